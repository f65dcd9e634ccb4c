"""Shape helpers for infer functions: broadcasting and axis handling with symbolic dims."""

from __future__ import annotations

from collections.abc import Sequence

from pycann.dtypes import Dim, TensorDesc


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
