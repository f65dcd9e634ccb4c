"""ONNX ModelProto -> pycann IR ``Graph``.

Uses the ``onnx`` package for parsing and checking. Opset differences are resolved here
(``pycann.ge.compile.importers.opset_upgrade``), so every later stage sees one meaning per op.
``Constant`` nodes become initializers; model-local functions are inlined.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.errors import ModelError, UnsupportedOpError
from pycann.ge.compile.importers.expand import FunctionExpander
from pycann.ge.compile.importers.onnx_check import check_structure
from pycann.ge.compile.importers.opset_upgrade import upgrade_node
from pycann.ge.ir import Graph, Node, overrides
from pycann.ge.ir.overrides import METADATA_KEY
from pycann.ops.registry import lookup


def load_onnx(source: str | os.PathLike[str] | bytes | onnx.ModelProto, check: bool = True) -> Graph:
    """Read an ONNX model (path, bytes or ModelProto) and import it.

    Raises ``ModelError`` when the file cannot be parsed or fails ``onnx.checker``.
    """
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        try:
            if isinstance(source, bytes):
                model = onnx.load_from_string(source)
            else:
                if not Path(source).is_file():
                    raise ModelError(f"model file '{source}' does not exist", code="E10001")
                if Path(source).stat().st_size == 0:
                    raise ModelError(f"model file '{source}' is empty (0 bytes): re-export or re-download it",
                                     code="E10001")
                model = onnx.load(os.fspath(source))
        except ModelError:
            raise
        except Exception as e:  # protobuf DecodeError and friends
            name = source if not isinstance(source, bytes) else '<bytes>'
            if _is_om(source):
                show = "" if isinstance(source, bytes) else f", or show it with atc --mode=6 --om={name}"
                raise ModelError(f"'{name}' is a pycann .om (a compiled model), not an ONNX model: run it as it is "
                                 f"(InferSession, acl.mdl.load_from_file{', load_from_mem' if not show else ''}){show}",
                                 code="E10001") from None
            raise ModelError(f"cannot parse '{name}' as an ONNX model: {e}") from None
    if check:
        try:
            # the structure alone: the weights' sizes are the importer's to check (onnx_check.py);
            # full_check would run onnx's shape inference, which rejects some valid exports.
            check_structure(model)
        except onnx.checker.ValidationError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            _raise_if_unknown_op(model, first)
            if "Field 'shape' of 'type' is required" not in first:
                # (a value_info without a shape is accepted, as ONNX Runtime accepts it)
                raise ModelError(f"model fails onnx.checker: {first}") from None  # noqa: E501
        except ValueError:
            pass  # >2 GB models cannot be checked in memory; the importer still validates edges.
    return import_model(model)


def _supported(domain: str, op_type: str, opset: int) -> bool:
    try:
        lookup(op_type, domain, opset)
        return True
    except UnsupportedOpError:
        return op_type == "Constant" and domain == ""


def _raise_if_unknown_op(model: onnx.ModelProto, message: str) -> None:
    """The checker's "No Op registered for X" becomes atc's E19010 naming the node and opset."""
    if not message.startswith("No Op registered for "):
        return
    op_type = message.split()[4]
    opsets = {(o.domain or ""): o.version for o in model.opset_import}
    for n in model.graph.node:
        if n.op_type == op_type:
            raise UnsupportedOpError(
                f"node {n.name or '<unnamed>'}: no parser is registered for op {op_type} "
                f"(domain {n.domain or 'ai.onnx'}, opset {opsets.get(n.domain or '', '?')}); it is not an "
                "operator of that ONNX opset — check the exporter's opset or op name"
            )


def import_model(model: onnx.ModelProto) -> Graph:
    """Convert a ModelProto into a ``Graph`` (opset-normalised, Constants folded to initializers)."""
    opsets = {(o.domain or ""): o.version for o in model.opset_import}
    if "" not in opsets and "ai.onnx" in opsets:
        opsets[""] = opsets["ai.onnx"]
    _check_opset(opsets.get(""))
    _check_input_types(model.graph)
    g = _Importer(model).graph(model.graph, opsets, outer=frozenset())
    g.metadata = {p.key: p.value for p in model.metadata_props}
    g.metadata["producer"] = f"{model.producer_name} {model.producer_version}".strip()
    g.metadata["ir_version"] = str(model.ir_version)
    # IR >= 4: an input with an initializer is an input with a default value (pycann.ge.ir.overrides)
    inits = {t.name for t in model.graph.initializer}
    feedable = sorted(vi.name for vi in model.graph.input if vi.name in inits) if model.ir_version >= 4 else []
    if feedable:
        g.metadata[METADATA_KEY] = overrides.record(feedable)
        defaults = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}
        declared = {vi.name: _dims(vi.type)[1] for vi in model.graph.input if vi.name in defaults}
        loose = {n: s for n, s in declared.items() if s != defaults[n]}
        if loose:  # (ORT checks a feed against the input's declared shape: "N" takes any size)
            g.metadata[overrides.SHAPES_KEY] = overrides.record_shapes(loose)
    return g


# Opsets 1..newest are ONNX's: a low opset is legitimate (onnx's own node tests stamp a model
# with its op's version, e.g. Not at opset 1; each op's checker/schema at that opset applies).
# An opset beyond the onnx package's newest is no ONNX opset yet, and is refused.
MIN_OPSET = 1


def _check_opset(version: int | None) -> None:
    """The default domain's opset must be one ONNX defines and ONNX Runtime runs."""
    if version is None:
        return
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= version <= newest:
        raise UnsupportedOpError(
            f"the model imports ONNX opset {version}; pycann supports opsets {MIN_OPSET}..{newest} "
            f"(ONNX's opsets, up to this onnx package's newest); re-export it with a released opset, or convert it "
            "with onnx.version_converter.convert_version(model, 17)"
        )


