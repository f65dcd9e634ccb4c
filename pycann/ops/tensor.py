"""Shape and view ops (ONNX spec, Operators.md): Constant, Identity, Shape, Size, Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Concat, Split.

Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose and Split return numpy *views* of
their input where possible: the executor treats kernel outputs as read-only, so no copy is needed.

Split and the output count: the kernel cannot see how many outputs its node has, so when neither
the ``split`` input nor the ``num_outputs`` attribute is given it reads ``attrs["_n_outputs"]``,
which the executor fills in; infer uses ``ctx.n_outputs``.

Expand/Tile, generators (Range, ConstantOfShape, EyeLike, Trilu), DepthToSpace/SpaceToDepth and
Dropout live in ``tensor_gen``; gather/scatter/slice/pad, TopK, Unique and NonZero in
``indexing``. The helpers below are shared by those modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc, from_numpy
from pycann.ops.index_checks import require_vector_input, vector_input_fault
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import (
    const_ints,
    dims_prod,
    dtype_of,
    infer_axes,
    infer_axis,
    int_dims,
    ints,
    merge_dim,
    normalize_axes,
    normalize_axis,
    rank_of,
    same_as,
    vec_len,
)

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


# --------------------------------------------------------------------------- Constant
_CONST_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                "value_strings", "sparse_value")


def tensor_attr(v: Any) -> np.ndarray:
    """A TENSOR attribute as ndarray (tolerates an ``onnx.TensorProto`` as well)."""
    if isinstance(v, np.ndarray):
        return v
    from onnx import numpy_helper

    return numpy_helper.to_array(v)


def astr(v: Any) -> str:
    """A STRING attribute as ``str`` (the importer may hand over ``bytes``)."""
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _constant_value(attrs: Attrs) -> np.ndarray:
    set_ = [k for k in _CONST_ATTRS if attrs.get(k) is not None]
    if len(set_) != 1:
        raise ValueError(f"Constant needs exactly one of {_CONST_ATTRS}, got {set_}")
    k = set_[0]
    v = attrs[k]
    if k == "value":
        return tensor_attr(v)
    if k == "value_float":
        return np.array(v, np.float32)
    if k == "value_floats":
        return np.array(v, np.float32).reshape(-1)
    if k == "value_int":
        return np.array(v, np.int64)
    if k == "value_ints":
        return np.array(v, np.int64).reshape(-1)
    if k == "value_string":
        return np.array(astr(v), dtype=object)
    if k == "value_strings":
        return np.array([astr(s) for s in v], dtype=object).reshape(-1)
    raise ValueError("Constant: sparse_value is not supported by pycann")


def _k_constant(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Constant (Operators.md): the single value attribute as a tensor."""
    return [_constant_value(attrs)]


def _infer_constant(ctx: InferContext) -> list[TensorDesc]:
    try:
        v = _constant_value(ctx.attrs)
    except (ValueError, TypeError) as e:
        raise ctx.fail(str(e)) from None
    return [TensorDesc(from_numpy(v.dtype), tuple(v.shape))]


