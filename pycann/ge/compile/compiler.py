"""The GE compiler: ONNX -> optimised IR -> ``CompiledModel`` (what ``atc`` writes to .om).

The run-time planning of a compiled graph for concrete input shapes is ``specialize.py``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import pycann
from pycann.dtypes import Dim, TensorDesc
from pycann.errors import OptionError
from pycann.gc_pause import gc_paused
from pycann.ge.aipp.config import load_aipp_config
from pycann.ge.compile import gears
from pycann.ge.compile.options import CompileOptions, check_implmode, dim_token, dims_to_desc_shape
from pycann.ge.compile.passes import insert_aipp, precision
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.compile.pipelines import run_pipeline
from pycann.ge.compile.precision_config import settings_from_options
from pycann.ge.compile.specialize import specialize
from pycann.ge.ir import CompileContext, Graph, Node, overrides
from pycann.ge.ir.fingerprint import ALGORITHM as FINGERPRINT_ALGORITHM
from pycann.ge.ir.fingerprint import graph_fingerprint
from pycann.ge.planning.memory import plan_memory
from pycann.kernels.environment import choice_environment

if TYPE_CHECKING:  # onnx (and protobuf, ~20 MB) load only when a model is compiled, not to run an .om
    import onnx


@dataclass
class CompiledModel:
    """An optimised graph plus the manifest that goes into the .om."""

    graph: Graph
    manifest: dict[str, Any] = field(default_factory=dict)
    tune_key: Any = None  # the knowledge-bank key of this model's subgraph tuning (pycann.ge.compile.tuned)

    def __repr__(self) -> str:
        """The graph's one-line summary and the target (the manifest's memory plan and options are
        ``atc --mode=6``'s to show)."""
        m = self.manifest
        precision = (m.get("precision") or {}).get("precision_mode", "")
        return f"CompiledModel({self.graph!r}, soc_version={m.get('soc_version', '')!r}, precision={precision!r})"

    def save(self, path: str | os.PathLike[str]) -> int:
        """Write the .om file; returns bytes written."""
        from pycann.ge.om import save_om

        return save_om(path, self.graph, self.manifest)


