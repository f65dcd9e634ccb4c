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
``make_graphed_callables`` (autograd through captured graphs) is not supported and raises.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_handles = itertools.count(1)
_NOT_CAPTURABLE = {"aten::_local_scalar_dense": "it reads a tensor's value on the host (.item(), bool(t), int(t))"}


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


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None) -> Iterator[Callable[..., Any]]:
    """Not supported: pycann's ``NPUGraph`` replays forward work without autograd, so graphed
    callables with backward cannot be built. Raises ``RuntimeError``; capture with ``NPUGraph``."""
    raise RuntimeError("torch.npu.make_graphed_callables is not supported by pycann: its NPUGraph replays "
                       "recorded ATen calls without autograd; capture forward work with torch.npu.graph / "
                       "NPUGraph and replay() it instead")
