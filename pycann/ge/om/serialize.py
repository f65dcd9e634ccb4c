"""Graph <-> JSON conversion for pycann's .om manifest (the container itself is ``pycann.ge.om``).

Tensor data never goes into the JSON: numeric arrays (initializers, TENSOR attributes, numpy
scalars) are handed to a ``put`` callback that appends their raw little-endian bytes to the
weights section and returns where they went; the JSON keeps a reference
``{"dtype": <ONNX dtype int>, "shape": [...], "offset": int, "nbytes": int}``. Only STRING
tensors (object / ``str_`` arrays) are stored inline, as a flat list.

Attribute values are tagged ``{"t": kind, "v": value}`` so that the exact Python type comes
back: ``1`` stays an int and ``1.0`` a float, ``True`` a bool, ``[]`` an empty list, a tuple a
tuple. Kinds: ``none bool int float str bytes ints floats list tuple dict tensor scalar graph``.
Non-finite floats are written as the strings ``"nan"``/``"inf"``/``"-inf"`` so the manifest
stays strict JSON. Decoding builds plain data only — nothing in a manifest is ever executed.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.dtypes import DType, Format, TensorDesc, from_numpy, to_numpy
from pycann.ge.ir.context import LEGACY_KEYS, CompileContext
from pycann.ge.ir.graph import Graph, Node
from pycann.kernels.algorithm import FAMILIES, Algorithm
from pycann.kernels.algorithm import parse as parse_algorithm

# put(array) -> (offset, nbytes): store a C-contiguous, little-endian numeric array's bytes.
PutTensor = Callable[[np.ndarray], tuple[int, int]]
# get(dtype, shape, offset, nbytes) -> array: view of stored bytes (read-only when mapped).
GetTensor = Callable[[np.dtype, tuple[int, ...], int, int], np.ndarray]

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class MalformedManifest(ValueError):
    """The JSON does not follow the layout this module writes (foreign or damaged writer)."""


# ------------------------------------------------------------------------------- tensors
def encode_tensor(arr: np.ndarray, put: PutTensor) -> dict[str, Any]:
    """JSON reference for ``arr``; numeric data goes through ``put``, strings stay inline."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray, got {type(arr).__name__}")
    if arr.dtype.kind in ("O", "U"):
        ref: dict[str, Any] = {"dtype": int(DType.STRING), "shape": list(arr.shape)}
        ref["strings"] = [_encode_string(s) for s in arr.reshape(-1).tolist()]
        if arr.dtype.kind == "U":
            ref["unicode"] = True  # restore an np.str_ array, not an object array
        return ref
    if arr.dtype.byteorder == ">":  # the weights section is little-endian
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    dtype = from_numpy(arr.dtype)  # TypeError for dtypes the IR does not know
    offset, nbytes = put(np.ascontiguousarray(arr))
    return {"dtype": int(dtype), "shape": list(arr.shape), "offset": offset, "nbytes": nbytes}


def decode_tensor(ref: dict[str, Any], get: GetTensor) -> np.ndarray:
    """Array for a reference written by ``encode_tensor``."""
    shape = tuple(_int(d, "tensor dim") for d in ref["shape"])
    if any(d < 0 for d in shape):
        raise MalformedManifest(f"negative tensor dim in {shape}")
    dtype_id = _int(ref["dtype"], "tensor dtype")
    if dtype_id == DType.STRING:
        flat = [_decode_string(s) for s in ref["strings"]]
        if ref.get("unicode"):
            out = np.array(flat, dtype=np.str_) if flat else np.array([], dtype=np.str_)
        else:
            out = np.empty(len(flat), dtype=object)
            out[:] = flat
        if out.size != math.prod(shape):
            raise MalformedManifest(f"{out.size} strings do not fill shape {shape}")
        return out.reshape(shape)
    try:
        dtype = to_numpy(dtype_id)
    except TypeError:
        raise MalformedManifest(f"unknown tensor dtype {dtype_id}") from None
    nbytes = _int(ref["nbytes"], "tensor nbytes")
    if nbytes != math.prod(shape) * dtype.itemsize:
        raise MalformedManifest(f"nbytes {nbytes} does not match {dtype}{list(shape)}")
    return get(dtype, shape, _int(ref["offset"], "tensor offset"), nbytes)


