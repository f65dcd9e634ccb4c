"""One Conv / FusedConv node of the shape-generic plan bound per input shape
(``bind_generic_conv``), with what no input shape changes worked out once for the node.

Why: the first call of a new input shape binds every conv node for that shape, and each bind went
through the static binder's whole path: the window derived twice, the activation's post-ops twice,
the attributes copied, the NaN guard's bias bound, fallback and closures made anew, a dozen
function-level imports, and the weight's and bias's oneDNN descriptors and the post-op attributes
(PP-OCRv4 rec: ~60 us of Python a conv beside oneDNN's descriptor and JIT, 29 convs a new width).
A node keeps those here (``_Dnnl``: made at its first oneDNN bind) and a shape's bind does what the
shape changes: the checks and window, the provider choice, and the shape's memories and primitive.

The kernels are the ones ``bind_generic_conv._bind`` (the static binder: ``bind._conv`` ->
``_conv_dnnl`` -> ``onednn.bound_conv_nhwc``, guarded by ``bind_guard``) makes for the shape, and
``_bind`` still serves what this does not cover: calls with other attributes than the node's and
a weight whose descriptor shape the static binder would read differently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.kernels import bind, bind_guard, providers
from pycann.kernels.algorithm import ONEDNN_CONV_NHWC, ONEDNN_CONV_WINOGRAD, Packing, Threads
from pycann.kernels.bind_base import static_shape
from pycann.kernels.bound import BoundKernel, bound
from pycann.kernels.providers import onednn
from pycann.kernels.providers import onednn_pointwise as pw
from pycann.kernels.providers.onednn_conv_descs import ConvDescs
from pycann.ops.nn.conv import _check_conv_shapes, _kernel_shape, _select, check_conv
from pycann.ops.nn.spatial import WindowParams, window_of, window_params

__all__ = ["ConvNode"]

_F32 = np.dtype(np.float32)


class ConvNode:
    """``bind(attrs, x, r)``: the bound kernel of the node's conv for this call's X (and residual
    ``r``), or None (the generic kernel serves the shape: errors included). ``general`` is
    ``bind_generic_conv._bind``, taken where the node's shortcuts do not apply."""

    __slots__ = ("attrs", "ins", "consts", "outs", "w", "b", "residual", "group", "direct", "general", "_dnnl",
                 "_algo_attrs", "cin", "window")

    def __init__(self, attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
                 outs: Sequence[TensorDesc | None], w: np.ndarray, b: np.ndarray | None, residual: bool,
                 general: Callable[..., BoundKernel | None]) -> None:
        self.attrs, self.ins, self.consts, self.outs = attrs, ins, consts, outs
        self.w, self.b, self.residual, self.general = w, b, residual, general
        self.group = int(attrs.get("group", 1))
        # the static binder reads W's shape from its desc: where that is not the weight's own
        # (never, for a constant), it is left to decide
        self.direct = static_shape(ins[1]) == tuple(w.shape)
        self._dnnl: _Dnnl | None = None
        self._algo_attrs: dict[Any, dict[str, Any]] = {}  # algorithm -> the attributes recording it
        # ``check_conv``'s checks that no X changes (group, M, B's length; any failing: every shape
        # is the generic kernel's) and its reading of the window attributes, made once: a shape's
        # bind checks X and resolves its window (None: ``check_conv`` itself, per shape, raises
        # what reading them raised)
        self.cin = int(w.shape[1]) * self.group
        self.window: WindowParams | None | bool = None
        try:
            kernel = _kernel_shape(attrs, w.shape)
            assert kernel is not None
            params = window_params(w.ndim - 2, kernel, attrs)
            self.window = params
            _check_conv_shapes(np.empty((1, self.cin) + (1,) * (w.ndim - 2), np.float32), w, self.group, False, b)
        except (ValueError, TypeError):
            self.window = False if self.window is not None else None  # (False: no X passes the checks)
        except Exception:  # (an error of another kind: per shape, where it was raised before)
            self.window = None

    def bind(self, attrs: Mapping[str, Any], x: np.ndarray, r: np.ndarray | None) -> BoundKernel | None:
        w, b, group = self.w, self.b, self.group
        if attrs is not self.attrs or not self.direct:
            return self.general(attrs, self.ins, self.consts, self.outs, x, r, w, b, self.residual)
        params = self.window
        if params is None:
            try:
                win = check_conv(x, w, b, group, attrs)
            except (ValueError, TypeError):
                return None
        else:
            if params is False or x.ndim != w.ndim or x.shape[1] != self.cin:
                return None  # (what ``check_conv`` raises)
            win = window_of(x.shape[2:], params)  # type: ignore[arg-type]
            # (a window that does not fit X, ``check_conv``'s last error: no output, below)
        if _select(x.shape, w.shape, group, win) == "empty" or any(o <= 0 for o in win.out):
            return None
        xs = tuple(int(d) for d in x.shape)
        # (not remembered: this node keeps what it binds for the shape, ``remember``)
        algo = providers.resolve(None, lambda: providers.ConvSpec("Conv", xs, tuple(w.shape), group, win, win.out,
                                                                  "float32"), remember=False).algo
        if algo is ONEDNN_CONV_WINOGRAD:
            return None  # its weight transform belongs to one bound kernel: per shape it would be redone
        if algo is ONEDNN_CONV_NHWC:
            d = self._dnnl
            if d is None:  # (two threads may both make it: equal, one kept)
                d = self._dnnl = _Dnnl(self, attrs)
            return d.bind(xs, win, r)
        a = self._algo_attrs.get(algo)
        if a is None:
            a = dict(attrs)
            a["_algo"] = algo
            self._algo_attrs[algo] = a
        descs: list[TensorDesc | None] = [TensorDesc(1, xs), *self.ins[1:3]]
        if self.residual:
            assert r is not None
            descs.append(TensorDesc(1, tuple(int(d) for d in r.shape)))
        return bound(bind.PREPARE[("", "Conv")](a, descs, self.consts, self.outs))


