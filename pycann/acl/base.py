"""Top-level ``acl.*`` functions (cann-interfaces.md §1.2): init/finalize, versions, data
buffers, tensor descriptors, error messages. Re-exported by ``pycann.acl``.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pycann
from pycann import config, profiler
from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._config import parse_config
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.errors import ArgTypeError, fault
from pycann.dtypes import ACL_TO_DTYPE, to_numpy
from pycann.runtime import Runtime


class AclLeakWarning(UserWarning):
    """``acl.finalize`` found memory, models, streams or events the application did not release."""


# ---------------------------------------------------------------- init / finalize
@api()
def init(config_path: str | None = None) -> int:
    """``ret = acl.init([config_path])``: read ``acl.json`` (§1.9) and start the runtime.
    A second init returns ``ACL_ERROR_REPEAT_INITIALIZE`` (harmless, as in CANN)."""
    if config_path is not None and not isinstance(config_path, str):
        raise ArgTypeError(f"config_path must be a str, not {type(config_path).__name__}")
    with _state.lock:
        if _state.initialized:
            raise fault(C.ACL_ERROR_REPEAT_INITIALIZE, "acl.init was already called")
        cfg = parse_config(config_path)
        if cfg.profiling_enabled:  # checked before anything starts (was: a write error at acl.finalize only)
            _check_profiler_output(cfg.profiler or {})
        # the dump first: its folder may fail to be made, and then nothing has started (a profiler started
        # before it kept running without an acl.init, and the runtime was left made)
        if cfg.dump_enabled:  # (the dump module, and csv, load only for an acl.json that asks for a dump)
            from pycann.profiler import dump as profiler_dump

            try:
                profiler_dump.configure_from_acl_json(cfg.raw)
            except OSError as e:  # (was ACL_ERROR_INTERNAL_ERROR: "internal error FileNotFoundError ...")
                raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, f"acl.json: dump_path {cfg.raw['dump']['dump_path']!r} "
                            f"cannot be used as a folder: {e.strerror or e} ({e.filename})") from None
        _state.config = cfg
        _state.runtime = Runtime(space=_state.space)
        if cfg.profiling_enabled:
            profiler.configure_from_acl_json(cfg.raw)
        _state.initialized = _state.ever_initialized = True
    return C.ACL_SUCCESS


def _check_profiler_output(block: dict[str, Any]) -> None:
    """``ACL_ERROR_INVALID_PROFILING_CONFIG`` when acl.json's profiler ``output`` folder (default: the
    current directory) cannot be written: the results are written at ``acl.finalize``, too late to say so."""
    from pycann.paths import folder_problem

    out = str(block.get("output") or os.getcwd())
    problem = folder_problem(out, create=False)  # (made when the profile is written: a dump error may follow)
    if problem is not None:
        raise fault(C.ACL_ERROR_INVALID_PROFILING_CONFIG,
                    f"acl.json: profiler.output {out!r}: {problem} (give a writable folder)")


@api()
def finalize() -> int:
    """``ret = acl.finalize()``: stop streams, free everything, and warn (``AclLeakWarning``)
    about allocations, models, streams and events the application did not release."""
    with _state.lock:
        if not _state.initialized:
            code = C.ACL_ERROR_REPEAT_FINALIZE if _state.ever_initialized else C.ACL_ERROR_UNINITIALIZE
            raise fault(code, "acl.finalize without a matching acl.init")
        rt = _state.runtime
        assert rt is not None
        report: list[str] = []
        from pycann.acl import mdl

        for mid in mdl.loaded_model_ids():
            rec = mdl.forget_model(mid)
            if rec is not None:  # (else another thread unloaded it after the listing)
                report.append(f"model {mid} ({rec.path}) was not unloaded")
        leaked, streams = rt.shutdown()
        for a in leaked:
            report.append(f"{a.describe()} was not freed")
        for s in streams:
            report.append(f"{s.describe()} was not destroyed")
        for ev in handles.live("event"):
            if not ev.destroyed:
                report.append("an event was not destroyed")
        handles.clear(("context", "stream", "event"))
        _state.last_leak_report = report
        if "pycann.acl.prof" in sys.modules:  # an acl.prof session left open: write its results
            sys.modules["pycann.acl.prof"].finalize_all(forget_configs=True)
        profiler.finalize()  # writes the profile / closes the dump started by acl.json, if any
        _state.initialized = False
        _state.runtime = None
    if report:
        nbytes = sum(a.size for a in leaked)
        head = f"acl.finalize: {len(leaked)} allocation(s) ({nbytes} bytes) and {len(report) - len(leaked)} other resource(s) leaked"
        warnings.warn(head + ":\n  " + "\n  ".join(report), AclLeakWarning, stacklevel=3)
    return C.ACL_SUCCESS


def get_version() -> tuple[int, int, int, int]:
    """``major, minor, patch, ret``: pycann's version (the runtime that answers)."""
    parts = [int(p) if p.isdigit() else 0 for p in pycann.__version__.split(".")[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2], C.ACL_SUCCESS


def get_soc_name() -> str:
    """The soc the CPU device stands in for (``PYCANN_SOC_VERSION``, default ``Ascend310P3``)."""
    rt = _state.runtime
    if rt is not None:
        return rt.devices[0].soc_name

    from pycann.runtime.device import DEFAULT_SOC

    return config.soc_version(DEFAULT_SOC)


def get_recent_err_msg() -> str:
    """The message of this thread's last failed call (``""`` if none)."""
    return _state.recent_error()


def app_log(level: int, msg: str) -> None:
    """``acl.app_log(level, msg)``: to the ``pycann.acl`` logger (levels ``ACL_DEBUG`` .. ``ACL_ERROR``)."""
    import logging

    lv = {C.ACL_DEBUG: logging.DEBUG, C.ACL_INFO: logging.INFO, C.ACL_WARNING: logging.WARNING}.get(
        as_int(level, "level"), logging.ERROR)
    _state.log.log(lv, "%s", msg)


def float16_to_float(value: int) -> float:
    """IEEE half bits (``int``) to ``float``."""
    return float(np.array([as_int(value, "value") & 0xFFFF], np.uint16).view(np.float16)[0])


def float_to_float16(value: float) -> int:
    """``float`` to IEEE half bits (``int``)."""
    return int(np.array([value], np.float16).view(np.uint16)[0])


# ---------------------------------------------------------------- data buffers
@dataclass
class DataBuffer:
    """``aclDataBuffer``: a pointer and a size; the memory is not owned."""

    ptr: int
    size: int


@api(bare=0)
def create_data_buffer(ptr: int, size: int) -> int:
    """``buf = acl.create_data_buffer(ptr, size)`` (0 on failure). The pointer is checked when used."""
    p, n = as_int(ptr, "data"), as_int(size, "size")
    if p < 0 or n < 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"invalid data buffer ({p}, {n})")
    return handles.add("data_buffer", DataBuffer(p, n))


