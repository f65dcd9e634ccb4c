"""Random ops (ONNX spec, Operators.md): RandomNormal, RandomUniform, RandomNormalLike,
RandomUniformLike, Bernoulli (15) and Multinomial (7). Part of the ``pycann.ops.misc`` family.

All are ``foldable=False`` so the compiler never evaluates them at build time. With a ``seed``
attribute a node returns the same values on every call (numpy's PCG64 seeded from the float's
bits; values differ from ONNX Runtime's generator, only the distributions agree); without one
every call draws fresh values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, to_numpy
from pycann.ops.opdef import REQUIRED, InferContext, OpDef


def _rng(attrs: Mapping[str, Any]) -> np.random.Generator:
    seed = attrs.get("seed")
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(int(np.array(float(seed), np.float64).view(np.uint64)))


def _dtype(ctx: InferContext, default: int | None) -> int:
    dt = ctx.attrs.get("dtype")
    dt = int(dt) if dt is not None else default
    if dt is None:
        return 0
    try:
        np_dt = to_numpy(dt)
    except TypeError:
        raise ctx.fail(f"attribute 'dtype' {dt} is not a tensor dtype") from None
    if np_dt.kind not in "fiub":
        raise ctx.fail(f"attribute 'dtype' {dt} is not a numeric dtype")
    return dt


def _like_dtype(x: Sequence[Any], a: Mapping[str, Any]) -> np.dtype:
    return to_numpy(int(a["dtype"])) if a.get("dtype") is not None else x[0].dtype


def _normal(rng: np.random.Generator, shape: tuple[int, ...], a: Mapping[str, Any], dt: np.dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * float(a["scale"]) + float(a["mean"])).astype(dt)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], a: Mapping[str, Any], dt: np.dtype) -> np.ndarray:
    lo, hi = float(a["low"]), float(a["high"])
    return (rng.random(shape) * (hi - lo) + lo).astype(dt)


def _k_random_normal(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """RandomNormal (Operators.md#RandomNormal): N(mean, scale^2) of attribute ``shape``."""
    return [_normal(_rng(a), tuple(int(d) for d in a["shape"]), a, to_numpy(int(a["dtype"])))]


def _k_random_uniform(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """RandomUniform (Operators.md#RandomUniform): U[low, high) of attribute ``shape``."""
    return [_uniform(_rng(a), tuple(int(d) for d in a["shape"]), a, to_numpy(int(a["dtype"])))]


def _k_random_normal_like(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """RandomNormalLike (Operators.md#RandomNormalLike): the input's shape (and dtype)."""
    return [_normal(_rng(a), x[0].shape, a, _like_dtype(x, a))]


def _k_random_uniform_like(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """RandomUniformLike (Operators.md#RandomUniformLike): the input's shape (and dtype)."""
    return [_uniform(_rng(a), x[0].shape, a, _like_dtype(x, a))]


def _k_bernoulli(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Bernoulli (Operators.md#Bernoulli): 1 with the input's probability, else 0."""
    p = np.asarray(x[0], np.float64)
    return [(_rng(a).random(p.shape) < p).astype(_like_dtype(x, a))]


def _k_multinomial(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Multinomial (Operators.md#Multinomial): ``sample_size`` class indices per row, drawn
    from softmax(input) (the input holds unnormalised log-probabilities)."""
    logits = np.asarray(x[0], np.float64)
    n = int(a["sample_size"])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(p, axis=1)
    cdf /= cdf[:, -1:]
    u = _rng(a).random((logits.shape[0], n))
    idx = np.stack([np.searchsorted(cdf[b], u[b], side="right") for b in range(logits.shape[0])]) \
        if logits.shape[0] else np.zeros((0, n), np.int64)
    return [np.minimum(idx, logits.shape[1] - 1).astype(to_numpy(int(a["dtype"])))]


def _infer_random(ctx: InferContext) -> list[TensorDesc]:
    shape = tuple(int(d) for d in ctx.attrs["shape"])
    if any(d < 0 for d in shape):
        raise ctx.fail(f"attribute 'shape' {list(shape)} has a negative dim")
    return [TensorDesc(_dtype(ctx, 1), shape)]


def _infer_like(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    dt = _dtype(ctx, x.dtype if x is not None else None)
    return [TensorDesc(dt, x.shape if x is not None else None)]


def _infer_multinomial(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    dt = _dtype(ctx, int(DType.INT32))
    if dt not in (DType.INT32, DType.INT64):
        raise ctx.fail(f"attribute 'dtype' {dt} must be INT32 (6) or INT64 (7)")
    n = int(ctx.attrs["sample_size"])
    if x is not None and x.shape is not None:
        if len(x.shape) != 2:
            raise ctx.fail(f"input has shape {x}; expected (batch_size, class_size)")
        return [TensorDesc(dt, (x.shape[0], n))]
    return [TensorDesc(dt, (None, n))]


_SEED = {"seed": None}

OPS: list[OpDef] = [
    OpDef("RandomNormal", _infer_random, _k_random_normal, since=1, foldable=False,
          attrs={**_SEED, "shape": REQUIRED, "dtype": 1, "mean": 0.0, "scale": 1.0}),
    OpDef("RandomUniform", _infer_random, _k_random_uniform, since=1, foldable=False,
          attrs={**_SEED, "shape": REQUIRED, "dtype": 1, "low": 0.0, "high": 1.0}),
    OpDef("RandomNormalLike", _infer_like, _k_random_normal_like, since=1, foldable=False,
          attrs={**_SEED, "dtype": None, "mean": 0.0, "scale": 1.0}),
    OpDef("RandomUniformLike", _infer_like, _k_random_uniform_like, since=1, foldable=False,
          attrs={**_SEED, "dtype": None, "low": 0.0, "high": 1.0}),
    OpDef("Bernoulli", _infer_like, _k_bernoulli, since=15, foldable=False, attrs={**_SEED, "dtype": None}),
    OpDef("Multinomial", _infer_multinomial, _k_multinomial, since=7, foldable=False,
          attrs={**_SEED, "dtype": int(DType.INT32), "sample_size": 1}),
]
