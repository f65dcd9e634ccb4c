"""Sequence and optional ops (ONNX spec, Operators.md): SequenceEmpty, SequenceConstruct,
SequenceInsert, SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence,
SequenceMap, Optional, OptionalHasElement, OptionalGetElement.

Run-time values: a sequence is a Python ``list`` of arrays and an optional is ``None`` (empty)
or its value (a tensor or a list). Lists are never mutated in place — a sequence may be a graph
input or be read by several nodes — so every op that changes one returns a new list.

Infer functions describe a sequence (or optional) by its element dtype with unknown shape and
``kind="sequence"`` (``"optional"``). Ops that make sequences or optionals are not foldable:
constant folding stores tensors only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import normalize_axis

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]
RunBody = Callable[[str, Sequence[Any]], Sequence[Any]]


def _seq_desc(dtype: int) -> TensorDesc:
    return TensorDesc(dtype, None, kind="sequence")


def _dtype(d: TensorDesc | None) -> int:
    return d.dtype if d is not None else 0


def _position(pos: Any, n: int, insert: bool, op: str) -> int:
    """A ``position`` input as an index into a sequence of length ``n`` (negative counts from the back).

    Valid range is [-n, n-1], or [-n, n] for SequenceInsert (n appends).
    """
    p = int(np.asarray(pos).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise IndexError(f"{op}: position {p} is out of range [{-n}, {hi}] for a sequence of length {n}")
    return p + n if p < 0 else p


def _as_list(seq: Any, op: str) -> list[np.ndarray]:
    if not isinstance(seq, (list, tuple)):
        raise TypeError(f"{op}: input must be a sequence (list of tensors), got {type(seq).__name__}")
    return list(seq)


# ------------------------------------------------------------------------- construction
def _k_sequence_empty(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """SequenceEmpty (opset 11): an empty sequence of element type ``dtype``."""
    return [[]]


def _infer_sequence_empty(ctx: InferContext) -> list[TensorDesc]:
    dt = ctx.attrs["dtype"]
    return [_seq_desc(int(DType.FLOAT) if dt is None else int(dt))]


def _k_sequence_construct(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """SequenceConstruct (opset 11): the inputs, in order, as one sequence."""
    return [list(inputs)]


def _infer_sequence_construct(ctx: InferContext) -> list[TensorDesc]:
    if not ctx.inputs:
        raise ctx.fail("SequenceConstruct needs at least one input tensor")
    dts = {d.dtype for d in ctx.inputs if d is not None and d.dtype}
    if len(dts) > 1:
        raise ctx.fail(f"all inputs must have one element type, got {[str(d) for d in ctx.inputs]}")
    return [_seq_desc(dts.pop() if dts else 0)]


# ---------------------------------------------------------------------- element access
def _k_sequence_insert(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """SequenceInsert (opset 11): ``tensor`` inserted at ``position`` (default: appended)."""
    seq = _as_list(inputs[0], "SequenceInsert")
    pos = inputs[2] if len(inputs) > 2 else None
    i = len(seq) if pos is None else _position(pos, len(seq), True, "SequenceInsert")
    return [seq[:i] + [inputs[1]] + seq[i:]]


def _infer_sequence_insert(ctx: InferContext) -> list[TensorDesc]:
    s, t = _dtype(ctx.input(0)), _dtype(ctx.input(1))
    if s and t and s != t:
        raise ctx.fail(f"tensor {ctx.input(1)} does not match the sequence element type {ctx.input(0)}")
    return [_seq_desc(s or t)]


def _k_sequence_at(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """SequenceAt (opset 11): the tensor at ``position`` (negative counts from the back)."""
    seq = _as_list(inputs[0], "SequenceAt")
    return [seq[_position(inputs[1], len(seq), False, "SequenceAt")]]


def _infer_sequence_at(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(_dtype(ctx.input(0)), None)]


def _k_sequence_erase(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """SequenceErase (opset 11): the sequence without the tensor at ``position`` (default: the last)."""
    seq = _as_list(inputs[0], "SequenceErase")
    pos = inputs[1] if len(inputs) > 1 else None
    if pos is None:
        if not seq:
            raise IndexError("SequenceErase: cannot erase from an empty sequence")
        i = len(seq) - 1
    else:
        i = _position(pos, len(seq), False, "SequenceErase")
    return [seq[:i] + seq[i + 1 :]]


def _infer_same_seq(ctx: InferContext) -> list[TensorDesc]:
    return [_seq_desc(_dtype(ctx.input(0)))]


def _k_sequence_length(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """SequenceLength (opset 11): the number of tensors, an int64 scalar."""
    return [np.array(len(_as_list(inputs[0], "SequenceLength")), dtype=np.int64)]


def _infer_sequence_length(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(int(DType.INT64), ())]


# ------------------------------------------------------------------- split / concatenate
def _k_split_to_sequence(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """SplitToSequence (opset 11): split along ``axis`` by ``split`` (scalar chunk size or sizes).

    Without ``split`` every slice has length 1, and ``keepdims=0`` removes the split axis.
    """
    x = np.asarray(inputs[0])
    axis = normalize_axis(int(attrs["axis"]), x.ndim, "SplitToSequence: ")
    dim = x.shape[axis]
    split = inputs[1] if len(inputs) > 1 else None
    if split is None:
        parts = np.split(x, dim, axis=axis) if dim else []
        if not attrs["keepdims"]:
            parts = [np.squeeze(p, axis=axis) for p in parts]
        return [parts]
    split = np.asarray(split)
    if split.ndim == 0:
        chunk = int(split)
        if chunk <= 0:
            raise ValueError(f"SplitToSequence: scalar 'split' must be positive, got {chunk}")
        bounds = list(range(chunk, dim, chunk))
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise ValueError(f"SplitToSequence: 'split' {sizes} does not sum to the axis length {dim}")
        bounds = np.cumsum(sizes)[:-1].tolist()
    return [list(np.split(x, bounds, axis=axis))]


def _infer_split_to_sequence(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is not None and x.shape is not None:
        try:
            normalize_axis(int(ctx.attrs["axis"]), len(x.shape))
        except ValueError as e:
            raise ctx.fail(f"attribute 'axis': {e}") from None
    s = ctx.input(1)
    if s is not None and s.shape is not None and len(s.shape) > 1:
        raise ctx.fail(f"input 'split' must be a scalar or 1-D, got {s}")
    return [_seq_desc(_dtype(x))]


def _k_concat_from_sequence(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ConcatFromSequence (opset 11): concatenate along ``axis``, or stack on a new one (``new_axis=1``)."""
    seq = _as_list(inputs[0], "ConcatFromSequence")
    if not seq:
        raise ValueError("ConcatFromSequence: the input sequence is empty")
    rank = np.ndim(seq[0])
    if attrs["new_axis"]:
        axis = normalize_axis(int(attrs["axis"]), rank + 1, "ConcatFromSequence: ")
        return [np.stack(seq, axis=axis)]
    axis = normalize_axis(int(attrs["axis"]), rank, "ConcatFromSequence: ")
    return [np.concatenate(seq, axis=axis)]