def _check_input_types(gp: onnx.GraphProto) -> None:
    """Every tensor input of the main graph has an element type (elem_type 0 is UNDEFINED)."""
    for vi in gp.input:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == 0:
            raise ModelError(f"graph input '{vi.name}' has no element type (elem_type 0 = UNDEFINED); "
                             "set it, e.g. onnx.TensorProto.FLOAT")


def _dims(tp: onnx.TypeProto) -> tuple[int, tuple[Dim, ...] | None]:
    if not tp.HasField("tensor_type"):
        return int(DType.UNDEFINED), None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, tuple(dims)


def _desc(vi: onnx.ValueInfoProto) -> TensorDesc | None:
    tp = vi.type
    if tp.HasField("tensor_type"):
        dtype, shape = _dims(tp)
        return TensorDesc(dtype, shape)
    # sequence / optional values: element dtype, no shape (a sequence's tensors differ in shape)
    kind = "sequence" if tp.HasField("sequence_type") else "optional" if tp.HasField("optional_type") else ""
    if not kind:
        return None  # map / sparse types: nothing pycann computes with
    elem = tp.sequence_type.elem_type if kind == "sequence" else tp.optional_type.elem_type
    if elem.HasField("sequence_type"):
        elem = elem.sequence_type.elem_type
    return TensorDesc(elem.tensor_type.elem_type if elem.HasField("tensor_type") else 0, None, kind=kind)


def tensor_to_array(t: onnx.TensorProto) -> np.ndarray:
    """TensorProto -> numpy (strings as object arrays of ``str``). Raises ``ModelError`` naming the
    tensor when its data does not fill its dims (e.g. ``raw_data`` of the wrong length)."""
    try:
        arr = numpy_helper.to_array(t)
    except (ValueError, TypeError, KeyError) as e:
        dims = list(t.dims)
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if t.HasField("raw_data"):
            try:
                item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
                why = (f"raw_data holds {len(t.raw_data)} bytes, dims {dims} of "
                       f"{onnx.TensorProto.DataType.Name(t.data_type)} need {math.prod(dims) * item}")
            except (KeyError, ValueError, TypeError):
                pass
        raise ModelError(f"tensor '{t.name}': {why}; re-export the model") from None
    if t.data_type == onnx.TensorProto.STRING:
        arr = np.vectorize(lambda b: b.decode("utf-8") if isinstance(b, bytes) else b, otypes=[object])(arr) if arr.size else arr.astype(object)
    return np.asarray(arr)


SubgraphFn = Callable[[onnx.GraphProto, dict[str, int], frozenset[str]], Graph]
_GRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


