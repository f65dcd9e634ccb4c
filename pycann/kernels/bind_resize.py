"""Resize by an integer factor per spatial axis (the x2 upsampling of FPN / DB necks) bound at plan
time: written straight into the executor's arena view.

ONNX Resize (Operators.md#Resize) in ``nearest`` mode maps output pixel (i, j) to an input pixel
by the coordinate transform and rounding its attributes name; for many of them (``asymmetric`` +
``floor``, ``half_pixel`` + ``round_prefer_floor``...) and an integer factor that is input pixel
(i // kh, j // kw). Which mapping a node computes is not re-derived here: at plan time the node's
own generic kernel (``ops/nn/resize._k_resize``) resizes a one-channel probe whose every value is its
flat index, and the kernel binds only when the result is exactly that repeat (N and C unchanged:
scales of 1 or sizes equal to theirs; no ``axes``, the ``stretch`` policy). A float32 call (or a
bfloat16 one in channels-last, resampled as its bytes) then runs oneDNN's nearest resampling (``providers/onednn_resample.py``: the same copy on every
OpenMP thread, 0.12 vs 0.3 ms for PP-OCRv4 det's 96 x 80 x 80 -> 160 x 160); otherwise, or in a
layout oneDNN does not take, it copies each input row into the first of its kh output rows,
repeated kw times along W (one broadcast copy with C innermost in a channels-last layout), and that
row into the other kh - 1. Either way the input's NaN-guard bound goes on to the output.

Why: the generic kernel plans both axes on every call and returns a new array (~30 us of Python on
PP-OCRv4 det's 4 x 4 maps; a 9.8 MB fresh array at 640 x 640, whose pages the first run faults in:
8-22 ms of det's first run against 2 ms later). Into the arena view: 2-16 us on the small maps, the
same memory-bound time on the large ones, and the first run finds the pages the load wrote.
Anything else (another shape or dtype, an output view in neither layout) runs the generic kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Threads
from pycann.kernels.bind_base import Kernel, Prepare
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import nan_guard

__all__ = ["PREPARE_RESIZE"]

_PROBE_MAX = 1 << 24  # output pixels of the probe at most (16 M float64: 128 MB); larger maps keep the generic kernel


def _upsample(x: np.ndarray, y: np.ndarray, kh: int, kw: int) -> bool:
    """``y`` = ``x`` repeated kh times along H and kw times along W, when ``y`` is C-ordered or
    channels-last (dense); False otherwise (nothing written)."""
    n, c, h, w = x.shape
    if y.flags.c_contiguous:
        yv = y.reshape(n, c, h, kh, w, kw)
        np.copyto(yv[:, :, :, 0], x[:, :, :, :, None])
        for i in range(1, kh):
            yv[:, :, :, i] = yv[:, :, :, 0]
        return True
    t = y.transpose(0, 2, 3, 1)
    if not t.flags.c_contiguous:
        return False
    yv = t.reshape(n, h, kh, w, kw, c)
    np.copyto(yv[:, :, 0], x.transpose(0, 2, 3, 1)[:, :, :, None, :])
    for i in range(1, kh):
        yv[:, :, i] = yv[:, :, 0]
    return True


def _onednn_upsample(xs: tuple[int, ...], ys: tuple[int, ...], x: Any) -> Any:
    """oneDNN's nearest resampling for float32 / bfloat16 X when the provider is there (``None``:
    numpy's copy serves every call)."""
    from pycann.dtypes import is_bfloat16, to_numpy
    from pycann.kernels.providers import available

    try:
        dt = np.dtype(to_numpy(x.dtype))
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    if not (dt == np.float32 or is_bfloat16(dt)) or not available("onednn"):
        return None
    from pycann.kernels.providers.onednn_resample import NearestUpsample

    return NearestUpsample(xs, ys, dt)


