"""Reading TensorFlow model files with TensorFlow's own protobuf definitions.

TensorFlow itself is not needed: the compiled ``GraphDef`` / ``MetaGraphDef`` / ``TensorProto``
messages ship in ``tensorboard`` (``tensorboard.compat.proto``, generated from TensorFlow's
``.proto`` files and kept in step with TensorFlow by the TensorBoard project), and
``tensorboard.util.tensor_util.make_ndarray`` decodes tensors the way TensorFlow does.
``saved_model.proto``'s one wrapper message (``SavedModel``: field 1 schema version, field 2
repeated ``MetaGraphDef``) is not among them; it is declared here through protobuf's descriptor
API on top of tensorboard's ``meta_graph.proto``, so parsing is still protobuf's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pycann.dtypes import DType
from pycann.errors import ModelError

# TensorFlow DataType (types.proto) -> ONNX/pycann DType. Quantized, resource and variant types
# are absent on purpose: they never reach an inference graph pycann can run.
TF_TO_DTYPE: dict[int, DType] = {
    1: DType.FLOAT, 2: DType.DOUBLE, 3: DType.INT32, 4: DType.UINT8, 5: DType.INT16, 6: DType.INT8,
    7: DType.STRING, 9: DType.INT64, 10: DType.BOOL, 14: DType.BFLOAT16, 17: DType.UINT16,
    19: DType.FLOAT16, 22: DType.UINT32, 23: DType.UINT64,
}

_INSTALL_HINT = "pip install tensorboard (it ships TensorFlow's compiled .proto modules; TensorFlow is not needed)"


def _protos() -> Any:
    try:
        from tensorboard.compat.proto import graph_pb2, meta_graph_pb2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ModelError(f"reading TensorFlow models needs TensorFlow's protobuf messages: {_INSTALL_HINT} ({e})",
                         code="E19999") from None
    return graph_pb2, meta_graph_pb2


def make_ndarray(tensor: Any) -> np.ndarray:
    """A TensorFlow ``TensorProto`` as a numpy array (TensorFlow's decoding, via tensorboard)."""
    from tensorboard.util import tensor_util

    try:
        arr = np.asarray(tensor_util.make_ndarray(tensor))
    except ValueError:
        arr = _short_tensor(tensor)
    if arr.dtype == object:  # DT_STRING: bytes -> str, as pycann's string tensors hold str
        arr = np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else b,
                           otypes=[object])(arr) if arr.size else arr
    return arr


def const_value(node: Any) -> np.ndarray:
    """The value of a ``Const`` node, or ``ModelError`` naming the node when it has no tensor
    ``value`` attribute or one that does not decode (a hand-edited or damaged GraphDef)."""
    t = attr(node, "value")
    if t is None or not hasattr(t, "tensor_shape"):
        raise ModelError(f"node {node.name} (Const): no tensor 'value' attribute: the GraphDef is damaged")
    try:
        return make_ndarray(t)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise ModelError(f"node {node.name} (Const): its value does not decode ({type(e).__name__}: {e})") from None


def _short_tensor(tensor: Any) -> np.ndarray:
    """TensorFlow's rule for a TensorProto with fewer values than elements (tensorboard's copy
    rejects it): the last value repeats, no value at all means zeros."""
    from tensorboard.util import tensor_util

    shape = tuple(int(d.size) for d in tensor.tensor_shape.dim)
    dtype = tensor_util.dtypes.as_dtype(tensor.dtype).as_numpy_dtype
    for field in ("float_val", "double_val", "int_val", "int64_val", "bool_val", "half_val", "uint32_val",
                  "uint64_val"):
        vals = list(getattr(tensor, field))
        if vals:
            flat = np.full(int(np.prod(shape)), vals[-1], dtype=dtype)
            flat[: len(vals)] = vals[: flat.size]
            return flat.reshape(shape)
    return np.zeros(shape, dtype=dtype)


