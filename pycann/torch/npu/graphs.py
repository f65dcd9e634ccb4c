"""torch.npu graphs: ``NPUGraph``, ``graph``, ``graph_pool_handle``, ``make_graphed_callables``
(torch.cuda.graphs' shapes, torch_npu's names).

pycann has no device task queue to capture, so ``NPUGraph`` captures at the ATen level: between
``capture_begin`` and ``capture_end`` every ATen op call is recorded (a ``TorchDispatchMode``)
together with the tensors it got and the tensors it returned (``profiler::`` record_function
annotations are not recorded), and is also run (unlike CUDA,
where capture only records: the outputs hold the captured run's values at once). ``replay()``
runs the recorded ops again in order on the same tensors and writes each op's new result into
the tensor the captured call returned, so, as with a CUDA graph, new data copied into the
captured inputs flows through to the captured outputs, in-place updates (an optimizer step)
happen again, and random ops draw new numbers. Replay runs under ``torch.no_grad``.

Not capturable (``RuntimeError`` naming the op): ops that read a tensor's value on the host
(``.item()``, ``bool(t)``, ``aten._local_scalar_dense``), and, at replay, an op whose result
changed shape or dtype (a data-dependent shape such as ``nonzero``'s).
``make_graphed_callables`` captures each callable's forward and backward (``torch.autograd.grad``)
into two graphs and returns autograd Functions that replay them (torch.cuda's semantics).
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_handles = itertools.count(1)
_NOT_CAPTURABLE = {"aten::_local_scalar_dense": "it reads a tensor's value on the host (.item(), bool(t), int(t))"}


def is_current_stream_capturing() -> bool:
    """Whether an ``NPUGraph`` capture is recording this thread's ops (torch.cuda's name; libraries
    call it to skip host syncs and allocations that a capture cannot hold)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(isinstance(m, _Capture) for m in _get_current_dispatch_mode_stack())


class _Capture(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        why = _NOT_CAPTURABLE.get(func._schema.name)
        if why is not None:
            raise RuntimeError(f"torch.npu.NPUGraph: {func._schema.name} cannot be captured: {why} "
                               "(operation not permitted when stream is capturing)")
        out = func(*args, **kwargs)
        if func.namespace != "profiler":  # record_function's enter/exit annotate; they compute nothing
            self.calls.append((func, args, kwargs, out))
        return out


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.device == b.device)


def _write(func: Any, old: Any, new: Any) -> None:
    if isinstance(old, torch.Tensor):
        if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != old.dtype:
            got = f"{tuple(new.shape)} {new.dtype}" if isinstance(new, torch.Tensor) else type(new).__name__
            raise RuntimeError(f"torch.npu.NPUGraph.replay: {func._schema.name} returned {got} on replay but "
                               f"{tuple(old.shape)} {old.dtype} when captured; a data-dependent result cannot "
                               "be replayed into the captured tensor")
        if not _same_memory(old, new):
            old.copy_(new)
    elif isinstance(old, (list, tuple)):
        if not isinstance(new, (list, tuple)) or len(new) != len(old):
            raise RuntimeError(f"torch.npu.NPUGraph.replay: {func._schema.name} returned a different number "
                               "of results on replay")
        for o, n in zip(old, new):
            _write(func, o, n)
    elif isinstance(old, (bool, int, float, str, type(None))) and old != new:
        raise RuntimeError(f"torch.npu.NPUGraph.replay: {func._schema.name} returned {new!r} on replay, "
                           f"{old!r} when captured")


