"""Sliding-window geometry shared by Conv, ConvTranspose and the pooling ops.

Implements the output-size and padding rules of the ONNX spec (Operators.md, sections Conv,
MaxPool, AveragePool: ``auto_pad``, ``pads``, ``strides``, ``dilations``, ``ceil_mode``) once, for
both compile-time inference (dims may be symbolic) and kernels (all ints). Also the strided
window view and padding helpers the kernels build on. Imports only; no ``OPS`` table here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.dtypes import Dim

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _auto_pad(attrs: Mapping[str, Any]) -> str:
    ap = attrs.get("auto_pad", "NOTSET")
    if isinstance(ap, bytes):
        ap = ap.decode()
    return str(ap) or "NOTSET"


def check_window_attrs(attrs: Mapping[str, Any], n: int, kernel: Sequence[int] | None) -> str | None:
    """Validate the window attributes for ``n`` spatial dims; an error message or ``None``.

    The spec requires ``strides``/``dilations``/``kernel_shape`` of length n and ``pads`` of
    length 2n (begin values then end values), all non-negative (strides, dilations positive).
    """
    ap = _auto_pad(attrs)
    if ap not in AUTO_PADS:
        return f"attribute auto_pad is {ap!r}; expected one of {', '.join(AUTO_PADS)}"
    checks = (("strides", n, 1), ("dilations", n, 1), ("pads", 2 * n, 0))
    for name, length, low in checks:
        v = list(attrs.get(name) or [])
        if v and len(v) != length:
            return f"attribute {name} has {len(v)} values {v}; expected {length} for {n} spatial dims"
        if any(int(e) < low for e in v):
            return f"attribute {name} = {v} must be >= {low}"
    if kernel is not None:
        if len(kernel) != n:
            return f"kernel_shape {list(kernel)} has {len(kernel)} dims; expected {n} spatial dims"
        if any(int(k) < 1 for k in kernel):
            return f"kernel_shape {list(kernel)} must be positive"
    return None


@dataclass(frozen=True)
class Window:
    """Resolved geometry of one sliding-window op over ``n`` spatial dims (all ints)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def padded(self) -> bool:
        return any(self.pads_begin) or any(self.pads_end)

    def span(self, i: int) -> int:
        """Extent of the dilated kernel along spatial dim ``i``."""
        return (self.kernel[i] - 1) * self.dilations[i] + 1


def _out_explicit(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool,
                  truncate: bool = False) -> int:
    span = (k - 1) * d + 1
    num = size + pb + pe - span
    if not ceil_mode:
        if num >= 0:
            return num // s + 1
        # ONNX Runtime's pooling divides in C++ (truncation toward zero), so a window wider than
        # the padded input by less than a stride still gives one output (trunc(-1 / 2) + 1 = 1);
        # the spec's floor gives 0, which pycann keeps for Conv and where ORT gives 0 or fails
        return 1 if truncate and num > -s else 0
    # ceil: a window wider than the padded input still gives one output when it starts inside the
    # input (ONNX's shape inference, ONNX Runtime, torch): ceil(-1 / 2) + 1 = 1
    out = max(-(-num // s) + 1, 0)
    # Spec (MaxPool/AveragePool, ceil_mode): the last window must start inside the input or
    # the left padding, so a window lying wholly in the right padding is dropped.
    if (out - 1) * s >= size + pb:
        out -= 1
    return out


def plan_window(
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    attrs: Mapping[str, Any],
    ceil_mode: bool = False,
    truncate: bool = False,
) -> Window:
    """Resolve strides, dilations, pads (incl. ``auto_pad``) and output sizes for a kernel.

    ``truncate`` (pooling): explicit-pad output sizes as ONNX Runtime computes them without
    ``ceil_mode``, ``trunc((in + pads - span) / stride) + 1``: a window wider than the padded input
    by less than a stride gives one output where the spec's floor gives 0.

    SAME_UPPER/SAME_LOWER: output = ceil(in / stride), total padding
    ``max(0, (out - 1) * stride + span - in)`` split with the odd one at the end (UPPER) or at
    the beginning (LOWER). VALID: no padding. NOTSET: explicit ``pads``.
    """
    return window_of(in_sizes, window_params(len(in_sizes), kernel, attrs), ceil_mode, truncate)


WindowParams = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], str, list[int]]


def window_params(n: int, kernel: Sequence[int], attrs: Mapping[str, Any]) -> WindowParams:
    """``plan_window``'s reading of the attributes for ``n`` spatial dims (strides, dilations,
    kernel, auto_pad, and the explicit pads unless ``auto_pad`` is SAME_*), for a caller that
    resolves windows of many input sizes with the same attributes (``window_of``): the shape-generic
    plan's convs, one per input shape."""
    strides = tuple(int(v) for v in (attrs.get("strides") or [1] * n))
    dil = tuple(int(v) for v in (attrs.get("dilations") or [1] * n))
    kernel = tuple(int(k) for k in kernel)
    ap = _auto_pad(attrs)
    pads: list[int] = [] if ap in ("SAME_UPPER", "SAME_LOWER") else [0] * (2 * n) if ap == "VALID" else \
        [int(p) for p in (attrs.get("pads") or [0] * (2 * n))]
    return strides, dil, kernel, ap, pads


