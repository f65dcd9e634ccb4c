"""``acl.mdl``: load, describe and execute offline models (cann-interfaces.md §1.4, §1.10).

A facade over ``pycann.ge.run.model.LoadedModel``: model ids and descs are handles; datasets hold
data buffers (device pointers) which ``execute`` reads into the model's inputs and writes the
outputs into, checking every pointer and size. ``execute_async`` queues the same work on a
stream. Several threads may execute one model at once (``LoadedModel.run`` is thread-safe).

Dynamic models (``pycann.acl._dynamic``): gear models (``--dynamic_batch_size`` & co.) select a
gear per dataset with ``set_dynamic_batch_size`` / ``set_dynamic_hw_size`` /
``set_input_dynamic_dims``; range models (``-1`` / ``lo~hi``) take their shapes from those calls
or ``set_dataset_tensor_desc``. The "dynamic tensor" ``ACL_DYNAMIC_TENSOR_NAME`` is a virtual
input at index ``num_inputs``: apps may look it up and allocate a buffer for it; ``execute``
ignores that buffer. Dynamic AIPP (``create_aipp``, ``set_aipp_*``, ``set_input_aipp``, ...):
``pycann.acl._aipp``.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import numpy as np

from pycann.acl import constants as C
from pycann.acl._aipp import (  # noqa: F401 - re-exported acl.mdl functions
    create_aipp,
    destroy_aipp,
    get_aipp_data_size,
    get_aipp_type,
    get_first_aipp_info,
    set_aipp_ax_swap_switch,
    set_aipp_by_input_index,
    set_aipp_crop_params,
    set_aipp_csc_params,
    set_aipp_dtc_pixel_mean,
    set_aipp_dtc_pixel_min,
    set_aipp_input_format,
    set_aipp_padding_params,
    set_aipp_pixel_var_reci,
    set_aipp_rbuv_swap_switch,
    set_aipp_scf_params,
    set_aipp_src_image_size,
    set_input_aipp,
)
from pycann.acl._dataset import (  # noqa: F401 - re-exported acl.mdl functions
    Dataset,
    add_dataset_buffer,
    create_dataset,
    dataset,
    destroy_dataset,
    get_dataset_buffer,
    get_dataset_num_buffers,
    get_dataset_tensor_desc,
    set_dataset_tensor_desc,
)
from pycann.acl._dynamic import (  # noqa: F401 - re-exported acl.mdl functions
    get_dynamic_batch,
    get_dynamic_hw,
    get_input_dynamic_dims,
    get_input_dynamic_gear_count,
    input_shapes,
    set_dynamic_batch_size,
    set_dynamic_hw_size,
    set_input_dynamic_dims,
)
from pycann.acl._models import (  # noqa: F401 - loaded_model_ids ... for acl.finalize
    ModelDesc,
    ModelRecord,
    add_model,
    desc_obj,
    forget_model,
    loaded_model_ids,
    loaded_path,
    model_record,
    np_dtype,
    runnable_record,
)
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.base import DataBuffer
from pycann.acl.errors import ArgTypeError, fault
from pycann.acl.rt import stream_of
from pycann.dtypes import ACL_DTYPE, DType
from pycann.ge.run.model import LoadedModel, TensorInfo
from pycann.runtime.errors import KindMismatch
from pycann.runtime.memory import ANY_KIND, DEVICE_KINDS

_FORMATS = {"NCHW": C.ACL_FORMAT_NCHW, "NHWC": C.ACL_FORMAT_NHWC, "ND": C.ACL_FORMAT_ND}


def _check_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgTypeError(f"model_path must be a str, not {type(path).__name__}")
    p = os.fspath(path)
    if os.path.isdir(p):
        raise fault(C.ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID, f"model path '{p}' is a directory, not an .om file")
    if not os.path.isfile(p):
        raise fault(C.ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID, f"model file '{p}' does not exist")
    return p


def _load_file(p: str) -> LoadedModel:
    """``LoadedModel.from_file`` with read failures (permissions, I/O) as ``ACL_ERROR_READ_MODEL_FAILURE``."""
    try:
        return LoadedModel.from_file(p)
    except OSError as e:
        raise fault(C.ACL_ERROR_READ_MODEL_FAILURE, f"cannot read model file '{p}': {e.strerror or e}") from None


def _from_memory(ptr: Any, size: Any) -> LoadedModel:
    from pycann.ge.om import loads_om

    n = as_int(size, "size")
    if n <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"model size must be > 0, not {n}")
    raw = require_init().space.read(as_int(ptr, "model"), n, ANY_KIND, "model data")
    om = loads_om(raw.tobytes())
    return LoadedModel(om.graph, om.manifest, "<memory>")


def _check_mem(ptr: Any, size: Any, what: str) -> None:
    p, n = as_int(ptr, what), as_int(size, f"{what} size")
    if p:
        require_init().space.resolve(p, n, DEVICE_KINDS, True, what)


# ---------------------------------------------------------------- load / unload
@api(out=(0,))
def load_from_file(model_path: str) -> tuple[int, int]:
    """``model_id, ret``. pycann ``.om`` files (an ``.onnx`` is compiled in memory, an extension)."""
    require_init().require_context()
    return add_model(_load_file(_check_path(model_path)), os.fspath(model_path))


@api(out=(0,))
def load_from_mem(model: int, model_size: int) -> tuple[int, int]:
    """``model_id, ret`` from an .om image at a host or device pointer."""
    require_init().require_context()
    return add_model(_from_memory(model, model_size), "<memory>")


@api(out=(0,))
def load_from_file_with_mem(model_path: str, work_ptr: int, work_size: int, weight_ptr: int,
                            weight_size: int) -> tuple[int, int]:
    """Like ``load_from_file``; the work/weight memory (device, or 0 = managed) is checked but
    not used: pycann's executor keeps its own arena and the weights stay memory-mapped."""
    require_init().require_context()
    p = _check_path(model_path)
    _check_mem(work_ptr, work_size, "work_ptr")
    _check_mem(weight_ptr, weight_size, "weight_ptr")
    return add_model(_load_file(p), p)


