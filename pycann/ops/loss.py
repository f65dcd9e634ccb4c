"""Loss ops (ONNX spec: NegativeLogLikelihoodLoss). SoftmaxCrossEntropyLoss is expanded from
its ONNX function body into LogSoftmax + NegativeLogLikelihoodLoss by the importer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import InferContext, OpDef


def _infer_nll(ctx: InferContext) -> list[TensorDesc]:
    x, t = ctx.input(0), ctx.input(1)
    dtype = x.dtype if x is not None else 1
    red = ctx.attrs["reduction"]
    if red not in ("none", "sum", "mean"):
        raise ctx.fail(f"attribute reduction={red!r} must be 'none', 'sum' or 'mean'")
    if red != "none":
        return [TensorDesc(dtype, ())]
    return [TensorDesc(dtype, None if t is None else t.shape)]


def _k_nll(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """NegativeLogLikelihoodLoss-13/22: loss[n, d..] = -x[n, t[n, d..], d..] * w[t], 0 where t == ignore_index.

    ``x`` is [N, C] or [N, C, d1, ...], ``t`` [N] or [N, d1, ...] (int), ``w`` [C] optional.
    mean divides by the sum of the weights of the counted targets.
    """
    x, t = inputs[0], inputs[1]
    w = inputs[2] if len(inputs) > 2 else None
    ignore = attrs.get("ignore_index")
    t = t.astype(np.int64)
    valid = np.ones(t.shape, dtype=bool) if ignore is None else t != int(ignore)
    c = x.shape[1]
    tc = np.where(valid, t, 0)
    if np.any((tc < 0) | (tc >= c)):
        raise ValueError(f"target values must lie in [0, {c}) or equal ignore_index={ignore}")
    picked = np.take_along_axis(x, tc[:, None, ...], axis=1)[:, 0, ...]
    weight = np.ones(t.shape, dtype=x.dtype) if w is None else w[tc].astype(x.dtype)
    weight = np.where(valid, weight, x.dtype.type(0))
    loss = (-picked * weight).astype(x.dtype)
    red = attrs["reduction"]
    if red == "none":
        return [loss]
    if red == "sum":
        return [np.asarray(loss.sum(), dtype=x.dtype)]
    return [np.asarray(loss.sum() / weight.sum(), dtype=x.dtype)]


OPS: list[OpDef] = [
    OpDef("NegativeLogLikelihoodLoss", _infer_nll, _k_nll, since=12, attrs={"reduction": "mean"}),
]
