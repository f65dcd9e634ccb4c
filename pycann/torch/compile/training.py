"""Training graphs for ``torch.compile(backend="npu")``: AOTAutograd's forward and backward graphs
lowered to GE where GE has the ops, eager on the npu device for the rest.

``aot_backend`` hands the Dynamo graph to AOTAutograd (``aot_module_simplified``) with
``DECOMPOSITIONS`` (PyTorch's core ATen decompositions, which turn batch norm, the losses and the
activation backward ops into elementwise ops and reductions, plus ``convolution_backward`` as
convolutions, below), so the backward graph is made of ops GE computes. Each of the forward
and backward graphs is split by ``CapabilityBasedPartitioner`` into maximal groups of nodes
``aten_onnx.supported`` accepts; each group becomes one GE plan (``aten_onnx.to_onnx`` ->
``compile_model``, compiled on its first call, when the real input shapes are known), the nodes
between groups run eagerly on the npu device. ``GraphRecord`` (``kind`` "forward"/"backward")
lists, per graph, how many partitions went to GE and which ATen ops stayed eager, by name.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from pycann.torch._alias import to_cpu
from pycann.torch.compile import aten_onnx
from pycann.torch.compile.outputs import OutSpec, host_layouts, output_values, place, spec, with_host_layouts
from pycann.torch.compile.records import GraphRecord, new_record

aten = torch.ops.aten


def _conv_backward(grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias_sizes: Any, stride: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                   groups: int, output_mask: Sequence[bool]) -> Any:
    """``aten.convolution_backward`` as forward convolutions (the textbook identities, PyTorch's
    ``ConvolutionBackward`` semantics): grad_input is the transposed convolution of grad_out
    with the weight (output_padding restores the rows the stride dropped); grad_weight is the
    convolution of the input with grad_out, batch as channels, stride and dilation swapped;
    grad_bias sums grad_out. Transposed convolutions and groups > 1 keep the ATen op."""
    if transposed or groups != 1:
        return NotImplemented
    k = w.shape[2:]
    nd = len(k)
    gi = gw = gb = None
    if output_mask[0]:
        extra = [x.shape[2 + i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1 - (grad_out.shape[2 + i] - 1) * stride[i]
                 for i in range(nd)]
        gi = aten.convolution.default(grad_out, w, None, list(stride), list(padding), list(dilation), True, extra, 1)
    if output_mask[1]:
        full = aten.convolution.default(x.transpose(0, 1), grad_out.transpose(0, 1), None, list(dilation),
                                        list(padding), list(stride), False, [0] * nd, 1)
        for i in range(nd):
            full = full.narrow(2 + i, 0, k[i])
        gw = full.transpose(0, 1)
    if output_mask[2]:
        gb = grad_out.sum([0] + list(range(2, 2 + nd)))
    return gi, gw, gb


def _decompositions() -> dict[Any, Callable[..., Any]]:
    from torch._decomp import core_aten_decompositions, get_decompositions

    table: dict[Any, Callable[..., Any]] = dict(core_aten_decompositions())
    table.update(get_decompositions([aten._native_batch_norm_legit_functional, aten.native_layer_norm,
                                     aten.gelu, aten.gelu_backward]))
    table[aten.convolution_backward.default] = _conv_backward
    return table


class _Support(OperatorSupport):
    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return aten_onnx.supported(node)


_FREE = frozenset({"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "t", "transpose", "permute",
                   "expand", "alias", "detach", "clone", "getitem", "flatten"})


def _op_name(node: torch.fx.Node) -> str:
    t = node.target
    return t.name() if isinstance(t, torch._ops.OpOverload) else getattr(t, "__name__", str(t))


_EAGER: Any = object()  # a partition whose GE compile failed


class _GEPart(torch.nn.Module):
    """One partition: compiled to a GE plan on its first call (input shapes then known)."""

    def __init__(self, gm: torch.fx.GraphModule, rec: GraphRecord) -> None:
        super().__init__()
        self.gm = gm
        self.rec = rec
        self.plans: dict[tuple[tuple[int, ...], ...], Any] = {}  # by input shapes (symbolic graphs)
        self.specs: dict[tuple[tuple[int, ...], ...], list[OutSpec | None]] = {}

    def _compile(self, args: Sequence[torch.Tensor]) -> Any:
        from pycann.ge.compile.compiler import compile_model
        from pycann.ge.run.model import LoadedModel

        t0 = time.perf_counter()
        model = LoadedModel.from_compiled(compile_model(aten_onnx.to_onnx(self.gm, args)))
        self.rec.compile_seconds += time.perf_counter() - t0
        return model

    def forward(self, *args: torch.Tensor) -> Any:
        key = tuple(tuple(a.shape) for a in args)
        model = self.plans.get(key)
        if model is None:
            try:
                model = self._compile(args)
            except Exception as e:  # noqa: BLE001 - a partition GE cannot compile runs eagerly, recorded
                model = _EAGER
                self._record_eager(e)
            self.plans[key] = model
            self.specs[key] = self._specs(args)
        if model is _EAGER:
            return self.gm(*args)
        index = -1
        feeds = []
        for t in args:
            t = t.detach()
            if t.device.type == "npu":
                index = t.get_device()
                t = to_cpu(t)
            feeds.append(t.contiguous().numpy())
        try:
            outs = model.run(feeds)
        except Exception as e:  # noqa: BLE001 - eager's exception (IndexError, ...) or values instead
            self.rec.reason = f"a GE plan failed at run time, that call ran eagerly: {type(e).__name__}"
            return self.gm(*args)
        specs = self.specs[key]
        res = tuple(place(torch.from_numpy(o), specs[i] if i < len(specs) else None, index) for i, o in enumerate(outs))
        return res if len(res) != 1 or self._tuple_out else res[0]

    def _specs(self, args: Sequence[torch.Tensor]) -> list[OutSpec | None]:
        """Each output's device and strides as eager gives them for these inputs: the partition
        run on fake copies of them (its ``val`` metadata may have symbolic sizes and strides).
        Without it, outputs went to the inputs' device (``.cpu()`` / ``.npu()`` inside a
        partition were lost) and came back contiguous. Devices from the metadata when the fake
        run fails."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        from pycann.torch.compile import _host_graph

        try:
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                outs = self.gm(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
            vals = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            specs = [spec(v) for v in vals]
        except Exception:  # noqa: BLE001 - keep the devices at least
            vals = output_values(self.gm, "val") or []
            return [None if sp is None else sp._replace(shape=(), stride=()) for sp in map(spec, vals)]
        return with_host_layouts(specs, host_layouts(_host_graph(self.gm), args))

    def _record_eager(self, e: Exception) -> None:
        ops = collections.Counter(dict(self.rec.eager_ops))
        for n in self.gm.graph.nodes:
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
                ops[_op_name(n)] += 1
        self.rec.eager_ops = tuple(sorted(ops.items()))
        self.rec.reason = f"a GE plan failed, its ops run eagerly: {type(e).__name__}: {str(e).splitlines()[0][:200]}"

    @property
    def _tuple_out(self) -> bool:
        out = next(n for n in self.gm.graph.nodes if n.op == "output")
        return isinstance(out.args[0], (tuple, list))


def partition(gm: torch.fx.GraphModule, rec: GraphRecord) -> torch.fx.GraphModule:
    """``gm`` with each maximal GE-lowerable group of nodes replaced by a ``_GEPart`` (groups of
    view/shape ops alone stay eager); ``rec`` gets the partition count and the eager ops."""
    parts = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True).propose_partitions()
    useful = [p for p in parts if any(n.op == "call_function" and _op_name(n).split("::")[-1].split(".")[0]
                                      not in _FREE for n in p.nodes)]
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

    fused = fuse_by_partitions(gm, [dict.fromkeys(p.nodes) for p in useful], prefix="ge_part_")
    eager: collections.Counter[str] = collections.Counter()
    for node in fused.graph.nodes:
        if node.op == "call_module" and str(node.target).startswith("ge_part_"):
            sub = getattr(fused, str(node.target))
            setattr(fused, str(node.target), _GEPart(sub, rec))
            rec.ge_partitions += 1
            rec.ge_ops += sum(1 for n in sub.graph.nodes if n.op == "call_function")
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                not node.target.name().startswith("aten::sym_"):
            eager[_op_name(node)] += 1  # ATen ops only: not getitem, not SymInt arithmetic
    rec.eager_ops = tuple(sorted(eager.items()))
    rec.compiled = rec.ge_partitions > 0
    if eager:
        rec.reason = "partly eager (ops GE lacks)" if rec.compiled else "no op GE has"
    fused.recompile()
    return fused


