"""Eager convolutions whose result is contiguous (ATen's rule for a contiguous input and weight,
``_layout``) computed in NCHW, where the channels-last conv (``torch:conv2d_nhwc``) would need its
input and its result reordered (docs/torch.md, "Memory formats").

* a 1x1 convolution without padding (ResNet's bottleneck ends and projection shortcuts): one matrix
  product ``W[O, C] @ X[n][C, H*W]`` per image on torch's BLAS; a strided one gathers its input's
  pixels first (one copy of the pixels it reads);
* every other convolution (3x3, strided, grouped, depthwise, an RGB stem): ATen's own CPU conv
  (``torch.conv2d`` on the host views: oneDNN's NCHW convolution for most shapes, which reorders
  inside one call, and ATen's own choice for the rest), NCHW in and out.

Why ATen's conv rather than the channels-last conv (``torch:conv2d_nhwc``) between two reorders,
as before: the same values and kernel choice as torch's CPU for these convs, grouped and depthwise
ones included, and no reorders of pycann's own between them; in-process A/Bs measured the two
equal (ResNet-50 eager, paired ratios 1.007-1.025; MobileNetV2 1.03: bench/RESULTS.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

Kernel = Callable[[Sequence[Any], Mapping[str, Any]], list[np.ndarray]]


def _ints(attrs: Mapping[str, Any], name: str, default: list[int]) -> list[int]:
    return [int(v) for v in attrs.get(name, default)]


def bind(ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> Kernel | None:
    """An NCHW kernel ``k(inputs, attrs) -> [y]`` (contiguous ``y``) for the ONNX Conv of a
    contiguous float32 input ``ins[0]`` with constant weight ``ins[1]`` (and bias ``ins[2]``), or
    None when it is none of the forms above (another dtype or rank, asymmetric pads). The kernel is marked ``nchw`` (its input is
    not reordered first: ``_pycann_ops._pre``)."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    if x is None or w is None or x.ndim != 4 or w.ndim != 4 or x.dtype != np.float32 or w.dtype != np.float32 \
            or not x.flags.c_contiguous or (b is not None and b.dtype != np.float32):
        return None
    group = int(attrs.get("group", 1))
    strides, dilations = _ints(attrs, "strides", [1, 1]), _ints(attrs, "dilations", [1, 1])
    pads = _ints(attrs, "pads", [0, 0, 0, 0])
    if len(strides) != 2 or len(pads) != 4 or pads[:2] != pads[2:]:
        return None
    if w.shape[2:] == (1, 1) and not any(pads) and dilations == [1, 1] and group == 1:
        kernel = _pointwise(x.shape, w, b, strides)
    else:
        kernel = _aten_conv(w, b, strides, pads[:2], dilations, group)
    kernel.nchw = True  # type: ignore[attr-defined]
    return kernel


def _pointwise(xs: tuple[int, ...], w: np.ndarray, b: np.ndarray | None, strides: list[int]) -> Kernel:
    n, c, hh, ww = xs
    sh, sw = strides
    ho, wo = (hh - 1) // sh + 1, (ww - 1) // sw + 1
    o = w.shape[0]
    w2 = torch.from_numpy(np.ascontiguousarray(w.reshape(o, c)))
    b2 = None if b is None else torch.from_numpy(np.ascontiguousarray(b)).reshape(o, 1)
    mm, addmm, from_numpy, empty = torch.mm, torch.addmm, torch.from_numpy, torch.empty
    strided = (sh, sw) != (1, 1)

    def kernel(inputs: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        xt = from_numpy(inputs[0])
        y = empty((n, o, ho, wo), dtype=torch.float32)
        for i in range(n):
            xi = xt[i, :, ::sh, ::sw].reshape(c, ho * wo) if strided else xt[i].view(c, hh * ww)
            yi = y[i].view(o, ho * wo)
            if b2 is None:
                mm(w2, xi, out=yi)
            else:
                addmm(b2, w2, xi, out=yi)
        return [y.numpy()]

    return kernel


def _aten_conv(w: np.ndarray, b: np.ndarray | None, strides: list[int], padding: list[int],
               dilations: list[int], group: int) -> Kernel:
    # ATen's own CPU conv: its choice of kernel (oneDNN for most, a direct loop for tiny images,
    # where oneDNN's NCHW call took 90-110 us against ATen's 10-30 for a 64-channel 3x3 on 1x1-4x4)
    wt = torch.from_numpy(np.ascontiguousarray(w))
    bt = None if b is None else torch.from_numpy(np.ascontiguousarray(b))
    op, from_numpy = torch.conv2d, torch.from_numpy

    def kernel(inputs: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        return [op(from_numpy(inputs[0]), wt, bt, strides, padding, dilations, group).numpy()]

    return kernel