# --------------------------------------------------------------------------- Identity / Shape / Size
def _k_identity(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Identity (Operators.md): the input itself."""
    return [inputs[0]]


def _infer_same(ctx: InferContext) -> list[TensorDesc]:
    return [same_as(ctx.input(0))]


def _shape_range(rank: int, attrs: Attrs) -> tuple[int, int]:
    """Shape-15 start/end: negative counts from the back, both clamped to [0, rank]."""
    start, end = attrs["start"], attrs["end"]
    end = rank if end is None else end
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, end


def _k_shape(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Shape (Operators.md, opset 15 start/end)."""
    x = inputs[0]
    s, e = _shape_range(x.ndim, attrs)
    return [np.array(x.shape[s:e], dtype=np.int64).reshape(-1)]


def _infer_shape(ctx: InferContext) -> list[TensorDesc]:
    r = rank_of(ctx.input(0))
    if r is None:
        return [TensorDesc(DType.INT64, (None,))]
    s, e = _shape_range(r, ctx.attrs)
    return [TensorDesc(DType.INT64, (max(e - s, 0),))]


def _k_size(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Size (Operators.md): element count as an int64 scalar."""
    return [np.array(inputs[0].size, dtype=np.int64)]


def _infer_size(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(DType.INT64, ())]


# --------------------------------------------------------------------------- Reshape / Flatten
def _k_reshape(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Reshape (Operators.md): 0 copies the input dim unless allowzero=1; one -1 is inferred."""
    require_vector_input("shape", inputs[1])  # (as shape inference says it, for a shape input of unknown rank)
    x, shape = inputs[0], ints(inputs[1])
    if not attrs["allowzero"]:
        shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(shape)]
    elif 0 in shape and -1 in shape:
        raise ValueError(_ALLOWZERO_BOTH.format(shape=shape))
    return [x.reshape(shape)]


_ALLOWZERO_BOTH = ("input 'shape' {shape} has both a 0 and a -1 with allowzero=1, which the ONNX spec makes invalid "
                   "(the -1 cannot be inferred from an output of 0 elements); give the size in place of -1, or "
                   "set allowzero=0 so that 0 copies the input's dim")


def _infer_reshape(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    dt = dtype_of(x)
    fault = vector_input_fault("shape", ctx.input(1))
    if fault:
        raise ctx.fail(fault)
    shape = const_ints(ctx, 1)
    if shape is None:
        n = vec_len(ctx.input(1))
        return [TensorDesc(dt, None if n is None else (None,) * n)]
    if shape.count(-1) > 1:
        raise ctx.fail(f"input 'shape' {shape} has more than one -1")
    if any(d < -1 for d in shape):
        raise ctx.fail(f"input 'shape' {shape} has a negative dim other than -1")
    if ctx.attrs["allowzero"] and 0 in shape and -1 in shape:
        raise ctx.fail(_ALLOWZERO_BOTH.format(shape=shape))
    in_shape = None if x is None else x.shape
    out: list[Dim] = []
    for i, d in enumerate(shape):
        if d == 0 and not ctx.attrs["allowzero"]:
            if in_shape is None:
                out.append(None)
            elif i >= len(in_shape):
                raise ctx.fail(f"input 'shape' {shape}: 0 at index {i} has no input dim to copy")
            else:
                out.append(in_shape[i])
        else:
            out.append(d)
    if -1 in shape:
        k = shape.index(-1)
        solved = _solve_minus_one(in_shape, [d for i, d in enumerate(out) if i != k])
        out[k] = solved
        if isinstance(solved, int) and solved < 0:
            raise ctx.fail(f"cannot reshape {x} to {shape}{_copied(shape, out, k)}: sizes do not divide")
    elif in_shape is not None and all(isinstance(d, int) for d in (*in_shape, *out)):
        if int(np.prod(out)) != int(np.prod(in_shape)):  # type: ignore[arg-type]
            raise ctx.fail(f"cannot reshape {x} to {shape}{_copied(shape, out)}: element counts differ")
    return [TensorDesc(dt, tuple(out))]


def _copied(shape: Sequence[int], out: Sequence[Dim], minus_one: int | None = None) -> str:
    """`` (its 0s copy the input's dims: [1, 8, 8])`` when a 0 of ``shape`` copied an input dim (the
    target a user reads, [1, 0, 8] of 0 elements, is not the one refused); empty otherwise."""
    if not any(d == 0 and o != 0 for d, o in zip(shape, out)):
        return ""
    dims = ["-1" if i == minus_one else str(o) for i, o in enumerate(out)]
    return f" (its 0s copy the input's dims: [{', '.join(dims)}]; allowzero=1 would read them as 0)"


def _solve_minus_one(in_shape: Sequence[Dim] | None, others: list[Dim]) -> Dim:
    """The -1 dim: input element count / the other output dims, cancelling shared symbols."""
    if in_shape is None:
        return None
    num = [d for d in in_shape if d != 1]
    den = [d for d in others if d != 1]
    for d in list(den):
        if not isinstance(d, int) and d is not None and d in num:
            num.remove(d)
            den.remove(d)
    den_ints = int_dims(den)
    if den_ints is None:
        return None
    dn = int(np.prod(den_ints)) if den_ints else 1
    num_ints = int_dims(num)
    if num_ints is not None:
        nn = int(np.prod(num_ints)) if num_ints else 1
        if dn == 0:
            return None
        return nn // dn if nn % dn == 0 else -1
    if dn == 1 and len(num) == 1:
        return num[0]
    return None


def _flatten_axis(axis: int, rank: int) -> int:
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten: axis {axis} is out of range [-{rank}, {rank}]")
    return axis + rank if axis < 0 else axis


def _k_flatten(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Flatten (Operators.md): 2-D [prod(d[:axis]), prod(d[axis:])]."""
    x = inputs[0]
    a = _flatten_axis(attrs["axis"], x.ndim)
    rows = int(np.prod(x.shape[:a], dtype=np.int64))
    cols = int(np.prod(x.shape[a:], dtype=np.int64))
    return [x.reshape(rows, cols)]


def _infer_flatten(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(dtype_of(x), (None, None))]
    try:
        a = _flatten_axis(ctx.attrs["axis"], len(x.shape))
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    return [TensorDesc(x.dtype, (dims_prod(x.shape[:a]), dims_prod(x.shape[a:])))]


# --------------------------------------------------------------------------- Transpose
def _perm(attrs: Attrs, rank: int) -> list[int]:
    p = attrs["perm"]
    return list(range(rank))[::-1] if p is None else [int(i) for i in p]


def _k_transpose(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Transpose (Operators.md): ``perm`` defaults to reversing the axes. Returns a view."""
    x = inputs[0]
    return [np.transpose(x, _perm(attrs, x.ndim))]


def _infer_transpose(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [same_as(x)]
    r = len(x.shape)
    p = _perm(ctx.attrs, r)
    if sorted(infer_axes(ctx, p, r, "attribute 'perm'")) != list(range(r)) or len(p) != r:
        raise ctx.fail(f"attribute 'perm' {p} is not a permutation of {r} axes")
    return [TensorDesc(x.dtype, tuple(x.shape[i] for i in p))]


# --------------------------------------------------------------------------- Squeeze / Unsqueeze
def _k_squeeze(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Squeeze (Operators.md): remove the given 1-dims, or every 1-dim when ``axes`` is absent."""
    x = inputs[0]
    axes = inputs[1] if len(inputs) > 1 else None
    if axes is None or axes.size == 0:  # ORT squeezes every 1-dim for an empty axes tensor too
        return [np.squeeze(x)]
    ax = normalize_axes(ints(axes), x.ndim, "Squeeze: ")
    bad = [a for a in ax if x.shape[a] != 1]
    if bad:
        raise ValueError(f"Squeeze: axes {bad} of shape {x.shape} are not 1")
    return [np.squeeze(x, axis=tuple(ax))]


def _infer_squeeze(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [same_as(x)]
    r = len(x.shape)
    axes = const_ints(ctx, 1)
    if ctx.input(1) is None or axes == [] or vec_len(ctx.input(1)) == 0:
        if any(not isinstance(d, int) for d in x.shape):
            return [TensorDesc(x.dtype, None)]  # an unknown dim may or may not be 1
        return [TensorDesc(x.dtype, tuple(d for d in x.shape if d != 1))]
    if axes is None:
        n = vec_len(ctx.input(1))
        return [TensorDesc(x.dtype, None if n is None else (None,) * max(r - n, 0))]
    ax = infer_axes(ctx, axes, r, "input 'axes'")
    for a in ax:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ctx.fail(f"input 'axes' {axes}: dim {a} of {x} is {x.shape[a]}, not 1")
    return [TensorDesc(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in ax))]


def _k_unsqueeze(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Unsqueeze (Operators.md): insert 1-dims at ``axes`` (relative to the output rank)."""
    x = inputs[0]
    axes = ints(inputs[1])
    shape = list(x.shape)
    for a in sorted(normalize_axes(axes, x.ndim + len(axes), "Unsqueeze: ")):
        shape.insert(a, 1)
    return [x.reshape(shape)]  # a view, as np.expand_dims gives, at a third of its cost (decode runs ~70 a step)


def _infer_unsqueeze(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    axes = const_ints(ctx, 1)
    if x is None or x.shape is None:
        return [same_as(x)]
    if axes is None:
        n = vec_len(ctx.input(1))
        return [TensorDesc(x.dtype, None if n is None else (None,) * (len(x.shape) + n))]
    r = len(x.shape) + len(axes)
    ax = set(infer_axes(ctx, axes, r, "input 'axes'"))
    it = iter(x.shape)
    return [TensorDesc(x.dtype, tuple(1 if i in ax else next(it) for i in range(r)))]


# --------------------------------------------------------------------------- Concat / Split
def _k_concat(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Concat (Operators.md): join along ``axis`` (negative allowed); zero-sized inputs are fine."""
    xs = [x for x in inputs if x is not None]
    if len(xs) == 1:
        return [xs[0]]
    return [np.concatenate(xs, axis=normalize_axis(attrs["axis"], xs[0].ndim, "Concat: "))]


def _out_concat(inputs: Inputs, attrs: Attrs, outs: Sequence[np.ndarray]) -> None:
    """``_k_concat`` into the executor's arena view: one copy of each input into its slice."""
    xs = [x for x in inputs if x is not None]
    out = outs[0]
    if len(xs) > 1 and all(x.dtype == out.dtype for x in xs):
        np.concatenate(xs, axis=normalize_axis(attrs["axis"], xs[0].ndim, "Concat: "), out=out)
    else:
        out[...] = _k_concat(inputs, attrs)[0]


def _infer_concat(ctx: InferContext) -> list[TensorDesc]:
    ds = [d for d in ctx.inputs if d is not None]
    if not ds:
        raise ctx.fail("needs at least one input")
    shapes = [d.shape for d in ds if d.shape is not None]
    if not shapes:
        return [TensorDesc(ds[0].dtype, None)]
    r = len(shapes[0])
    if any(len(s) != r for s in shapes):
        raise ctx.fail(f"inputs {[str(d) for d in ds]} have different ranks")
    a = infer_axis(ctx, ctx.attrs["axis"], r)
    out: list[Dim] = []
    for i in range(r):
        if i == a:
            axis_dims = int_dims([s[i] for s in shapes])
            out.append(sum(axis_dims) if len(shapes) == len(ds) and axis_dims is not None else None)
            continue
        d: Dim = None
        for s in shapes:
            if isinstance(d, int) and isinstance(s[i], int) and d != s[i]:
                raise ctx.fail(f"inputs {[str(x) for x in ds]} differ on non-concat axis {i}")
            d = merge_dim(d, s[i])
        out.append(d)
    return [TensorDesc(ds[0].dtype, tuple(out))]


def _split_sizes(dim: int, split: list[int] | None, attrs: Attrs) -> list[int]:
    if split is not None:
        n_out = attrs.get("_n_outputs")  # (set by shape inference and the plan)
        if n_out is not None and len(split) != int(n_out):
            raise ValueError(f"Split: 'split' {split} has {len(split)} entries for {int(n_out)} outputs")
        if sum(split) != dim or any(s < 0 for s in split):
            raise ValueError(f"Split: 'split' {split} does not sum to the axis length {dim}")
        return split
    n = attrs.get("num_outputs") or attrs.get("_n_outputs")
    if not n:
        raise ValueError("Split: the output count is unknown (no 'split', 'num_outputs' or '_n_outputs')")
    n = int(n)
    if attrs.get("num_outputs"):
        # opset 18: chunks of ceil(dim / n); the last one takes the remainder
        c = -(-dim // n)
        # 6 into 4: 2, 2, 2 and an empty last output (ORT gives that too); 5 into 4: 2, 2, 2 and -1
        # (ORT: "would produce a negative final split")
        if n > 1 and (n - 1) * c > dim:
            raise ValueError(f"Split: num_outputs {n} cannot split axis length {dim}: chunks of ceil({dim}/{n}) = {c} "
                             f"leave nothing for the last output; use the 'split' input to give the sizes")
        return [max(min(c, dim - i * c), 0) for i in range(n)]
    if dim % n:
        raise ValueError(f"Split: axis length {dim} does not split evenly into {n} outputs")
    return [dim // n] * n


def _k_split(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Split (Operators.md, opset 18): by ``split`` sizes, ``num_outputs`` or the node's output count."""
    x = inputs[0]
    axis = normalize_axis(attrs["axis"], x.ndim, "Split: ")
    # an empty ``split`` tensor counts as absent (ORT does the same)
    split = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None and inputs[1].size else None
    sizes = _split_sizes(x.shape[axis], split, attrs)
    # views, as np.split gives, by basic slicing (np.split costs ~15 us more a call on short rows)
    index: list[slice] = [slice(None)] * x.ndim
    outs, start = [], 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        outs.append(x[tuple(index)])
        start += size
    return outs


def _infer_split(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    n_out = ctx.n_outputs
    if x is None or x.shape is None:
        return [same_as(x)] * n_out
    axis = infer_axis(ctx, ctx.attrs["axis"], len(x.shape))
    split = const_ints(ctx, 1) if ctx.input(1) is not None else None
    split = split or None
    if ctx.input(1) is not None and split is None and ctx.value(1) is None:
        sizes: list[Dim] = [None] * n_out
    elif isinstance(dim := x.shape[axis], int):
        try:
            sizes = list(_split_sizes(dim, split, {**ctx.attrs, "_n_outputs": n_out}))
        except ValueError as e:
            raise ctx.fail(str(e)) from None
    else:
        sizes = list(split) if split is not None else [None] * n_out
    return [TensorDesc(x.dtype, tuple(s if i == axis else d for i, d in enumerate(x.shape)))
            for s in sizes]


OPS: list[OpDef] = [
    OpDef("Constant", _infer_constant, _k_constant, since=1, attrs={k: None for k in _CONST_ATTRS}),
    OpDef("Identity", _infer_same, _k_identity, since=1),
    OpDef("Shape", _infer_shape, _k_shape, since=1, attrs={"start": 0, "end": None}),
    OpDef("Size", _infer_size, _k_size, since=1),
    # Reshape-1's ``shape`` attribute is rewritten into the input by the importer.
    OpDef("Reshape", _infer_reshape, _k_reshape, since=1, attrs={"allowzero": 0}),
    OpDef("Flatten", _infer_flatten, _k_flatten, since=1, attrs={"axis": 1}),
    OpDef("Transpose", _infer_transpose, _k_transpose, since=1, attrs={"perm": None}),
    OpDef("Squeeze", _infer_squeeze, _k_squeeze, since=1),
    OpDef("Unsqueeze", _infer_unsqueeze, _k_unsqueeze, since=1),
    OpDef("Concat", _infer_concat, _k_concat, since=1, attrs={"axis": 1}, out_kernel=_out_concat),  # opset 1: axis 1
    OpDef("Concat", _infer_concat, _k_concat, since=4, attrs={"axis": REQUIRED}, out_kernel=_out_concat),
    OpDef("Split", _infer_split, _k_split, since=1, attrs={"axis": 0, "num_outputs": None}),
]