@api(out=(0,))
def load_from_mem_with_mem(model: int, model_size: int, work_ptr: int, work_size: int, weight_ptr: int,
                           weight_size: int) -> tuple[int, int]:
    require_init().require_context()
    _check_mem(work_ptr, work_size, "work_ptr")
    _check_mem(weight_ptr, weight_size, "weight_ptr")
    return add_model(_from_memory(model, model_size), "<memory>")


@api(out=(0, 0))
def query_size(model_path: str) -> tuple[int, int, int]:
    """``work_size, weight_size, ret``: the planned activation arena and the weights section."""
    from pycann.ge.om import peek_header

    h = peek_header(_check_path(model_path))
    work = int(h.get("manifest", {}).get("memory_plan", {}).get("peak_bytes", 0))
    return work, int(h["weights_bytes"]), C.ACL_SUCCESS


@api(out=(0, 0))
def query_size_from_mem(model: int, model_size: int) -> tuple[int, int, int]:
    """``work_size, weight_size, ret`` of an .om image in memory."""
    from pycann.ge.om import loads_om

    n = as_int(model_size, "model_size")
    if n <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"model size must be > 0, not {n}")
    om = loads_om(require_init().space.read(as_int(model, "model"), n, ANY_KIND, "model data").tobytes(), verify=False)
    work = int(om.manifest.get("memory_plan", {}).get("peak_bytes", 0))
    return work, int(om.weights_bytes), C.ACL_SUCCESS


@api()
def unload(model_id: int) -> int:
    if forget_model(as_int(model_id, "model_id")) is None:  # (one check-and-remove: two unloads, one success)
        model_record(model_id)  # raises ACL_ERROR_INVALID_MODEL_ID
        raise fault(C.ACL_ERROR_INVALID_MODEL_ID, f"model id {int(model_id)} is not loaded")
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- model descriptions
@api(bare=0)
def create_desc() -> int:
    return handles.add("model_desc", ModelDesc())


