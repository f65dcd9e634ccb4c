"""Selection ops (ONNX spec, Operators.md): TopK, Unique, NonZero: outputs whose order or size the
data decides (ties broken as ONNX Runtime breaks them: stable, lower index first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import const_ints, dtype_of, infer_axis, ints, normalize_axis

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


def _stable_order(v: np.ndarray, largest: bool) -> np.ndarray:
    """Per-row sort order of a 2-D array; ties keep the lower column first."""
    if not largest:
        return np.argsort(v, axis=1, kind="stable")
    # stable ascending sort of the reversed rows, read backwards: descending with ties by lower
    # column (negating would break unsigned ints and -0.0/NaN ordering)
    return (v.shape[1] - 1) - np.argsort(v[:, ::-1], axis=1, kind="stable")[:, ::-1]


def _partition_topk(rows: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Columns of the top ``k`` of each row in O(n): partition to find the k-th value, keep the
    values beyond it plus the lowest-index ties, then sort just those ``k``."""
    r, n = rows.shape
    if largest:
        thr = np.partition(rows, n - k, axis=1)[:, n - k:n - k + 1]
        mask = rows >= thr
    else:
        thr = np.partition(rows, k - 1, axis=1)[:, k - 1:k]
        mask = rows <= thr
    if np.count_nonzero(mask) != r * k:  # more ties at the threshold than places: lowest indices win
        eq = rows == thr
        mask &= ~eq
        need = k - np.count_nonzero(mask, axis=1, keepdims=True)
        mask |= eq & (np.cumsum(eq, axis=1) <= need)
    cols = (np.flatnonzero(mask) % n).reshape(r, k)  # ascending column order within each row
    return np.take_along_axis(cols, _stable_order(np.take_along_axis(rows, cols, axis=1), largest), axis=1)


def _k_topk(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """TopK (Operators.md, opset 11): ties go to the lower index (stable), as in ONNX Runtime.

    Results are always sorted, which is a valid answer for ``sorted=0`` as well.
    """
    x, ks = inputs[0], ints(inputs[1])
    if len(ks) != 1:  # (shape inference's check, for a K it did not know)
        raise ValueError(f"input 'K' must hold one value, got {ks}")
    k = ks[0]
    axis = normalize_axis(attrs["axis"], x.ndim, "TopK: ")
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: k={k} is out of range for axis {axis} of length {n}")
    xm = np.moveaxis(x, axis, -1)
    rows = xm.reshape(-1, n)
    largest = bool(attrs["largest"])
    has_nan = rows.dtype.kind not in "biu" and bool(np.isnan(rows).any())
    if k == 0 or rows.shape[0] == 0:
        cols = np.zeros((rows.shape[0], k), np.int64)
    elif 2 * k <= n and not has_nan:  # NaN breaks the threshold comparisons
        cols = _partition_topk(rows, k, largest)
    else:
        cols = _stable_order(rows, largest)[:, :k]
    cols = cols.astype(np.int64, copy=False)
    idx = np.moveaxis(cols.reshape((*xm.shape[:-1], k)), -1, axis)
    return [np.take_along_axis(x, idx, axis=axis), idx]


def _infer_topk(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    k = const_ints(ctx, 1)
    if k is not None and len(k) != 1:
        raise ctx.fail(f"input 'K' must hold one value, got {k}")
    if x is None or x.shape is None:
        return [TensorDesc(dtype_of(x), None), TensorDesc(DType.INT64, None)]
    a = infer_axis(ctx, ctx.attrs["axis"], len(x.shape))
    d = x.shape[a]
    if k is not None and isinstance(d, int) and not 0 <= k[0] <= d:
        raise ctx.fail(f"input 'K' = {k[0]} is out of range for axis {a} of {x}")
    shape = tuple((None if k is None else k[0]) if i == a else s for i, s in enumerate(x.shape))
    return [TensorDesc(x.dtype, shape), TensorDesc(DType.INT64, shape)]


def _k_unique(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Unique (Operators.md): Y, first-occurrence indices, inverse indices, counts (int64)."""
    x = inputs[0]
    axis = attrs["axis"]
    if axis is None:
        src, ax = x.reshape(-1), 0
    else:
        src, ax = x, normalize_axis(axis, x.ndim, "Unique: ")
    y, first, inv, cnt = np.unique(src, return_index=True, return_inverse=True, return_counts=True,
                                   axis=None if axis is None else ax)
    inv = inv.reshape(-1)
    if not attrs["sorted"]:
        order = np.argsort(first, kind="stable")  # order of first occurrence
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y, first, cnt, inv = np.take(y, order, axis=ax), first[order], cnt[order], rank[inv]
    return [y, *(a.astype(np.int64, copy=False) for a in (first, inv, cnt))]


def _infer_unique(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    axis = ctx.attrs["axis"]
    n_inv: Dim = None
    if x is None or x.shape is None:
        y = TensorDesc(dtype_of(x), (None,) if axis is None else None)
    elif axis is None:
        y = TensorDesc(x.dtype, (None,))
        n_inv = x.numel()
    else:
        a = infer_axis(ctx, axis, len(x.shape))
        y = TensorDesc(x.dtype, tuple(None if i == a else d for i, d in enumerate(x.shape)))
        n_inv = x.shape[a]
    i64 = DType.INT64
    return [y, TensorDesc(i64, (None,)), TensorDesc(i64, (n_inv,)), TensorDesc(i64, (None,))]


def _k_nonzero(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """NonZero (Operators.md): [rank, nnz] int64 indices; a scalar counts as shape [1] (as in ORT)."""
    x = inputs[0]
    x = x.reshape(1) if x.ndim == 0 else x
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


def _infer_nonzero(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    r = None if x is None or x.shape is None else max(len(x.shape), 1)
    return [TensorDesc(DType.INT64, (r, None))]


OPS: list[OpDef] = [
    # TopK-1's ``k`` attribute becomes the input (importer); largest/sorted (11) default to TopK-1's behaviour
    OpDef("TopK", _infer_topk, _k_topk, since=1, attrs={"axis": -1, "largest": 1, "sorted": 1}),
    OpDef("Unique", _infer_unique, _k_unique, since=11, attrs={"axis": None, "sorted": 1}),
    OpDef("NonZero", _infer_nonzero, _k_nonzero, since=9),
]