def attr_value(a: AttributeProto, opsets: dict[str, int], outer: frozenset[str], sub: SubgraphFn) -> Any:
    """Decode one attribute into a Python value (see ``Node`` docs); ``sub`` imports GRAPH values."""
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        try:
            return a.s.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(a.s)
    if t == AttributeProto.TENSOR:
        return tensor_to_array(a.t)
    if t == AttributeProto.SPARSE_TENSOR:
        return _sparse_to_dense(a.sparse_tensor)
    if t == AttributeProto.GRAPH:
        return sub(a.g, opsets, outer)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [tensor_to_array(x) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [sub(x, opsets, outer) for x in a.graphs]
    if t == AttributeProto.TYPE_PROTO:
        return int(a.tp.tensor_type.elem_type) if a.tp.HasField("tensor_type") else 0
    raise ModelError(f"attribute '{a.name}' has unsupported type {AttributeProto.AttributeType.Name(t)}")


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sp.values)
    idx = numpy_helper.to_array(sp.indices).astype(np.int64)
    dense = np.zeros(int(np.prod(sp.dims)), dtype=values.dtype)
    if idx.ndim == 2:
        idx = np.ravel_multi_index(idx.T, tuple(sp.dims))
    dense[idx.reshape(-1)] = values.reshape(-1)
    return dense.reshape(tuple(sp.dims))


def constant_value(node: Node) -> np.ndarray:
    """The tensor a ``Constant`` node produces (ONNX Constant, all value_* attributes)."""
    a = node.attrs
    if "value" in a:
        return np.asarray(a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    if "value_string" in a:
        return np.array(a["value_string"], dtype=object)
    if "value_strings" in a:
        return np.array(a["value_strings"], dtype=object)
    if "sparse_value" in a:
        return np.asarray(a["sparse_value"])
    raise ModelError(f"node {node.label()}: Constant has no value attribute")


class _Importer:
    """Imports graphs, expanding function calls (``FunctionExpander``) as it goes."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.expander = FunctionExpander(model, _supported)

    def graph(self, gp: onnx.GraphProto, opsets: dict[str, int], outer: frozenset[str]) -> Graph:
        g = Graph(name=gp.name or "main", opsets=dict(opsets))
        for t in gp.initializer:
            g.initializers[t.name] = tensor_to_array(t)
        for sp in gp.sparse_initializer:
            g.initializers[sp.values.name] = _sparse_to_dense(sp)
        for vi in list(gp.input) + list(gp.value_info) + list(gp.output):
            d = _desc(vi)
            if d is not None and vi.name not in g.descs:
                g.descs[vi.name] = d
        # IR < 4 lists initializers among the inputs; those stay constants.
        g.inputs = [vi.name for vi in gp.input if vi.name not in g.initializers]
        g.outputs = [vi.name for vi in gp.output]
        scope = set(outer) | set(g.inputs) | set(g.initializers)
        self._add_nodes(g, list(gp.node), opsets, scope, None)
        return g

    def _add_nodes(self, g: Graph, protos: list[onnx.NodeProto], opsets: dict[str, int],
                   scope: set[str], origin: str | None) -> None:
        for i, np_ in enumerate(protos):
            domain = np_.domain if np_.domain != "ai.onnx" else ""
            name = np_.name or f"{np_.op_type}_{len(g.nodes)}_{i}"
            expanded = self.expander.expand(np_, opsets)
            if expanded is not None:
                body, fn_opsets = expanded
                self._add_nodes(g, body, fn_opsets, scope, origin or name)
                continue
            # the names in scope are copied only for a node with a subgraph, which reads them (a copy
            # per node was quadratic: ~5 ms of DenseNet-121's 15 ms import)
            outer = frozenset(scope) if any(a.type in _GRAPH_TYPES for a in np_.attribute) else frozenset()
            attrs = {a.name: attr_value(a, opsets, outer, self.graph) for a in np_.attribute}
            node = Node(
                op_type=np_.op_type,
                inputs=list(np_.input),
                outputs=list(np_.output),
                attrs=attrs,
                name=name,
                domain=domain,
                opset=opsets.get(domain, 0),
                origin=[origin or name],
            )
            if node.op_type == "Constant" and node.domain == "" and len(node.outputs) == 1:
                g.initializers[node.outputs[0]] = constant_value(node)
                scope.add(node.outputs[0])
                continue
            new_nodes = upgrade_node(node, g)
            g.nodes.extend(new_nodes)
            for n in new_nodes:
                scope.update(o for o in n.outputs if o)


def _is_om(source: Any) -> bool:
    """Whether ``source`` (a path or bytes) starts with the pycann .om magic."""
    from pycann.ge.om import MAGIC

    try:
        if isinstance(source, bytes):
            return source[: len(MAGIC)] == MAGIC
        with open(os.fspath(source), "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False