class NPUGraph:
    """``NPUGraph(keep_graph=False)``: capture with ``capture_begin`` / ``capture_end`` (or
    ``with torch.npu.graph(g):``), then ``replay()``. See the module's doc for what is captured."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.keep_graph = keep_graph
        self._calls: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] | None = None
        self._mode: _Capture | None = None
        self._pool: tuple[int, int] | None = None
        self._debug = False

    def capture_begin(self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global") -> None:
        """Start recording the ATen ops this thread runs."""
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, "
                               f"got {capture_error_mode}")
        if self._mode is not None:
            raise RuntimeError("torch.npu.NPUGraph.capture_begin: this graph is already capturing")
        if self._calls is not None:
            raise RuntimeError("torch.npu.NPUGraph.capture_begin: this graph already holds a capture; "
                               "call reset() first")
        self._pool = tuple(pool) if pool is not None else (next(_handles), 0)  # type: ignore[assignment]
        self._mode = _Capture()
        self._mode.__enter__()

    def capture_end(self) -> None:
        """Stop recording; the graph can be replayed."""
        if self._mode is None:
            raise RuntimeError("torch.npu.NPUGraph.capture_end: capture_begin was not called")
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        self._calls = mode.calls

    def instantiate(self) -> None:
        """Nothing to instantiate (the recorded calls are replayed as they are); checks a capture exists."""
        if self._calls is None:
            raise RuntimeError("torch.npu.NPUGraph.instantiate: nothing was captured")

    def replay(self) -> None:
        """Run the captured ops again on the captured tensors."""
        if self._calls is None:
            raise RuntimeError("torch.npu.NPUGraph.replay: nothing was captured (capture_begin/capture_end "
                               "or `with torch.npu.graph(g):` first)")
        with torch.no_grad():
            for func, args, kwargs, out in self._calls:
                _write(func, out, func(*args, **kwargs))

    def reset(self) -> None:
        """Drop the capture (and the tensors it keeps alive)."""
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        self._calls = None

    def pool(self) -> tuple[int, int]:
        """The id of the graph's memory pool (an opaque handle; pass it to another capture's ``pool``)."""
        if self._pool is None:
            raise RuntimeError("torch.npu.NPUGraph.pool: the graph has not been captured")
        return self._pool

    def enable_debug_mode(self) -> None:
        self._debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured ATen calls, one per line, to ``debug_path`` (needs ``enable_debug_mode``)."""
        if not self._debug:
            raise RuntimeError("torch.npu.NPUGraph.debug_dump: call enable_debug_mode() before capture")
        with open(debug_path, "w", encoding="utf-8") as f:
            for func, args, _kwargs, _out in self._calls or []:
                shapes = [tuple(a.shape) for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
                f.write(f"{func._schema.name} {shapes}\n")

    def captured_ops(self) -> list[str]:
        """The names of the captured ATen ops, in order (pycann's own accessor)."""
        return [c[0]._schema.name for c in self._calls or []]


class graph:  # noqa: N801 - torch.cuda.graph's name
    """``with torch.npu.graph(g, pool=None, stream=None, capture_error_mode="global"):`` captures the
    block into ``g`` (synchronizes and collects garbage first, as torch.cuda.graph does)."""

    default_capture_stream: Any = None

    def __init__(self, npu_graph: NPUGraph, pool: tuple[int, int] | None = None, stream: Any = None,
                 capture_error_mode: str = "global") -> None:
        self.npu_graph = npu_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        from pycann.torch.npu.streams import StreamContext

        self.stream_ctx = StreamContext(stream)

    def __enter__(self) -> None:
        gc.collect()  # (torch.cuda.graph synchronizes first too: npu work is always complete)
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: object) -> None:
        try:
            self.npu_graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*exc)


def graph_pool_handle() -> tuple[int, int]:
    """An opaque memory-pool id to share between captures (host memory is not pooled: only an id)."""
    return (next(_handles), 0)


