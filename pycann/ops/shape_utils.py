"""Shape helpers for infer functions: broadcasting and axis handling with symbolic dims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc

if TYPE_CHECKING:  # (opdef is a sibling the infer functions import anyway; a type only here)
    from pycann.ops.opdef import InferContext


def broadcast_shapes(*shapes: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """Numpy/ONNX multidirectional broadcasting (ONNX Broadcasting.md) over symbolic dims.

    Returns ``None`` if any rank is unknown. Raises ``ValueError`` on incompatible known dims.
    """
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = []
        for s in shapes:
            assert s is not None
            k = axis - (rank - len(s))
            dims.append(s[k] if k >= 0 else 1)
        known = {d for d in dims if isinstance(d, int) and d != 1}
        if len(known) > 1:
            raise ValueError(f"cannot broadcast dims {dims} at axis {axis}")
        if known:
            out.append(known.pop())
        elif all(d == 1 for d in dims):
            out.append(1)
        else:
            syms = {d for d in dims if d != 1}
            out.append(syms.pop() if len(syms) == 1 else None)
    return tuple(out)


def int_dims(dims: Sequence[Dim]) -> list[int] | None:
    """``dims`` as a list of ints, or ``None`` if any dim is not a known ``int``."""
    out = [d for d in dims if isinstance(d, int)]
    return out if len(out) == len(dims) else None


def normalize_axis(axis: int, rank: int, where: str = "") -> int:
    """Map a possibly negative axis into [0, rank). Raises ``ValueError`` if out of range."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{where}axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int], rank: int, where: str = "") -> list[int]:
    """Normalise several axes; raises ``ValueError`` on out-of-range or repeated axes."""
    out = [normalize_axis(int(a), rank, where) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{where}repeated axes {list(axes)}")
    return out


def same_as(desc: TensorDesc | None, dtype: int | None = None) -> TensorDesc:
    """A desc with the shape of ``desc`` and its dtype (or ``dtype``)."""
    if desc is None:
        return TensorDesc(dtype or 0, None)
    return TensorDesc(desc.dtype if dtype is None else dtype, desc.shape)


# ------------------------------------------------- helpers of the infer functions and kernels of every family
def ints(a: Any) -> list[int]:
    """A 0-d/1-D integer tensor (or list) as a Python int list."""
    return np.asarray(a).reshape(-1).tolist()


def const_ints(ctx: InferContext, i: int) -> list[int] | None:
    """Input ``i``'s compile-time value as ints, or None when not a known constant. Raises
    ``ShapeError`` for a non-integer tensor (shape, axes, pads, repeats, k are int64 in ONNX)."""
    v = ctx.value(i)
    if v is None:
        return None
    if np.asarray(v).dtype.kind not in "iu":
        raise ctx.fail(f"input {i} must be an integer tensor (int64), got {np.asarray(v).dtype}")
    return ints(v)


def vec_len(desc: TensorDesc | None) -> int | None:
    """Static length of a 1-D tensor desc (e.g. a shape/axes input), else None."""
    if desc is None or desc.shape is None or len(desc.shape) != 1:
        return None
    n = desc.shape[0]
    return n if isinstance(n, int) else None


def dim_mul(a: Dim, b: Dim) -> Dim:
    """Product of two dims; symbolic only when the other factor is 1."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return 0 if 0 in (a, b) else None


def dims_prod(dims: Sequence[Dim]) -> Dim:
    """Product of dims (see ``dim_mul``); used for Flatten's output dims."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def merge_dim(a: Dim, b: Dim) -> Dim:
    """Two views of one dim: prefer a known int, then a symbol."""
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a is not None else b


def rank_of(desc: TensorDesc | None) -> int | None:
    """Rank of a desc, None when unknown."""
    return None if desc is None or desc.shape is None else len(desc.shape)


def dtype_of(desc: TensorDesc | None) -> int:
    """dtype of a desc (UNDEFINED when the input is absent)."""
    return 0 if desc is None else desc.dtype


def infer_axes(ctx: InferContext, axes: Sequence[int], rank: int, what: str) -> list[int]:
    """Normalised axes for an infer function; ``ctx.fail`` (not ValueError) when invalid."""
    try:
        if rank == 0 and len(axes):
            raise ValueError("a scalar has no axes")
        return normalize_axes(axes, rank)
    except ValueError as e:
        raise ctx.fail(f"{what} {list(axes)} is invalid for rank {rank}: {e}") from None


def infer_axis(ctx: InferContext, axis: int, rank: int, what: str = "attribute 'axis'") -> int:
    """One normalised axis (the input must have rank >= 1) or ``ctx.fail``."""
    return infer_axes(ctx, [axis], rank, what)[0]
