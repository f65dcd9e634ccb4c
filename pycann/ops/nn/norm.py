"""Normalisation ops (ONNX spec, Operators.md: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN).

Statistics run in float32 (or the ``stash_type``) for narrow float inputs and results are cast
back to the input dtype. BatchNormalization is evaluated in inference mode unless an opset >= 14 node sets training_mode=1
(the importer sets it on an opset 7-13 node that names its running-stat outputs: the spec's training form).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, to_numpy
from pycann.ops.nn.spatial import compute_dtype
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.operand_checks import check_broadcast_to, check_vector, require_vector
from pycann.ops.shape_utils import normalize_axes, normalize_axis, same_as


def _channel_shape(x: np.ndarray, v: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector (or a (C, D1, ...) block) over (N, C, ...)."""
    return (1,) + v.shape + (1,) * (x.ndim - 1 - v.ndim)


def batch_norm_scale_shift(scale: np.ndarray, b: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float,
                           cd: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Inference BatchNormalization (BatchNormalization-15) as ``y = x * a + c`` per channel, in the
    compute dtype ``cd``: ``a = scale / sqrt(var + epsilon)``, ``c = B - mean * a``. The kernel below
    and GE's BatchNormToScaleShift pass both use it, so the rewritten graph keeps the kernel's values."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # var + eps <= 0: +-inf / NaN, as ORT
        a = scale.astype(cd) / np.sqrt(var.astype(cd) + cd.type(epsilon))
        return a, b.astype(cd) - mean.astype(cd) * a


def _require_channels(x: np.ndarray, inputs: Sequence[Any]) -> None:
    """Run time: scale, B, mean and var are 1-D of length C (numpy would broadcast a length-1 one
    over the channels), as shape inference checks for the lengths it knows. (C, D1, ...) blocks of
    old spatial=0 models are left to numpy's broadcasting."""
    if x.ndim < 2 or any(np.ndim(v) > 1 for v in inputs[1:5]):
        return
    for name, v in zip(("scale", "B", "input_mean", "input_var"), inputs[1:5]):
        require_vector("BatchNormalization", name, v, int(x.shape[1]), f"one per channel C of X {list(x.shape)}")


def _batch_norm(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
    """BatchNormalization (spec: BatchNormalization-15), inference mode:
    Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B.

    ``training_mode``, ``momentum`` (opset 9-14) and the opset-1..7 ``is_test``/``spatial``/
    ``consumed_inputs`` attributes never switch to batch statistics: exported inference models
    (Paddle sets ``momentum``) must use the running mean/var. Old ``spatial=0`` models carry
    (C, D1, ...) statistics, which broadcast the same way. Extra outputs: the running
    mean and var passed through, for graphs that name the optional outputs.
    """
    x, scale, b, mean, var = inputs[:5]
    _require_channels(x, inputs)
    cd = compute_dtype(x.dtype)
    eps = float(attrs.get("epsilon", 1e-5))
    # Fold into one multiply-add over the big tensor: a = scale / sqrt(var + eps), c = B - mean * a.
    a, c = batch_norm_scale_shift(scale, b, mean, var, eps, cd)
    shape = _channel_shape(x, a)
    y = out if out is not None and out.dtype == cd else np.empty(x.shape, cd)
    np.multiply(x, a.reshape(shape), out=y)
    y += c.reshape(shape)
    return y


def _batch_norm_training(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """BatchNormalization-14/15 with ``training_mode=1`` (explicit only): normalise with the batch
    statistics (population variance over all axes but C) and return the updated running stats
    ``running = input * momentum + current * (1 - momentum)``."""
    x, scale, b, mean, var = inputs[:5]
    _require_channels(x, inputs)
    cd = compute_dtype(x.dtype)
    axes = (0,) + tuple(range(2, x.ndim))
    xc = x.astype(cd)
    cur_mean = xc.mean(axis=axes)
    cur_var = xc.var(axis=axes)
    shape = _channel_shape(x, cur_mean)
    eps = cd.type(float(attrs.get("epsilon", 1e-5)))
    y = (xc - cur_mean.reshape(shape)) / np.sqrt(cur_var.reshape(shape) + eps)
    y = y * scale.astype(cd).reshape(shape) + b.astype(cd).reshape(shape)
    m = cd.type(float(attrs.get("momentum", 0.9)))
    run_mean = mean.astype(cd) * m + cur_mean * (1 - m)
    run_var = var.astype(cd) * m + cur_var * (1 - m)
    return [y.astype(x.dtype), run_mean.astype(mean.dtype), run_var.astype(var.dtype)]


def _k_batch_norm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """BatchNormalization kernel (see ``_batch_norm``): Y, then input_mean/input_var."""
    if attrs.get("training_mode", 0):
        return _batch_norm_training(inputs, attrs)
    y = _batch_norm(inputs, attrs)
    return [y.astype(inputs[0].dtype, copy=False), np.asarray(inputs[3]), np.asarray(inputs[4])]


def _out_batch_norm(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """BatchNormalization into preallocated outputs (Y computed in place when dtypes allow)."""
    if attrs.get("training_mode", 0):
        for dst, src in zip(outs, _batch_norm_training(inputs, attrs)):
            dst[...] = src
        return
    y = _batch_norm(inputs, attrs, outs[0])
    if y is not outs[0]:
        outs[0][...] = y
    for dst, src in zip(outs[1:], inputs[3:5]):
        dst[...] = src


def _infer_batch_norm(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; per-channel inputs must be 1-D of length C (or (C, D1, ...) for spatial=0)."""
    x = ctx.input(0)
    if x is not None and x.shape is not None:
        if len(x.shape) < 2 and ctx.opset >= 9:
            raise ctx.fail(f"input X {x} must have rank >= 2 (N, C, ...)")
        c = x.shape[1] if len(x.shape) > 1 else None
        spatial0 = ctx.opset < 9 and int(ctx.attrs.get("spatial", 1)) == 0
        for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
            d = ctx.input(i)
            if d is None or d.shape is None or not d.shape:
                continue
            if spatial0:  # (C, D1, ...): only C is checked
                if isinstance(c, int) and isinstance(d.shape[0], int) and d.shape[0] != c:
                    raise ctx.fail(f"input {name} {d} must have C = {c} elements (one per channel of X {x})")
            else:
                check_vector(ctx, i, name, c, f"one per channel C of X {list(x.shape)}")
    outs = [same_as(x)]
    for i in (3, 4, 3, 4)[: max(0, ctx.n_outputs - 1)]:
        outs.append(same_as(ctx.input(i)))
    return outs


def _k_instance_norm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """InstanceNormalization (spec: InstanceNormalization-6): per (n, c) mean/variance over
    the spatial dims; Y = scale * (x - mean) / sqrt(var + epsilon) + B."""
    x, scale, b = inputs[:3]
    cd = compute_dtype(x.dtype)
    eps = float(attrs.get("epsilon", 1e-5))
    xc = x.astype(cd, copy=False)
    axes = tuple(range(2, x.ndim))
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    var = np.mean(d * d, axis=axes, keepdims=True)
    shape = _channel_shape(x, scale)
    a = scale.astype(cd).reshape(shape) / np.sqrt(var + cd.type(eps))
    y = d * a
    y += b.astype(cd).reshape(shape)
    return [y.astype(x.dtype, copy=False)]


def _infer_channelwise(ctx: InferContext) -> list[TensorDesc]:
    """Y like X (InstanceNormalization); scale/B must have C elements."""
    x = ctx.input(0)
    if x is not None and x.shape is not None:
        if len(x.shape) < 3:
            raise ctx.fail(f"input X {x} must have rank >= 3 (N, C, D1, ...)")
        for i, name in ((1, "scale"), (2, "B")):
            check_vector(ctx, i, name, x.shape[1], f"one per channel C of X {list(x.shape)}")
    return [same_as(x)]


def _stash_dtype(attrs: Mapping[str, Any], x_dtype: np.dtype) -> np.dtype:
    st = int(attrs.get("stash_type", 1))
    dt = to_numpy(st) if st else np.dtype(np.float32)
    return dt if dt.kind == "f" and dt.itemsize >= 4 else np.dtype(np.float32)


def _k_layer_norm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """LayerNormalization (spec: LayerNormalization-17): normalise over axes [axis, rank) in
    ``stash_type``; Y = norm * Scale + B; also Mean and InvStdDev (dims from axis kept as 1).

    X is viewed as (rows, n): the row sums (mean, then the squared deviations) go through
    ``einsum``, 3x faster than numpy's reductions on short rows, and Y is built in place in the
    deviation buffer (one subtract, one multiply per row, then Scale and B).
    """
    x, scale = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    sd = _stash_dtype(attrs, x.dtype)
    axis = normalize_axis(int(attrs.get("axis", -1)), x.ndim)
    stat_shape = x.shape[:axis] + (1,) * (x.ndim - axis)
    eps = sd.type(float(attrs.get("epsilon", 1e-5)))
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    if x.size == 0 or n == 0:
        return _layer_norm_reference(x, scale, b, sd, tuple(range(axis, x.ndim)), eps)
    x2 = np.ascontiguousarray(x.astype(sd, copy=False)).reshape(-1, n)
    mean = np.einsum("ij->i", x2)
    mean *= sd.type(1.0 / n)
    d = np.subtract(x2, mean[:, None])
    var = np.einsum("ij,ij->i", d, d)
    var *= sd.type(1.0 / n)
    var += eps
    inv = np.sqrt(var, out=var)
    np.divide(sd.type(1), inv, out=inv)
    d *= inv[:, None]
    y = d.reshape(x.shape)
    y *= scale.astype(sd, copy=False)
    if b is not None:
        y += b.astype(sd, copy=False)
    return [y.astype(x.dtype, copy=False), mean.reshape(stat_shape), inv.reshape(stat_shape)]


def _layer_norm_reference(x: np.ndarray, scale: np.ndarray, b: np.ndarray | None, sd: np.dtype,
                          axes: tuple[int, ...], eps: Any) -> list[np.ndarray]:
    """LayerNormalization with numpy's reductions (empty inputs)."""
    xc = x.astype(sd, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    var = np.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = d * inv
    y *= scale.astype(sd, copy=False)
    if b is not None:
        y += b.astype(sd, copy=False)
    return [y.astype(x.dtype, copy=False), mean, np.asarray(inv)]


def _infer_layer_norm(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; Mean/InvStdDev: X's dims before ``axis`` then 1s, in ``stash_type``."""
    x = ctx.input(0)
    st = int(ctx.attrs.get("stash_type", 1))
    out = [same_as(x)]
    stat_dt = int(DType.FLOAT) if st in (0, 1) else st
    if x is None or x.shape is None:
        return out + [TensorDesc(stat_dt, None)] * (ctx.n_outputs - 1)
    try:
        axis = normalize_axis(int(ctx.attrs.get("axis", -1)), len(x.shape), "attribute axis: ")
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    for i, name in ((1, "Scale"), (2, "B")):  # ONNX Runtime: broadcastable to X (not only X.shape[axis:])
        check_broadcast_to(ctx, i, name, x.shape)
    stat = TensorDesc(stat_dt, tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis))
    return out + [stat] * (ctx.n_outputs - 1)


def _group_norm(inputs: Sequence[Any], attrs: Mapping[str, Any], per_group: bool) -> list[np.ndarray]:
    x, scale, b = inputs[:3]
    g = int(attrs["num_groups"])
    n, c = x.shape[:2]
    if g < 1 or c % g:
        raise ValueError(f"num_groups={g} must divide the {c} channels of X {x.shape}")
    sd = _stash_dtype(attrs, x.dtype)
    xg = x.astype(sd, copy=False).reshape(n, g, -1) if x.size else x.astype(sd).reshape(n, g, 0)
    mean = xg.mean(axis=2, keepdims=True)
    d = xg - mean
    var = np.mean(d * d, axis=2, keepdims=True)
    y = (d / np.sqrt(var + sd.type(float(attrs.get("epsilon", 1e-5))))).reshape(x.shape)
    s, bb = scale.astype(sd), b.astype(sd)
    if per_group:  # opset 18: one scale/bias per group, shared by its channels
        s, bb = np.repeat(s, c // g), np.repeat(bb, c // g)
    shape = (1, c) + (1,) * (x.ndim - 2)
    y = y * s.reshape(shape) + bb.reshape(shape)
    return [y.astype(x.dtype, copy=False)]


def _k_group_norm_21(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GroupNormalization-21 (spec): statistics per (n, group), scale/bias per channel (C)."""
    return _group_norm(inputs, attrs, per_group=False)


def _k_group_norm_18(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GroupNormalization-18 (spec): as 21 but scale/bias have one value per group."""
    return _group_norm(inputs, attrs, per_group=True)


def _infer_group_norm(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; C must be divisible by num_groups; scale/bias C (opset 21) or G (18) long."""
    x = ctx.input(0)
    g = int(ctx.attrs["num_groups"])
    if g < 1:
        raise ctx.fail(f"attribute num_groups = {g} must be >= 1")
    if x is not None and x.shape is not None:
        if len(x.shape) < 2:
            raise ctx.fail(f"input X {x} must have rank >= 2 (N, C, ...)")
        c = x.shape[1]
        if isinstance(c, int) and c % g:
            raise ctx.fail(f"num_groups = {g} does not divide the {c} channels of X {x}")
        want = g if ctx.opset < 21 else c
        role = f"one per group, num_groups = {g}, at opset {ctx.opset}" if ctx.opset < 21 else \
            f"one per channel C of X {list(x.shape)} at opset {ctx.opset}"
        for i, name in ((1, "scale"), (2, "bias")):
            check_vector(ctx, i, name, want, role)
    return [same_as(x)]


def _k_lp_norm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """LpNormalization (spec: LpNormalization-1/22): x / ||x||_p along ``axis`` (p = 1 or 2);
    a zero norm yields 0, as ONNX Runtime does."""
    x = inputs[0]
    p = int(attrs.get("p", 2))
    axis = normalize_axis(int(attrs.get("axis", -1)), x.ndim)
    cd = compute_dtype(x.dtype) if x.dtype.kind == "f" else np.dtype(np.float64)
    xc = x.astype(cd, copy=False)
    if p == 1:
        norm = np.sum(np.abs(xc), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(xc * xc, axis=axis, keepdims=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(norm == 0, cd.type(0), xc / norm)
    return [np.asarray(y, dtype=x.dtype)]


def _infer_lp_norm(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; ``p`` must be 1 or 2 and ``axis`` within X's rank."""
    x = ctx.input(0)
    p = int(ctx.attrs.get("p", 2))
    if p not in (1, 2):
        raise ctx.fail(f"attribute p = {p}; LpNormalization supports p = 1 or 2")
    if x is not None and x.shape is not None:
        try:
            normalize_axis(int(ctx.attrs.get("axis", -1)), len(x.shape), "attribute axis: ")
        except ValueError as e:
            raise ctx.fail(str(e)) from None
    return [same_as(x)]


def _k_mvn(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MeanVarianceNormalization (spec: function body of MVN-13):
    Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over ``axes``."""
    x = inputs[0]
    cd = compute_dtype(x.dtype)
    axes = tuple(normalize_axes(attrs.get("axes", [0, 2, 3]), x.ndim))
    xc = x.astype(cd, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    std = np.sqrt(np.mean(d * d, axis=axes, keepdims=True))
    y = d / (std + cd.type(1e-9))
    return [y.astype(x.dtype, copy=False)]


def _infer_mvn(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; ``axes`` must be valid for X's rank."""
    x = ctx.input(0)
    if x is not None and x.shape is not None:
        try:
            normalize_axes(ctx.attrs.get("axes", [0, 2, 3]), len(x.shape), "attribute axes: ")
        except ValueError as e:
            raise ctx.fail(str(e)) from None
    return [same_as(x)]


def _k_lrn(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """LRN (spec: LRN-13): y = x / (bias + alpha / size * sum of x^2 over the
    [c - floor((size-1)/2), c + ceil((size-1)/2)] channel window) ^ beta."""
    x = inputs[0]
    size = int(attrs["size"])
    cd = compute_dtype(x.dtype)
    xc = x.astype(cd, copy=False)
    sq = xc * xc
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    # Zero-pad the channel axis and add `size` shifted slices: exact, no cumsum cancellation.
    pad = np.zeros((x.shape[0], c + lo + hi) + x.shape[2:], dtype=cd)
    pad[:, lo : lo + c] = sq
    acc = pad[:, 0:c].copy()
    for k in range(1, size):
        acc += pad[:, k : k + c]
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    acc *= cd.type(alpha / size)
    acc += cd.type(bias)
    y = xc / np.power(acc, cd.type(beta))
    return [y.astype(x.dtype, copy=False)]


def _k_rms_norm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """RMSNormalization (spec: RMSNormalization-23): over axes [axis, rank) in ``stash_type``,
    Y = X / sqrt(mean(X^2) + epsilon) * Scale (Scale broadcasts to the normalised dims).

    X is viewed as (rows, n): the row sums of squares go through ``einsum`` (as LayerNormalization's)."""
    x, scale = inputs[0], inputs[1]
    sd = _stash_dtype(attrs, x.dtype)
    axis = normalize_axis(int(attrs.get("axis", -1)), x.ndim)
    eps = sd.type(float(attrs.get("epsilon", 1e-5)))
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    xc = x.astype(sd, copy=False)
    if x.size == 0 or n == 0:
        ms = np.mean(xc * xc, axis=tuple(range(axis, x.ndim)), keepdims=True)
        return [(xc / np.sqrt(ms + eps) * scale.astype(sd, copy=False)).astype(x.dtype, copy=False)]
    x2 = np.ascontiguousarray(xc).reshape(-1, n)
    ms = np.einsum("ij,ij->i", x2, x2)
    ms *= sd.type(1.0 / n)
    ms += eps
    np.sqrt(ms, out=ms)
    np.divide(sd.type(1), ms, out=ms)
    y = x2 * ms[:, None]
    y = y.reshape(x.shape)
    y *= scale.astype(sd, copy=False)
    return [y.astype(x.dtype, copy=False)]


def _infer_rms_norm(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; ``axis`` within X's rank; Scale must broadcast to X's dims from ``axis``."""
    x, scale = ctx.input(0), ctx.input(1)
    if x is not None and x.shape is not None:
        try:
            axis = normalize_axis(int(ctx.attrs.get("axis", -1)), len(x.shape), "attribute axis: ")
        except ValueError as e:
            raise ctx.fail(str(e)) from None
        if scale is not None and scale.shape is not None:
            inner = x.shape[axis:]
            ok = len(scale.shape) <= len(inner) and all(
                s == 1 or not isinstance(s, int) or not isinstance(d, int) or s == d
                for s, d in zip(scale.shape[::-1], inner[::-1]))
            if not ok:
                raise ctx.fail(f"input scale {scale} does not broadcast to the normalised dims {list(inner)} of X {x}")
    return [same_as(x)]


def _infer_lrn(ctx: InferContext) -> list[TensorDesc]:
    """Y like X; ``size`` must be positive and X at least (N, C, D1)."""
    x = ctx.input(0)
    if int(ctx.attrs["size"]) < 1:
        raise ctx.fail(f"attribute size = {ctx.attrs['size']} must be >= 1")
    if x is not None and x.shape is not None and len(x.shape) < 3:
        raise ctx.fail(f"input X {x} must have rank >= 3 (N, C, D1, ...)")
    return [same_as(x)]


OPS: list[OpDef] = [
    OpDef("BatchNormalization", _infer_batch_norm, _k_batch_norm, since=1,
          attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}, out_kernel=_out_batch_norm),
    OpDef("InstanceNormalization", _infer_channelwise, _k_instance_norm, since=1, attrs={"epsilon": 1e-5}),
    OpDef("LayerNormalization", _infer_layer_norm, _k_layer_norm, since=17,
          attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1}),
    OpDef("RMSNormalization", _infer_rms_norm, _k_rms_norm, since=23,
          attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1}),
    OpDef("GroupNormalization", _infer_group_norm, _k_group_norm_18, since=18,
          attrs={"epsilon": 1e-5, "num_groups": REQUIRED, "stash_type": 1}),
    OpDef("GroupNormalization", _infer_group_norm, _k_group_norm_21, since=21,
          attrs={"epsilon": 1e-5, "num_groups": REQUIRED, "stash_type": 1}),
    OpDef("LpNormalization", _infer_lp_norm, _k_lp_norm, since=1, attrs={"axis": -1, "p": 2}),
    OpDef("MeanVarianceNormalization", _infer_mvn, _k_mvn, since=9, attrs={"axes": [0, 2, 3]}),
    OpDef("LRN", _infer_lrn, _k_lrn, since=1, attrs={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED}),
]
