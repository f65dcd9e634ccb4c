"""``torch.compile(model, backend="npu")``: FX graphs lowered to GE and run as compiled plans.

TorchDynamo hands each captured FX graph to ``npu_backend``. The graph is lowered to GE's IR
through ONNX (``torch.onnx.export`` of the GraphModule, TorchScript exporter, opset 17; the
parameters and buffers Dynamo lifts to graph inputs are embedded as constants, so the fusions
see them), compiled with the same passes as ``atc`` (``pycann.ge.compile.compiler.compile_model``) and
run as a ``LoadedModel`` plan. A graph that cannot be lowered -- an op GE lacks, an export
error -- runs eagerly (its FX code on the npu device) and is recorded: ``graph_report()`` lists every graph with its op count, the
unsupported ops by name and why it stayed eager; Dynamo's own graph breaks are counted by
``torch._dynamo.explain``. Compile time per graph is recorded too.

Training graphs (inputs or parameters requiring grad) and graphs with symbolic sizes go through
AOTAutograd instead (``training``): their ATen-level forward and backward graphs are partitioned
into GE plans where GE has the ops and run eagerly between them, recorded per op.

``register()`` makes ``torch.compile(..., backend="npu")`` find the backend without importing
torch._dynamo at ``import pycann.torch`` time; torchair's names are in ``pycann.torch.torchair``.
"""

from __future__ import annotations

import copy
import functools
import io
import operator
import re
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pycann.dtypes import DType, to_numpy
from pycann.torch._alias import to_cpu
from pycann.torch.compile.export_fixes import call_arg, fix_export, misexported, quiet_onnx_log, target_name
from pycann.torch.compile.frozen import FrozenWeights
from pycann.torch.compile.outputs import OutSpec, host_layouts, output_values, place, spec, with_host_layouts
from pycann.torch.compile.records import GraphRecord, new_record
from pycann.torch.compile.records import records as _records

_CPU = torch.device("cpu")
_NPU_NAME = re.compile(r"npu(:\d+)?")

__all__ = ["GraphRecord", "format_graph_report", "graph_breaks", "graph_report", "npu_backend", "register",
           "reset_graph_report"]

_break_base: dict[str, int] = {}  # Dynamo's graph-break counts at the last reset_graph_report()


def graph_report() -> list[GraphRecord]:
    """Every graph given to the npu backend so far, in order."""
    return list(_records)


def graph_breaks() -> dict[str, int]:
    """Dynamo's graph breaks since the last ``reset_graph_report()``: reason -> count (Dynamo's
    own counters, ``torch._dynamo.utils.counters["graph_break"]``; each break splits a function
    into graphs that reach the backend separately)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {}
    now = dict(utils.counters.get("graph_break", {}))
    return {k: n - _break_base.get(k, 0) for k, n in now.items() if n > _break_base.get(k, 0)}


def format_graph_report() -> str:
    """``graph_report()`` as text: one line per graph, then one per graph-break reason."""
    lines = [f"pycann torch.compile(backend='npu'): {len(_records)} graph(s)"]
    for r in _records:
        if r.kind == "inference":
            state = "GE plan" if r.compiled else f"eager ({r.reason})"
        else:
            state = f"{r.ge_partitions} GE plan(s) with {r.ge_ops} ops"
        extra = f"; unsupported: {', '.join(r.unsupported)}" if r.unsupported else ""
        if r.relowers:
            extra += f"; rebuilt {r.relowers}x (weights changed after compiling)"
        if r.eager_ops:
            extra += "; eager: " + ", ".join(f"{op} x{n}" for op, n in r.eager_ops)
        lines.append(f"  graph {r.index} ({r.kind}): {r.ops} FX ops, {state}, compile {r.compile_seconds * 1e3:.0f} ms, "
                     f"{r.calls} calls{extra}")
    for reason, n in graph_breaks().items():
        first = reason.splitlines()[0] if reason else "?"
        lines.append(f"  graph break x{n}: {first[:200]}")
    return "\n".join(lines)


def _running_stats(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[bool]:
    """Which placeholders are BatchNorm running statistics, CPU or npu (``frozen.py``: written
    without a version bump by a train-mode forward)."""
    names = [str(n.target) for n in gm.graph.nodes if n.op == "placeholder"]
    return [("_buffers_running_mean" in n or "_buffers_running_var" in n) and isinstance(t, torch.Tensor)
            and t.device.type in ("cpu", "npu") and t.is_contiguous() for n, t in zip(names, example_inputs)]


def _writes_running_stats(gm: torch.fx.GraphModule) -> bool:
    """A train-mode batch norm with running statistics in ``gm`` (``F.batch_norm(...,
    training=True)``: a module in train mode called under no_grad). The ONNX export is an eval
    graph: it would normalize with the running statistics and never update them; eager does both."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in (torch.nn.functional.batch_norm, torch.batch_norm):
            at = 1 if n.target is torch.nn.functional.batch_norm else 3
            running = n.kwargs.get("running_mean", n.args[at] if len(n.args) > at else None)
            training = n.kwargs.get("training", n.args[5] if len(n.args) > 5 else False)
            if running is not None and training is not False:
                return True
        elif n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.training and mod.track_running_stats:
                return True
    return False