@api()
def destroy_desc(model_desc: int) -> int:
    handles.pop("model_desc", model_desc, "model desc")
    return C.ACL_SUCCESS


@api()
def get_desc(model_desc: int, model_id: int) -> int:
    """``ret = get_desc(desc, model_id)``: fill ``desc`` from a loaded model."""
    d, rec = desc_obj(model_desc), model_record(model_id)
    m = rec.model
    d.model_id, d.inputs, d.outputs, d.record = int(model_id), list(m.inputs), list(m.outputs), rec
    d.ranges = m.input_ranges
    d.input_format = m.input_format
    return C.ACL_SUCCESS


def _io(desc: Any, index: Any, outputs: bool) -> tuple[ModelDesc, TensorInfo]:
    d, i = desc_obj(desc), as_int(index, "index")
    infos = d.outputs if outputs else d.inputs
    if not 0 <= i < len(infos):
        kind = "outputs" if outputs else "inputs"
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {i} out of range: the model has {len(infos)} {kind}")
    return d, infos[i]


def _size(desc: Any, index: Any, outputs: bool) -> int:
    d = desc_obj(desc)
    if not outputs and as_int(index, "index") == len(d.inputs) and d.record is not None and d.record.dynamic:
        return 64  # the virtual dynamic tensor (see module doc)
    d, info = _io(desc, index, outputs)
    if np_dtype(info) is None:
        return 0
    if d.record is None:
        return info.size
    m, i = d.record.model, int(index)
    return m.max_output_bytes(i) if outputs else m.max_input_bytes(i)


def _dims_dict(info: TensorInfo, dims: list[int] | tuple[int, ...]) -> dict[str, Any]:
    return {"name": info.name, "dimCount": len(dims), "dims": [int(x) for x in dims]}


@api(bare=0)
def get_num_inputs(model_desc: int) -> int:
    return len(desc_obj(model_desc).inputs)


@api(bare=0)
def get_num_outputs(model_desc: int) -> int:
    return len(desc_obj(model_desc).outputs)


@api(bare=0)
def get_input_size_by_index(model_desc: int, index: int) -> int:
    """Bytes of input ``index``: the largest gear, or the largest shape a range allows (0 if unbounded)."""
    return _size(model_desc, index, False)


@api(bare=0)
def get_output_size_by_index(model_desc: int, index: int) -> int:
    """Bytes of output ``index``: the largest gear's for gear models; 0 for other dynamic outputs
    (size their buffers yourself)."""
    return _size(model_desc, index, True)


_NO_DIMS: dict[str, Any] = {"name": "", "dimCount": 0, "dims": []}


