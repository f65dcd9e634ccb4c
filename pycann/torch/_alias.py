"""Host memory seen as ``npu`` memory and back, without copying.

pycann's device memory is host memory, so an ``npu`` tensor and a CPU tensor can share one buffer.
PyTorch has no Python call that makes a tensor of a PrivateUse1 device over given memory, but
DLPack does: ATen maps DLPack's ``kDLExtDev`` device type to PrivateUse1 (``DLConvertor.cpp``).
``to_npu`` exports a CPU tensor as a DLPack capsule, relabels the capsule's device as
``kDLExtDev`` and imports it; the new tensor owns the capsule, whose deleter releases the CPU
tensor, so the memory lives exactly as long as either tensor. ``to_cpu`` is the reverse.
Both keep sizes, strides, storage offset and dtype; neither copies.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

import torch

KDL_CPU = 1
KDL_EXT_DEV = 12  # DLPack's "reserved extension device": ATen's PrivateUse1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_device_offset = _DLTensor.device.offset
_DELETER_OFFSET = _DLManagedTensor.deleter.offset
_I64 = ctypes.c_int64
assert sys.byteorder == "little", "pycann.torch._alias relabels DLPack devices as little-endian int64"
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@dataclass
class MemoryCounters:
    """Bytes of host memory held by npu tensors that npu ops allocated (exact: counted when the
    memory is made and when its last tensor frees it)."""

    allocated: int = 0
    peak: int = 0
    allocations: int = 0
    frees: int = 0


COUNTERS = MemoryCounters()
_pending: dict[int, tuple[Any, int]] = {}  # DLManagedTensor address -> (ATen's deleter, bytes)


def _deleter(addr: int) -> None:
    # Runs when the last npu tensor over tracked memory dies (from C++, with the GIL).
    entry = _pending.pop(addr, None)
    if entry is None:
        return
    orig, nbytes = entry
    COUNTERS.allocated -= nbytes
    COUNTERS.frees += 1
    orig(addr)


_deleter_c = _DELETER(_deleter)
_deleter_ptr = ctypes.cast(_deleter_c, ctypes.c_void_p).value
_orig_deleters: dict[int, Any] = {}


def _relabel(t: torch.Tensor, device_type: int, index: int, track: bool = False) -> torch.Tensor:
    capsule = _to_dlpack(t)
    addr = _get_pointer(capsule, b"dltensor")
    # DLManagedTensor starts with its DLTensor; its DLDevice is two int32s (type, id): one
    # little-endian int64 store relabels both
    _I64.from_address(addr + _device_offset).value = device_type | (index << 32)
    if track:
        nbytes = t.untyped_storage().nbytes()
        slot = ctypes.c_void_p.from_address(addr + _DELETER_OFFSET)
        orig_ptr = slot.value
        if orig_ptr:
            orig = _orig_deleters.get(orig_ptr)
            if orig is None:
                orig = _orig_deleters.setdefault(orig_ptr, _DELETER(orig_ptr))
            _pending[addr] = (orig, nbytes)
            slot.value = _deleter_ptr
            c = COUNTERS
            c.allocated += nbytes
            c.allocations += 1
            if c.allocated > c.peak:
                c.peak = c.allocated
    return _from_dlpack(capsule)


def to_npu(t: torch.Tensor, index: int = 0, track: bool = True) -> torch.Tensor:
    """An ``npu:index`` tensor over the memory of the CPU tensor ``t`` (same sizes, strides,
    dtype; no copy). ``track``: count the memory in ``COUNTERS`` as npu memory (for new memory,
    not for views of memory already counted). Raises ``TypeError`` for a non-strided or
    quantized tensor (DLPack cannot carry it)."""
    if t.layout != torch.strided or t.is_quantized:
        raise TypeError(f"pycann npu tensors are strided and not quantized; got layout {t.layout}, "
                        f"dtype {t.dtype}")
    return _relabel(t, KDL_EXT_DEV, index, track)


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the memory of the ``npu`` tensor ``t`` (no copy)."""
    return _relabel(t, KDL_CPU, 0)
