"""``acl.op``: single-operator execution (cann-interfaces.md §1.6).

``execute_v2(op_type, in_descs, in_buffers, out_descs, out_buffers, attr, stream)`` runs any op
of pycann's operator table through GE's single-op entry point (``pycann.ge.run.singleop.run_op``:
defaults, shape inference, kernel, output check) — the table graph mode uses, as CANN shares its
op library between the two. Op types and attribute names are ONNX's (latest
opset semantics, e.g. ``ReduceSum`` takes ``axes`` as an input); no ``atc --singleop``
precompilation is needed, so ``set_model_dir`` only checks the directory. The op runs when the
stream reaches it; inputs are read from device memory (host memory if the tensor desc has
``set_tensor_place_ment(desc, ACL_MEMTYPE_HOST)``), outputs must match their descs' dtype and shape.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.acl import constants as C
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.base import DataBuffer, TensorDescObj, tensor_desc
from pycann.acl.errors import AclFault, ArgTypeError, fault
from pycann.acl.rt import stream_of
from pycann.dtypes import ACL_TO_DTYPE, DType
from pycann.errors import KernelError, ShapeError, UnsupportedOpError
from pycann.ge.run.singleop import AttrError, OutputCountError, find_op, run_op
from pycann.runtime.memory import ANY_KIND, DEVICE_KINDS


@dataclass
class OpAttr:
    """``aclopAttr``: attribute name -> value."""

    values: dict[str, Any] = field(default_factory=dict)


def _attr(h: Any) -> OpAttr:
    return handles.get("op_attr", h, "op attr")


@api(bare=0)
def create_attr() -> int:
    return handles.add("op_attr", OpAttr())


def destroy_attr(attr: int) -> None:
    """Void in C: returns ``None``."""
    try:
        handles.pop("op_attr", attr)
    except AclFault:
        pass


def _set(attr: Any, name: Any, value: Any) -> int:
    if not isinstance(name, str):
        raise ArgTypeError(f"attribute name must be a str, not {type(name).__name__}")
    _attr(attr).values[name] = value
    return C.ACL_SUCCESS


def _values(args: tuple[Any, ...]) -> list[Any]:
    """List setters accept ``(values)`` or C's ``(num, values)``; other counts are a parse failure
    (``ArgTypeError``, as pyACL raises; no values was an internal error, 500000: an IndexError)."""
    if len(args) not in (1, 2):
        raise ArgTypeError(f"expected (attr, name, values) or (attr, name, num, values), not {len(args)} argument(s) "
                           "after the name")
    vals = args[-1]
    if not isinstance(vals, (list, tuple)):
        raise ArgTypeError(f"values must be a list, not {type(vals).__name__}")
    if len(args) == 2 and as_int(args[0], "num") != len(vals):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"num {args[0]} != {len(vals)} values")
    return list(vals)


def _float(v: Any) -> float:
    """``v`` as a float; a str or another non-number is a parse failure (``ArgTypeError``; ``float("x")``'s
    ValueError was an internal error, 500000)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ArgTypeError(f"value must be a number, not {type(v).__name__} {v!r}")
    return float(v)


def _int_list(v: Any) -> list[int]:
    """One inner list of ``set_attr_list_list_int`` (a non-list was an internal error, 500000)."""
    if not isinstance(v, (list, tuple)):
        raise ArgTypeError(f"each value of a list of int lists must be a list, not {type(v).__name__} {v!r}")
    return [as_int(x, "value") for x in v]


def _onnx_dtype(acl_dtype: Any) -> int:
    dt = ACL_TO_DTYPE.get(as_int(acl_dtype, "data_type"))
    if dt is None:
        raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, f"aclDataType {acl_dtype} is not supported")
    return int(dt)


@api()
def set_attr_bool(attr: int, name: str, value: bool) -> int:
    return _set(attr, name, int(bool(value)))


@api()
def set_attr_int(attr: int, name: str, value: int) -> int:
    return _set(attr, name, as_int(value, "value"))


@api()
def set_attr_float(attr: int, name: str, value: float) -> int:
    return _set(attr, name, _float(value))


@api()
def set_attr_string(attr: int, name: str, value: str) -> int:
    return _set(attr, name, str(value))


@api()
def set_attr_list_bool(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [int(bool(v)) for v in _values(args)])


@api()
def set_attr_list_int(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [as_int(v, "value") for v in _values(args)])


@api()
def set_attr_list_float(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [_float(v) for v in _values(args)])


@api()
def set_attr_list_string(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [str(v) for v in _values(args)])


@api()
def set_attr_list_list_int(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [_int_list(v) for v in _values(args)])


@api()
def set_attr_data_type(attr: int, name: str, value: int) -> int:
    """An aclDataType attribute, stored as the ONNX dtype the kernels expect (e.g. Cast's ``to``)."""
    return _set(attr, name, _onnx_dtype(value))