@api()
def destroy_data_buffer(data_buffer: int) -> int:
    """Frees the descriptor only, never the memory."""
    handles.pop("data_buffer", data_buffer, "data buffer")
    return C.ACL_SUCCESS


@api(bare=0)
def get_data_buffer_addr(data_buffer: int) -> int:
    return handles.get("data_buffer", data_buffer, "data buffer").ptr


@api(bare=0)
def get_data_buffer_size(data_buffer: int) -> int:
    return handles.get("data_buffer", data_buffer, "data buffer").size


get_data_buffer_size_v2 = get_data_buffer_size


@api()
def update_data_buffer(data_buffer: int, ptr: int, size: int) -> int:
    buf = handles.get("data_buffer", data_buffer, "data buffer")
    p, n = as_int(ptr, "data"), as_int(size, "size")
    if p < 0 or n < 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"invalid data buffer ({p}, {n})")
    buf.ptr, buf.size = p, n
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- tensor descriptors
@dataclass
class TensorDescObj:
    """``aclTensorDesc``: aclDataType, dims (-1 dynamic), aclFormat, name."""

    dtype: int
    dims: list[int]
    format: int
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def numpy_dtype(self) -> np.dtype:
        if self.dtype not in ACL_TO_DTYPE:
            raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, f"aclDataType {self.dtype} is not supported")
        dt = to_numpy(ACL_TO_DTYPE[self.dtype])
        if dt.hasobject:
            raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, "ACL_STRING tensors have no fixed-size layout")
        return dt

    def element_count(self) -> int:
        return 0 if any(d < 0 for d in self.dims) else math.prod(self.dims)

    def snapshot(self) -> TensorDescObj:
        """A copy that later ``set_tensor_*`` calls on this desc do not change."""
        return TensorDescObj(self.dtype, list(self.dims), self.format, self.name, dict(self.extra))