@api(out=(_NO_DIMS,))
def get_input_dims(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """``{"name", "dimCount", "dims"}, ret`` (-1 for dynamic dims)."""
    _, info = _io(model_desc, index, False)
    return _dims_dict(info, info.shape), C.ACL_SUCCESS


get_input_dims_v2 = get_input_dims


@api(out=(_NO_DIMS,))
def get_output_dims(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    _, info = _io(model_desc, index, True)
    return _dims_dict(info, info.shape), C.ACL_SUCCESS


@api(out=(_NO_DIMS,))
def get_cur_output_dims(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """Output dims of the calling thread's latest execution of the model (``execute``, or ``execute_async``
    once its stream ran it), else of the model's latest (the compiled dims before any)."""
    d, info = _io(model_desc, index, True)
    last = d.record.out_shapes()[int(index)] if d.record is not None else None
    return _dims_dict(info, last if last is not None else info.shape), C.ACL_SUCCESS


@api(bare="")
def get_input_name_by_index(model_desc: int, index: int) -> str:
    d = desc_obj(model_desc)
    if as_int(index, "index") == len(d.inputs) and d.record is not None and d.record.dynamic:
        return C.ACL_DYNAMIC_TENSOR_NAME  # the virtual dynamic tensor (see module doc), as get_input_index_by_name
    return _io(model_desc, index, False)[1].name


@api(bare="")
def get_output_name_by_index(model_desc: int, index: int) -> str:
    return _io(model_desc, index, True)[1].name


def _acl_dtype(info: TensorInfo) -> int:
    try:
        return ACL_DTYPE[DType(info.dtype)]
    except (KeyError, ValueError):
        return C.ACL_DT_UNDEFINED


@api(bare=C.ACL_DT_UNDEFINED)
def get_input_data_type(model_desc: int, index: int) -> int:
    return _acl_dtype(_io(model_desc, index, False)[1])


@api(bare=C.ACL_DT_UNDEFINED)
def get_output_data_type(model_desc: int, index: int) -> int:
    return _acl_dtype(_io(model_desc, index, True)[1])


@api(bare=C.ACL_FORMAT_UNDEFINED)
def get_input_format(model_desc: int, index: int) -> int:
    """The input's compile-time format (``TensorInfo.format``): 4-D inputs have ``--input_format``
    (NCHW by default; NHWC for the uint8 source of static AIPP), others ND."""
    return _FORMATS.get(_io(model_desc, index, False)[1].format, C.ACL_FORMAT_ND)


@api(bare=C.ACL_FORMAT_UNDEFINED)
def get_output_format(model_desc: int, index: int) -> int:
    _io(model_desc, index, True)
    return C.ACL_FORMAT_ND


def _index_by_name(model_desc: Any, name: Any, outputs: bool) -> tuple[int, int]:
    d = desc_obj(model_desc)
    if not isinstance(name, str):
        raise ArgTypeError(f"name must be a str, not {type(name).__name__}")
    infos = d.outputs if outputs else d.inputs
    for i, info in enumerate(infos):
        if info.name == name:
            return i, C.ACL_SUCCESS
    if not outputs and name == C.ACL_DYNAMIC_TENSOR_NAME and d.record is not None and d.record.dynamic:
        return len(infos), C.ACL_SUCCESS
    raise fault(C.ACL_ERROR_INVALID_PARAM, f"the model has no {'output' if outputs else 'input'} named '{name}'; "
                f"it has {[i.name for i in infos]}")


@api(out=(-1,))
def get_input_index_by_name(model_desc: int, name: str) -> tuple[int, int]:
    """``index, ret``; ``ACL_DYNAMIC_TENSOR_NAME`` gives ``num_inputs`` on dynamic models."""
    return _index_by_name(model_desc, name, False)


@api(out=(-1,))
def get_output_index_by_name(model_desc: int, name: str) -> tuple[int, int]:
    return _index_by_name(model_desc, name, True)


# ---------------------------------------------------------------- execution
def _buffers(rec: ModelRecord, ds: Dataset, n: int, what: str, extra: int = 0) -> list[DataBuffer]:
    bufs = [handles.get("data_buffer", h, f"{what} data buffer") for h in ds.buffers]
    if not n <= len(bufs) <= n + extra:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"the {what} dataset has {len(bufs)} buffers; the model has {n} {what}s")
    return [DataBuffer(b.ptr, b.size) for b in bufs[:n]]


def _run(rec: ModelRecord, ins: list[DataBuffer], outs: list[DataBuffer], shapes: list[list[int]],
         out_ds: Dataset, caller: threading.Thread) -> None:
    """Run the model on the dataset buffers (``caller``: the thread that asked, whose
    ``get_cur_output_dims`` reports this run)."""
    rec.require_live_context()  # (execute_async: its context may have been destroyed since the call)
    space = require_init().space
    feeds = []
    for i, (info, shape, b) in enumerate(zip(rec.model.inputs, shapes, ins)):
        dt = np_dtype(info)
        if dt is None:
            raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, f"input {i} ({info.name}) of type {info.datatype} "
                        "cannot be passed through device memory")
        need = math.prod(shape) * dt.itemsize
        if b.size < need:
            raise fault(C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID,
                        f"input {i} ({info.name}): buffer of {b.size} bytes, shape {shape} needs {need}")
        raw = _device_io(space.read, b.ptr, need, DEVICE_KINDS, f"input {i} ({info.name})") if need else None
        feeds.append(np.zeros(shape, dt) if raw is None else raw.view(dt).reshape(shape))
    results = rec.model.run(feeds)
    for j, (o, b) in enumerate(zip(results, outs)):
        o = np.ascontiguousarray(o)
        if o.dtype.hasobject:
            raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, f"output {j} holds strings; it cannot go to device memory")
        if o.nbytes > b.size:
            raise fault(C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID,
                        f"output {j} ({rec.model.outputs[j].name}): {o.nbytes} bytes (shape {list(o.shape)}) "
                        f"do not fit its buffer of {b.size} bytes")
        if o.nbytes:
            _device_io(space.write, b.ptr, o, DEVICE_KINDS, f"output {j}")
    rec.ran(caller, [tuple(o.shape) for o in results])
    out_ds.out_shapes = [(tuple(o.shape), o.dtype) for o in results]