def _graphed_function(fwd: NPUGraph, bwd: NPUGraph, params: tuple[torch.Tensor, ...], n_user: int, spec: Any,
                      surface: tuple[torch.Tensor, ...], outs: tuple[torch.Tensor, ...],
                      grad_outs: tuple[torch.Tensor | None, ...],
                      grad_ins: tuple[torch.Tensor | None, ...]) -> Callable[..., Any]:
    """One graphed callable: an autograd Function whose forward copies new arguments into the
    captured inputs and replays ``fwd``, and whose backward copies the incoming gradients into the
    captured ones and replays ``bwd`` (torch.cuda.make_graphed_callables' structure)."""

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
            for static, new in zip(surface[:n_user], inputs[:n_user]):
                if not _same_memory(static, new):
                    static.copy_(new)
            fwd.replay()
            # (the captured tensors themselves: the next call overwrites them, as a CUDA graph's outputs)
            return tuple(o.detach() for o in outs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
            for static, g in zip(grad_outs, grads):
                if static is None:
                    continue
                if g is None:
                    static.zero_()
                elif not _same_memory(static, g):
                    static.copy_(g)
            bwd.replay()
            return tuple(g.detach() if g is not None else None for g in grad_ins)

    def graphed(*user_args: Any) -> Any:
        leaves = torch.utils._pytree.arg_tree_leaves(*user_args)
        if len(leaves) != n_user:
            raise RuntimeError(f"torch.npu.make_graphed_callables: the graphed callable was captured with {n_user} "
                               f"tensor argument(s), called with {len(leaves)}; pass the arguments as in sample_args")
        return torch.utils._pytree.tree_unflatten(list(Graphed.apply(*leaves, *params)), spec)

    return graphed


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None) -> Any:
    """torch.cuda.make_graphed_callables for the npu: each callable (function or ``nn.Module``) is
    run on its ``sample_args`` and its forward, then its backward (``torch.autograd.grad`` of its
    outputs with respect to the arguments and module parameters that require grad), are captured
    into two ``NPUGraph`` s. The graphed callable is an autograd Function that replays them: same
    values and gradients as the original, arguments passed as in ``sample_args``, outputs that the
    next call overwrites. A module keeps its object, with ``forward`` replaced (its original
    forward runs while its ``training`` flag differs from the captured one). One callable returns
    one graphed callable; a tuple, a tuple (captured forwards in order, backwards in reverse)."""
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. "
                           "Please set `cache_enabled=False`.")
    one = not isinstance(callables, tuple)
    funcs: tuple[Any, ...] = (callables,) if one else callables
    args_per: tuple[Any, ...] = (sample_args,) if one else tuple(sample_args)
    if len(args_per) != len(funcs):
        raise ValueError(f"torch.npu.make_graphed_callables: {len(funcs)} callables, {len(args_per)} sample_args")
    flat_args: list[tuple[torch.Tensor, ...]] = []
    for fn, args in zip(funcs, args_per):
        if isinstance(fn, torch.nn.Module):
            if fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks:
                raise AssertionError("Modules must not have hooks registered at the time they are passed. However, "
                                     "registering hooks on modules after passing them through make_graphed_callables "
                                     "is allowed.")
            if any(b.requires_grad for b in fn.buffers()):
                raise AssertionError("In any torch.nn.Module passed to make_graphed_callables, only parameters may "
                                     "be trainable. All buffers must have requires_grad=False.")
        leaves = tuple(torch.utils._pytree.arg_tree_leaves(*args))
        if not all(isinstance(a, torch.Tensor) for a in leaves):
            raise AssertionError("sample_args for each callable must contain only Tensors. Other types are not allowed.")
        flat_args.append(leaves)
    params = [tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else () for fn in funcs]
    surfaces = [a + p for a, p in zip(flat_args, params)]
    mempool = graph_pool_handle() if pool is None else pool

    def grads_of(outputs: Sequence[torch.Tensor], surface: tuple[torch.Tensor, ...],
                 grad_outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        return torch.autograd.grad(outputs=tuple(outputs), inputs=tuple(i for i in surface if i.requires_grad),
                                   grad_outputs=tuple(grad_outputs), only_inputs=True,
                                   allow_unused=allow_unused_input)

    for fn, args, surface in zip(funcs, args_per, surfaces):  # warm-up, as torch.cuda does
        for _ in range(num_warmup_iters):
            outputs = [o for o in torch.utils._pytree.tree_leaves(fn(*args)) if isinstance(o, torch.Tensor)]
            needing = [o for o in outputs if o.requires_grad]
            if needing:
                grads_of(needing, surface, [torch.zeros_like(o) for o in needing])
    fwds = [NPUGraph() for _ in funcs]
    bwds = [NPUGraph() for _ in funcs]
    static_outs: list[tuple[torch.Tensor, ...]] = []
    specs = []
    for fn, args, g in zip(funcs, args_per, fwds):
        with graph(g, pool=mempool):
            result = fn(*args)
        leaves_out, spec = torch.utils._pytree.tree_flatten(result)
        if not all(isinstance(o, torch.Tensor) for o in leaves_out):
            raise RuntimeError("torch.npu.make_graphed_callables: a callable must return tensors (or nested "
                               "tuples / lists / dicts of them)")
        static_outs.append(tuple(leaves_out))
        specs.append(spec)
    grad_outs: list[tuple[torch.Tensor | None, ...]] = [()] * len(funcs)
    grad_ins: list[tuple[torch.Tensor | None, ...]] = [()] * len(funcs)
    for i in reversed(range(len(funcs))):  # backwards in reverse order, as they will run
        g_out = tuple(torch.empty_like(o) if o.requires_grad else None for o in static_outs[i])
        needing = [o for o in static_outs[i] if o.requires_grad]
        got: tuple[torch.Tensor | None, ...] = ()
        if needing:
            with graph(bwds[i], pool=mempool):
                got = grads_of(needing, surfaces[i], [g for g in g_out if g is not None])
        else:
            bwds[i].capture_begin(mempool)  # (nothing to differentiate: an empty backward)
            bwds[i].capture_end()
        it = iter(got)
        grad_ins[i] = tuple(next(it) if a.requires_grad and got else None for a in surfaces[i])
        grad_outs[i] = g_out
    out: list[Any] = []
    for i, fn in enumerate(funcs):
        graphed = _graphed_function(fwds[i], bwds[i], params[i], len(flat_args[i]), specs[i], surfaces[i],
                                    static_outs[i], grad_outs[i], grad_ins[i])
        if isinstance(fn, torch.nn.Module):
            fn.forward = _module_forward(fn, fn.training, graphed, fn.forward)
            out.append(fn)
        else:
            out.append(graphed)
    return out[0] if one else tuple(out)


def _module_forward(module: torch.nn.Module, training: bool, graphed: Callable[..., Any],
                    original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        if module.training == training:
            return graphed(*args, **kwargs)
        return original(*args, **kwargs)

    return forward