def _input_dim(name: str, i: int, d: Any) -> int | tuple[int, int]:
    """One dim of ``CompileOptions.input_shape``: an int >= -1 (-1: dynamic) or a range ``(lo, hi)``;
    atc's text forms ("8", "8~32", ``options.dim_token``) and numpy ints are accepted too. Raises
    ``OptionError`` (E10001) for anything else (a string dim would otherwise become a symbolic name and
    the .om would not load)."""
    def integer(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        try:
            return operator.index(v)
        except TypeError:
            return None

    parsed = dim_token(d) if isinstance(d, str) else d
    vals = [integer(v) for v in parsed] if isinstance(parsed, (list, tuple)) else [integer(parsed)]
    if len(vals) == 1 and vals[0] is not None and vals[0] >= -1 and not isinstance(parsed, (list, tuple)):
        return vals[0]
    if len(vals) == 2 and vals[0] is not None and vals[1] is not None and 0 <= vals[0] <= vals[1]:
        return vals[0], vals[1]
    raise OptionError(f"E10001: dim {i} of input [{name}] in input_shape is {d!r}: use an int >= 0, -1 (dynamic) "
                      "or a range (lo, hi) with 0 <= lo <= hi (atc: lo~hi)")


def _apply_input_shape(g: Graph, shapes: dict[str, list[Any]] | None,
                       say: Callable[[str], None] = lambda line: None) -> dict[str, list[Any]]:
    """``--input_shape`` applied to the graph's input descriptors; returns each input's dims as given
    (ranges as lists). A fixed dim that overrides a different fixed dim the model declares is allowed
    (ATC compiles the shape it is given) but said as a ``W:`` line: constants the exporter baked for the
    declared size (a Reshape's target, a broadcast mask) may not fit the new one."""
    ranges: dict[str, list[Any]] = {}
    for key, dims in (shapes or {}).items():
        if isinstance(dims, str):  # atc's text for one input, "1,3,8~32,-1"
            dims = dims.split(",")
        if not isinstance(dims, (list, tuple)):
            raise OptionError(f"E10001: input_shape of input [{key}] is {dims!r}: give a list of dims, e.g. [1, 3, 224, 224]")
        name = key
        if name not in g.inputs and key.isdigit() and int(key) < len(g.inputs):
            name = g.inputs[int(key)]
        if name not in g.inputs:
            raise OptionError(
                f"E10016: input [{key}] in --input_shape is not an input of the model; "
                f"the inputs are: {', '.join(g.inputs)}",
                code="E10016",
            )
        dims = [_input_dim(name, i, d) for i, d in enumerate(dims)]
        old = g.descs.get(name)
        if old is not None and old.shape is not None and len(old.shape) != len(dims):
            raise OptionError(
                f"E10001: --input_shape gives input [{name}] rank {len(dims)} but the model declares "
                f"{len(old.shape)} dims {list(old.shape)}",
            )
        old_dims: Sequence[Dim] = old.shape if old is not None and old.shape is not None else (None,) * len(dims)
        changed = [(i, o, d) for i, (o, d) in enumerate(zip(old_dims, dims))
                   if isinstance(o, int) and o >= 0 and isinstance(d, int) and d >= 0 and d != o]
        if changed:
            said = ", ".join(f"dim {i} {o} -> {d}" for i, o, d in changed)
            say(f"[InputShape] W: --input_shape changes static dims the model declares for input [{name}] "
                f"({said}); values the exporter computed for the declared shape may not fit (compare the "
                f"outputs with the source model, or export with dynamic axes)")
        sym = tuple(d if isinstance(d, str) else f"{name}_d{i}" for i, d in enumerate(old_dims))
        g.descs[name] = TensorDesc(old.dtype if old else 1, dims_to_desc_shape(dims, sym))
        ranges[name] = [list(d) if isinstance(d, tuple) else d for d in dims]
    return ranges


def _apply_out_nodes(g: Graph, out_nodes: list[tuple[str, int]]) -> None:
    by_name = {n.name: n for n in g.nodes}
    outs = []
    for name, idx in out_nodes:
        node = by_name.get(name)
        if node is None:
            import difflib

            names = list(by_name)
            close = difflib.get_close_matches(name, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            shown = ", ".join(names[:12]) + (f", ... ({len(names)} nodes)" if len(names) > 12 else "")
            raise OptionError(f"E10016: node [{name}] in --out_nodes is not in the model{hint} (its nodes, "
                              f"as imported: {shown})", code="E10016")
        if idx >= len(node.outputs):
            raise OptionError(f"E10001: node [{name}] has {len(node.outputs)} outputs; --out_nodes asks for index {idx}")
        outs.append(node.outputs[idx])
    g.outputs = outs


def _output_type_by_value(g: Graph, types: dict[str, int]) -> dict[str, int]:
    """``--output_type`` with each ``node:index`` key replaced by the graph output value it names,
    resolved on the graph as imported: the fusions rename or absorb the producing node (a Gemm
    becomes a FusedMatMul, a Split part of a ChannelShuffle) while the output keeps its value name.
    ``""`` (every float output) stays. Raises ``OptionError`` (E10016) for a ``node:index`` that
    names no model output."""
    producers = g.producers()
    by_key = {f"{p.name}:{p.outputs.index(o)}": o for o in g.outputs if (p := producers.get(o)) is not None}
    out: dict[str, int] = {}
    for key, dt in types.items():
        if key and key not in by_key:
            raise OptionError(
                f"E10016: [{key}] in --output_type is not an output of the model; the outputs are: "
                f"{', '.join(sorted(by_key))} (use --out_nodes to expose other nodes)", code="E10016")
        out[by_key[key] if key else ""] = dt
    return out


def _apply_output_type(g: Graph, types: dict[str, int]) -> None:
    """``--output_type`` (``types`` keyed by output value, ``_output_type_by_value``): a Cast before
    each chosen output. The output keeps its name (apps look outputs up by name); the value before
    the cast is renamed ``<name>_before_output_type``."""
    producers = g.producers()
    for out in list(g.outputs):
        p = producers.get(out)
        dt = types.get(out, types.get(""))
        d = g.descs.get(out)
        if dt is None or d is None or d.dtype == dt or (out not in types and not _is_float(d.dtype)):
            continue
        if p is None:  # a graph input or constant returned as is: the cast result needs a new name
            cast_out = g.fresh_name(f"{out}_cast")
            g.nodes.append(Node("Cast", [out], [cast_out], {"to": dt}, name=g.fresh_name(f"{out}_output_type"), opset=19))
            g.descs[cast_out] = TensorDesc(dt, d.shape)
            g.outputs = [cast_out if o == out else o for o in g.outputs]
            continue
        before = g.fresh_name(f"{out}_before_output_type")
        p.outputs = [before if o == out else o for o in p.outputs]
        for n in g.nodes:  # other readers of the value keep reading the uncast tensor
            if n is not p and out in n.inputs:
                n.inputs = [before if i == out else i for i in n.inputs]
        g.descs[before] = d
        g.nodes.append(Node("Cast", [before], [out], {"to": dt}, name=g.fresh_name(f"{out}_output_type"), opset=19))
        g.descs[out] = TensorDesc(dt, d.shape)


def _is_float(dtype: int) -> bool:
    return dtype in (1, 10, 11, 16)


def _insert_aipp(graph: Graph, options: CompileOptions, ranges: dict[str, list[Any]], say: Callable[[str], None]) -> Graph:
    """``--insert_op_conf``: parse the AIPP config and insert ``Aipp`` nodes (passes/insert_aipp.py)."""
    ctx = PassContext(options={"aipp": load_aipp_config(options.insert_op_conf),
                               "input_format": options.input_format}, log=say)
    graph = run_pipeline(graph, ctx, [(insert_aipp.name, insert_aipp.run)])
    insert_aipp.update_ranges(graph, ranges)
    return graph


@gc_paused()  # (its many long-lived objects: no collections walking them mid-compile)
def compile_model(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto | Graph,
    options: CompileOptions | None = None,
    log: Callable[[str], None] | None = None,
) -> CompiledModel:
    """Import, optimise and plan an ONNX model (or a ``Graph`` another importer made: TF, Caffe).

    Raises ``ModelError`` (bad model), ``UnsupportedOpError`` (E19010), ``ShapeError``,
    ``OptionError`` (bad option values).
    """
    from pycann.ge.compile.importers.onnx import load_onnx

    options = options or CompileOptions()
    say = log or (lambda line: None)
    precision_settings = settings_from_options(options, say)  # option errors before any work
    check_implmode(options.op_select_implmode)
    t0 = time.perf_counter()
    graph = model if isinstance(model, Graph) else load_onnx(model)
    # (before any option or pass changes the graph: the source model's own content)
    fingerprint = graph_fingerprint(graph) if options.source_fingerprint else None
    say(f"[Import] {len(graph.nodes)} nodes, {len(graph.initializers)} constants, opsets {graph.opsets} "
        f"({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    ranges = _apply_input_shape(graph, options.input_shape, say)
    gear_plan = gears.plan_gears(graph, options)
    if options.insert_op_conf:
        graph = _insert_aipp(graph, options, ranges, say)
    if options.out_nodes:
        _apply_out_nodes(graph, options.out_nodes)
    # the node names of --output_type are the model's: resolved before the fusions rename nodes
    output_type = _output_type_by_value(graph, options.output_type)
    precision_settings.output_type = output_type
    tune_key, tuned_off, tuned_record, kernel_bank = _tuned_graph(graph, options, say)
    disabled = list(dict.fromkeys([*options.disabled_passes, *tuned_off]))
    # read by KernelSelection here and when a run specialises the graph to its shapes, which
    # re-runs the fusion passes with the same switches
    graph.context = CompileContext(options.op_select_implmode, tuple(options.optypelist_for_implmode),
                                   tuple(disabled),
                                   # absolute: the .om may load from another folder
                                   os.path.abspath(options.op_bank_path) if options.op_bank_path else "",
                                   kernel_bank)
    source = overrides.snapshot(graph) if overrides.overridable(graph) else None
    graph, ctx = _run_passes(graph, options, precision_settings, say)
    if source is not None:
        graph.override_source = overrides.keep_source(source, graph)
    gear_info = gears.record_gears(gear_plan, graph, specialize, say)
    mem = plan_memory(graph)
    say(f"[MemoryPlan] {mem.summary()}")
    manifest: dict[str, Any] = {
        "soc_version": options.soc_version,
        # the input shape is stored once: "input_ranges" (--input_shape with names resolved, in its order)
        "options": {k: v for k, v in options.to_json().items() if k != "input_shape"},
        "input_ranges": ranges,
        # with gears, the largest gear's arena (the graph itself has symbolic dims: 0 here)
        "memory_plan": {"peak_bytes": max([mem.peak_bytes, *(gear_info or {}).get("arena_bytes", [])]),
                        "total_bytes": mem.total_bytes,
                        "dynamic_values": len(mem.dynamic), "offsets": mem.offsets},
        "execution_plan": [n.name for n in graph.nodes],
        "op_counts": graph.op_counts(),
        "precision": precision.manifest_entry(ctx, precision_settings),
        "pycann_version": pycann.__version__,
        # what the kernel and layout choices above depend on: a loader that finds the same plans the
        # compiled graph as it is, without the pass pipeline (ge/run/specializer.py)
        "kernel_env": choice_environment(graph.context.op_bank_path, graph.context.kernel_bank),
        "weight_bounds": weight_bounds(graph),
        "compile_seconds": round(time.perf_counter() - t0, 3),
    }
    if tuned_record is not None:
        manifest["tuned_graph"] = tuned_record  # the subgraph-tuning record compile_model applied
    if options.insert_op_conf:
        manifest["aipp"] = insert_aipp.aipp_manifest(graph)
    if gear_info:
        manifest["gears"] = gear_info
    if fingerprint is not None:
        manifest["source_fingerprint"] = {"algorithm": FINGERPRINT_ALGORITHM, "sha256": fingerprint}
    return CompiledModel(graph, manifest, tune_key)


def _run_passes(graph: Graph, options: CompileOptions, settings: Any,
                say: Callable[[str], None]) -> tuple[Graph, PassContext]:
    """The pass pipeline (switches: ``graph.context``), then ``--output_type`` (resolved into
    ``settings.output_type`` beforehand)."""
    ctx = PassContext(options={"disabled_passes": list(graph.context.disabled_passes), "precision": settings,
                               "fold_max_bytes": options.fold_max_bytes}, log=say)
    graph = run_pipeline(graph, ctx)
    if settings.output_type:
        _apply_output_type(graph, settings.output_type)
        precision.simplify_casts(graph)  # PrecisionMode's Cast back to float32, then --output_type's
    return graph, ctx


def override_variant(graph: Graph, names: Sequence[str],
                     manifest: Mapping[str, Any]) -> tuple[Graph, dict[str, Any]]:
    """(graph, manifest) of the compiled ``graph`` with its overridable initializers ``names`` as
    inputs (pycann.ge.ir.overrides): the constants made inputs where the compiler kept them
    verbatim, else compiled again from ``graph.override_source``."""
    if graph.override_source is None:
        return overrides.with_inputs(graph, names), dict(manifest)
    # the recorded conv weight bounds are the compiled graph's: a recompiled weight may reuse a
    # name with other values (the NaN guard computes its own)
    return (compile_variant(graph.override_source, names, manifest),
            {k: v for k, v in manifest.items() if k != "weight_bounds"})


def compile_variant(source: Graph, names: Sequence[str], manifest: Mapping[str, Any]) -> Graph:
    """The model compiled again from ``source`` (a compiled graph's ``override_source``: the graph
    as it entered the passes) with the overridable initializers ``names`` as inputs, under the
    options the manifest recorded (pycann.ge.ir.overrides)."""
    known = {f.name for f in dataclasses.fields(CompileOptions)}
    options = CompileOptions(**{k: v for k, v in manifest.get("options", {}).items() if k in known})
    settings = settings_from_options(options, lambda line: None)
    # the passes rewrite nodes in place: on a copy, so that the source serves the next variant
    # (and threads compiling variants of one model at once) unchanged
    graph = overrides.with_inputs(overrides.snapshot(source), names)
    settings.output_type = _output_type_by_value(graph, options.output_type)
    return _run_passes(graph, options, settings, lambda line: None)[0]


def _tuned_graph(graph: Graph, options: CompileOptions,
                 say: Callable[[str], None]) -> tuple[Any, list[str], dict[str, Any] | None, bool]:
    """(bank key, passes to switch off, the applied record's choice or None, whether tuned kernel
    choices are used) from the knowledge bank's subgraph-tuning record of this model
    (``aoe --job_type=1``; pycann/ge/compile/tuned.py)."""
    from pycann.ge.compile import tuned

    if options.tune_bank not in ("on", "kernels", "off"):
        raise OptionError(f"E10001: tune_bank={options.tune_bank!r} is invalid: use on, kernels or off")
    kernel_bank = options.tune_bank != "off"
    if options.tune_bank != "on":
        return tuned.graph_key(graph, options.soc_version, options.op_select_implmode), [], None, kernel_bank
    key, choice = tuned.graph_choice(graph, options.soc_version, options.op_select_implmode, options.op_bank_path)
    if choice is None:
        return key, [], None, kernel_bank
    say(f"[KnowledgeBank] subgraph tuning record applied: passes off {choice.passes_off() or 'none'}, "
        f"tuned kernels {'on' if choice.kernel_bank else 'off'}")
    return key, choice.passes_off(), choice.to_json(), choice.kernel_bank


# (domain, op type) of the convolutions whose fused activation the NaN guard checks, and whether their
# weight is ConvTranspose's (C, M/G, k...) form
_GUARDED_CONVS = {("", "Conv"): False, ("pycann", "FusedConv"): False,
                  ("", "ConvTranspose"): True, ("pycann", "FusedConvTranspose"): True}


def weight_bounds(graph: Graph) -> list[list[Any]]:
    """``[[initializer, transpose, bound], ...]``: ``nan_guard.weight_part`` of every float32 conv
    weight, recorded in the .om (manifest ``weight_bounds``) so that loading it does not read every
    weight for the guard (``LoadedModel`` seeds the guard's cache with them). A weight holding NaN
    or inf has no finite bound and no entry (the manifest is strict JSON; the guard computes it at
    load, and every call of that conv takes the unfused path)."""
    from pycann.kernels.providers import nan_guard

    out: list[list[Any]] = []
    seen: set[tuple[str, bool]] = set()
    for n in graph.nodes:
        transpose = _GUARDED_CONVS.get((n.domain, n.op_type))
        if transpose is None or len(n.inputs) < 2 or (n.inputs[1], transpose) in seen:
            continue
        w = graph.initializers.get(n.inputs[1])
        if isinstance(w, np.ndarray) and w.dtype == np.float32 and w.size:
            seen.add((n.inputs[1], transpose))
            part = nan_guard.weight_part(w, transpose)
            if math.isfinite(part):
                out.append([n.inputs[1], transpose, part])
    return out


def describe_io(graph: Graph) -> list[str]:
    """Lines ``name: DTYPE[dims]`` for inputs then outputs (atc --mode=6, logs)."""
    return [f"input {n}: {graph.descs.get(n) or '?'}" for n in graph.inputs] + [
        f"output {n}: {graph.descs.get(n) or '?'}" for n in graph.outputs
    ]