def _infer_concat_from_sequence(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(_dtype(ctx.input(0)), None)]


# ---------------------------------------------------------------------------- SequenceMap
def _k_sequence_map(inputs: Inputs, attrs: Attrs, run_body: RunBody) -> list[Any]:
    """SequenceMap (opset 17): run ``body`` once per element of the first sequence.

    Sequence inputs feed their i-th element, tensor inputs feed themselves; each body output
    is collected into an output sequence.
    """
    seq = _as_list(inputs[0], "SequenceMap")
    rest = list(inputs[1:])
    for j, r in enumerate(rest, 1):
        if isinstance(r, list) and len(r) != len(seq):
            raise ValueError(f"SequenceMap: input {j} has {len(r)} tensors but input 0 has {len(seq)}")
    outs: list[list[Any]] = [[] for _ in range(int(attrs["_n_outputs"]))]
    for i, x in enumerate(seq):
        feeds = [x] + [r[i] if isinstance(r, list) else r for r in rest]
        for lst, v in zip(outs, run_body("body", feeds)):
            lst.append(v)
    return outs


def _infer_sequence_map(ctx: InferContext) -> list[TensorDesc]:
    body = ctx.attrs["body"]
    if len(body.inputs) != len(ctx.inputs):
        raise ctx.fail(f"body has {len(body.inputs)} inputs but the node has {len(ctx.inputs)}")
    if len(body.outputs) != ctx.n_outputs:
        raise ctx.fail(f"body has {len(body.outputs)} outputs but the node has {ctx.n_outputs}")
    return [_seq_desc(_dtype(body.descs.get(o))) for o in body.outputs]