def _static_inputs(gm: torch.fx.GraphModule) -> list[bool]:
    """Which placeholders are parameters/buffers Dynamo lifted (names it gives them)."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            name = str(node.target)
            out.append("_parameters_" in name or "_buffers_" in name)
    return out


class _Embedded(torch.nn.Module):
    """The GraphModule with its lifted parameters/buffers as buffers of this module, so the
    ONNX export makes them initializers."""

    def __init__(self, gm: torch.fx.GraphModule, static: list[bool], consts: list[torch.Tensor | None]) -> None:
        super().__init__()
        self.gm = gm
        self.static = static
        for i, c in enumerate(consts):
            if c is not None:
                self.register_buffer(f"c{i}", c)

    def forward(self, *dynamic: torch.Tensor) -> Any:
        it = iter(dynamic)
        args = [getattr(self, f"c{i}") if s else next(it) for i, s in enumerate(self.static)]
        return self.gm(*args)


def _host(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return to_cpu(t).clone() if t.device.type == "npu" else t.clone()


def _host_device(a: Any) -> Any:
    if isinstance(a, torch.device) and a.type == "npu":
        return _CPU
    if isinstance(a, str) and _NPU_NAME.fullmatch(a):
        return "cpu"
    return a


def _host_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose npu devices are the cpu: the export traces it on host tensors, and
    a tensor the graph makes itself on its input's device (GPT-2's ``torch.arange(n,
    device=ids.device)``, recorded by Dynamo as ``device='npu:0'``) would otherwise be an npu
    tensor beside host ones, which the npu device refuses as PyTorch's device rule says. The ops
    the exporter gets wrong are rewritten too (``fix_export``)."""
    graph = copy.deepcopy(gm.graph)
    changed = fix_export(graph)
    for node in graph.nodes:
        args = torch.fx.node.map_aggregate(node.args, _host_device)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, _host_device)
        if args != node.args or kwargs != node.kwargs:
            node.args, node.kwargs, changed = args, kwargs, True
        if node.op == "call_method" and node.target == "npu":
            node.target, changed = "cpu", True
    attrs = [str(n.target) for n in graph.nodes if n.op == "get_attr"]
    if not changed and not attrs:
        return gm
    host = torch.fx.GraphModule(gm, graph)
    for target in attrs:
        _host_attr(gm, host, target)
    return host


def _host_attr(gm: torch.nn.Module, host: torch.nn.Module, target: str) -> None:
    """Give ``host`` (a GraphModule made from ``gm``) a host copy of ``gm``'s tensor attribute
    ``target``, so tracing ``host`` neither writes ``gm``'s tensor (a compiled optimizer step
    holds the parameters it updates in place as attributes: the export's trace updated them
    once more) nor meets an npu tensor among host ones. A submodule the two share is left alone."""
    *prefix, field = target.split(".")
    owner: Any = host
    orig_owner: Any = gm
    for item in prefix:
        owner, orig_owner = getattr(owner, item, None), getattr(orig_owner, item, None)
        if owner is None or orig_owner is None:
            return
    t = getattr(owner, field, None)
    if owner is orig_owner or not isinstance(t, torch.Tensor):
        return
    copy_ = _host(t)
    if field in owner._parameters:
        owner._parameters[field] = torch.nn.Parameter(copy_, requires_grad=False)
    elif field in owner._buffers:
        owner._buffers[field] = copy_
    else:
        setattr(owner, field, copy_)


def _lower(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], static: list[bool]) -> bytes:
    consts = [_host(t) if s else None for t, s in zip(example_inputs, static)]
    dynamic = tuple(_host(t) for t, s in zip(example_inputs, static) if not s)
    module = _Embedded(_host_graph(gm), static, consts).eval()
    buf = io.BytesIO()
    with warnings.catch_warnings(), quiet_onnx_log():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, dynamic, buf,  # type: ignore[arg-type]  # the exporter writes file objects too
                          dynamo=False, opset_version=17, do_constant_folding=True,
                          input_names=[f"x{i}" for i in range(len(dynamic))])
    return buf.getvalue()