def _dims(dims: Any) -> list[int]:
    """``dims`` as a list of ints: at most ``ACL_MAX_DIM_CNT``, each >= 0, -1 (dynamic) or -2 (unknown
    rank). Raises ``ArgTypeError`` (not a list of ints), ``AclFault(ACL_ERROR_INVALID_PARAM)``."""
    if not isinstance(dims, (list, tuple)):
        raise ArgTypeError(f"dims must be a list of ints, not {type(dims).__name__}")
    d = [as_int(x, "dim") for x in dims]
    if len(d) > C.ACL_MAX_DIM_CNT or any(x < -2 for x in d):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"invalid dims {d if len(d) <= 16 else f'of rank {len(d)}'}: at most "
                    f"{C.ACL_MAX_DIM_CNT} dims, each >= 0, -1 (dynamic) or -2 (unknown rank)")
    return d


@api(bare=0)
def create_tensor_desc(data_type: int, dims: list[int], format: int) -> int:
    """``desc = acl.create_tensor_desc(dtype, dims_list, format)`` (0 on failure)."""
    d = _dims(dims)
    return handles.add("tensor_desc", TensorDescObj(as_int(data_type, "data_type"), d, as_int(format, "format")))


def destroy_tensor_desc(desc: int) -> None:
    """Returns ``None`` (void in C); an unknown handle is ignored."""
    try:
        handles.pop("tensor_desc", desc)
    except Exception:  # noqa: BLE001 - void function
        _state.record_error("acl.destroy_tensor_desc", C.ACL_ERROR_INVALID_RESOURCE_HANDLE, "unknown tensor desc")


def tensor_desc(desc: int) -> TensorDescObj:
    return handles.get("tensor_desc", desc, "tensor desc")


@api(bare=C.ACL_DT_UNDEFINED)
def get_tensor_desc_type(desc: int) -> int:
    return tensor_desc(desc).dtype


@api(bare=C.ACL_FORMAT_UNDEFINED)
def get_tensor_desc_format(desc: int) -> int:
    return tensor_desc(desc).format


@api(bare=0)
def get_tensor_desc_size(desc: int) -> int:
    """Bytes: element count x ``data_type_size`` (0 for dynamic dims)."""
    t = tensor_desc(desc)
    return t.element_count() * _dtype_size(t.dtype)


@api(bare=0)
def get_tensor_desc_element_count(desc: int) -> int:
    return tensor_desc(desc).element_count()


@api(bare=0)
def get_tensor_desc_num_dims(desc: int) -> int:
    return len(tensor_desc(desc).dims)


@api(bare=-1)
def get_tensor_desc_dim(desc: int, index: int) -> int:
    t, i = tensor_desc(desc), as_int(index, "index")
    if not 0 <= i < len(t.dims):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"dim index {i} out of range for {len(t.dims)} dims")
    return t.dims[i]


@api(out=(-1,))
def get_tensor_desc_dim_v2(desc: int, index: int) -> tuple[int, int]:
    t, i = tensor_desc(desc), as_int(index, "index")
    if not 0 <= i < len(t.dims):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"dim index {i} out of range for {len(t.dims)} dims")
    return t.dims[i], C.ACL_SUCCESS


@api(bare="")
def get_tensor_desc_name(desc: int) -> str:
    return tensor_desc(desc).name


def set_tensor_desc_name(desc: int, name: str) -> None:
    try:
        tensor_desc(desc).name = str(name)
    except Exception:  # noqa: BLE001 - void function
        _state.record_error("acl.set_tensor_desc_name", C.ACL_ERROR_INVALID_RESOURCE_HANDLE, "unknown tensor desc")


@api()
def set_tensor_shape(desc: int, dims: list[int]) -> int:
    """The same dims as ``create_tensor_desc`` takes (a refused shape leaves the desc as it was)."""
    t, d = tensor_desc(desc), _dims(dims)
    t.dims = d
    return C.ACL_SUCCESS


@api()
def set_tensor_format(desc: int, format: int) -> int:
    tensor_desc(desc).format = as_int(format, "format")
    return C.ACL_SUCCESS


@api()
def set_tensor_place_ment(desc: int, mem_type: int) -> int:
    """``ACL_MEMTYPE_HOST`` lets a single-op input live in host memory (``acl.op``)."""
    tensor_desc(desc).extra["placement"] = as_int(mem_type, "mem_type")
    return C.ACL_SUCCESS


def _dtype_size(data_type: int) -> int:
    dt = ACL_TO_DTYPE.get(data_type)
    if dt is None:
        return 0
    npdt = to_numpy(dt)
    return 0 if npdt.hasobject else npdt.itemsize


def data_type_size(data_type: int) -> int:
    """Bytes of one element of an aclDataType (0 for unknown / string)."""
    return _dtype_size(as_int(data_type, "data_type"))


def runtime() -> Runtime:
    """The runtime (requires ``acl.init``); for the facade modules."""
    return require_init()