# ------------------------------------------------------------------------------ optional
def _k_optional(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """Optional (opset 15): an optional holding the input, or empty (None) without one."""
    return [inputs[0] if inputs else None]


def _infer_optional(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None and ctx.attrs.get("type") is None:
        raise ctx.fail("an Optional without input needs the 'type' attribute")
    return [TensorDesc(_dtype(x) or int(ctx.attrs.get("type") or 0), None, kind="optional")]


def _k_optional_has_element(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """OptionalHasElement (opset 18): false for an empty optional or an omitted input, else true."""
    return [np.array(bool(inputs) and inputs[0] is not None)]


def _infer_optional_has_element(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(int(DType.BOOL), ())]


def _k_optional_get_element(inputs: Inputs, attrs: Attrs) -> list[Any]:
    """OptionalGetElement (opset 18): the optional's value (a tensor or sequence passes through)."""
    if inputs[0] is None:
        raise ValueError("OptionalGetElement: the optional input is empty")
    return [inputs[0]]


def _infer_optional_get_element(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None:
        return [TensorDesc(0, None)]
    # an optional's element may be a tensor or a sequence; its desc does not say which
    return [TensorDesc(x.dtype, x.shape, x.format, "sequence" if x.kind == "sequence" else "tensor")]


OPS: list[OpDef] = [
    OpDef("SequenceEmpty", _infer_sequence_empty, _k_sequence_empty, since=11, attrs={"dtype": None},
          foldable=False),
    OpDef("SequenceConstruct", _infer_sequence_construct, _k_sequence_construct, since=11, foldable=False),
    OpDef("SequenceInsert", _infer_sequence_insert, _k_sequence_insert, since=11, foldable=False),
    OpDef("SequenceAt", _infer_sequence_at, _k_sequence_at, since=11, foldable=False),
    OpDef("SequenceErase", _infer_same_seq, _k_sequence_erase, since=11, foldable=False),
    OpDef("SequenceLength", _infer_sequence_length, _k_sequence_length, since=11, foldable=False),
    OpDef("SplitToSequence", _infer_split_to_sequence, _k_split_to_sequence, since=11,
          attrs={"axis": 0, "keepdims": 1}, foldable=False),
    OpDef("ConcatFromSequence", _infer_concat_from_sequence, _k_concat_from_sequence, since=11,
          attrs={"axis": REQUIRED, "new_axis": 0}, foldable=False),
    OpDef("SequenceMap", _infer_sequence_map, _k_sequence_map, since=17, attrs={"body": REQUIRED},
          scoped=True, foldable=False),
    OpDef("Optional", _infer_optional, _k_optional, since=15, attrs={"type": None}, foldable=False),
    # opset 18 widened the input types (plain tensors/sequences) and made the input optional;
    # those semantics include opset 15's, so one definition serves both.
    OpDef("OptionalHasElement", _infer_optional_has_element, _k_optional_has_element, since=15,
          foldable=False),
    OpDef("OptionalGetElement", _infer_optional_get_element, _k_optional_get_element, since=15,
          foldable=False),
]