def _plan(onnx_bytes: bytes) -> Any:
    """The ONNX bytes compiled with atc's passes and loaded as a runnable ``LoadedModel``."""
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel

    return LoadedModel.from_compiled(compile_model(onnx_bytes))


_BF16 = to_numpy(DType.BFLOAT16)


def _to_numpy(t: torch.Tensor) -> Any:
    """A CPU tensor as a numpy array sharing its bytes; bfloat16 (which torch's ``.numpy()``
    refuses) as ml_dtypes' bfloat16, the dtype GE's plans use."""
    t = t.contiguous()
    if t.dtype != torch.bfloat16:
        return t.numpy()
    return t.view(torch.int16).numpy().view(_BF16)


def _from_numpy(a: Any) -> torch.Tensor:
    """``torch.from_numpy``, with ml_dtypes' bfloat16 arrays as torch.bfloat16."""
    if a.dtype == _BF16:
        return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(a)


def _fed(model: Any, dyn_idx: Sequence[int]) -> list[bool]:
    """Which of the graph's dynamic inputs (``dyn_idx``, exported as ``x0``, ``x1``, ...) the plan
    takes. Why: the ONNX exporter drops an input no output depends on (a graph between two graph
    breaks that only passes a tensor through), and the plan rejects a feed count it lacks."""
    names = {i.name for i in model.inputs}
    return [f"x{k}" in names for k in range(len(dyn_idx))]


def _unsupported(onnx_bytes: bytes) -> list[str]:
    import onnx

    from pycann.errors import UnsupportedOpError
    from pycann.ops.registry import lookup

    bad = []
    for node in onnx.load_from_string(onnx_bytes).graph.node:
        try:
            lookup(node.op_type, node.domain, None)
        except UnsupportedOpError:
            bad.append(node.op_type)
    return sorted(set(bad))


def _eager(gm: torch.fx.GraphModule, rec: GraphRecord) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        rec.calls += 1
        return gm.forward(*args)

    return run


_tag_guards: dict[str, Any] = {}  # the user's use_recursive_dict_tags_for_guards while one of our compiles runs


def _restore_tag_guards(_args: Any = None) -> None:
    """Dynamo's end-of-compile callback (after the frame's guards are built): put back the user's value."""
    if "prior" in _tag_guards:
        import torch._dynamo.config as dynamo_config

        dynamo_config.use_recursive_dict_tags_for_guards = _tag_guards.pop("prior")


def _cheap_module_guards() -> None:
    """Let Dynamo build the guards of the frame now compiling with its recursive dict tags.

    Why: Dynamo lifts every parameter and buffer of a module into the graph's inputs and guards
    each (ResNet-50: 268 tensor guards over ~160 modules). A GE plan run leaves the caches cold,
    so that guard walk cost ~0.45 ms and the whole call path ~0.75 ms per call, ~4 % of
    ResNet-50 at 2 threads (the plan itself ran at ORT's speed). With recursive dict tags an
    unchanged module subtree is checked by its dicts' tags (~0.3 ms saved). Dynamo reads the flag
    when it builds the guards, after this backend returns: it is set here and put back by a
    compile-end callback, so other backends' compiles keep the user's setting. A missing flag
    or callback API (another torch) leaves Dynamo's default."""
    import torch._dynamo
    import torch._dynamo.config as dynamo_config

    handler = getattr(torch._dynamo, "callback_handler", None)
    if not torch.compiler.is_compiling():  # called directly, not by Dynamo: no guards follow, no callback would run
        return
    if not hasattr(dynamo_config, "use_recursive_dict_tags_for_guards") or handler is None:
        return
    if _restore_tag_guards not in getattr(handler, "end_callbacks", ()):  # torch._dynamo.reset() clears them
        handler.register_end_callback(_restore_tag_guards)
    if "prior" not in _tag_guards:
        _tag_guards["prior"] = dynamo_config.use_recursive_dict_tags_for_guards
    dynamo_config.use_recursive_dict_tags_for_guards = True


