"""Host memory seen as ``npu`` memory and back, without copying.

pycann's device memory is host memory, so an ``npu`` tensor and a CPU tensor can share one buffer.
PyTorch has no Python call that makes a tensor of a PrivateUse1 device over given memory, but
DLPack does: ATen maps DLPack's ``kDLExtDev`` device type to PrivateUse1 (``DLConvertor.cpp``).
``to_npu`` exports a CPU tensor as a DLPack capsule, relabels the capsule's device as
``kDLExtDev`` and imports it; the new tensor owns the capsule, whose deleter releases the CPU
tensor, so the memory lives exactly as long as either tensor. ``to_cpu`` is the reverse.
Both keep sizes, strides, storage offset and dtype; neither copies. ``to_npu`` also counts the
memory in ``COUNTERS`` until the npu storage dies (a weakref on the storage's Python object: the
storage's deleter stays ATen's own, see ``_freed``).
"""

from __future__ import annotations

import ctypes
import sys
import weakref
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


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_device_offset = _DLTensor.device.offset
_I64 = ctypes.c_int64
assert sys.byteorder == "little", "pycann.torch._alias relabels DLPack devices as little-endian int64"
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack


@dataclass
class MemoryCounters:
    """Bytes of host memory held by npu tensors that npu ops allocated (exact: counted when the
    memory is made and when its last tensor frees it)."""

    allocated: int = 0
    peak: int = 0
    allocations: int = 0
    frees: int = 0


COUNTERS = MemoryCounters()
# tracked npu storages: id(weakref to the storage's Python object) -> (that weakref, bytes)
_live: dict[int, tuple[weakref.ref[torch.UntypedStorage], int]] = {}


def _freed(ref: weakref.ref[torch.UntypedStorage], live: dict[int, Any] = _live,
           c: MemoryCounters = COUNTERS) -> None:
    # The storage died: its last npu tensor is gone and its memory with it. A weakref callback,
    # run by CPython's PyObject_ClearWeakRefs, which saves and restores a pending exception around
    # it: the storage may be freed while a C++ error unwinds (a temporary npu tensor of an op that
    # raised), and that error must reach the user intact. (A ctypes callback as the DLPack deleter,
    # as before, turned such errors into "SystemError: error return without exception set".)
    # live and c are bound as defaults: the callback may run at interpreter exit.
    entry = live.pop(id(ref), None)
    if entry is not None:
        c.allocated -= entry[1]
        c.frees += 1


def _relabel(t: torch.Tensor, device_type: int, index: int, track: bool = False) -> torch.Tensor:
    if t.is_conj() or t.is_neg():
        # a lazy conjugate / negative view (``c.conj()``, ``c.conj().imag``): DLPack carries neither
        # bit, and exporting one resolves it first, which on an npu tensor is an npu op that
        # relabels it again (unbounded recursion: the process died). The same memory goes without
        # the bits and gets them back on the other side.
        conj, neg = t.is_conj(), t.is_neg()
        bare = t.detach()
        torch._C._set_conj(bare, False)
        torch._C._set_neg(bare, False)
        out = _relabel(bare, device_type, index, track)
        torch._C._set_conj(out, conj)
        torch._C._set_neg(out, neg)
        return out
    capsule = _to_dlpack(t)
    addr = _get_pointer(capsule, b"dltensor")
    # DLManagedTensor starts with its DLTensor; its DLDevice is two int32s (type, id): one
    # little-endian int64 store relabels both
    _I64.from_address(addr + _device_offset).value = device_type | (index << 32)
    out = _from_dlpack(capsule)
    if track:
        # The new storage's Python object lives exactly as long as the storage: PyTorch keeps it
        # (PyObject preservation) while C++ still refers to the storage after Python let go, and
        # frees it with the storage, which fires the weakref.
        storage = out.untyped_storage()
        nbytes = storage.nbytes()
        if not nbytes:
            return out  # nothing allocated (a batch norm's empty statistics): nothing to count
        ref = weakref.ref(storage, _freed)
        _live[id(ref)] = (ref, nbytes)
        c = COUNTERS
        c.allocated += nbytes
        c.allocations += 1
        if c.allocated > c.peak:
            c.peak = c.allocated
    return out


def to_npu(t: torch.Tensor, index: int = 0, track: bool = True) -> torch.Tensor:
    """An ``npu:index`` tensor over the memory of the CPU tensor ``t`` (same sizes, strides,
    dtype; no copy). ``track``: count the memory in ``COUNTERS`` as npu memory (for new memory,
    not for views of memory already counted). Raises ``TypeError`` for a non-strided or
    quantized tensor (DLPack cannot carry it)."""
    if t.is_nested:  # (its layout reads strided; DLPack cannot carry it and torch crashed exporting it)
        raise TypeError("pycann npu tensors cannot be nested tensors (torch.nested / NestedTensor): an op on npu "
                        "tensors returned one; run it on CPU tensors, or pad the batch and pass a mask")
    if t.layout != torch.strided or t.is_quantized:
        raise TypeError(f"pycann npu tensors are strided and not quantized; got layout {t.layout}, "
                        f"dtype {t.dtype}")
    return _relabel(t, KDL_EXT_DEV, index, track)


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the memory of the ``npu`` tensor ``t`` (no copy)."""
    return _relabel(t, KDL_CPU, 0)
