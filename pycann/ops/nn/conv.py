"""Convolution ops: Conv, ConvTranspose (ONNX spec, Operators.md sections Conv, ConvTranspose).

The kernels here are the numpy references; the provider kernels (oneDNN, torch) that a compiled
model runs, chosen per node, are ``pycann.kernels.conv``'s. numpy's algorithms (``conv_algorithm``): a 1x1 unpadded
conv is one GEMM on the (C, H*W) view, a depthwise conv is a batched GEMV (small maps) or a
sum of shifted multiply-adds (large maps), everything else is im2col + GEMM.
float16/bfloat16 inputs are computed in float32 and returned in their dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc
from pycann.ops.nn.im2col import add_bias, conv_im2col_gemm, conv_transpose
from pycann.ops.nn.spatial import (
    Window,
    check_window_attrs,
    compute_dtype,
    infer_window_dims,
    plan_window,
)
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_vector, require_vector

_WINDOW_ATTRS: dict[str, Any] = {
    "auto_pad": "NOTSET",
    "dilations": [],
    "group": 1,
    "kernel_shape": [],
    "pads": [],
    "strides": [],
}


def _kernel_shape(attrs: Mapping[str, Any], w_shape: Sequence[Dim] | None) -> tuple[int, ...] | None:
    """``kernel_shape`` attribute, else W's spatial dims (spec: "inferred from W"), else None."""
    ks = attrs.get("kernel_shape") or []
    if ks:
        return tuple(int(k) for k in ks)
    if w_shape is not None and all(isinstance(d, int) for d in w_shape[2:]):
        return tuple(int(d) for d in w_shape[2:])  # type: ignore[arg-type]
    return None


def conv_window(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any]) -> Window:
    """Resolved Conv geometry (pads after ``auto_pad``, output spatial sizes) for static shapes."""
    kernel = _kernel_shape(attrs, w_shape)
    assert kernel is not None
    return plan_window(tuple(x_shape[2:]), kernel, attrs)


def _select(x_shape: Sequence[int], w_shape: Sequence[int], group: int, win: Window) -> str:
    n, c, m = x_shape[0], x_shape[1], w_shape[0]
    if n == 0 or m == 0 or c == 0 or any(o == 0 for o in win.out):
        return "empty"
    if all(k == 1 for k in win.kernel) and not win.padded:
        return "gemm_1x1"
    if group == c == m and group > 1:
        return "depthwise"
    return "im2col_gemm"


def conv_algorithm(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any]) -> str:
    """Name of the algorithm the Conv kernel uses for these static shapes and attributes.

    One of ``gemm_1x1`` (1x1 kernel, no padding: a GEMM on the (C, H*W) view),
    ``depthwise`` (group == C_in == C_out: batched GEMV or shifted multiply-adds),
    ``im2col_gemm`` (patch matrix + GEMM) or ``empty`` (zero-sized output or no input
    channels: the output is the bias). GE records it per node.
    """
    return _select(x_shape, w_shape, int(attrs.get("group", 1)), conv_window(x_shape, w_shape, attrs))


def _bias_shape(m: int, n_spatial: int) -> tuple[int, ...]:
    return (1, m) + (1,) * n_spatial


def _check_conv_shapes(x: np.ndarray, w: np.ndarray, group: int, transpose: bool, b: np.ndarray | None = None) -> None:
    """The run-time twin of the infer checks (dims symbolic at compile time, single-op calls):
    ranks, channels, group, and B's length, which the oneDNN primitives read without looking."""
    op = "ConvTranspose" if transpose else "Conv"
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ValueError(f"X {x.shape} and W {w.shape} must both be (N, C, D1, ...) of the same rank >= 3")
    cin = w.shape[0] if transpose else w.shape[1] * group
    if group < 1 or x.shape[1] != cin or (not transpose and w.shape[0] % group) or (transpose and cin % group):
        raise ValueError(f"channels of X {x.shape} do not match W {w.shape} with group={group}")
    m = w.shape[1] * group if transpose else w.shape[0]
    require_vector(op, "B", b, m, f"one per output channel M of W {list(w.shape)}" + (
        f" with group={group}" if transpose else ""))