def _saved_model_class(meta_graph_pb2: Any) -> Any:
    """The ``tensorflow.SavedModel`` message class, declared over tensorboard's MetaGraphDef."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorboard.PycannSavedModel"))
    except KeyError:
        pass
    meta_file = meta_graph_pb2.DESCRIPTOR
    fdp = descriptor_pb2.FileDescriptorProto(name="pycann/tensorboard_saved_model.proto",
                                             package=meta_file.package, syntax="proto3")
    fdp.dependency.append(meta_file.name)
    msg = fdp.message_type.add(name="PycannSavedModel")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="saved_model_schema_version", number=1, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    msg.field.add(name="meta_graphs", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                  type_name=f".{meta_file.package}.MetaGraphDef")
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{meta_file.package}.PycannSavedModel"))


def read_graph_def(path: str | os.PathLike[str]) -> Any:
    """The ``GraphDef`` of a frozen ``.pb``, or of a SavedModel directory / ``saved_model.pb``.

    A SavedModel is accepted when its ``serve`` meta graph (else its first) is a frozen graph;
    variables make it fail in ``check_frozen`` with the command that freezes it.
    Raises ``ModelError`` (E10001 for a missing/empty file, E19999 for an unparsable one).
    """
    graph_pb2, meta_graph_pb2 = _protos()
    p = Path(path)
    if p.is_dir():
        p = p / "saved_model.pb"
    if not p.is_file():
        raise ModelError(f"model file '{path}' does not exist", code="E10001")
    data = p.read_bytes()
    if not data:
        raise ModelError(f"model file '{path}' is empty (0 bytes): re-export it", code="E10001")
    if p.name == "saved_model.pb":
        sm = _saved_model_class(meta_graph_pb2)()
        try:
            sm.ParseFromString(data)
        except Exception as e:  # protobuf DecodeError
            raise ModelError(f"cannot parse '{path}' as a TensorFlow SavedModel: {e}") from None
        if not sm.meta_graphs:
            raise ModelError(f"SavedModel '{path}' holds no meta graph")
        serve = [m for m in sm.meta_graphs if "serve" in m.meta_info_def.tags]
        return (serve or list(sm.meta_graphs))[0].graph_def
    gd = graph_pb2.GraphDef()
    try:
        if p.suffix == ".pbtxt":
            from google.protobuf import text_format

            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError / ParseError
        raise ModelError(f"cannot parse '{path}' as a TensorFlow GraphDef (frozen .pb): {e}") from None
    if not gd.node:
        raise ModelError(f"'{path}' parses as a GraphDef with no nodes: is it a TensorFlow frozen graph?")
    return gd


VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "ResourceGather",
                          "StatefulPartitionedCall", "PartitionedCall", "AssignVariableOp"})


def check_frozen(graph_def: Any, needed: set[str]) -> None:
    """Variables (or function calls, TF2's form) among the needed nodes: ask for a frozen graph."""
    found = [n.name for n in graph_def.node if n.name in needed and n.op in VARIABLE_OPS]
    if found:
        raise ModelError(
            f"the TensorFlow graph is not frozen: {len(found)} variable/function-call node(s), e.g. "
            f"{', '.join(found[:5])}. Freeze it first (TF2: convert_variables_to_constants_v2 on a concrete "
            "function; TF1: tf.compat.v1.graph_util.convert_variables_to_constants) and pass the frozen .pb",
            code="E19999")


def attr(node: Any, name: str, default: Any = None) -> Any:
    """A NodeDef attribute as a Python value: int, float, bool, str, list, dtype int, shape list
    (None for unknown dims / unknown rank) or ``TensorProto``; ``default`` when absent."""
    if name not in node.attr:
        return default
    a = node.attr[name]
    kind = a.WhichOneof("value")
    if kind == "i":
        return int(a.i)
    if kind == "f":
        return float(a.f)
    if kind == "b":
        return bool(a.b)
    if kind == "s":
        return a.s.decode("utf-8", "replace")
    if kind == "type":
        return int(a.type)
    if kind == "shape":
        return shape_list(a.shape)
    if kind == "tensor":
        return a.tensor
    if kind == "list":
        lst = a.list
        for field in ("i", "f", "s", "type", "b"):
            vals = list(getattr(lst, field))
            if vals:
                return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vals]
        if lst.shape:
            return [shape_list(s) for s in lst.shape]
        return []
    return default


def shape_list(shape: Any) -> list[int | None] | None:
    """A TensorShapeProto as a list (None for an unknown dim), or None for an unknown rank."""
    if shape.unknown_rank:
        return None
    return [int(d.size) if d.size >= 0 else None for d in shape.dim]