class _Dnnl:
    """A node's oneDNN conv as ``onednn:conv_nhwc`` binds it (``bind._conv_dnnl``), or as
    ``onednn_pointwise``'s run-time-rows matmul for a pointwise shape (``bind_generic_conv._pointwise``):
    the attributes recording the algorithm, the post-ops, the bias, the guard and the
    shape-independent descriptors, made once."""

    __slots__ = ("node", "attrs", "ok", "unary", "bias", "in_place", "guard", "descs", "pw_keep")

    def __init__(self, node: ConvNode, attrs: Mapping[str, Any]) -> None:
        self.node = node
        a = dict(attrs)
        a["_algo"] = ONEDNN_CONV_NHWC
        self.attrs = a
        self.ok, self.unary = bind._dnnl_post_ops(a)
        b = node.b
        self.bias = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
        self.in_place = node.residual and bool(a.get("_in_place"))
        # (the node's table runs its kernels without arena views: ``bind_generic_conv.conv``)
        self.guard = bind_guard.conv_guard(self.unary, a, node.w, b, node.residual, arena=False)
        self.descs: ConvDescs | None = None  # made at the first conv primitive (oneDNN loaded by then)
        self.pw_keep: tuple[Any, ...] = ()  # (w, bias, the matmul): one tuple for the node's shapes

    def bind(self, xs: tuple[int, ...], win: Any, r: np.ndarray | None) -> BoundKernel | None:
        node = self.node
        w, b, group, residual = node.w, node.b, node.group, node.residual
        if onednn.POINTWISE_ANY_SIZE and onednn.available() and pw.pointwise(w, group, win) and self.ok:
            k = pw.plan(w, b is not None, self.unary, residual)
            if k is not None:  # (None: oneDNN declines the matmul, the conv primitive below is tried)
                bias, keep = self.bias, self.pw_keep
                if not keep or keep[2] is not k:  # (another OpenMP team's matmul)
                    keep = self.pw_keep = (w, bias, k)
                bk = BoundKernel(k.sized(xs, bias).kernel, threads=Threads.OPENMP, packing=Packing.PACKED,
                                 keep=keep, impl=k.impl)
                return self.guard(bk)
        if not onednn.available() or not onednn.accepts(_F32, int(math.prod(xs)), w, win) or not self.ok:
            return None
        if residual and (r is None or tuple(int(d) for d in r.shape) != (xs[0], w.shape[0]) + tuple(win.out)):
            return None
        descs = self.descs
        if descs is None:
            descs = self.descs = ConvDescs(w, b is not None, group, False, self.unary, int(w.shape[1]) * group)
        return self.guard(onednn.bound_conv_nhwc(w, b, group, win, xs, self.unary, residual, self.in_place, descs))