def _op_count(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


_INPLACE_OPERATORS = frozenset({operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                                operator.ixor, operator.ilshift, operator.irshift, operator.imatmul})


def _written(node: torch.fx.Node) -> list[Any]:
    """The arguments an in-place call writes (``x.add_``, ``torch._foreach_add_([...])``,
    ``x[i] = v``, ``x += y``, ``out=``, ``inplace=True``); [] for other nodes."""
    if node.op not in ("call_function", "call_method"):
        return []
    name = target_name(node)
    first = node.args[0] if node.args else None
    written: list[Any] = []
    if (node.target in _INPLACE_OPERATORS or name == "__setitem__" or node.kwargs.get("inplace") is True
            or (name.endswith("_") and not name.endswith("__"))):
        written = list(first) if isinstance(first, (tuple, list)) else [first]
    out = node.kwargs.get("out")
    if out is not None:
        written += list(out) if isinstance(out, (tuple, list)) else [out]
    return written


def _mutates_or_aliases_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` writes one of its inputs (``x.add_(1)``, ``x[0] = 5``, a buffer updated in
    ``forward``) or returns a view of an input or two outputs sharing memory (``x[1:]``,
    ``(y, y.t())``). Dynamo's fake inputs start at version 0 and share their storage with their
    views, so an in-place write through any view bumps the placeholder's ``_version``."""
    from torch.multiprocessing.reductions import StorageWeakRef

    inputs = set()
    for n in gm.graph.nodes:
        v = n.meta.get("example_value") if n.op in ("placeholder", "get_attr") else None
        if isinstance(v, torch.Tensor):
            try:
                if v._version > 0:
                    return True
                inputs.add(StorageWeakRef(v.untyped_storage()))
            except (RuntimeError, NotImplementedError):  # no storage / version counter (inference, sparse)
                continue
    # tensors Dynamo holds as attributes (get_attr: a compiled optimizer step's parameters) do not
    # show the writes in their fake's version: the in-place ops themselves are looked at
    for n in gm.graph.nodes:
        for t in _written(n):
            v = t.meta.get("example_value") if isinstance(t, torch.fx.Node) else None
            try:
                if isinstance(v, torch.Tensor) and StorageWeakRef(v.untyped_storage()) in inputs:
                    return True
            except (RuntimeError, NotImplementedError):
                continue
    seen = set()
    for v in output_values(gm) or []:
        if isinstance(v, torch.Tensor):
            try:
                ref = StorageWeakRef(v.untyped_storage())
            except (RuntimeError, NotImplementedError):
                continue
            if ref in inputs or ref in seen:
                return True
            seen.add(ref)
    return False


_SCALAR_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__"})


def _reads_scalars(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` reads a tensor's value as a Python number (``t.item()``): Dynamo's graph for
    a function called with a second float value (``f(x, 0.5)`` then ``f(x, 0.7)``: the float
    becomes a 0-dim float64 input read by ``.item()``), or any ``.item()`` under
    ``capture_scalar_outputs``. The TorchScript exporter traces that number as a constant, so the
    plan kept the first call's value for every later call (``f(x, 1.5)`` gave ``x * 0.7 + 1``);
    AOTAutograd's graph keeps it a tensor."""
    for n in gm.graph.nodes:
        if n.op == "call_method" and n.target in _SCALAR_READS:
            return True
        if n.op == "call_function" and (n.target in (torch.Tensor.item, torch.ops.aten._local_scalar_dense.default)
                                        or getattr(n.target, "__name__", "") == "_local_scalar_dense"):
            return True
    return False


_RANDOM = frozenset({"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli",
                     "bernoulli_", "normal", "normal_", "uniform_", "random_", "exponential_", "cauchy_", "log_normal_",
                     "geometric_", "multinomial", "poisson", "rrelu", "rrelu_", "gumbel_softmax", "native_dropout"})
_DROPOUT = frozenset({"dropout", "dropout_", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d",
                      "dropout3d", "feature_dropout"})


def _draws_random(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` draws random numbers (``torch.randn``, dropout in training mode, ...). A GE
    plan's random ops draw from their own generator: the values ignored ``torch.manual_seed``
    and ``generator=``, so a seeded call was not reproducible as it is eagerly (and with Inductor).
    On the ATen path they run eagerly on torch's generator."""
    for n in gm.graph.nodes:
        name = target_name(n)
        if name in _RANDOM:
            return True
        if name in _DROPOUT and call_arg(n, 2, "training", True) is not False and call_arg(n, 1, "p", 0.5) != 0:
            return True
    return False


def _output_specs(gm: torch.fx.GraphModule) -> list[OutSpec | None] | None:
    """Each output's device, sizes, strides and dtype as eager gives them; None when one is not
    a tensor on the CPU or the npu."""
    vals = output_values(gm)
    if vals is None:
        return None
    specs = [spec(v) for v in vals]
    return None if any(s is None for s in specs) else specs


def _plan_mismatch(model: Any, specs: Sequence[OutSpec | None]) -> str:
    """Where the plan's outputs differ from eager's in count, dtype or (static) shape; "" when
    they agree. The exporter's known value errors are handled before (``misexported``); this
    catches the dtype and shape ones (it exported ``cumsum`` of int32 as int32, eager gives int64)."""
    outs = model.outputs
    if len(outs) != len(specs):
        return f"{len(outs)} outputs, eager gives {len(specs)}"
    for i, (o, sp) in enumerate(zip(outs, specs)):
        if sp is None:
            continue
        want = str(sp.dtype).removeprefix("torch.")
        if o.datatype != want:
            return f"output {i} is {o.datatype}, eager gives {want}"
        if sp.shape and all(isinstance(d, int) and d >= 0 for d in o.shape) and tuple(o.shape) != sp.shape:
            return f"output {i} has shape {tuple(o.shape)}, eager gives {sp.shape}"
    return ""


def _failed_at_run_time(gm: torch.fx.GraphModule, rec: GraphRecord, e: Exception, args: Sequence[Any]) -> Any:
    """A plan that raised at run time (an index out of range: pycann's ``KernelError``) runs this
    call eagerly instead, so the caller gets eager's exception (``IndexError``, ``RuntimeError``,
    which ``except`` clauses name) or, where eager does not fail, eager's values."""
    rec.reason = f"the plan failed at run time, that call ran eagerly: {type(e).__name__}"
    return gm.forward(*args)


def npu_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **options: Any) -> Callable[..., Any]:
    """The TorchDynamo backend: a callable running ``gm`` as a GE plan (or eagerly, recorded).
    ``torch.compile(..., options={...})`` reaches here as ``options``: none are defined, so any raises
    RuntimeError naming it, as inductor refuses an option it does not know (a typo must not be
    ignored); ``mode`` (inductor's presets: CUDA graphs, autotuning) has nothing to choose here."""
    unknown = sorted(str(k) for k in (options.get("options") or {})) + sorted(k for k in options if k not in ("options", "mode"))
    if unknown:
        raise RuntimeError(f"Unexpected optimization option {', '.join(unknown)} for backend 'npu': it takes none "
                           "(pycann's compile knobs are environment variables: docs/torch.md)")
    _cheap_module_guards()
    if torch.is_grad_enabled() and (any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
                                    or any(p.requires_grad for p in gm.parameters())):
        from pycann.torch.compile.training import aot_backend

        return aot_backend(gm, example_inputs)
    if not all(isinstance(t, torch.Tensor) for t in example_inputs):
        # symbolic sizes (Dynamo's automatic dynamic shapes) or other non-tensor inputs: the
        # ATen-level path (AOTAutograd's inference graph, partitioned, a GE plan per concrete shape)
        from pycann.torch.compile.training import aot_backend

        return aot_backend(gm, example_inputs)
    if _writes_running_stats(gm):
        rec = new_record(_op_count(gm))
        rec.reason = "train-mode batch norm (writes running statistics)"
        return _eager(gm, rec)
    if _mutates_or_aliases_inputs(gm) or _reads_scalars(gm) or _draws_random(gm):
        # the ONNX export neither writes the inputs nor returns views of them; AOTAutograd's
        # functionalization does both (writes back with copy_, regenerates the views). And the
        # export's tracer bakes a tensor read as a Python number (.item()) in as a constant, and
        # the plan's random ops draw from their own generator, not torch's (torch.manual_seed)
        from pycann.torch.compile.training import aot_backend

        return aot_backend(gm, example_inputs)
    rec = new_record(_op_count(gm))
    specs = _output_specs(gm)
    if specs is not None:
        specs = with_host_layouts(specs, host_layouts(_host_graph(gm), example_inputs))
    if specs is None:
        rec.reason = "outputs eager gives on a device other than the CPU and the npu, or not tensors"
        return _eager(gm, rec)
    wrong = misexported(gm)
    if wrong is not None:
        rec.reason = f"the ONNX export gets it wrong: {wrong}"
        return _eager(gm, rec)
    t0 = time.perf_counter()
    static = _static_inputs(gm)
    if len(static) != len(example_inputs):
        static = [False] * len(example_inputs)
    # an inference tensor (made under torch.inference_mode) has no version counter, so an in-place
    # write to it could not be seen (frozen.py): it is fed each call instead of embedded
    static = [s and not (isinstance(t, torch.Tensor) and t.is_inference()) for s, t in zip(static, example_inputs)]
    try:
        onnx_bytes = _lower(gm, example_inputs, static)
    except Exception as e:  # noqa: BLE001 - any export failure means: run this graph eagerly, say why
        rec.reason = f"ONNX lowering failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return _eager(gm, rec)
    bad = _unsupported(onnx_bytes)
    if bad:
        rec.unsupported = tuple(bad)
        rec.reason = "ops GE lacks"
        return _eager(gm, rec)
    try:
        model = _plan(onnx_bytes)
    except Exception as e:  # noqa: BLE001 - a GE compile failure also falls back, recorded
        rec.reason = f"GE compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return _eager(gm, rec)
    mismatch = _plan_mismatch(model, specs)
    if mismatch:
        rec.reason = f"the ONNX export gets it wrong: {mismatch}"
        return _eager(gm, rec)
    rec.compiled = True
    rec.compile_seconds = time.perf_counter() - t0
    dyn_idx = [i for i, s in enumerate(static) if not s]
    stats = _running_stats(gm, example_inputs)
    frozen = FrozenWeights(example_inputs, static, stats)
    fed = _fed(model, dyn_idx)

    def run(*args: Any) -> tuple[torch.Tensor, ...]:
        nonlocal model, frozen, fed
        rec.calls += 1
        if not frozen.still_hold(args):
            # a parameter/buffer was replaced or written since the plan embedded it: build the
            # plan again from this call's values (eager PyTorch would use them; see frozen.py)
            t1 = time.perf_counter()
            model = _plan(_lower(gm, args, static))
            frozen = FrozenWeights(args, static, stats)
            fed = _fed(model, dyn_idx)
            rec.relowers += 1
            rec.compile_seconds += time.perf_counter() - t1
            if rec.relowers == 1:
                warnings.warn(f"pycann torch.compile(backend='npu'): graph {rec.index}'s parameters or buffers "
                              "changed after it was compiled; its GE plan was rebuilt with the new values "
                              f"({(time.perf_counter() - t1) * 1e3:.0f} ms). Updating weights between calls "
                              "rebuilds it each time; compile after loading the weights.", stacklevel=2)
        feeds = []
        index = -1
        for i, f in zip(dyn_idx, fed):
            t = args[i].detach()
            if t.device.type == "npu":
                index = t.device.index or 0
                t = to_cpu(t)  # a relabel, no copy
            if f:
                feeds.append(_to_numpy(t))
        try:
            outs = model.run(feeds)
        except Exception as e:  # noqa: BLE001 - see _failed_at_run_time
            return _failed_at_run_time(gm, rec, e, args)
        return tuple(place(_from_numpy(o), sp, index) for o, sp in zip(outs, specs))

    return run


_orig_compile: Any = None


_skipping: list[bool] = []


def _skip_pycann_frames() -> None:
    """Have Dynamo run pycann's own frames instead of tracing them (as it does torch's), once.
    Where a compiled function breaks its graph on an npu tensor (``float(y.sum())``), the op runs
    eagerly through pycann's Python kernel, called from the dispatcher; Dynamo caught those frames
    and tried to compile the kernel itself: ~10 graph breaks and "does not know how to trace
    torch._C._to_dlpack" warnings for every one break a CPU tensor takes."""
    if not _skipping:
        import torch._dynamo.trace_rules as trace_rules

        trace_rules.add("pycann")
        _skipping.append(True)


def register() -> None:
    """Let ``torch.compile(..., backend="npu")`` resolve to ``npu_backend`` (a thin wrapper of
    ``torch.compile``; torch._dynamo is imported only when compiling)."""
    global _orig_compile
    if _orig_compile is not None:
        return
    _orig_compile = torch.compile

    @functools.wraps(_orig_compile)
    def compile(model: Any = None, *args: Any, backend: Any = "inductor", **kwargs: Any) -> Any:  # noqa: A001
        _skip_pycann_frames()
        if backend == "npu":
            backend = npu_backend
        return _orig_compile(model, *args, backend=backend, **kwargs)

    torch.compile = compile  # type: ignore[assignment]


def reset_graph_report() -> None:
    """Forget the recorded graphs and the graph breaks counted so far."""
    _records.clear()
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    _break_base.clear()
    if utils is not None:
        _break_base.update(utils.counters.get("graph_break", {}))
