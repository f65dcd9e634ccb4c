"""Prepared kernels: when a node's input shapes (and its shape-defining inputs) are known at
plan time, bind a kernel with everything but the data precomputed — the target shape of a
Reshape, the slice tuple of a Slice, the permutation of a Transpose. The generic kernels stay
the reference; these are exact specialisations of them for one static signature.

``PREPARE`` is the table the executor reads: ``(domain, op_type) -> prepare(attrs, in_descs,
in_consts, out_descs) -> kernel | None`` (None = keep the generic kernel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, to_numpy
from pycann.kernels import algorithm
from pycann.kernels.algorithm import ONEDNN_CONV_NHWC, ONEDNN_CONV_WINOGRAD, ONEDNN_MATMUL, TORCH_CONV2D_NHWC
from pycann.kernels.bind_base import Kernel, Prepare
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bind_guard import act_out_bound as _act_out_bound
from pycann.kernels.bind_guard import guard_conv as _guard_conv
from pycann.kernels.bind_guard import nan_guarded, passes_bound  # noqa: F401  (re-exported)
from pycann.kernels.bind_onednn import PREPARE_ONEDNN
from pycann.kernels.bind_resize import PREPARE_RESIZE
from pycann.kernels.bind_small import PREPARE_SMALL, conv_im2col
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import onednn_bf16, onednn_cast
from pycann.ops.nn.spatial import empty_like_layout, is_channels_last


def _reshape_to(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
                outs: Sequence[TensorDesc | None]) -> Kernel | None:
    shape = _static(outs[0]) if outs else None
    if shape is None or _static(ins[0]) is None:
        return None
    return lambda x, a: [x[0].reshape(shape)]


def _identity(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    return lambda x, a: [x[0]]


def _transpose(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    shape = _static(ins[0])
    if shape is None:
        return None
    perm = tuple(attrs.get("perm") or range(len(shape) - 1, -1, -1))
    return lambda x, a: [x[0].transpose(perm)]


def _slice_bounds(dim: int, start: int, end: int, step: int) -> slice:
    """ONNX Slice clamping (Operators.md#Slice) as a Python slice."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _slice(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    shape = _static(ins[0])
    if shape is None or len(consts) < 3 or consts[1] is None or consts[2] is None:
        return None
    starts, ends = consts[1].reshape(-1), consts[2].reshape(-1)
    axes = consts[3].reshape(-1) if len(consts) > 3 and consts[3] is not None else np.arange(len(starts))
    if len(ins) > 3 and ins[3] is not None and consts[3] is None:
        return None
    steps = consts[4].reshape(-1) if len(consts) > 4 and consts[4] is not None else np.ones(len(starts), np.int64)
    if len(ins) > 4 and ins[4] is not None and consts[4] is None:
        return None
    index: list[slice] = [slice(None)] * len(shape)
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = int(ax) % len(shape)
        if int(st) == 0:
            return None
        index[ax] = _slice_bounds(shape[ax], int(s), int(e), int(st))
    key = tuple(index)
    want = _static(outs[0]) if outs else None
    if want is None or np.empty(shape, dtype=np.bool_)[key].shape != want:
        return None  # the precomputed slice must reproduce the inferred shape exactly
    return lambda x, a: [x[0][key]]


def _gather(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    shape = _static(ins[0])
    idx = consts[1] if len(consts) > 1 else None
    if shape is None or idx is None or idx.dtype.kind not in "iu":
        return None
    axis = int(attrs.get("axis", 0)) % len(shape)
    dim = shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        return None  # out of range: let the generic kernel raise its error
    fixed = np.where(idx < 0, idx + dim, idx).astype(np.intp)
    if fixed.ndim == 0:
        key = (slice(None),) * axis + (int(fixed),)
        return lambda x, a: [np.asarray(x[0][key])]
    return lambda x, a: [np.take(x[0], fixed, axis=axis)]


def _concat(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    from pycann.kernels.providers import nan_guard

    shapes = [_static(d) for d in ins]
    if any(s is None for s in shapes) or not shapes:
        return None
    rank = len(shapes[0])  # type: ignore[arg-type]
    axis = int(attrs["axis"]) % max(rank, 1)
    out_shape = _static(outs[0]) if outs else None

    def concat(x: Sequence[Any], a: Mapping[str, Any], into: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        if into is not None:  # the executor's arena view
            if all(v.dtype == into[0].dtype for v in x):
                np.concatenate(x, axis=axis, out=into[0])
            else:
                into[0][...] = np.concatenate(x, axis=axis)
            nan_guard.record_max(into[0], x)
            return [into[0]]
        # channels-last inputs (a GE LayoutSelection chain) give a channels-last result
        if rank == 4 and out_shape is not None and all(is_channels_last(v) for v in x) and len({v.dtype for v in x}) == 1:
            y = empty_like_layout(x[0], out_shape)
            return [np.concatenate(x, axis=axis, out=y)]
        return [np.concatenate(x, axis=axis)]

    return BoundKernel(concat, writes_out=True)



_PLAIN = {np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_)}


def _cast(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    d = ins[0]
    if d is None or getattr(d, "kind", "tensor") != "tensor":
        return None
    try:
        src, dst = to_numpy(d.dtype), to_numpy(int(attrs["to"]))
    except (TypeError, KeyError, ValueError):
        return None
    shape = _static(d)
    # the bf16 modes' casts as oneDNN reorders: widening ones always (exact), narrowing ones whose
    # readers are all bf16 matrix operands (ge/compile/passes/flushing_casts.py) where those run natively
    flush = bool(attrs.get("_readers_flush")) and onednn_cast.is_narrowing(src, dst) and onednn_bf16.native()
    if (flush or onednn_cast.is_pair(src, dst)) and shape is not None:
        from pycann.ops.cast import _k_cast

        k = onednn_cast.bound_cast(shape, src, dst, _k_cast, narrowing=flush)
        if k is not None:
            return k
    if src not in _PLAIN or dst not in _PLAIN or (src.kind == "f" and dst.kind in "iub"):
        return None  # float -> int and exotic types keep the generic kernel's exact rules
    if src == dst:
        # a cast to the input's own type changes no value: pass the array on, as Identity does
        # (the memory plan treats every non-arena output as a possible alias of its inputs)
        return lambda x, a: [x[0]]

    def cast(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        with np.errstate(over="ignore"):  # float32 -> float16 overflow is inf, silently (as the generic kernel)
            return [x[0].astype(dst)]

    return cast


def _fused_conv(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """FusedConv: a bfloat16 one on the native bf16 kernels with its setup made once
    (``bf16_conv.bind``); a float32 one as ``_conv``."""
    if ins and ins[0] is not None and ins[0].dtype == int(DType.BFLOAT16):
        from pycann.kernels import bf16_conv

        return bf16_conv.bind(attrs, ins, consts, outs)
    return _conv(attrs, ins, consts, outs)


def _conv(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """Small float32 convs with constant weights (Silero VAD, PP-OCR cls): im2col + one matmul
    with the geometry, gather indices and GEMM-shaped weights fixed once (bind_small.py
    ``conv_im2col``). Larger convs keep the provider-selected kernel."""
    from pycann.kernels.providers import TINY_FLOPS
    from pycann.ops import fused
    from pycann.ops.nn.conv import conv_window

    xs, ws = _static(ins[0]), _static(ins[1])
    w = consts[1] if len(consts) > 1 else None
    b = consts[2] if len(consts) > 2 else None
    if xs is None or ws is None or w is None or w.dtype != np.float32 or ins[0].dtype != 1:  # type: ignore[union-attr]
        return None
    if len(ins) > 2 and ins[2] is not None and b is None:
        return None
    algo = algorithm.of(attrs)
    if fused.post_affine(attrs) is not None and algo not in (ONEDNN_CONV_NHWC, ONEDNN_CONV_WINOGRAD):
        return None  # the generic kernel applies the scale/shift after the activation
    if algo == TORCH_CONV2D_NHWC:
        return _conv_onednn(attrs, ins, w, b, xs, conv_window(xs, ws, attrs))
    if algo == ONEDNN_CONV_WINOGRAD:
        win = conv_window(xs, ws, attrs)
        return _conv_wino(attrs, ins, w, b, xs, win) or _conv_dnnl(attrs, ins, w, b, xs, win)
    if algo == ONEDNN_CONV_NHWC:
        return _conv_dnnl(attrs, ins, w, b, xs, conv_window(xs, ws, attrs))
    if algo is not None and algo.provider != "numpy":
        return None
    group = int(attrs.get("group", 1))
    win = conv_window(xs, ws, attrs)
    n, c = xs[:2]
    kdim = (c // group) * int(math.prod(win.kernel))
    l_out = int(math.prod(win.out))
    if 2 * n * ws[0] * kdim * l_out >= TINY_FLOPS or l_out == 0 or any(o <= 0 for o in win.out):
        return None
    return conv_im2col(attrs, ins, w, b, xs, win)


def _pad(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """Pad with constant pads (and axes, value): constant mode fills once and copies the body;
    reflect/edge/wrap become one precomputed gather per padded axis (``np.pad`` of the index
    range gives exactly its own index mapping). Silero VAD's STFT reflect pad: ~20 -> ~3 us."""
    from pycann.ops.indexing import _PAD_MODES, _pad_lists
    from pycann.ops.tensor import astr

    xs = _static(ins[0])
    out = _static(outs[0]) if outs else None
    pads = consts[1] if len(consts) > 1 else None
    if xs is None or out is None or pads is None:
        return None
    has = [i < len(ins) and ins[i] is not None for i in range(4)]
    if (has[2] and consts[2] is None) or (has[3] and consts[3] is None):
        return None
    mode = _PAD_MODES.get(astr(attrs["mode"]))
    try:
        axes = [int(v) for v in consts[3].reshape(-1)] if has[3] else None
        begin, end = _pad_lists(len(xs), [int(v) for v in pads.reshape(-1)], axes)
    except ValueError:
        return None  # the generic kernel reports it
    if mode is None or any(p < 0 for p in begin + end):
        return None
    if mode == "constant":
        cv = consts[2] if has[2] else None
        inner = tuple(slice(b, b + d) for d, b in zip(xs, begin))

        def constant(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
            v = x[0]
            fill = v.dtype.type(0) if cv is None or cv.size == 0 else cv.reshape(-1)[0]
            y = np.full(out, fill, dtype=v.dtype)
            y[inner] = v
            return [y]

        return constant
    if any(d == 0 for d in xs):
        return None  # (before np.pad of an empty index range, which raises: the generic kernel serves it)
    gathers = [(ax, np.pad(np.arange(d), (b, e), mode=mode)) for ax, (d, b, e) in enumerate(zip(xs, begin, end))
               if b or e]

    def gather(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        y = x[0]
        for ax, idx in gathers:
            y = np.take(y, idx, axis=ax)
        return [y if gathers else y.copy()]

    return gather


def _max_pool(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """MaxPool inside a channels-last conv chain (``_layout == "NHWC"``) when torch is already
    loaded (its convs run there): ATen's pooling when it can express the window (symmetric pads
    up to half the kernel)."""
    from pycann.kernels.providers import torch_onednn

    xs = _static(ins[0])
    if attrs.get("_layout") != "NHWC" or xs is None or len(xs) != 4 or ins[0].dtype != 1 or len(outs) != 1:
        return None
    if torch_onednn._torch is None:
        return None  # never import torch (~180 MB) for a pooling: the numpy kernel keeps the layout
    if str(attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "b'NOTSET'") or int(attrs.get("storage_order", 0)):
        return None
    k = [int(v) for v in attrs["kernel_shape"]]
    pads = [int(v) for v in attrs.get("pads") or [0] * 4]
    strides = [int(v) for v in attrs.get("strides") or [1, 1]]
    dil = [int(v) for v in attrs.get("dilations") or [1, 1]]
    if len(k) != 2 or pads[:2] != pads[2:] or any(2 * p > kk for p, kk in zip(pads[:2], k)):
        return None
    if any(xs[2 + i] + 2 * pads[i] < (k[i] - 1) * dil[i] + 1 for i in range(2)):
        return None  # a window wider than the padded input: ATen refuses what ORT sizes by truncation
    from pycann.ops.nn.pool import _k_max_pool

    out = _static(outs[0])
    bound = torch_onednn.bound_max_pool2d(k, strides, pads[:2], dil, bool(attrs.get("ceil_mode", 0)), _k_max_pool)

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        y = bound(x, a)
        if y[0].shape != out:  # ATen's ceil_mode rule can differ from ONNX's at the edge
            return _k_max_pool(x, a)
        return y  # type: ignore[no-any-return]

    return kernel


def _dnnl_post_ops(attrs: Mapping[str, Any]) -> tuple[bool, Any]:
    """(False, None) when oneDNN cannot run the node's activation, else (True, the eltwise
    post-op chain for ``onednn``: activation then the FusedConv ``post_scale``/``post_shift``)."""
    from pycann.kernels.providers import onednn
    from pycann.ops import fused

    act, al, be = fused._act(attrs)
    unary: Any = onednn.onednn_unary(act, al, be) if act else None
    if act and unary is None:
        return False, None
    aff = fused.post_affine(attrs)
    if aff is not None:
        lin = (onednn.E["linear"], aff[0], aff[1])
        unary = lin if unary is None else (unary, lin)
    return True, unary


def _conv_dnnl(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], w: np.ndarray, b: np.ndarray | None,
               xs: tuple[int, ...], win: Any) -> Kernel | None:
    """A oneDNN C-API conv (``onednn:conv_nhwc``) bound once: primitive, packed weight, bias and
    post-ops fixed; a call re-points two data handles and executes (~6 us of Python)."""
    from pycann.kernels.providers import onednn

    if not onednn.available() or not onednn.accepts(np.dtype(np.float32), int(math.prod(xs)), w, win) \
            or (b is not None and b.dtype != np.float32):
        return None
    ok, unary = _dnnl_post_ops(attrs)
    if not ok:
        return None  # an activation oneDNN does not run: the generic kernel applies it in numpy
    residual = len(ins) > 3 and ins[3] is not None
    out_shape = (xs[0], w.shape[0]) + tuple(win.out)
    if residual and (_static(ins[3]) != out_shape or ins[3].dtype != 1):  # type: ignore[union-attr]
        return None
    # the plan writes the output over the residual's buffer (``_in_place``): the "sum" primitive alone
    in_place = residual and bool(attrs.get("_in_place"))
    return _guard_conv(onednn.bound_conv_nhwc(w, b, int(attrs.get("group", 1)), win, xs, unary, residual, in_place),
                       unary, attrs, w, b, residual)


def _conv_wino(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], w: np.ndarray, b: np.ndarray | None,
               xs: tuple[int, ...], win: Any) -> Kernel | None:
    """A Winograd conv (``onednn:conv_winograd``) bound once; None when it has no residual-free
    Winograd form here (the caller binds the direct oneDNN conv)."""
    from pycann.kernels.providers import onednn_wino

    if (len(ins) > 3 and ins[3] is not None) or int(attrs.get("group", 1)) != 1 \
            or (b is not None and b.dtype != np.float32):
        return None
    ok, unary = _dnnl_post_ops(attrs)
    return _guard_conv(onednn_wino.bound_conv_winograd(w, b, win, xs, unary), unary, attrs, w, b, False) if ok else None


def _fused_matmul(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """FusedMatMul: a bfloat16 one on the native bf16 matmul with its setup made once
    (``bf16_matmul.bind``); a float32 one as ``_matmul``."""
    if ins and ins[0] is not None and ins[0].dtype == int(DType.BFLOAT16):
        from pycann.kernels import bf16_matmul

        return bf16_matmul.bind(attrs, ins, consts, outs)
    return _matmul(attrs, ins, consts, outs)


def _matmul(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """MatMul / FusedMatMul with a constant float32 B chosen for ``onednn:matmul``: bound once
    (``onednn_matmul.bound_matmul``): B packed into oneDNN's layout, a constant bias, the
    residual (FusedMatMul input 3, a binary-add post-op re-pointed per call) and the activation
    as post-ops, so a call re-points the data handles and executes (~5 us of Python)."""
    from pycann.kernels.providers import onednn, onednn_matmul

    xs = _static(ins[0])
    b = consts[1] if len(consts) > 1 else None
    bias = consts[2] if len(consts) > 2 else None
    if algorithm.of(attrs) != ONEDNN_MATMUL or xs is None or b is None or ins[0].dtype != 1 \
            or b.dtype != np.float32 or not onednn.available():  # type: ignore[union-attr]
        return None
    if len(ins) > 2 and ins[2] is not None and (bias is None or bias.dtype != np.float32):
        return None  # a run-time or non-float32 bias: the generic kernel adds it
    ok, unary = _dnnl_post_ops(attrs)
    if not ok:
        return None  # an activation oneDNN does not run: the generic kernel applies it in numpy
    want = _static(outs[0]) if outs else None
    residual = len(ins) > 3 and ins[3] is not None
    if residual and (want is None or _static(ins[3]) != want or ins[3].dtype != 1):
        return None  # a residual that broadcasts or has another dtype: the generic kernel adds it
    k = onednn_matmul.bound_matmul(b, bias, xs, unary, residual)
    if k is None or want != tuple(xs[:-1]) + (b.shape[-1],):
        return None  # (a bias that widens the result, a 1-D B: the generic kernel)
    from pycann.kernels.providers import nan_guard
    from pycann.ops import fused

    if not nan_guard.drops_nan(unary):
        return k  # type: ignore[no-any-return]
    # |A @ B + bias| <= max|A| * max_n sum_k |B[k, n]| + max|bias|
    bb = b.reshape(-1, b.shape[-1]) if b.ndim > 1 else b.reshape(-1, 1)
    wb = float(np.abs(bb.astype(np.float64)).sum(axis=0).max()) if bb.size else 0.0
    wb += float(np.abs(bias.astype(np.float64)).max()) if bias is not None and bias.size else 0.0
    return nan_guarded(k, unary, wb, lambda x, a: fused._k_fused_matmul(x, attrs), 3 if residual else None,
                       _act_out_bound(attrs))


def _conv_onednn(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], w: np.ndarray, b: np.ndarray | None,
                 xs: tuple[int, ...], win: Any) -> Kernel | None:
    """A oneDNN channels-last conv (``torch:conv2d_nhwc``) bound once: packed weight, bias, geometry
    and post-ops fixed, so a call is one torch op (saves ~25 us of per-call Python a conv)."""
    from pycann.kernels.providers import torch_onednn
    from pycann.ops import fused

    x = np.empty((0,), np.float32)
    if len(xs) != 4 or not torch_onednn.native(x, w, win) or (b is not None and b.dtype != np.float32):
        return None
    act, al, be = fused._act(attrs)
    unary = torch_onednn.onednn_unary(act, al, be) if act else ("none", [], "")
    if unary is None:
        return None  # an activation oneDNN does not run: the generic kernel applies it in numpy
    residual = len(ins) > 3 and ins[3] is not None
    out_shape = (xs[0], w.shape[0]) + tuple(win.out)
    if residual and (_static(ins[3]) != out_shape or ins[3].dtype != 1):  # type: ignore[union-attr]
        return None
    return _guard_conv(torch_onednn.bound_conv_nhwc(w, b, int(attrs.get("group", 1)), win, xs, unary, residual), unary,
                       attrs, w, b, residual)


def _squeeze_excite(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """SqueezeExcite: ``squeeze_excite.prepare_squeeze_excite`` (imported by the models that have one)."""
    from pycann.kernels.squeeze_excite import prepare_squeeze_excite

    return prepare_squeeze_excite(attrs, ins, consts, outs)


def _squeeze_excite_project(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """SqueezeExciteProject: ``squeeze_excite_project.prepare_squeeze_excite_project``."""
    from pycann.kernels.squeeze_excite_project import prepare_squeeze_excite_project

    return prepare_squeeze_excite_project(attrs, ins, consts, outs)


def _channel_shuffle(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """ChannelShuffle in a channels-last chain: ``channel_shuffle.prepare_channel_shuffle`` (oneDNN reorders)."""
    from pycann.kernels.channel_shuffle import prepare_channel_shuffle

    return prepare_channel_shuffle(attrs, ins, consts, outs)


PREPARE: dict[tuple[str, str], Prepare] = {
    ("", "Conv"): _conv,
    ("pycann", "FusedConv"): _fused_conv,
    ("", "MatMul"): _matmul,
    ("pycann", "FusedMatMul"): _fused_matmul,
    ("", "Pad"): _pad,
    ("", "Reshape"): _reshape_to,
    ("", "Squeeze"): _reshape_to,
    ("", "Unsqueeze"): _reshape_to,
    ("", "Flatten"): _reshape_to,
    ("", "Identity"): _identity,
    ("", "Transpose"): _transpose,
    ("", "Slice"): _slice,
    ("", "Gather"): _gather,
    ("", "Concat"): _concat,
    ("", "Cast"): _cast,
    ("pycann", "SqueezeExcite"): _squeeze_excite,
    ("pycann", "SqueezeExciteProject"): _squeeze_excite_project,
    ("pycann", "ChannelShuffle"): _channel_shuffle,
    **PREPARE_SMALL,  # ReduceMean/Sum, Pow, ElementwiseChain, LSTM for tiny static shapes (bind_small.py)
    **PREPARE_RESIZE,  # nearest Resize by integer factors into the arena view (bind_resize.py)
    # MaxPool comes from PREPARE_ONEDNN: oneDNN's pooling first, then ``_max_pool`` (ATen) above
    **PREPARE_ONEDNN,  # LayerNormalization, FusedAttention, Softmax, pooling, Gemm bound to oneDNN (bind_onednn.py)
}
