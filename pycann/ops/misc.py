"""Miscellaneous ops real models use (ONNX spec, Operators.md): Upsample here, plus the
signal (``misc_signal``), vision (``misc_vision``), grid (``misc_grid``) and random (``misc_random``) modules whose
OPS lists this family re-exports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops import misc_grid, misc_random, misc_signal, misc_vision
from pycann.ops.nn.resize import infer_resized_shape, output_shape, resize_nd
from pycann.ops.opdef import InferContext, OpDef


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _upsample_scales(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[float]:
    if len(x) > 1 and x[1] is not None:
        return [float(v) for v in np.asarray(x[1]).reshape(-1)]
    return [float(v) for v in attrs.get("scales") or []]


def _infer_upsample(ctx: InferContext) -> list[TensorDesc]:
    mode = _text(ctx.attrs.get("mode", "nearest"))
    if mode not in ("nearest", "linear", "bilinear"):
        raise ctx.fail(f"attribute 'mode' is {mode!r}; expected nearest or linear")
    x = ctx.input(0)
    if len(ctx.inputs) > 1 and ctx.input(1) is not None:
        scales = ctx.value(1)
    else:
        scales = ctx.attrs.get("scales")
        if not scales:
            raise ctx.fail("attribute 'scales' is required (opset 7-8 Upsample)")
        scales = np.asarray(scales, np.float32)
    if scales is not None and any(float(s) < 1 for s in np.asarray(scales).reshape(-1)):
        raise ctx.fail(f"'scales' {list(np.asarray(scales).reshape(-1))} must all be >= 1 for Upsample")
    shape = infer_resized_shape(ctx, x, scales, None, None)
    return [TensorDesc(x.dtype if x is not None else 1, shape)]


def _k_upsample(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Upsample (Operators.md#Upsample, opsets 7-9): Resize-10 semantics, i.e. asymmetric
    coordinates, nearest truncation (ORT's legacy rounding) or N-linear."""
    X = x[0]
    out, scl = output_shape(X.shape, _upsample_scales(x, attrs), None, None)
    mode = _text(attrs.get("mode", "nearest"))
    return [resize_nd(X, out, scl, None, mode="linear" if mode == "bilinear" else mode,
                      coord="asymmetric", nearest_mode="simple")]


OPS: list[OpDef] = [
    # Upsample-7: scales attribute; Upsample-9: scales input (deprecated in opset 10).
    OpDef("Upsample", _infer_upsample, _k_upsample, since=7, attrs={"mode": "nearest", "scales": None}),
    OpDef("Upsample", _infer_upsample, _k_upsample, since=9, attrs={"mode": "nearest"}),
    *misc_signal.OPS,
    *misc_vision.OPS,
    *misc_grid.OPS,
    *misc_random.OPS,
]
