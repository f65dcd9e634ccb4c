"""Numeric convolution algorithms (ONNX spec, Operators.md: Conv, ConvTranspose).

All functions take channels-first arrays already in the compute dtype and a resolved
``Window``; the op kernels in ``pycann.ops.nn.conv`` pick one per shape. GEMMs go through
``np.matmul`` (BLAS), data movement through strided views so Python work stays O(taps).
"""

from __future__ import annotations

import numpy as np

from pycann.ops.nn.spatial import Window, pad_spatial, tap_slices, window_view

# im2col buffers above this many bytes are built a few images at a time to bound memory.
_COLS_BUDGET = 256 << 20


def _target(out: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``out`` viewed as ``shape`` when it can receive the result directly, else a new array."""
    if out is not None and out.dtype == dtype and out.flags.c_contiguous:
        return out.reshape(shape)
    return np.empty(shape, dtype=dtype)


def conv_1x1(x: np.ndarray, w: np.ndarray, group: int, win: Window, out: np.ndarray | None = None) -> np.ndarray:
    """1x1 kernel, no padding: one GEMM per group over the (C, spatial) view of each image.

    With unit strides ``x.reshape`` is a view (no copy); strided 1x1 convs subsample first.
    The GEMM writes into ``out`` (a C-contiguous (N, M, *out) array) when given.
    """
    if any(s != 1 for s in win.strides):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in win.strides)]
        x = x[(slice(None), slice(None)) + tuple(slice(0, o) for o in win.out)]
    n, c = x.shape[:2]
    m = w.shape[0]
    xg = x.reshape(n, group, c // group, -1)
    wg = w.reshape(group, m // group, c // group)
    y = _target(out, (n, group, m // group, xg.shape[-1]), x.dtype)
    np.matmul(wg, xg, out=y)
    return y.reshape((n, m) + win.out)


# Depthwise heuristics (measured on x86 with single-threaded OpenBLAS): small kernel x output
# products go to a batched GEMV over the patch matrix; larger ones accumulate taps in channel
# blocks whose working set stays around 1 MiB, i.e. cache resident.
_DW_GEMV_MAX = 25_000
_DW_BLOCK_BYTES = 1 << 20


def conv_depthwise(x: np.ndarray, w: np.ndarray, win: Window, out: np.ndarray | None = None) -> np.ndarray:
    """group == C_in == C_out: each output channel sees only its own input channel.

    Small maps: the (C, K, L) patch matrix times the per-channel (1, K) weights, one batched
    GEMV. Large maps: per kernel tap one broadcast multiply-add of the shifted input, done on
    channel blocks that fit in cache (no reduction over channels, so no GEMM to hand off).
    """
    xp = pad_spatial(x, win.pads_begin, win.pads_end)
    n, c = x.shape[:2]
    k = int(np.prod(win.kernel))
    l_out = int(np.prod(win.out))
    if k * l_out <= _DW_GEMV_MAX and n * c * k * l_out * x.dtype.itemsize <= _COLS_BUDGET:
        cols = window_view(xp, win).reshape(n, c, k, l_out)
        y = _target(out, (n, c, 1, l_out), x.dtype)
        np.matmul(w.reshape(c, 1, k), cols, out=y)
        return y.reshape((n, c) + win.out)
    y = _target(out, (n, c) + win.out, x.dtype)
    blk = max(1, _DW_BLOCK_BYTES // (3 * l_out * x.dtype.itemsize))
    taps = tap_slices(win)
    tmp = np.empty((1, min(blk, c)) + win.out, dtype=x.dtype)
    for i in range(n):
        for c0 in range(0, c, blk):
            xb, yb = xp[i : i + 1, c0 : c0 + blk], y[i : i + 1, c0 : c0 + blk]
            wb = w[c0 : c0 + blk, 0]
            tb = tmp[:, : yb.shape[1]]
            bshape = (1, yb.shape[1]) + (1,) * len(win.kernel)
            for t, (pos, sl) in enumerate(taps):
                tap = xb[(slice(None), slice(None)) + sl]
                wk = wb[(slice(None),) + pos].reshape(bshape)
                if t == 0:
                    np.multiply(tap, wk, out=yb)
                else:
                    np.multiply(tap, wk, out=tb)
                    yb += tb
    return y


def conv_im2col(x: np.ndarray, w: np.ndarray, group: int, win: Window, out: np.ndarray | None = None) -> np.ndarray:
    """General conv: copy the (C*prod(kernel), prod(out)) patch matrix once, then one GEMM.

    The patch matrix is a strided view of the padded input (``window_view``) made contiguous
    by a single reshape copy; large batches are processed in chunks to bound its size.
    """
    xp = pad_spatial(x, win.pads_begin, win.pads_end)
    n, c = x.shape[:2]
    m = w.shape[0]
    cg = c // group
    kdim = cg * int(np.prod(win.kernel))
    l_out = int(np.prod(win.out))
    wg = w.reshape(group, m // group, kdim)
    y = _target(out, (n, group, m // group, l_out), x.dtype)
    per_image = max(1, c * int(np.prod(win.kernel)) * l_out * x.dtype.itemsize)
    step = max(1, _COLS_BUDGET // per_image)
    for s0 in range(0, n, step):
        view = window_view(xp[s0 : s0 + step], win)  # (n', C, *k, *out)
        cols = view.reshape(view.shape[0], group, kdim, l_out)  # the one copy
        np.matmul(wg, cols, out=y[s0 : s0 + step])
    return y.reshape((n, m) + win.out)


def conv_transpose_col2im(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    win: Window,
    out_sizes: tuple[int, ...],
) -> np.ndarray:
    """ConvTranspose as GEMM + col2im: each input pixel scatters W^T x over a kernel window.

    ``win.pads_begin`` are the (possibly negative) offsets of the output inside the full
    scatter result; the full result is ``(in - 1) * stride + span`` long per dim and the
    output is cropped from it (or zero-extended where ``output_shape``/``output_padding``
    reach past it).
    """
    n, c = x.shape[:2]
    in_sp = x.shape[2:]
    nk = len(win.kernel)
    mg = w.shape[1]
    m = mg * group
    ksize = int(np.prod(win.kernel))
    wt = w.reshape(group, c // group, mg * ksize).transpose(0, 2, 1)  # F-order view: BLAS trans
    if x.size == 0 or any(o <= 0 for o in out_sizes):
        return np.zeros((n, m) + tuple(max(0, o) for o in out_sizes), dtype=x.dtype)
    xg = x.reshape(n, group, c // group, int(np.prod(in_sp)))
    cols = np.matmul(wt, xg).reshape((n, m) + win.kernel + in_sp)
    # Buffer coordinates: full-result index f sits at f + shift, output o at o + pads_begin + shift.
    full = [(in_sp[i] - 1) * win.strides[i] + win.span(i) for i in range(nk)]
    shift = [max(0, -win.pads_begin[i]) for i in range(nk)]
    size = [max(full[i], win.pads_begin[i] + out_sizes[i]) + shift[i] for i in range(nk)]
    buf = np.zeros((n, m) + tuple(size), dtype=x.dtype)
    for pos in np.ndindex(*win.kernel):
        dst = tuple(
            slice(
                shift[i] + pos[i] * win.dilations[i],
                shift[i] + pos[i] * win.dilations[i] + (in_sp[i] - 1) * win.strides[i] + 1,
                win.strides[i],
            )
            for i in range(nk)
        )
        buf[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + pos]
    crop = tuple(slice(shift[i] + win.pads_begin[i], shift[i] + win.pads_begin[i] + out_sizes[i]) for i in range(nk))
    return buf[(slice(None), slice(None)) + crop]


# ---------------------------------------------------------------- the numpy reference convolutions


def add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``y += b`` over the channel axis (1), in place; returns ``y``."""
    if b is not None and y.size:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


def _pointwise(win: Window) -> bool:
    return all(k == 1 for k in win.kernel) and not win.padded


def conv_im2col_gemm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Any conv: patch matrix + one GEMM (1x1 and depthwise shapes take their fast paths)."""
    if _pointwise(win):
        return add_bias(conv_1x1(x, w, group, win, out), b)
    if group > 1 and group == x.shape[1] == w.shape[0]:
        return add_bias(conv_depthwise(x, w, win, out), b)
    return add_bias(conv_im2col(x, w, group, win, out), b)


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                   out_sizes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """ConvTranspose as GEMM + col2im (``out`` unused: the result is a crop of a scatter buffer)."""
    y = conv_transpose_col2im(x, w, group, win, out_sizes)
    if b is not None and y.size:
        y = y + b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


