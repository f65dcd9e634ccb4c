"""Generator and layout ops (ONNX spec, Operators.md): Expand, Tile, Range, ConstantOfShape,
EyeLike, Trilu, DepthToSpace, SpaceToDepth, Dropout."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, from_numpy, is_bfloat16, to_numpy
from pycann.ops.index_checks import require_vector_input, vector_input_fault
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import broadcast_shapes, const_ints, dim_mul, dtype_of, ints, same_as, vec_len
from pycann.ops.tensor import astr, tensor_attr

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


# --------------------------------------------------------------------------- Expand / Tile
def _k_expand(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Expand (Operators.md): bidirectional (numpy) broadcast of the input to ``shape``."""
    x = inputs[0]
    require_vector_input("shape", inputs[1])  # (as shape inference says it, for a shape input of unknown rank)
    shape = np.broadcast_shapes(x.shape, tuple(ints(inputs[1])))
    # A contiguous copy: a zero-stride broadcast view would surprise writers of graph outputs
    # (``copy``, not ``ascontiguousarray``: that makes a 0-d result 1-d, Expand(scalar, []) -> [1])
    return [np.broadcast_to(x, shape).copy()]


def _infer_expand(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    fault = vector_input_fault("shape", ctx.input(1))
    if fault:
        raise ctx.fail(fault)
    shape = const_ints(ctx, 1)
    xs = None if x is None else x.shape
    if shape is None:
        n = vec_len(ctx.input(1))
        if n is None or xs is None:
            return [TensorDesc(dtype_of(x), None)]
        return [TensorDesc(dtype_of(x), (None,) * max(n, len(xs)))]
    try:
        # a 1 in ``shape`` keeps the input dim, which broadcast_shapes does as well
        return [TensorDesc(dtype_of(x), broadcast_shapes(xs, tuple(shape)))]
    except ValueError as e:
        raise ctx.fail(f"input {x} cannot expand to 'shape' {shape}: {e}") from None


def _k_tile(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Tile (Operators.md, opset 6+): repeat along each axis ``repeats[i]`` times."""
    require_vector_input("repeats", inputs[1])
    x, reps = inputs[0], ints(inputs[1])
    if len(reps) != x.ndim or any(r < 0 for r in reps):  # (shape inference's wording)
        raise ValueError(f"input 'repeats' {reps} must hold {x.ndim} non-negative counts")
    return [np.tile(x, reps)]


def _infer_tile(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    fault = vector_input_fault("repeats", ctx.input(1))
    if fault:
        raise ctx.fail(fault)
    reps = const_ints(ctx, 1)
    if x is None or x.shape is None:
        return [same_as(x)]
    if reps is None:
        return [TensorDesc(x.dtype, (None,) * len(x.shape))]
    if len(reps) != len(x.shape) or any(r < 0 for r in reps):
        raise ctx.fail(f"input 'repeats' {reps} must hold {len(x.shape)} non-negative counts")
    return [TensorDesc(x.dtype, tuple(dim_mul(d, r) for d, r in zip(x.shape, reps)))]


# --------------------------------------------------------------------------- DepthToSpace / SpaceToDepth
def _k_depth_to_space(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """DepthToSpace (Operators.md): DCR or CRD ordering of the depth blocks."""
    x, b = inputs[0], attrs["blocksize"]
    n, c, h, w = x.shape
    if astr(attrs["mode"]) == "CRD":
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return [t.reshape(n, c // (b * b), h * b, w * b)]


def _k_space_to_depth(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """SpaceToDepth (Operators.md): the inverse of DepthToSpace — DCR (default) puts the block
    offset before the channel, CRD (``mode`` attribute, opset 26+) after it."""
    x, b = inputs[0], attrs["blocksize"]
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    if str(attrs.get("mode", "DCR")).upper() == "CRD":
        t = t.transpose(0, 1, 3, 5, 2, 4)
    else:
        t = t.transpose(0, 3, 5, 1, 2, 4)
    return [t.reshape(n, c * b * b, h // b, w // b)]


def _infer_d2s(ctx: InferContext, to_space: bool) -> list[TensorDesc]:
    x = ctx.input(0)
    b = ctx.attrs["blocksize"]
    if x is None or x.shape is None:
        return [TensorDesc(dtype_of(x), (None,) * 4)]
    if len(x.shape) != 4 or b <= 0:
        raise ctx.fail(f"needs a 4-D input and blocksize > 0, got {x} and blocksize={b}")
    n, c, h, w = x.shape
    if to_space:
        if isinstance(c, int) and c % (b * b):
            raise ctx.fail(f"channels {c} are not divisible by blocksize^2 = {b * b}")
        c_out = c // (b * b) if isinstance(c, int) else None
        return [TensorDesc(x.dtype, (n, c_out, dim_mul(h, b), dim_mul(w, b)))]
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise ctx.fail(f"spatial dims {h}x{w} are not divisible by blocksize {b}")
    hw = [d // b if isinstance(d, int) else (d if b == 1 else None) for d in (h, w)]
    return [TensorDesc(x.dtype, (n, dim_mul(c, b * b), hw[0], hw[1]))]


# --------------------------------------------------------------------------- Dropout
def _k_dropout(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Dropout (Operators.md): identity in inference; a random mask when training_mode is true."""
    x = inputs[0]
    training = len(inputs) > 2 and inputs[2] is not None and bool(np.asarray(inputs[2]))
    ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0.5
    if not training or ratio == 0:
        return [x, np.ones(x.shape, dtype=np.bool_)]
    seed = attrs.get("seed")
    rng = np.random.default_rng(None if seed is None else int(seed))
    mask = rng.random(x.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    return [np.asarray(x * mask * x.dtype.type(scale), dtype=x.dtype), mask]


def _k_dropout_old(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Dropout opsets 1-9: inference only; the mask has the input's dtype and is all zeros, as
    ONNX Runtime returns it (the spec leaves an inference mask unsaid; docs/differences.md)."""
    x = inputs[0]
    return [x, np.zeros(x.shape, dtype=x.dtype)]


def _k_dropout_10(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Dropout opsets 10-11: inference only (no training_mode yet); a bool mask, all false as
    ONNX Runtime returns it (opset 12 made the inference mask all true)."""
    x = inputs[0]
    return [x, np.zeros(x.shape, dtype=np.bool_)]


def _infer_dropout(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    mask = TensorDesc(DType.BOOL, None if x is None else x.shape)
    return [same_as(x), mask][: max(ctx.n_outputs, 1)]


def _infer_dropout_old(ctx: InferContext) -> list[TensorDesc]:
    return [same_as(ctx.input(0))] * max(ctx.n_outputs, 1)


def _infer_d2s_fwd(ctx: InferContext) -> list[TensorDesc]:
    return _infer_d2s(ctx, True)


def _infer_s2d(ctx: InferContext) -> list[TensorDesc]:
    return _infer_d2s(ctx, False)



# --------------------------------------------------------------------------- Range
def _range_count(start: Any, limit: Any, delta: Any) -> int:
    """max(ceil((limit - start) / delta), 0), exactly for integers."""
    if delta == 0:
        raise ValueError("Range: 'delta' must not be 0")
    if isinstance(start, (int, np.integer)):
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    return max(math.ceil(float(limit - start) / float(delta)), 0)


def _range_args(inputs: Inputs) -> tuple[np.dtype, np.dtype, list[Any]]:
    """(output dtype, working dtype, [start, limit, delta] as working-dtype scalars)."""
    vals = [np.asarray(v).reshape(()) for v in inputs[:3]]
    dt = vals[0].dtype
    # stash_type=1 (opset 27, ORT's behaviour earlier): 16-bit floats are computed in float32
    wt = np.dtype(np.float32) if dt == np.float16 or is_bfloat16(dt) else dt
    return dt, wt, [v.astype(wt)[()] for v in vals]


def _k_range(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Range (Operators.md): start + i * delta for i < max(ceil((limit - start) / delta), 0)."""
    dt, wt, (s, lim, d) = _range_args(inputs)
    n = _range_count(s, lim, d)
    if dt.kind in "iu":
        return [(np.arange(n, dtype=np.int64) * int(d) + int(s)).astype(dt)]
    out = np.arange(n, dtype=wt)
    out *= d
    out += s
    return [out.astype(dt, copy=False)]


def _infer_range(ctx: InferContext) -> list[TensorDesc]:
    dt = dtype_of(ctx.input(0))
    vals = [ctx.value(i) for i in range(3)]
    if any(v is None for v in vals):
        return [TensorDesc(dt, (None,))]
    try:
        n = _range_count(*_range_args(vals)[2])
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    return [TensorDesc(dt, (n,))]


# --------------------------------------------------------------------------- ConstantOfShape
def _cos_value(attrs: Attrs) -> np.ndarray:
    v = attrs["value"]
    return np.zeros(1, np.float32) if v is None else tensor_attr(v).reshape(-1)


def _k_constant_of_shape(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ConstantOfShape (Operators.md): ``value`` (default float32 0) broadcast to the input shape."""
    v = _cos_value(attrs)
    shape = ints(inputs[0])
    if any(d < 0 for d in shape):
        raise ValueError(f"ConstantOfShape: negative dim in shape {shape}")
    return [np.full(shape, v[0], dtype=v.dtype)]


def _infer_constant_of_shape(ctx: InferContext) -> list[TensorDesc]:
    dt = from_numpy(_cos_value(ctx.attrs).dtype)
    shape = const_ints(ctx, 0)
    if shape is None:
        n = vec_len(ctx.input(0))
        return [TensorDesc(dt, None if n is None else (None,) * n)]
    if any(d < 0 for d in shape):
        raise ctx.fail(f"input 'input' (the shape) {shape} has a negative dim")
    return [TensorDesc(dt, tuple(shape))]


# --------------------------------------------------------------------------- EyeLike / Trilu
def _eye_dtype(attrs: Attrs, x_dtype: np.dtype) -> np.dtype:
    return x_dtype if attrs["dtype"] is None else to_numpy(attrs["dtype"])


def _k_eye_like(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """EyeLike (Operators.md): 2-D identity-like tensor, ones on diagonal ``k``."""
    x = inputs[0]
    if x.ndim != 2:
        raise ValueError(f"EyeLike: input must be 2-D, got shape {x.shape}")
    return [np.eye(x.shape[0], x.shape[1], k=attrs["k"], dtype=_eye_dtype(attrs, x.dtype))]


def _infer_eye_like(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    dt = dtype_of(x) if ctx.attrs["dtype"] is None else int(ctx.attrs["dtype"])
    if x is not None and x.shape is not None and len(x.shape) != 2:
        raise ctx.fail(f"input must be 2-D, got {x}")
    return [TensorDesc(dt, (None, None) if x is None or x.shape is None else x.shape)]


def _k_trilu(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Trilu (Operators.md): keep the upper (or lower) triangle of the last two axes, offset ``k``."""
    x = inputs[0]
    ks = np.asarray(inputs[1]).reshape(-1) if len(inputs) > 1 and inputs[1] is not None else np.zeros(1, np.int64)
    if ks.size != 1:  # (ONNX Runtime refuses it; the first value was used)
        raise ValueError(f"input 'k' must hold one value, got {ks.tolist()}")
    k = int(ks[0])
    if x.ndim < 2:
        raise ValueError(f"Trilu: input must have rank >= 2, got shape {x.shape}")
    m, n = x.shape[-2:]
    # np.tri(m, n, k - 1) marks j < i + k, the part triu zeroes; tril keeps j <= i + k
    keep = ~np.tri(m, n, k - 1, dtype=np.bool_) if attrs["upper"] else np.tri(m, n, k, dtype=np.bool_)
    out = np.full_like(x, "") if x.dtype == object else np.zeros_like(x)
    np.copyto(out, x, where=keep)  # ~2x faster than np.triu's np.where
    return [out]


def _infer_trilu(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is not None and x.shape is not None and len(x.shape) < 2:
        raise ctx.fail(f"input must have rank >= 2, got {x}")
    k = ctx.input(1)
    if k is not None and k.is_static and k.numel() != 1:
        raise ctx.fail(f"input 'k' must hold one value, got {k}")
    return [same_as(x)]


OPS: list[OpDef] = [
    OpDef("Expand", _infer_expand, _k_expand, since=8),
    OpDef("Tile", _infer_tile, _k_tile, since=6),
    OpDef("Range", _infer_range, _k_range, since=11, attrs={"stash_type": 1}),
    OpDef("ConstantOfShape", _infer_constant_of_shape, _k_constant_of_shape, since=9, attrs={"value": None}),
    OpDef("EyeLike", _infer_eye_like, _k_eye_like, since=9, attrs={"dtype": None, "k": 0}),
    OpDef("Trilu", _infer_trilu, _k_trilu, since=14, attrs={"upper": 1}),
    OpDef("DepthToSpace", _infer_d2s_fwd, _k_depth_to_space, since=1,
          attrs={"blocksize": REQUIRED, "mode": "DCR"}),
    OpDef("SpaceToDepth", _infer_s2d, _k_space_to_depth, since=1, attrs={"blocksize": REQUIRED}),
    # Dropout 1-9: mask has the input's dtype; 10+: bool mask; 12+: ratio/training_mode inputs and an
    # inference mask of ones (ONNX Runtime's 7-11 masks are zeros / false: docs/differences.md)
    OpDef("Dropout", _infer_dropout_old, _k_dropout_old, since=1),
    OpDef("Dropout", _infer_dropout, _k_dropout_10, since=10),
    OpDef("Dropout", _infer_dropout, _k_dropout, since=12, attrs={"seed": None}),
]
