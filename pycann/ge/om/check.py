"""What a loaded .om must satisfy before anything runs it: graph structure, ops, attribute types
and the manifest fields the run time reads.

``pycann.ge.om`` decodes the container (header, checksums, JSON, tensor references); this module
checks the *meaning*: a manifest written by a damaged or foreign writer can be valid JSON with a
correct CRC and still describe a graph whose nodes are out of order, whose outputs are never
produced, or whose ``gears`` entry is a string. Each check raises ``OmInvalid`` with one line
naming the node, attribute or manifest key; ``om.load_om`` turns it into ``OmFormatError``.

The rules mirror what the executor and ``LoadedModel`` assume, so a file that passes loads and
runs (or fails with a shape/dtype error naming a node, as a compiled model would):

* graph: SSA, topological order, every node input defined (graph input, initializer, earlier
  node output, or an enclosing graph's value for a subgraph), every graph output produced,
  every graph input and output described (``descs``) at the top level;
* ops: every node's (domain, op_type, opset) is in the op registry (``pycann.ops.registry``);
  required attributes are present and attributes the schema knows have its kind (int, float,
  str, list, tensor, graph);
* manifest: ``options``, ``input_ranges``, ``memory_plan`` are objects, ``aipp`` a list of AIPP
  entries, ``gears`` a gear table (kind, profiles, per-profile shapes), with the field types
  ``LoadedModel``, ``GearTable`` and ``acl.mdl`` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pycann.errors import ModelError, PycannError
from pycann.ge.ir.graph import Graph, verify


class OmInvalid(ValueError):
    """An .om whose manifest decodes but does not describe a runnable model (one line: what)."""


# ------------------------------------------------------------------------------------ graph
def check_graph(graph: Graph) -> None:
    """Structure, ops and attribute kinds of ``graph`` and its subgraphs. Raises ``OmInvalid``."""
    try:
        verify(graph)
    except ModelError as e:
        raise OmInvalid(str(e)) from None
    for name in list(graph.inputs) + list(graph.outputs):
        if name not in graph.descs:
            raise OmInvalid(f"graph '{graph.name}': input/output '{name}' has no tensor description")
    _check_names(graph)
    if len(set(graph.inputs)) != len(graph.inputs):
        raise OmInvalid(f"graph '{graph.name}': an input name is listed twice ({graph.inputs})")
    _check_ops(graph)


def _check_names(graph: Graph) -> None:
    """No NUL in any name (generated plan code and file names cannot hold one)."""
    names = [graph.name, *graph.inputs, *graph.outputs, *graph.initializers]
    for n in graph.nodes:
        names += [n.name, n.op_type, n.domain, *n.inputs, *n.outputs]
    bad = next((x for x in names if "\0" in x), None)
    if bad is not None:
        raise OmInvalid(f"graph '{graph.name[:40]!r}': the name {bad[:40]!r} contains a NUL character")
    for n in graph.nodes:
        for g in n.subgraphs.values():
            _check_names(g)


def _check_ops(graph: Graph) -> None:
    from pycann.ops.opdef import REQUIRED
    from pycann.ops.registry import lookup

    for n in graph.nodes:
        try:
            op = lookup(n.op_type, n.domain, n.opset or graph.opsets.get(n.domain), n.label())
        except PycannError as e:
            raise OmInvalid(str(e)) from None
        where = f"node {n.label()}"
        for k, default in op.attrs.items():
            if k not in n.attrs:
                if default is REQUIRED:
                    raise OmInvalid(f"{where}: required attribute '{k}' is missing")
                continue
            want = _kind(default)
            if want is not None and not _has_kind(n.attrs[k], want):
                raise OmInvalid(
                    f"{where}: attribute '{k}' is {type(n.attrs[k]).__name__} {_short(n.attrs[k])}, "
                    f"expected {want}"
                )
        for g in n.subgraphs.values():
            _check_ops(g)


def _kind(default: Any) -> str | None:
    """The attribute kind a schema default implies (``None``: no default to judge by)."""
    if isinstance(default, Graph):
        return "graph"
    if isinstance(default, (bool, np.bool_)):
        return "int"  # ONNX has no BOOL attribute: flags are INT attributes
    if isinstance(default, (int, np.integer)):
        return "int"
    if isinstance(default, (float, np.floating)):
        return "float"
    if isinstance(default, str):
        return "str"
    if isinstance(default, (list, tuple)):
        return "list"
    if isinstance(default, np.ndarray):
        return "tensor"
    return None


def _has_kind(value: Any, kind: str) -> bool:
    if value is None:
        return True  # an optional attribute left unset
    if kind == "int":
        return isinstance(value, (int, np.integer))
    if kind == "float":
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, (str, bytes))
    if kind == "list":
        return isinstance(value, (list, tuple, np.ndarray))
    if kind == "tensor":
        return isinstance(value, (np.ndarray, np.generic))
    return isinstance(value, Graph)


def _short(v: Any) -> str:
    return f"{v!r:.40}" if not isinstance(v, (np.ndarray, Graph)) else ""


# --------------------------------------------------------------------------------- manifest
def check_manifest(m: Mapping[str, Any], graph: Graph) -> None:
    """Types of the manifest fields the run time reads. Raises ``OmInvalid``."""
    for key in ("options", "input_ranges", "memory_plan", "precision", "op_counts"):
        _opt_obj(m, key)
    opts = m.get("options") or {}
    if "input_format" in opts and not isinstance(opts["input_format"], str):
        raise OmInvalid(f"manifest 'options.input_format' is {_short(opts['input_format'])}, expected a string")
    if opts.get("input_shape") is not None and not isinstance(opts["input_shape"], dict):
        raise OmInvalid("manifest 'options.input_shape' is not an object")
    for name, dims in (m.get("input_ranges") or {}).items():
        if dims is None:
            continue
        if not isinstance(dims, list) or not all(_is_range_dim(d) for d in dims):
            raise OmInvalid(f"manifest 'input_ranges.{name}' is {_short(dims)}, expected a list of dims or [lo, hi]")
    peak = (m.get("memory_plan") or {}).get("peak_bytes", 0)
    if not _is_int(peak) or peak < 0:
        raise OmInvalid(f"manifest 'memory_plan.peak_bytes' is {_short(peak)}, expected a byte count")
    if m.get("execution_plan") is not None and not _is_list_of(m["execution_plan"], str):
        raise OmInvalid("manifest 'execution_plan' is not a list of node names")
    if "aipp" in m:
        _check_aipp(m["aipp"], graph)
    if m.get("gears"):
        _check_gears(m["gears"], graph)


def _opt_obj(m: Mapping[str, Any], key: str) -> None:
    # readers do ``manifest.get(key, {})``: a key that is present must hold an object (not null)
    if key in m and not isinstance(m[key], dict):
        raise OmInvalid(f"manifest '{key}' is {type(m[key]).__name__} {_short(m[key])}, expected an object")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_list_of(v: Any, t: type) -> bool:
    return isinstance(v, list) and all(type(x) is t for x in v)


def _is_range_dim(d: Any) -> bool:
    if d is None or _is_int(d):
        return True
    return isinstance(d, list) and len(d) == 2 and all(_is_int(x) for x in d) and d[0] <= d[1]


_AIPP_FIELDS: dict[str, tuple[type, ...]] = {
    "input": (str,), "input_index": (int,), "mode": (str,), "node": (str,),
    "output_layout": (str,), "output_dtype": (int,), "output_shape": (list,),
}
_DYNAMIC_AIPP_FIELDS: dict[str, tuple[type, ...]] = {
    "params_input": (str,), "params_input_index": (int,), "max_src_image_size": (int,),
}


def _check_aipp(entries: Any, graph: Graph) -> None:
    if not isinstance(entries, list):
        raise OmInvalid(f"manifest 'aipp' is {type(entries).__name__}, expected a list of AIPP entries")
    for i, e in enumerate(entries):
        where = f"manifest 'aipp[{i}]'"
        if not isinstance(e, dict):
            raise OmInvalid(f"{where} is {type(e).__name__}, expected an object")
        fields = dict(_AIPP_FIELDS)
        if e.get("mode") == "dynamic":
            fields.update(_DYNAMIC_AIPP_FIELDS)
        elif e.get("mode") == "static":
            fields["params"] = (dict,)
        else:
            raise OmInvalid(f"{where}.mode is {_short(e.get('mode'))}, expected 'static' or 'dynamic'")
        for k, types in fields.items():
            if k not in e:
                raise OmInvalid(f"{where} has no '{k}'")
            if not isinstance(e[k], types) or isinstance(e[k], bool):
                raise OmInvalid(f"{where}.{k} is {_short(e[k])}, expected {types[0].__name__}")
        if not all(_is_int(d) for d in e["output_shape"]):
            raise OmInvalid(f"{where}.output_shape is {_short(e['output_shape'])}, expected ints")
        for k in ("input_index", "params_input_index"):
            if k in e and not 0 <= e[k] < len(graph.inputs):
                raise OmInvalid(f"{where}.{k} {e[k]} is not an input index (the model has {len(graph.inputs)})")
        if graph.inputs[e["input_index"]] != e["input"]:
            raise OmInvalid(f"{where}: input {e['input_index']} is '{graph.inputs[e['input_index']]}', not '{e['input']}'")


_GEAR_KINDS = ("batch", "image_size", "dims")


def _check_gears(g: Any, graph: Graph) -> None:
    if not isinstance(g, dict):
        raise OmInvalid(f"manifest 'gears' is {type(g).__name__} {_short(g)}, expected an object")
    if g.get("kind") not in _GEAR_KINDS:
        raise OmInvalid(f"manifest 'gears.kind' is {_short(g.get('kind'))}, expected one of {', '.join(_GEAR_KINDS)}")
    profiles, shapes = g.get("profiles"), g.get("shapes")
    if not isinstance(profiles, list) or not profiles or not all(_is_list_of(p, int) for p in profiles):
        raise OmInvalid("manifest 'gears.profiles' is not a non-empty list of int lists")
    if not isinstance(shapes, list) or len(shapes) != len(profiles):
        raise OmInvalid(f"manifest 'gears.shapes' is not a list of {len(profiles)} entries (one per gear)")
    if not _is_list_of(g.get("inputs", []), str):
        raise OmInvalid("manifest 'gears.inputs' is not a list of input names")
    if "option" in g and not isinstance(g["option"], str):
        raise OmInvalid("manifest 'gears.option' is not a string")
    for i, s in enumerate(shapes):
        if not isinstance(s, dict):
            raise OmInvalid(f"manifest 'gears.shapes[{i}]' is not an object")
        for name, dims in s.items():
            if name not in graph.inputs:
                raise OmInvalid(f"manifest 'gears.shapes[{i}]' names '{name}', which is not a model input")
            if not _is_list_of(dims, int) or any(d < 0 for d in dims):
                raise OmInvalid(f"manifest 'gears.shapes[{i}].{name}' is {_short(dims)}, expected a shape")