def _conv(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
    """Conv (spec: Conv-11/22): Y = X (*) W + B with strides, dilations, pads and groups, by the
    numpy reference algorithm (``im2col.conv_im2col_gemm``; 1x1 and depthwise shapes take its fast
    paths). Narrow floats are computed in float32; the result lands in ``out`` when it fits."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    win = check_conv(x, w, b, group, attrs)
    cd = compute_dtype(x.dtype)
    bc = b.astype(cd, copy=False) if b is not None else None
    if _select(x.shape, w.shape, group, win) == "empty":
        y = np.zeros((x.shape[0], w.shape[0]) + win.out, dtype=cd)
        return add_bias(y, bc)
    return conv_im2col_gemm(x.astype(cd, copy=False), w.astype(cd, copy=False), bc, group, win, out)


def check_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, attrs: Mapping[str, Any]) -> Window:
    """The run-time checks of a Conv call (ranks, channels, B, a window that fits X); returns
    its resolved window. Raises ValueError naming the mismatch."""
    _check_conv_shapes(x, w, group, transpose=False, b=b)
    win = conv_window(x.shape, w.shape, attrs)
    if any(o <= 0 for o in win.out) and all(s > 0 for s in x.shape[2:]):
        raise ValueError(f"Conv window {win.kernel} does not fit input {x.shape} with pads/strides given")
    return win


def _k_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Conv reference kernel: see ``_conv``; narrow floats are cast back."""
    return [np.asarray(_conv(inputs, attrs).astype(inputs[0].dtype, copy=False))]


def _out_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """Conv into a preallocated output: the GEMM writes straight into the arena when it can."""
    y = _conv(inputs, attrs, outs[0])
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y


def _operands(ctx: InferContext) -> tuple[int, tuple[Dim, ...] | None, tuple[Dim, ...] | None, int | None, int]:
    """(dtype, X shape, W shape, rank or None if unknown, group) after the checks Conv and
    ConvTranspose share (spec: rank >= 3, equal ranks, group >= 1)."""
    x, w = ctx.input(0), ctx.input(1)
    dtype = x.dtype if x is not None else (w.dtype if w is not None else 0)
    xs = x.shape if x is not None else None
    ws = w.shape if w is not None else None
    rank = len(xs) if xs is not None else (len(ws) if ws is not None else None)
    group = int(ctx.attrs.get("group", 1))
    if rank is None:
        return dtype, xs, ws, None, group
    if rank < 3:
        raise ctx.fail(f"input X has rank {rank}; expected (N, C, D1, ...) with at least one spatial dim")
    if xs is not None and ws is not None and len(ws) != len(xs):
        raise ctx.fail(f"input W has rank {len(ws)} but X has rank {len(xs)}; they must match")
    if group < 1:
        raise ctx.fail(f"attribute group = {group} must be >= 1")
    return dtype, xs, ws, rank, group


def _infer_conv(ctx: InferContext) -> list[TensorDesc]:
    """Conv output: (N, M, *spatial) with spatial sizes from the window rules (spec: Conv)."""
    dtype, xs, ws, rank, group = _operands(ctx)
    if rank is None:
        return [TensorDesc(dtype, None)]
    kernel = _kernel_shape(ctx.attrs, ws)
    err = check_window_attrs(ctx.attrs, rank - 2, kernel)
    if err:
        raise ctx.fail(err)
    if ws is not None and ctx.attrs.get("kernel_shape"):
        if any(isinstance(d, int) and d != k for d, k in zip(ws[2:], kernel or ())):
            raise ctx.fail(f"attribute kernel_shape {list(kernel or ())} does not match W shape {list(ws)}")
    if xs is not None and ws is not None and isinstance(xs[1], int) and isinstance(ws[1], int):
        if xs[1] != ws[1] * group:
            raise ctx.fail(f"X has {xs[1]} channels but W {list(ws)} with group={group} expects {ws[1] * group}")
    m: Dim = ws[0] if ws is not None else None
    if isinstance(m, int) and m % group:
        raise ctx.fail(f"W has {m} output channels, not divisible by group={group}")
    if ws is not None:
        check_vector(ctx, 2, "B", m, f"one per output channel M = W.shape[0] of W {list(ws)}")
    spatial: list[Dim] = [None] * (rank - 2)
    if xs is not None:
        spatial = infer_window_dims(xs[2:], kernel, ctx.attrs)
        for i, (d, o) in enumerate(zip(xs[2:], spatial)):
            if isinstance(d, int) and d > 0 and o == 0:
                raise ctx.fail(f"kernel {list(kernel or ())} does not fit spatial dim {i} of X {list(xs)}")
    n: Dim = xs[0] if xs is not None else None
    return [TensorDesc(dtype, (n, m, *spatial))]


# ---------------------------------------------------------------- ConvTranspose


def conv_transpose_geometry(
    in_sizes: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any]
) -> tuple[Window, tuple[int, ...]]:
    """(window with pads_begin as output offsets, output spatial sizes) for ConvTranspose.

    Spec (ConvTranspose-11): with ``output_shape`` or SAME auto_pad, total padding
    ``stride*(in-1) + output_padding + span - out`` is split between begin and end; SAME output
    is ``in * stride`` (ONNX Runtime: never more than the unpadded result); otherwise
    out = ``stride*(in-1) + output_padding + span - pads``.
    """
    n = len(in_sizes)
    strides = tuple(int(v) for v in (attrs.get("strides") or [1] * n))
    dil = tuple(int(v) for v in (attrs.get("dilations") or [1] * n))
    opad = [int(v) for v in (attrs.get("output_padding") or [0] * n)]
    oshape = [int(v) for v in (attrs.get("output_shape") or [])][-n:] if attrs.get("output_shape") else []
    ap = attrs.get("auto_pad", "NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    pads = [int(p) for p in (attrs.get("pads") or [0] * (2 * n))] if ap in ("NOTSET", "") else [0] * (2 * n)
    pb: list[int] = []
    outs: list[int] = []
    for i in range(n):
        full = strides[i] * (in_sizes[i] - 1) + opad[i] + (int(kernel[i]) - 1) * dil[i] + 1
        if oshape or ap in ("SAME_UPPER", "SAME_LOWER"):
            if oshape:
                out = oshape[i]
                # an output_shape beyond the full result: ONNX Runtime clamps the total padding at 0
                # (the extra rows at the end hold the bias alone), where the spec's split of a
                # negative total shifted the result (check_output_shape: which such sizes it takes)
                total = max(0, full - out)
            else:
                # Spec: out = in * stride. ONNX Runtime clamps the total padding at 0 instead,
                # so when in * stride exceeds the full result the output is the full result.
                total = max(0, full - in_sizes[i] * strides[i])
                out = full - total
            # Spec: the odd unit of padding goes to the end for SAME_UPPER, else to the start.
            pb.append(total // 2 if ap == "SAME_UPPER" else total - total // 2)
        else:
            out = full - pads[i] - pads[n + i]
            pb.append(pads[i])
        outs.append(out)
    kern = tuple(int(k) for k in kernel)
    return Window(kern, strides, dil, tuple(pb), (0,) * n, tuple(in_sizes)), tuple(outs)


def output_padding_fault(attrs: Mapping[str, Any], n: int) -> str | None:
    """Why ConvTranspose's ``output_padding`` is invalid, or None. The spec: each value "must be less
    than the corresponding stride/dilation dimension"; ONNX Runtime refuses a value >= max(stride,
    dilation), as PyTorch does ("smaller than either stride or dilation"). Beyond that the added rows
    get no input, so the result would be an invented size, not a convolution's."""
    opad = [int(v) for v in (attrs.get("output_padding") or [])]
    if len(opad) != n:
        return None  # (its length is checked with the other attributes)
    strides = [int(v) for v in (attrs.get("strides") or [1] * n)]
    dil = [int(v) for v in (attrs.get("dilations") or [1] * n)]
    for i, (o, s, d) in enumerate(zip(opad, strides, dil)):
        if o < 0 or o >= max(s, d):
            return (f"attribute output_padding {opad} is invalid: output_padding[{i}] = {o} must be >= 0 and less "
                    f"than max(stride, dilation) = max({s}, {d}) for spatial dim {i} (spec: ConvTranspose; ONNX "
                    f"Runtime and PyTorch refuse it too). Fix: set output_padding[{i}] to at most {max(s, d) - 1} "
                    "(it picks one of the output sizes a stride makes possible); for a larger output, pad the "
                    "result with a Pad node")
    return None


def output_shape_fault(in_sizes: Sequence[Dim], kernel: Sequence[int], attrs: Mapping[str, Any]) -> str | None:
    """Why ConvTranspose's ``output_shape`` cannot come from inputs of these spatial sizes (symbolic ones
    pass), or None. An output_shape no larger than the full result is cropped by padding; a larger one
    is taken (ONNX Runtime) only when it implies the same input size, (out - span) // stride + 1,
    i.e. it is less than a stride beyond: ORT refuses the rest as "inconsistent with input spatial
    dimensions"."""
    if not attrs.get("output_shape"):
        return None
    n = len(in_sizes)
    oshape = [int(v) for v in attrs["output_shape"]][-n:]
    strides = [int(v) for v in (attrs.get("strides") or [1] * n)]
    dil = [int(v) for v in (attrs.get("dilations") or [1] * n)]
    opad = [int(v) for v in (attrs.get("output_padding") or [0] * n)]
    for i, d in enumerate(in_sizes):
        if not isinstance(d, int) or i >= len(oshape):
            continue
        span = (int(kernel[i]) - 1) * dil[i] + 1
        full = strides[i] * (d - 1) + opad[i] + span
        if oshape[i] > full and (oshape[i] - span) // strides[i] + 1 != d:
            return (f"output_shape {oshape} does not fit input spatial dim {i} of size {d}: it takes "
                    f"{(oshape[i] - span) // strides[i] + 1} (the full result is {full})")
    return None


def _conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
    """ConvTranspose (spec: ConvTranspose-11/22), the gradient of Conv w.r.t. its input, by the
    numpy reference algorithm (GEMM + col2im). Raises ValueError for shapes the spec rejects."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    win, outs = check_conv_transpose(x, w, b, group, attrs)
    cd = compute_dtype(x.dtype)
    bc = b.astype(cd, copy=False) if b is not None else None
    return conv_transpose(x.astype(cd, copy=False), w.astype(cd, copy=False), bc, group, win, outs, out)


def check_conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int,
                         attrs: Mapping[str, Any]) -> tuple[Window, tuple[int, ...]]:
    """The run-time checks of a ConvTranspose call; returns (window, output spatial sizes) of
    ``conv_transpose_geometry``. Raises ValueError naming the mismatch."""
    _check_conv_shapes(x, w, group, transpose=True, b=b)
    kernel = _kernel_shape(attrs, w.shape)
    assert kernel is not None
    fault = output_padding_fault(attrs, x.ndim - 2) or output_shape_fault(x.shape[2:], kernel, attrs)
    if fault:
        raise ValueError(f"ConvTranspose {fault}")
    win, outs = conv_transpose_geometry(x.shape[2:], kernel, attrs)
    if any(o < 0 for o in outs):
        raise ValueError(f"ConvTranspose output size {outs} is negative for input {x.shape}")
    if any(o == 0 for o in outs) and all(s > 0 for s in x.shape[2:]):
        # (ORT: "Computed output dimension is <= 0"; as Conv, an empty input may give an empty output)
        raise ValueError(f"ConvTranspose output size {outs} has a 0 for input {x.shape} (pads too large)")
    return win, outs


def _k_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """ConvTranspose reference kernel: see ``_conv_transpose``; narrow floats are cast back."""
    return [np.asarray(_conv_transpose(inputs, attrs).astype(inputs[0].dtype, copy=False))]


def _out_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """ConvTranspose into a preallocated output."""
    y = _conv_transpose(inputs, attrs, outs[0])
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y


def _transpose_keeps_dim(i: int, ns: int, kernel: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    """True when ConvTranspose provably maps spatial dim ``i`` to the same size (stride 1 and
    the kernel span plus output_padding exactly eaten by the pads)."""
    if int((attrs.get("strides") or [1] * ns)[i]) != 1:
        return False
    ap = attrs.get("auto_pad", "NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    dil = int((attrs.get("dilations") or [1] * ns)[i])
    grow = (int(kernel[i]) - 1) * dil + int((attrs.get("output_padding") or [0] * ns)[i])
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        return True  # total padding = grow >= 0, output = in
    pads = [0] * (2 * ns) if ap == "VALID" else [int(p) for p in (attrs.get("pads") or [0] * (2 * ns))]
    return grow == pads[i] + pads[ns + i]


def _infer_conv_transpose(ctx: InferContext) -> list[TensorDesc]:
    """ConvTranspose output: (N, W.shape[1] * group, *spatial) (spec: ConvTranspose)."""
    dtype, xs, ws, rank, group = _operands(ctx)
    if rank is None:
        return [TensorDesc(dtype, None)]
    ns = rank - 2
    kernel = _kernel_shape(ctx.attrs, ws)
    err = check_window_attrs(ctx.attrs, ns, kernel)
    if err:
        raise ctx.fail(err)
    for name in ("output_padding",):
        v = list(ctx.attrs.get(name) or [])
        if v and len(v) != ns:
            raise ctx.fail(f"attribute {name} has {len(v)} values; expected {ns}")
    fault = output_padding_fault(ctx.attrs, ns)
    if fault:
        raise ctx.fail(fault)
    oshape = list(ctx.attrs.get("output_shape") or [])
    if oshape and len(oshape) not in (ns, rank):
        raise ctx.fail(f"attribute output_shape {oshape} must have {ns} (spatial) or {rank} values")
    if xs is not None and ws is not None and isinstance(xs[1], int) and isinstance(ws[0], int):
        if xs[1] != ws[0]:
            raise ctx.fail(f"X has {xs[1]} channels but W {list(ws)} expects {ws[0]}")
    if ws is not None and isinstance(ws[0], int) and ws[0] % group:
        raise ctx.fail(f"W has {ws[0]} input channels, not divisible by group={group}")
    m: Dim = ws[1] * group if ws is not None and isinstance(ws[1], int) else None
    if ws is not None:
        check_vector(ctx, 2, "B", m, f"one per output channel M = W.shape[1] * group of W {list(ws)}, group={group}")
    spatial: list[Dim] = [None] * ns
    if oshape:
        spatial = [int(v) for v in oshape[-ns:]]
        fault = output_shape_fault(xs[2:], kernel, ctx.attrs) if xs is not None and kernel is not None else None
        if fault:
            raise ctx.fail(fault)
    elif xs is not None and kernel is not None:
        for i, d in enumerate(xs[2:]):
            if isinstance(d, int):
                sizes = [1] * ns
                sizes[i] = d
                spatial[i] = conv_transpose_geometry(sizes, kernel, ctx.attrs)[1][i]
                if spatial[i] < 0 or (spatial[i] == 0 and d > 0):  # type: ignore[operator]
                    raise ctx.fail(f"output spatial dim {i} would be {spatial[i]} (pads too large)")
            elif isinstance(d, str):
                spatial[i] = d if _transpose_keeps_dim(i, ns, kernel, ctx.attrs) else None
    n: Dim = xs[0] if xs is not None else None
    return [TensorDesc(dtype, (n, m, *spatial))]


OPS: list[OpDef] = [
    OpDef("Conv", _infer_conv, _k_conv, since=1, attrs=dict(_WINDOW_ATTRS), out_kernel=_out_conv),
    OpDef(
        "ConvTranspose",
        _infer_conv_transpose,
        _k_conv_transpose,
        since=1,
        attrs={**_WINDOW_ATTRS, "output_padding": [], "output_shape": []},
        out_kernel=_out_conv_transpose,
    ),
]
