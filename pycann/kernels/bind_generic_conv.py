"""Shape-generic Conv / FusedConv: each input shape a node sees gets the static binder's kernel,
kept in a small per-node table, so the shape's later calls skip the per-call dispatch.

Why: on the shape-generic plan (``ge/run/executor.py``, docs/dynamic-shapes.md) every conv call
went through ``kernels.conv.conv_act``: shape checks, the window, the provider choice, the NaN
guard's choice, the primitive lookup by a key of a dozen fields, three operand checks. That is
~40 us of Python a conv; PP-OCRv4 det at 128 x 128 ran 3.5 ms of such Python around 1.4 ms of
kernels (ORT: 1.35 ms a call), rec at 48 x 64 3 ms around 1.2 ms. An OCR service feeds crops of
many sizes, and a size's later calls often stay on this plan (its specialised plan is built
only in a quiet moment: ``Executor.HOLD_CALLS``). With a kernel bound per shape, a call checks
the input's class and dtype, looks its shape up and runs the bound primitive (~6 us).

Per node and input shape (and OpenMP team, which oneDNN fixes in a primitive), on the first call
of that shape:

* the provider the static table picks for the concrete shape (``providers.resolve``, as
  ``conv_act`` would) is recorded in a copy of the attributes, and ``kernels.bind``'s static
  ``Conv`` binder binds it for that shape (oneDNN primitive over the weight packed once per model
  and layout: ``onednn_packed``; numpy im2col for tiny convs; the NaN guard as in static plans);
* a pointwise conv (1x1, stride 1, no pads) that oneDNN computes gets the run-time-rows matmul of
  ``onednn_pointwise``, one per weight for every size: no primitive is made per shape;
* Winograd convs, and anything the binder declines (an activation oneDNN lacks, a dtype, a shape
  it does not implement), keep the generic kernel for that shape: the table records that too.

A call the table cannot serve (another dtype, a residual of another class) runs the generic kernel
unchanged: same errors and semantics (ONNX Conv-11/22 and pycann's FusedConv, ``ops/fused.py``).
Each node keeps at most ``MAX_SHAPES`` shapes, least recently bound first out; a dropped kernel
frees its primitive with it. The bound kernels share the model's packed weights, so memory grows
by primitives only (no weight copies per shape).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.kernels import algorithm, bind_guard
from pycann.kernels.algorithm import ONEDNN_CONV_NHWC, ONEDNN_CONV_WINOGRAD, Packing, Threads
from pycann.kernels.bind_base import remember
from pycann.kernels.bound import BoundKernel, bound
from pycann.kernels.providers import omp_fork

__all__ = ["MAX_SHAPES", "conv"]

_F32 = np.dtype(np.float32)
_MISSING: Any = object()  # "not bound for this shape yet" (None records a shape the generic kernel keeps)
# Input shapes one node keeps a kernel for: an OCR service's crop widths and image sizes (the issue's
# interleaved bench: 50+ rec widths, 30+ det sizes) fit; a stream of ever new shapes re-binds.
MAX_SHAPES = 64

Kernel = Any


def conv(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
         outs: Sequence[TensorDesc | None], fallback: Kernel) -> BoundKernel | None:
    """The shape-generic kernel of a Conv / FusedConv node with a constant float32 W (and B when
    present), float32 X and no recorded algorithm; None otherwise (the node keeps ``fallback``,
    its generic kernel). ``inputs[3]`` of a FusedConv is its residual, of the output's shape."""
    from pycann.kernels.providers import openmp

    w = consts[1] if len(consts) > 1 else None
    b = consts[2] if len(consts) > 2 else None
    x = ins[0] if ins else None
    if w is None or w.dtype != _F32 or w.ndim < 3 or x is None or x.dtype != 1:
        return None
    if len(ins) > 2 and ins[2] is not None and (b is None or b.dtype != _F32):
        return None  # a computed bias: the generic kernel
    if algorithm.of(attrs) is not None:
        return None  # a recorded choice (the bf16 modes, a tuned model) stays with the generic kernel
    from pycann.kernels.bind_generic_conv_node import ConvNode

    residual = len(ins) > 3 and ins[3] is not None
    _prepare_pointwise(attrs, x, w, b, residual)
    table: dict[tuple[Any, ...], BoundKernel | None] = {}
    lock = omp_fork.fork_safe(threading.Lock())
    team = openmp.team
    node = ConvNode(attrs, ins, consts, outs, w, b, residual, _bind)  # (what every shape's bind shares)
    bind = node.bind

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        x = inputs[0]
        r = inputs[3] if residual and len(inputs) > 3 else None
        if x.__class__ is not np.ndarray or x.dtype != _F32 or (residual and (
                r.__class__ is not np.ndarray or r.dtype != _F32)):
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        key = (x.shape, r.shape if r is not None else None, team())
        kb = table.get(key, _MISSING)  # one lookup: another thread may evict between two
        if kb is _MISSING:
            kb = bind(attrs, x, r)
            remember(table, lock, key, kb, MAX_SHAPES)  # (never waits: a forked child's lock may be taken)
        if kb is None:
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        return kb.run(inputs, attrs)  # type: ignore[no-any-return]  # (no arena views: ``conv_guard(arena=False)``)

    return BoundKernel(kernel, threads=Threads.OPENMP, packing=Packing.PACKED, keep=(w, b, table, node),
                       impl="generic:conv_per_shape")