def _encode_string(s: Any) -> Any:
    if isinstance(s, str):
        return s
    if isinstance(s, (bytes, bytearray, np.bytes_)):
        return {"b64": base64.b64encode(bytes(s)).decode("ascii")}
    raise TypeError(f"STRING tensor element of type {type(s).__name__} (expected str or bytes)")


def _decode_string(s: Any) -> str | bytes:
    if isinstance(s, str):
        return s
    if isinstance(s, dict) and isinstance(s.get("b64"), str):
        return base64.b64decode(s["b64"], validate=True)
    raise MalformedManifest(f"bad STRING tensor element {s!r:.60}")


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise MalformedManifest(f"{what} is {v!r:.60}, expected an integer")
    return v


# ---------------------------------------------------------------------------- attributes
def _encode_float(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _decode_float(v: Any) -> float:
    if isinstance(v, str) and v in _NONFINITE:
        return _NONFINITE[v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise MalformedManifest(f"bad float {v!r:.60}")


def encode_attr(value: Any, put: PutTensor) -> dict[str, Any]:
    """Tagged JSON form of one attribute value (see the module docstring for the kinds)."""
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, np.generic):
        # numpy scalars (np.float32(0.5), np.int64(3), np.bool_): a 0-d tensor keeps the dtype
        return {"t": "scalar", "v": encode_tensor(np.asarray(value), put)}
    if isinstance(value, int):
        return {"t": "int", "v": int(value)}
    if isinstance(value, float):
        return {"t": "float", "v": _encode_float(float(value))}
    if isinstance(value, str):
        return {"t": "str", "v": value}
    if isinstance(value, Algorithm):
        # a kernel choice (``_algo``) is written as its key, as files before typed algorithms were
        return {"t": "str", "v": value.key}
    if isinstance(value, (bytes, bytearray)):
        return {"t": "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.ndarray):
        return {"t": "tensor", "v": encode_tensor(value, put)}
    if isinstance(value, Graph):
        return {"t": "graph", "v": encode_graph(value, put)}
    if isinstance(value, list):
        # compact forms for the common homogeneous lists; [] takes the generic form
        if value and all(type(x) is int for x in value):
            return {"t": "ints", "v": value}
        if value and all(type(x) is float for x in value):
            return {"t": "floats", "v": [_encode_float(x) for x in value]}
        return {"t": "list", "v": [encode_attr(x, put) for x in value]}
    if isinstance(value, tuple):
        return {"t": "tuple", "v": [encode_attr(x, put) for x in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("dict attribute values need str keys")
        return {"t": "dict", "v": {k: encode_attr(v, put) for k, v in value.items()}}
    raise TypeError(f"attribute value of type {type(value).__name__} cannot be stored in an .om")


def decode_attr(obj: Any, get: GetTensor) -> Any:
    """Python value for a tagged attribute written by ``encode_attr``."""
    if not isinstance(obj, dict) or "t" not in obj:
        raise MalformedManifest(f"attribute is not tagged: {obj!r:.60}")
    t, v = obj["t"], obj.get("v")
    if t == "none":
        return None
    if t == "bool" and isinstance(v, bool):
        return v
    if t == "int":
        return _int(v, "int attribute")
    if t == "float":
        return _decode_float(v)
    if t == "str" and isinstance(v, str):
        return v
    if t == "bytes" and isinstance(v, str):
        return base64.b64decode(v, validate=True)
    if t == "ints" and isinstance(v, list):
        return [_int(x, "ints attribute") for x in v]
    if t == "floats" and isinstance(v, list):
        return [_decode_float(x) for x in v]
    if t in ("list", "tuple") and isinstance(v, list):
        items = [decode_attr(x, get) for x in v]
        return items if t == "list" else tuple(items)
    if t == "dict" and isinstance(v, dict):
        return {k: decode_attr(x, get) for k, x in v.items()}
    if t == "tensor" and isinstance(v, dict):
        return decode_tensor(v, get)
    if t == "scalar" and isinstance(v, dict):
        return decode_tensor(v, get)[()]
    if t == "graph" and isinstance(v, dict):
        return decode_graph(v, get)
    raise MalformedManifest(f"unknown attribute kind {t!r:.40} (file from a newer pycann?)")


# -------------------------------------------------------------------------------- graphs
def _encode_desc(desc: TensorDesc) -> dict[str, Any]:
    shape: list[int | str | None] | None = None
    if desc.shape is not None:
        shape = []
        for d in desc.shape:
            if d is None or isinstance(d, str):
                shape.append(d)
            elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                shape.append(int(d))
            else:
                raise TypeError(f"dim {d!r} is not an int, str or None")
    out: dict[str, Any] = {"dtype": int(desc.dtype), "shape": shape, "format": int(desc.format)}
    if desc.kind != "tensor":  # sequence / optional values; absent means tensor (older files)
        out["kind"] = desc.kind
    return out


def _decode_desc(obj: dict[str, Any]) -> TensorDesc:
    shape = obj["shape"]
    if shape is not None:
        if not isinstance(shape, list) or not all(
            d is None or isinstance(d, str) or type(d) is int for d in shape
        ):
            raise MalformedManifest(f"bad shape {shape!r:.60}")
        shape = tuple(shape)
    kind = obj.get("kind", "tensor")
    if kind not in ("tensor", "sequence", "optional"):
        raise MalformedManifest(f"bad value kind {kind!r:.40}")
    return TensorDesc(_int(obj["dtype"], "desc dtype"), shape, Format(obj.get("format", Format.ND)), kind)


def encode_graph(graph: Graph, put: PutTensor) -> dict[str, Any]:
    """JSON-ready dict for ``graph`` (recursing into subgraphs); tensors go through ``put``."""
    nodes = []
    for n in graph.nodes:
        attrs = {}
        for k, v in n.attrs.items():
            try:
                attrs[k] = encode_attr(v, put)
            except TypeError as e:
                raise TypeError(f"node {n.label()} attribute '{k}': {e}") from None
        nodes.append({
            "op_type": n.op_type, "domain": n.domain, "name": n.name, "opset": int(n.opset),
            "inputs": list(n.inputs), "outputs": list(n.outputs), "origin": list(n.origin),
            "attrs": attrs,
        })
    inits = []
    for name, arr in graph.initializers.items():
        try:
            inits.append({"name": name, **encode_tensor(np.asarray(arr), put)})
        except TypeError as e:
            raise TypeError(f"graph '{graph.name}' initializer '{name}': {e}") from None
    out = {
        "name": graph.name,
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "opsets": {d: int(v) for d, v in graph.opsets.items()},
        "metadata": dict(graph.metadata),
        "compile": graph.context.to_json(),
        "descs": {k: _encode_desc(d) for k, d in graph.descs.items()},
        "initializers": inits,
        "nodes": nodes,
    }
    if graph.override_source is not None:  # its unchanged weights are the graph's own arrays: stored once
        out["override_source"] = encode_graph(graph.override_source, put)
    return out


def _field(obj: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    """``obj[key]`` checked to be a ``kind`` (a missing key gives ``default`` when there is one)."""
    if key not in obj and default is not None:
        return default
    if key not in obj:
        raise MalformedManifest(f"{where} has no '{key}'")
    v = obj[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise MalformedManifest(f"{where} '{key}' is {type(v).__name__}, expected {kind.__name__}")
    return v


def _names(obj: dict[str, Any], key: str, where: str, default: Any = None) -> list[str]:
    v = _field(obj, key, list, where, default)
    if not all(isinstance(x, str) for x in v):
        raise MalformedManifest(f"{where} '{key}' holds a non-string name")
    return list(v)


def _decode_algo(attrs: dict[str, Any], where: str, family: str | None) -> None:
    """The kernel choice ``_algo`` of a node read back as an ``Algorithm`` (files store its key,
    ``"onednn:conv_nhwc"``). A key this pycann does not know (a newer file) is dropped: the node
    takes the static choice, as a choice whose provider is missing here does. So is an algorithm of
    another op family than the node's (``family``, ``algorithm.FAMILIES``; an edited file): bound
    as it is, a MatMul would call a conv kernel at run time."""
    key = attrs["_algo"]
    if not isinstance(key, str):
        raise MalformedManifest(f"{where} attribute _algo is {type(key).__name__}, expected a 'provider:name' string")
    algo = parse_algorithm(key)
    if algo is None or algo.op_type != family:
        del attrs["_algo"]
    else:
        attrs["_algo"] = algo


def _decode_node(n: Any, get: GetTensor, i: int) -> Node:
    if not isinstance(n, dict):
        raise MalformedManifest(f"node {i} is {type(n).__name__}, expected an object")
    where = f"node {i} ({n.get('name', '')!s:.40})"
    attrs = {k: decode_attr(v, get) for k, v in _field(n, "attrs", dict, where).items()}
    if "_algo" in attrs:
        _decode_algo(attrs, where, FAMILIES.get((str(n.get("domain", "")), str(n.get("op_type", "")))))
    return Node(
        op_type=_field(n, "op_type", str, where), inputs=_names(n, "inputs", where),
        outputs=_names(n, "outputs", where),
        attrs=attrs,
        name=_field(n, "name", str, where, ""), domain=_field(n, "domain", str, where, ""),
        opset=_int(n.get("opset", 0), "opset"), origin=_names(n, "origin", where, []),
    )


def decode_graph(obj: dict[str, Any], get: GetTensor) -> Graph:
    """``Graph`` for a dict written by ``encode_graph``. Raises ``MalformedManifest`` naming the
    first missing or mistyped field (structure is checked by ``pycann.ge.om.check``)."""
    if not isinstance(obj, dict):
        raise MalformedManifest("graph entry is not an object")
    where = f"graph '{obj.get('name', 'main')!s:.40}'"
    inits: dict[str, np.ndarray] = {}
    for i in _field(obj, "initializers", list, where, []):
        if not isinstance(i, dict) or not isinstance(i.get("name"), str):
            raise MalformedManifest(f"{where}: an initializer entry has no name")
        inits[i["name"]] = decode_tensor(i, get)
    descs = _field(obj, "descs", dict, where, {})
    if not all(isinstance(d, dict) for d in descs.values()):
        raise MalformedManifest(f"{where}: a tensor description is not an object")
    metadata = _metadata(_field(obj, "metadata", dict, where, {}), where)
    source = obj.get("override_source")
    return Graph(
        nodes=[_decode_node(n, get, i) for i, n in enumerate(_field(obj, "nodes", list, where))],
        inputs=_names(obj, "inputs", where),
        outputs=_names(obj, "outputs", where),
        initializers=inits,
        descs={k: _decode_desc(d) for k, d in descs.items()},
        name=_field(obj, "name", str, where, "main"),
        opsets={d: _int(v, "opset") for d, v in _field(obj, "opsets", dict, where, {}).items()},
        metadata=metadata,
        context=_context(obj, metadata, where),
        override_source=None if source is None else decode_graph(source, get),
    )


def _context(obj: dict[str, Any], metadata: dict[str, str], where: str) -> CompileContext:
    """The graph's ``CompileContext``: its ``"compile"`` section, or for a file written before
    that section the old ``graph.metadata`` strings (taken out of the metadata)."""
    if "compile" in obj:
        try:
            return CompileContext.from_json(_field(obj, "compile", dict, where))
        except ValueError as e:
            raise MalformedManifest(f"{where}: {e}") from None
    ctx = CompileContext.from_metadata(metadata)
    for key in LEGACY_KEYS:
        metadata.pop(key, None)
    return ctx


def _metadata(md: dict[str, Any], where: str) -> dict[str, str]:
    """Graph metadata holds strings only (ONNX metadata_props; pycann's own keys are strings too)."""
    bad = [k for k, v in md.items() if not isinstance(v, str)]
    if bad:
        raise MalformedManifest(f"{where} metadata '{bad[0]}' is {type(md[bad[0]]).__name__}, expected a string")
    return dict(md)