def _device_io(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except KindMismatch as e:
        raise fault(C.ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID, f"{e}; model inputs and outputs live in device memory") from None


def _prepare(model_id: Any, input_ds: Any, output_ds: Any) -> tuple[Any, ...]:
    """Everything ``execute`` checks before running: handles, buffer counts, shapes, and that
    each buffer is live device memory of the size it claims (so ``execute_async`` fails early)."""
    space = require_init().space
    require_init().require_context()
    rec = runnable_record(model_id)
    ind, outd = dataset(input_ds), dataset(output_ds)
    ins = _buffers(rec, ind, len(rec.model.inputs), "input", 1 if rec.dynamic else 0)
    outs = _buffers(rec, outd, len(rec.model.outputs), "output")
    shapes = input_shapes(rec, ind)
    m = rec.model
    for info, shape in zip(m.inputs, shapes):
        # a shape outside its --input_shape range is that (145021), before the buffer sizes: a desc of
        # [2**40, 4] on a 1~8 model was "buffer of 128 bytes, shape [1099511627776, 4] needs 17592186044416"
        gd = m.graph.descs.get(info.name)
        if info.name in m._ranges and gd is not None and gd.kind == "tensor" and gd.shape is not None:
            m._check_shape(info.name, gd, tuple(shape))
    for i, (info, shape, b) in enumerate(zip(m.inputs, shapes, ins)):
        dt = np_dtype(info)
        need = math.prod(shape) * (dt.itemsize if dt is not None else 0)
        if b.size < need:
            raise fault(C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID,
                        f"input {i} ({info.name}): buffer of {b.size} bytes, shape {shape} needs {need}")
        if need:
            _device_io(space.resolve, b.ptr, need, DEVICE_KINDS, False, f"input {i} ({info.name})")
    for j, b in enumerate(outs):
        if b.size:
            _device_io(space.resolve, b.ptr, b.size, DEVICE_KINDS, True, f"output {j}")
    return rec, ins, outs, shapes, outd, threading.current_thread()


@api()
def execute(model_id: int, input: int, output: int) -> int:
    """``ret = execute(model_id, in_dataset, out_dataset)``: runs now, synchronously."""
    _run(*_prepare(model_id, input, output))
    return C.ACL_SUCCESS


@api()
def execute_async(model_id: int, input: int, output: int, stream: int) -> int:
    """Checks now, runs when the stream reaches it; failures come back from ``synchronize_stream``.
    A stream of another context than the calling thread's current one is ``ACL_ERROR_RT_STREAM_CONTEXT``
    (107003), as CANN's runtime refuses it (pycann ran the model there)."""
    st = stream_of(stream)
    ctx = require_init().require_context()
    if st not in ctx.all_streams() and st is not ctx.default_stream:
        raise fault(C.ACL_ERROR_RT_STREAM_CONTEXT,
                    f"stream {int(stream)} belongs to another context than the current one: call "
                    "acl.rt.set_context(<the stream's context>) first, or use a stream created in this context")
    args = _prepare(model_id, input, output)
    st.submit(lambda: _run(*args), f"execute model {int(model_id)}")
    return C.ACL_SUCCESS