@api()
def set_attr_list_data_type(attr: int, name: str, *args: Any) -> int:
    return _set(attr, name, [_onnx_dtype(v) for v in _values(args)])


@api()
def set_model_dir(model_dir: str) -> int:
    """Checks the directory; pycann needs no precompiled single-op models."""
    if not isinstance(model_dir, str):
        raise ArgTypeError("model_dir must be a str")
    if not os.path.isdir(model_dir):
        raise fault(C.ACL_ERROR_INVALID_FILE, f"'{model_dir}' is not a directory")
    return C.ACL_SUCCESS


@api()
def load(model: int, model_size: int) -> int:
    """Accepted and ignored: ops are compiled on demand."""
    require_init()
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- execution
def _descs(descs: Any, what: str) -> list[TensorDescObj]:
    """Copies of the descs as they are now: the op runs later, on the stream, and the app may reshape
    or destroy its descs meanwhile (a desc reused for the next op), as CANN's launch has them already."""
    if not isinstance(descs, (list, tuple)):
        raise ArgTypeError(f"{what} descs must be a list")
    return [tensor_desc(d).snapshot() for d in descs]


def _bufs(bufs: Any, n: int, what: str) -> list[DataBuffer]:
    if not isinstance(bufs, (list, tuple)):
        raise ArgTypeError(f"{what} buffers must be a list")
    if len(bufs) != n:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"{n} {what} descs but {len(bufs)} {what} buffers")
    out = []
    for h in bufs:
        b = handles.get("data_buffer", h, f"{what} data buffer")
        out.append(DataBuffer(b.ptr, b.size))
    return out


def _lookup(op_type: str) -> Any:
    try:
        return find_op(op_type)
    except UnsupportedOpError as e:
        raise fault(C.ACL_ERROR_OP_NOT_FOUND, str(e)) from None


def _input_bytes(op_type: str, i: int, d: TensorDescObj, b: DataBuffer) -> tuple[np.dtype, int]:
    """(dtype, bytes) of input ``i`` as its desc says, checked against its buffer's size."""
    dt = d.numpy_dtype()
    if any(x < 0 for x in d.dims):
        raise fault(C.ACL_ERROR_OP_INPUT_NOT_MATCH, f"input {i} of {op_type} has dynamic dims {d.dims}")
    need = math.prod(d.dims) * dt.itemsize
    if b.size < need:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"input {i} of {op_type}: buffer of {b.size} bytes, desc needs {need}")
    return dt, need


def _check_now(op_type: str, ins: list[TensorDescObj], in_bufs: list[DataBuffer], outs: list[TensorDescObj],
               out_bufs: list[DataBuffer]) -> None:
    """What a queued op can be refused for at the call (docs/acl.md: asynchronous calls check their
    arguments at once): descs against buffer sizes, and every buffer live memory of the right kind
    (device; host for an input placed there). These returned 0 and failed only at the next
    ``synchronize_stream``; what changes in between (memory freed) is still reported there."""
    space = require_init().space
    for i, (d, b) in enumerate(zip(ins, in_bufs)):
        if d.dtype == C.ACL_DT_UNDEFINED:
            continue
        _, need = _input_bytes(op_type, i, d, b)
        kinds = ANY_KIND if d.extra.get("placement") == C.ACL_MEMTYPE_HOST else DEVICE_KINDS
        if need:
            space.resolve(b.ptr, need, kinds, False, f"input {i} of {op_type}")
    for j, (d, b) in enumerate(zip(outs, out_bufs)):
        dt = d.numpy_dtype()
        if any(x < 0 for x in d.dims):
            continue  # (the size is known once the op ran)
        need = math.prod(d.dims) * dt.itemsize
        if need > b.size:
            raise fault(C.ACL_ERROR_INVALID_PARAM, f"output {j} of {op_type}: buffer of {b.size} bytes, desc needs {need}")
        if need:
            space.resolve(b.ptr, need, DEVICE_KINDS, True, f"output {j} of {op_type}")