def window_of(in_sizes: Sequence[int], params: WindowParams, ceil_mode: bool = False,
              truncate: bool = False) -> Window:
    """``plan_window`` with the attributes read by ``window_params`` (for ``len(in_sizes)`` dims)."""
    strides, dil, kernel, ap, pads = params
    n = len(in_sizes)
    pb: list[int] = []
    pe: list[int] = []
    out: list[int] = []
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        for i, size in enumerate(in_sizes):
            o = -(-size // strides[i])
            total = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
            small, big = total // 2, total - total // 2
            pb.append(small if ap == "SAME_UPPER" else big)
            pe.append(big if ap == "SAME_UPPER" else small)
            out.append(o)
    else:
        pb, pe = pads[:n], pads[n:]
        for i, size in enumerate(in_sizes):
            out.append(_out_explicit(size, kernel[i], strides[i], dil[i], pb[i], pe[i], ceil_mode, truncate))
    return Window(kernel, strides, dil, tuple(pb), tuple(pe), tuple(out))


def infer_window_dims(
    in_dims: Sequence[Dim],
    kernel: Sequence[int] | None,
    attrs: Mapping[str, Any],
    ceil_mode: bool = False,
    truncate: bool = False,
) -> list[Dim]:
    """Output spatial dims for inference; symbolic/unknown inputs give the symbol or ``None``
    (``ceil_mode`` and ``truncate`` as in ``plan_window``).

    A symbolic input dim keeps its name when the op provably preserves it (stride 1 and either
    SAME padding or a 1-wide window with no padding); otherwise it becomes ``None``.
    """
    n = len(in_dims)
    strides = [int(v) for v in (attrs.get("strides") or [1] * n)]
    dil = [int(v) for v in (attrs.get("dilations") or [1] * n)]
    ap = _auto_pad(attrs)
    pads = [0] * (2 * n) if ap == "VALID" else [int(p) for p in (attrs.get("pads") or [0] * (2 * n))]
    out: list[Dim] = []
    for i, d in enumerate(in_dims):
        if isinstance(d, int) and (kernel is not None or ap in ("SAME_UPPER", "SAME_LOWER")):
            if ap in ("SAME_UPPER", "SAME_LOWER"):
                out.append(-(-d // strides[i]))
            else:
                sizes = [1] * n
                sizes[i] = d
                out.append(plan_window(sizes, kernel or [1] * n, attrs, ceil_mode, truncate).out[i])
        elif isinstance(d, str) and strides[i] == 1 and ap in ("SAME_UPPER", "SAME_LOWER"):
            out.append(d)
        elif isinstance(d, str) and strides[i] == 1 and kernel is not None:
            # stride 1: out = in + pads - (span - 1), so the symbol survives iff they cancel.
            span = (int(kernel[i]) - 1) * dil[i] + 1
            out.append(d if span - 1 == pads[i] + pads[n + i] else None)
        else:
            out.append(None)
    return out


def is_channels_last(a: np.ndarray) -> bool:
    """A 4-D array stored NHWC (channels innermost) that is not also C-contiguous."""
    return a.ndim == 4 and not a.flags.c_contiguous and a.transpose(0, 2, 3, 1).flags.c_contiguous


def empty_like_layout(x: np.ndarray, shape: Sequence[int], dtype: Any = None) -> np.ndarray:
    """An uninitialised array of ``shape`` (same rank as ``x``) laid out in memory in ``x``'s
    axis order: a channels-last (NHWC-strided) ``x`` gives a channels-last result, so window
    ops over the output of a channels-last conv chain (GE's LayoutSelection) read and write
    with unit inner strides. C-contiguous ``x``: a plain C-order array."""
    dt = x.dtype if dtype is None else np.dtype(dtype)
    if x.flags.c_contiguous or x.ndim != len(shape) or x.ndim < 2:
        return np.empty(tuple(shape), dt)
    order = sorted(range(x.ndim), key=lambda i: -abs(x.strides[i]))  # outermost axis first (stable)
    buf = np.empty(tuple(shape[i] for i in order), dt)
    return buf.transpose(tuple(int(i) for i in np.argsort(order)))


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: Any = 0) -> np.ndarray:
    """``x`` (N, C, *spatial) padded with ``value``; returns ``x`` itself when nothing to pad.

    Allocating the result and assigning the interior is cheaper than ``np.pad``'s generic path.
    """
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(s + b + e for s, b, e in zip(x.shape[2:], begin, end))
    out = empty_like_layout(x, shape)
    out.fill(value)
    inner = (slice(None), slice(None)) + tuple(slice(b, b + s) for b, s in zip(begin, x.shape[2:]))
    out[inner] = x
    return out


def window_view(xp: np.ndarray, w: Window) -> np.ndarray:
    """Read-only strided view (N, C, *kernel, *out) of the padded input ``xp``.

    Element [n, c, k..., o...] is ``xp[n, c, o*stride + k*dilation ...]``; no data is copied.
    ``xp`` must cover ``(out - 1) * stride + span`` along every spatial dim.
    """
    st = xp.strides
    n = len(w.kernel)
    shape = xp.shape[:2] + w.kernel + w.out
    strides = (
        st[:2]
        + tuple(st[2 + i] * w.dilations[i] for i in range(n))
        + tuple(st[2 + i] * w.strides[i] for i in range(n))
    )
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def tap_slices(w: Window) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """(kernel position, spatial slices) for every kernel tap: the input seen by that tap.

    Slicing the padded input with a tap's slices gives an (N, C, *out) strided view.
    """
    taps: list[tuple[tuple[int, ...], tuple[slice, ...]]] = [((), ())]
    for i in range(len(w.kernel)):
        nxt = []
        for pos, sl in taps:
            for k in range(w.kernel[i]):
                start = k * w.dilations[i]
                stop = start + (w.out[i] - 1) * w.strides[i] + 1
                nxt.append((pos + (k,), sl + (slice(start, stop, w.strides[i]),)))
        taps = nxt
    return taps


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float32/float64 as is, narrower floats widened to float32.

    ONNX Runtime accumulates float16/bfloat16 convolutions and pooling in float32 as well.
    """
    if dtype in (np.float32, np.float64):
        return np.dtype(dtype)
    return np.dtype(np.float32)