def _compiler(kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func

        ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        rec = new_record(ops, kind)
        run = partition(gm, rec)

        def call(*args: Any) -> Any:
            rec.calls += 1
            return run(*args)

        return make_boxed_func(call)

    return compile_graph


_TABLE: dict[Any, Callable[..., Any]] = {}


def aot_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The npu backend for graphs that need gradients, and for inference graphs with symbolic
    sizes: AOTAutograd with GE-lowered forward and backward (or inference) graphs, recorded
    with ``kind`` "forward", "backward" or "aten inference" (see the module docstring)."""
    from torch._functorch.aot_autograd import aot_module_simplified

    if not _TABLE:
        _TABLE.update(_decompositions())
    fw: Any = _compiler("forward")
    bw: Any = _compiler("backward")
    inference: Any = _compiler("aten inference")
    try:
        return aot_module_simplified(gm, list(example_inputs), fw_compiler=fw, bw_compiler=bw,
                                     inference_compiler=inference, decompositions=_TABLE)
    except Exception as e:  # noqa: BLE001 - AOTAutograd cannot trace it: eager PyTorch can run it
        from torch._dynamo.exc import TorchDynamoException

        if isinstance(e, TorchDynamoException):  # Dynamo's own control flow (RestartAnalysis, ...)
            raise
        # e.g. floor_divide on a tensor that requires grad: eager's forward runs (the result has
        # no grad_fn), AOTAutograd's joint trace raises "derivative for aten::floor_divide is not
        # implemented" (Dynamo then raised BackendCompilerFailed where eager gave a value)
        rec = new_record(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
        rec.reason = f"AOTAutograd failed, run eagerly: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"

        def run(*args: Any) -> Any:
            rec.calls += 1
            return gm.forward(*args)

        return run