def _run(op_type: str, ins: list[TensorDescObj], in_bufs: list[DataBuffer], outs: list[TensorDescObj],
         out_bufs: list[DataBuffer], attrs: dict[str, Any]) -> None:
    space = require_init().space
    arrays: list[np.ndarray | None] = []
    for i, (d, b) in enumerate(zip(ins, in_bufs)):
        if d.dtype == C.ACL_DT_UNDEFINED:
            arrays.append(None)  # an omitted optional input
            continue
        dt, need = _input_bytes(op_type, i, d, b)
        kinds = ANY_KIND if d.extra.get("placement") == C.ACL_MEMTYPE_HOST else DEVICE_KINDS
        raw = space.read(b.ptr, need, kinds, f"input {i} of {op_type}") if need else np.zeros(0, np.uint8)
        arrays.append(raw.view(dt).reshape(d.dims))
    try:
        results = run_op(op_type, arrays, attrs, n_outputs=len(outs))
    except UnsupportedOpError as e:
        raise fault(C.ACL_ERROR_OP_NOT_FOUND, str(e)) from None
    except AttrError as e:
        raise fault(C.ACL_ERROR_OP_ATTR_NOT_MATCH, str(e)) from None
    except OutputCountError as e:
        raise fault(C.ACL_ERROR_OP_OUTPUT_NOT_MATCH, str(e)) from None
    except (ShapeError, KernelError) as e:  # inference or the kernel rejects these inputs
        raise fault(C.ACL_ERROR_OP_INPUT_NOT_MATCH, str(e)) from None
    for j, (d, b) in enumerate(zip(outs, out_bufs)):
        o = np.ascontiguousarray(results[j])
        dt = d.numpy_dtype()
        if o.dtype != dt or (all(x >= 0 for x in d.dims) and list(o.shape) != list(d.dims)):
            raise fault(C.ACL_ERROR_OP_OUTPUT_NOT_MATCH,
                        f"output {j} of {op_type} is {o.dtype}{list(o.shape)}, its desc says {dt}{d.dims}")
        if o.nbytes > b.size:
            raise fault(C.ACL_ERROR_INVALID_PARAM, f"output {j} of {op_type}: {o.nbytes} bytes do not fit {b.size}")
        if o.nbytes:
            space.write(b.ptr, o, DEVICE_KINDS, f"output {j} of {op_type}")


def _submit(op_type: str, in_descs: Any, inputs: Any, out_descs: Any, outputs: Any, attr: Any, stream: Any) -> None:
    if not isinstance(op_type, str):
        raise ArgTypeError("op_type must be a str")
    _lookup(op_type)
    ins, outs = _descs(in_descs, "input"), _descs(out_descs, "output")
    _queue(op_type, ins, inputs, outs, outputs, dict(_attr(attr).values) if as_int(attr, "attr") else {}, stream)


def _queue(op_type: str, ins: list[TensorDescObj], inputs: Any, outs: list[TensorDescObj], outputs: Any,
           attrs: dict[str, Any], stream: Any) -> None:
    in_bufs, out_bufs = _bufs(inputs, len(ins), "input"), _bufs(outputs, len(outs), "output")
    st = stream_of(stream)
    _check_now(op_type, ins, in_bufs, outs, out_bufs)
    st.submit(lambda: _run(op_type, ins, in_bufs, outs, out_bufs, attrs), f"op {op_type}")


@api()
def execute_v2(op_type: str, input_desc: list[int], inputs: list[int], output_desc: list[int],
               outputs: list[int], attr: int, stream: int) -> int:
    """Queue ``op_type`` on ``stream`` (0 = default); synchronize the stream for the result."""
    _submit(op_type, input_desc, inputs, output_desc, outputs, attr, stream)
    return C.ACL_SUCCESS


execute = execute_v2


@api()
def cast(input_desc: int, input: int, output_desc: int, output: int, truncate: int, stream: int) -> int:
    """Cast to the output desc's dtype (ONNX ``Cast``; ``truncate`` is ignored)."""
    to = ACL_TO_DTYPE.get(tensor_desc(output_desc).dtype)
    if to is None:
        raise fault(C.ACL_ERROR_UNSUPPORTED_DATA_TYPE, "the output desc's data type is not supported")
    a = create_attr()
    try:
        _attr(a).values["to"] = int(DType(to))
        _submit("Cast", [input_desc], [input], [output_desc], [output], a, stream)
    finally:
        destroy_attr(a)
    return C.ACL_SUCCESS


@dataclass
class OpHandle:
    op_type: str
    in_descs: list[TensorDescObj]
    out_descs: list[TensorDescObj]
    attr: dict[str, Any]


@api(out=(0,))
def create_handle(op_type: str, input_desc: list[int], output_desc: list[int], attr: int) -> tuple[int, int]:
    """``handle, ret``: an op bound to its descs and attributes (checked now)."""
    if not isinstance(op_type, str):
        raise ArgTypeError("op_type must be a str")
    _lookup(op_type)
    ins, outs = _descs(input_desc, "input"), _descs(output_desc, "output")  # (bound now: aclopCreateHandle)
    attrs = dict(_attr(attr).values) if as_int(attr, "attr") else {}
    return handles.add("op_handle", OpHandle(op_type, ins, outs, attrs)), C.ACL_SUCCESS


@api()
def execute_with_handle(handle: int, inputs: list[int], outputs: list[int], stream: int) -> int:
    h: OpHandle = handles.get("op_handle", handle, "op handle")
    _queue(h.op_type, h.in_descs, inputs, h.out_descs, outputs, dict(h.attr), stream)
    return C.ACL_SUCCESS


def destroy_handle(handle: int) -> None:
    try:
        handles.pop("op_handle", handle)
    except AclFault:
        pass
