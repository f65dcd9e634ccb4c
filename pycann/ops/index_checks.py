"""Shape agreements of the gather/scatter family and Pad (ONNX Operators.md), for shape inference and kernels.

Shape inference checks them on the dims it knows; the kernels check them again per call, for dims
that were symbolic at compile time (the shape-generic plan runs kernels without inference). Without
these, numpy's reshape and broadcasting accept some operands the spec and ONNX Runtime refuse:
ScatterElements broadcast a (1, 1) ``updates`` over (1, 3) indices, ScatterND reshaped a (3, 1)
``updates`` into the (1, 3) it needs, GatherND paired index rows with the wrong batch, Pad
cropped a dim below 0 to an empty axis.
Each function returns the fault as text (the caller raises ``ctx.fail`` or ``ValueError``), or None.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pycann.dtypes import Dim, TensorDesc, from_numpy


def desc_of(x: np.ndarray) -> TensorDesc:
    """The desc of a run-time array (for messages worded as shape inference words them)."""
    return TensorDesc(from_numpy(x.dtype), tuple(int(d) for d in x.shape))


def _differ(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """Known to differ: other ranks, or two int dims that are not equal (symbolic dims pass)."""
    return len(a) != len(b) or any(isinstance(p, int) and isinstance(q, int) and p != q for p, q in zip(a, b))


def gather_nd_fault(x: TensorDesc, idx: TensorDesc, batch_dims: int) -> str | None:
    """GatherND: the first ``batch_dims`` dims of indices and data are the same."""
    if x.shape is None or idx.shape is None or len(idx.shape) <= batch_dims or len(x.shape) < batch_dims:
        return None
    if _differ(idx.shape[:batch_dims], x.shape[:batch_dims]):
        return (f"indices {idx} and data {x} differ in their first {batch_dims} (batch_dims) dims: "
                f"{list(idx.shape[:batch_dims])} vs {list(x.shape[:batch_dims])}")
    return None


def scatter_nd_fault(x: TensorDesc, idx: TensorDesc, upd: TensorDesc) -> str | None:
    """ScatterND: updates.shape == indices.shape[:-1] + data.shape[k:], k = indices.shape[-1] <= rank."""
    if x.shape is None or idx.shape is None or upd.shape is None or not idx.shape:
        return None
    k = idx.shape[-1]
    if not isinstance(k, int):
        return None
    if k > len(x.shape):
        return f"indices {idx} index {k} dims of data {x} of rank {len(x.shape)}"
    want = (*idx.shape[:-1], *x.shape[k:])
    if _differ(upd.shape, want):
        shown = ["?" if d is None else d for d in want]
        return f"updates {upd} must have shape {shown} (indices.shape[:-1] + data.shape[{k}:])"
    return None


def vector_input_fault(name: str, d: TensorDesc | None) -> str | None:
    """A shape-like input (Reshape/Expand 'shape', Tile 'repeats') is 1-D (the spec; ONNX Runtime
    refuses others, numpy would flatten them)."""
    if d is None or d.shape is None or len(d.shape) == 1:
        return None
    return f"input '{name}' {d} must be 1-D"


def require_vector_input(name: str, a: np.ndarray) -> None:
    """Kernels: ``vector_input_fault`` for a run-time operand, raised as ValueError. The common case
    (1-D) costs one ``ndim`` read: Reshape runs two dozen times a decode step on the generic plan."""
    if np.ndim(a) != 1:
        raise ValueError(vector_input_fault(name, desc_of(np.asarray(a))))


def scatter_elements_fault(x: TensorDesc, idx: TensorDesc, upd: TensorDesc) -> str | None:
    """ScatterElements: indices have data's rank and updates have indices' shape."""
    if x.shape is None or idx.shape is None or upd.shape is None:
        return None
    if len(idx.shape) != len(x.shape):
        return f"indices {idx} must have the rank {len(x.shape)} of data {x}"
    if _differ(upd.shape, idx.shape):
        return f"updates {upd} must have the shape of indices {idx}"
    return None


def pad_fault(dims: Sequence[Dim], begin: list[int], end: list[int], mode: str) -> str | None:
    """What the pads cannot do to these dims (symbolic ones pass), as shape inference says it; None if
    they fit. A crop may not pass below 0 (in constant mode, the padded dim); reflect mirrors at most d - 1 rows of the (cropped) dim d
    and edge (or wrap) needs a row to repeat (ONNX Runtime refuses both; numpy would repeat the reflection);
    neither mode may crop a non-empty input's axis to nothing (ONNX Runtime refuses that too)."""
    # an empty input gives an empty output whatever a reflect pad mirrors, so ONNX Runtime refuses only
    # padding an axis that is itself empty (as in edge mode): (0, 1) padded by 1 on axis 1 is (0, 3)
    empty = any(isinstance(d, int) and d == 0 for d in dims)
    # (a symbolic dim may be 0 at run time, where ONNX Runtime's empty-input path takes the crop: checked per call)
    full = all(isinstance(d, int) and d > 0 for d in dims)
    for a, (d, b, e) in enumerate(zip(dims, begin, end)):
        if not isinstance(d, int):
            continue
        kept = d + min(b, 0) + min(e, 0)
        # constant mode pads, then crops (ONNX Runtime): a crop may reach into the other side's
        # padding (begin -4, end +2 on a dim of 3: one padding value), only the output may not be < 0
        if (d + b + e if mode == "constant" else kept) < 0:
            return "crops more than the dims of"
        if mode != "constant" and full and kept == 0:  # ORT: "zero effective input extent"
            return f"crops axis {a} to nothing in {mode} mode (no row left to mirror or repeat), in"
        if mode == "reflect" and empty and kept == 0 and max(b, e) > 0:
            return f"pads the empty axis {a} in reflect mode, in"
        if mode == "reflect" and not empty and max(b, e) > kept - 1 and max(b, e) > 0:
            return f"pads axis {a} by {max(b, e)} in reflect mode, more than its size {kept} - 1, in"
        if mode in ("edge", "wrap") and kept == 0 and max(b, e) > 0:
            return f"pads the empty axis {a} in {mode} mode, in"
    return None