def _resize(attrs: Mapping[str, Any], ins: Sequence[Any], consts: Sequence[np.ndarray | None],
            outs: Sequence[Any]) -> Kernel | None:
    """Resize of a static rank-4 X to H * kh x W * kw (constant roi / scales / sizes) whose node
    maps output pixels to input pixels by that repeat (checked on a probe, see the module doc)."""
    from pycann.ops.nn.resize import _k_resize, _text
    from pycann.ops.nn.spatial import empty_like_layout

    xs = _static(ins[0]) if ins else None
    ys = _static(outs[0]) if outs else None
    if xs is None or ys is None or len(xs) != 4 or _text(attrs.get("mode", "nearest")) != "nearest":
        return None
    if _text(attrs.get("coordinate_transformation_mode", "half_pixel")) == "tf_crop_and_resize":
        # its roi can put output pixels outside the input (extrapolation_value there): the probe's
        # values cannot tell that from a pixel whose value equals it (index 0 and the default 0.0
        # both give 0, e.g. x (1, C, 2, 1) -> (1, C, 4, 1), roi H [-0.2, 1]: row 0 is 0, not x's)
        return None
    if any(ins[i] is not None and (len(consts) <= i or consts[i] is None) for i in range(1, len(ins))):
        return None  # a run-time roi / scales / sizes
    n, c, h, w = xs
    # an empty output (scale 0.5 of a 1-pixel axis: factor 0) is no repeat; the generic kernel returns it
    # the probe's result (and the repeat it is compared with) has the output's H x W: bound that,
    # not the input's (a 2 x 2 int8 map x 4096 x 2048 made ~540 MB of float64 probes at load)
    if ys[:2] != (n, c) or 0 in xs or 0 in ys or ys[2] % h or ys[3] % w or ys[2:] == (h, w) or ys[2] * ys[3] > _PROBE_MAX \
            or attrs.get("axes") or _text(attrs.get("keep_aspect_ratio_policy", "stretch")) != "stretch":
        return None
    kh, kw = ys[2] // h, ys[3] // w
    # N and C unchanged (scales 1 or sizes n, c) map each index to itself: the probe is one image
    # and one channel, (1, 1, h, w), so binding a large map costs a few ms less of the load
    probe_in: list[Any] = [consts[i] if len(consts) > i else None for i in range(len(ins))]
    scales = probe_in[2] if len(ins) > 2 else probe_in[1] if len(ins) == 2 else None
    sizes = probe_in[3] if len(ins) > 3 else None
    if scales is not None and np.asarray(scales).size:
        if [float(v) for v in np.asarray(scales).reshape(-1)[:2]] != [1.0, 1.0]:
            return None
    elif sizes is not None and np.asarray(sizes).size == 4:
        probe_in[3] = np.array([1, 1, *ys[2:]], np.int64)
    else:
        return None
    probe_in[0] = np.arange(h * w, dtype=np.float64).reshape(1, 1, h, w)
    try:
        got = _k_resize(probe_in, attrs)[0]
    except (ValueError, TypeError, IndexError):
        return None  # the generic kernel reports it in the run
    if got.shape != (1, 1, *ys[2:]) or not np.array_equal(got, probe_in[0].repeat(kh, axis=2).repeat(kw, axis=3)):
        return None

    ups = _onednn_upsample(xs, ys, ins[0])

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        x = inputs[0]
        o = out[0] if out is not None else None
        if x.__class__ is np.ndarray and x.shape == xs:
            y = o if o is not None and o.dtype == x.dtype and o.shape == ys and o.flags.writeable \
                and not np.may_share_memory(o, x) else empty_like_layout(x, ys)
            if (ups is not None and ups.run(x, y)) or _upsample(x, y, kh, kw):
                nan_guard.pass_on(y, x, lambda b: b)  # (a copy: the input's proven bound holds)
                if o is not None and y is not o:
                    o[...] = y
                    return [o]
                return [y]
        y = _k_resize(inputs, attrs)[0]
        if o is not None:
            o[...] = y
            return [o]
        return [y]

    if ups is None:
        return BoundKernel(kernel, writes_out=True, impl="numpy:upsample_repeat")
    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=ups, impl="onednn:resampling_nearest")


PREPARE_RESIZE: dict[tuple[str, str], Prepare] = {("", "Resize"): _resize}