def _bind(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
          outs: Sequence[TensorDesc | None], x: np.ndarray, r: np.ndarray | None, w: np.ndarray,
          b: np.ndarray | None, residual: bool) -> BoundKernel | None:
    """The static binder's kernel for this call's shapes, or None (the generic kernel serves them:
    errors included, so a bad shape raises there, naming the node). The reference for
    ``ConvNode.bind``, which makes the same kernels with the node's shape-independent parts made
    once, and calls this where its shortcuts do not apply."""
    from pycann.kernels import bind
    from pycann.kernels.providers import ConvSpec, resolve
    from pycann.ops.nn.conv import _select, check_conv

    group = int(attrs.get("group", 1))
    try:
        win = check_conv(x, w, b, group, attrs)
    except (ValueError, TypeError):
        return None
    if _select(x.shape, w.shape, group, win) == "empty" or any(o <= 0 for o in win.out):
        return None
    xs = tuple(int(d) for d in x.shape)
    algo = resolve(None, lambda: ConvSpec("Conv", xs, tuple(w.shape), group, win, win.out, "float32")).algo
    if algo is ONEDNN_CONV_WINOGRAD:
        return None  # its weight transform belongs to one bound kernel: per shape it would be redone
    a = dict(attrs)
    a["_algo"] = algo
    if algo is ONEDNN_CONV_NHWC:
        pk = _pointwise(a, xs, w, b, group, win, residual)
        if pk is not None:
            return pk
    descs: list[TensorDesc | None] = [TensorDesc(1, xs), *ins[1:3]]
    if residual:
        assert r is not None
        descs.append(TensorDesc(1, tuple(int(d) for d in r.shape)))
    return bound(bind.PREPARE[("", "Conv")](a, descs, consts, outs))


def _prepare_pointwise(attrs: Mapping[str, Any], x: TensorDesc, w: np.ndarray, b: np.ndarray | None,
                       residual: bool) -> None:
    """Make a pointwise conv's run-time-rows matmul now, when the plan is built (the model's load:
    ``Executor.prepare_generic``), not in the first call: its primitive and transposed weight do not
    depend on the input shape, and ``_pointwise`` finds them in ``onednn_pointwise``'s table
    (PP-OCRv4 rec's first call made 17 of them, ~4 ms). Where X's spatial dims are known (a
    squeeze-and-excitation conv on a 1 x 1 image) the provider ``_bind`` would pick for one image
    decides; elsewhere the geometry at a nominal size does (1x1, stride 1, no pads: any size)."""
    from pycann.kernels import bind
    from pycann.kernels.providers import ConvSpec, onednn, resolve
    from pycann.kernels.providers import onednn_pointwise as pw
    from pycann.ops.nn.conv import conv_window

    group = int(attrs.get("group", 1))
    spatial = x.shape[2:] if x.shape is not None else None
    if spatial is None or w.ndim != len(x.shape or ()) or not onednn.POINTWISE_ANY_SIZE or not onednn.available():
        return
    known = all(isinstance(d, int) for d in spatial)
    xs = (1, int(w.shape[1]) * group, *(d if known and isinstance(d, int) else 8 for d in spatial))
    try:
        win = conv_window(xs, w.shape, attrs)
    except (ValueError, TypeError, AssertionError):
        return
    if not pw.pointwise(w, group, win):
        return
    if known and resolve(None, lambda: ConvSpec("Conv", xs, tuple(w.shape), group, win, win.out,
                                                "float32")).algo is not ONEDNN_CONV_NHWC:
        return
    ok, unary = bind._dnnl_post_ops(attrs)
    if ok:
        pw.plan(w, b is not None, unary, residual)  # (None when oneDNN declines: the first call sees that too)


def _pointwise(attrs: Mapping[str, Any], x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray | None,
               group: int, win: Any, residual: bool) -> BoundKernel | None:
    """A 1x1 conv as ``onednn_pointwise``'s run-time-rows matmul (one per weight, every size) with
    this shape's memories made once, NaN-guarded as the static binder guards; None when it is no
    such conv or oneDNN declines."""
    from pycann.kernels import bind
    from pycann.kernels.providers import onednn
    from pycann.kernels.providers import onednn_pointwise as pw

    if not onednn.POINTWISE_ANY_SIZE or not onednn.available() or not pw.pointwise(w, group, win):
        return None
    ok, unary = bind._dnnl_post_ops(attrs)
    if not ok:
        return None
    k = pw.plan(w, b is not None, unary, residual)
    if k is None:
        return None
    bias = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
    bk = BoundKernel(k.sized(x_shape, bias).kernel, threads=Threads.OPENMP, packing=Packing.PACKED, keep=(w, bias, k),
                     impl=k.impl)
    return bind_guard.guard_conv(bk, unary, attrs, w, b, residual)
