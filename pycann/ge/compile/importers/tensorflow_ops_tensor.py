"""TensorFlow shape and data-movement ops -> ONNX ops (Reshape, StridedSlice, Concat, Pad, ...).

Semantics: tf.raw_ops. TensorFlow's shape tensors are int32 where ONNX wants int64: shape and
index inputs go through ``Emitter.int64`` (constants converted at import, others Cast).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pycann.dtypes import DType, to_numpy
from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_emit import INT64_MAX, TO_NCHW, TO_NHWC, Emitter
from pycann.ge.compile.importers.tensorflow_ops_math import NHWC_TO_NCHW_AXIS

Converter = Callable[[Emitter], list[str]]
INT64_MIN = np.iinfo(np.int64).min


def _axes(e: Emitter, values: list[int] | np.ndarray) -> str:
    return e.constant(np.asarray(values, np.int64).reshape(-1), "axes")


def reshape(e: Emitter) -> list[str]:
    c = e.const(1)
    allowzero = int(c is not None and bool((c == 0).any()))  # a TF 0 is an empty dim, never "copy"
    return [e.add("Reshape", [e.input(0), e.int64(e.input(1))], e.out(), allowzero=allowzero)]


def squeeze(e: Emitter) -> list[str]:
    dims = e.attr("squeeze_dims", []) or e.attr("axis", [])
    ins = [e.input(0)] + ([_axes(e, dims)] if dims else [])
    return [e.add("Squeeze", ins, e.out())]


def expand_dims(e: Emitter) -> list[str]:
    dim = e.need_const(1, "dim")
    return [e.add("Unsqueeze", [e.input(0), _axes(e, dim)], e.out())]


def concat(e: Emitter) -> list[str]:
    first_axis = e.op == "Concat"
    ins = e.inputs()
    axis_i = 0 if first_axis else len(ins) - 1
    axis = int(np.ravel(e.need_const(axis_i, "axis"))[0])
    vals = ins[1:] if first_axis else ins[:-1]
    if vals and all(v in e.twin for v in vals):
        y = e.add("Concat", [e.twin[v] for v in vals], axis=NHWC_TO_NCHW_AXIS[axis % 4])
        return [e.from_nchw(y, e.out())]
    return [e.add("Concat", vals, e.out(), axis=axis)]


def pack(e: Emitter) -> list[str]:
    axis = int(e.attr("axis", 0))
    ax = _axes(e, [axis])
    return [e.add("Concat", [e.add("Unsqueeze", [v, ax]) for v in e.inputs()], e.out(), axis=axis)]


def unpack(e: Emitter) -> list[str]:
    num, axis = int(e.attr("num")), int(e.attr("axis", 0))
    if num < 1:
        raise ModelError(f"{e.where()}: num {num} must be >= 1")
    parts = [e.names.fresh(f"{e.name}/part") for _ in range(num)]
    e.add_node("Split", [e.input(0)], parts, axis=axis, num_outputs=num)
    ax = _axes(e, [axis])
    return [e.add("Squeeze", [p, ax], e.out(i)) for i, p in enumerate(parts)]


def split(e: Emitter) -> list[str]:
    axis = int(np.ravel(e.need_const(0, "axis"))[0])
    num = int(e.attr("num_split"))
    if num < 1:  # (TF's own check; without it the node had no output: "no output 0" at the reader)
        raise ModelError(f"{e.where()}: num_split {num} must be >= 1")
    if e.graph is e.root:  # ONNX's Split of num_outputs makes the last part smaller; TF refuses it
        e.names.dim_checks.append((e.where(), e.input(1), axis, lambda d: None if d % num == 0 else
                                   f"axis {axis} of size {d} does not split into {num} equal parts (num_split)"))
    outs = [e.out(i) for i in range(num)]
    return e.add_node("Split", [e.input(1)], outs, axis=axis, num_outputs=num)


def split_v(e: Emitter) -> list[str]:
    sizes = [int(s) for s in np.ravel(e.need_const(1, "size_splits"))]
    axis = int(np.ravel(e.need_const(2, "split_dim"))[0])
    x = e.input(0)
    if -1 not in sizes:
        return e.add_node("Split", [x, _axes(e, sizes)], [e.out(i) for i in range(len(sizes))], axis=axis)
    # one size is "the rest": slices, the pieces after it counted from the end
    k = sizes.index(-1)
    outs = []
    for i, s in enumerate(sizes):
        if i < k:
            start, end = sum(sizes[:i]), sum(sizes[:i]) + s
        elif i == k:
            start, end = sum(sizes[:k]), -sum(sizes[k + 1:]) if k + 1 < len(sizes) else INT64_MAX
        else:
            start = -sum(sizes[i:])
            end = start + s if start + s < 0 else INT64_MAX
        outs.append(e.add("Slice", [x, _axes(e, [start]), _axes(e, [end]), _axes(e, [axis])], e.out(i)))
    return outs


def pad(e: Emitter) -> list[str]:
    p = e.need_const(1, "paddings").astype(np.int64)
    if (p < 0).any():  # TF refuses them; ONNX Pad crops by a negative pad: a different tensor, silently
        raise ModelError(f"{e.where()}: paddings {p.tolist()} hold a negative amount; TensorFlow's {e.op} "
                         "takes non-negative paddings only (crop with Slice)")
    mode = str(e.attr("mode", "CONSTANT")).upper()
    onnx_mode = {"CONSTANT": "constant", "REFLECT": "reflect"}.get(mode)
    if onnx_mode is None:
        raise ModelError(f"{e.where()}: MirrorPad mode {mode} has no ONNX equivalent (CONSTANT and REFLECT are supported)")
    x = e.input(0)
    value = [e.input(2)] if e.op == "PadV2" else []
    t = e.twin.get(x)
    if t is not None and p.shape[0] == 4:
        pn = p[TO_NCHW]
        y = e.add("Pad", [t, e.constant(np.concatenate([pn[:, 0], pn[:, 1]]), "pads"), *value], mode=onnx_mode)
        return [e.from_nchw(y, e.out())]
    return [e.add("Pad", [x, e.constant(np.concatenate([p[:, 0], p[:, 1]]), "pads"), *value], e.out(), mode=onnx_mode)]


def _bits(mask: int, n: int) -> list[bool]:
    return [bool(mask >> i & 1) for i in range(n)]


def strided_slice(e: Emitter) -> list[str]:
    """x[begin:end:strides] with TF's five masks, as Slice + Squeeze + Unsqueeze (no rank needed:
    dims after an ellipsis are addressed by negative axes)."""
    x = e.input(0)
    b, en, st = (e.const(i) for i in (1, 2, 3))
    masks = {k: int(e.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                            "shrink_axis_mask")}
    if b is None or en is None or st is None:
        if any(masks.values()):
            raise ModelError(f"{e.where()}: begin/end/strides computed at run time together with masks {masks}: "
                             "pycann needs them constant")
        count = e.add("Size", [e.input(1)])
        all_axes = e.add("Range", [e.constant(np.int64(0), "zero"), count, e.constant(np.int64(1), "one")])
        return [e.add("Slice", [x, e.int64(e.input(1)), e.int64(e.input(2)), all_axes, e.int64(e.input(3))], e.out())]
    b, en, st = (np.ravel(v).astype(np.int64) for v in (b, en, st))
    n = len(b)
    bm, em, elm, nam, sam = (_bits(masks[k], n) for k in masks)
    ell = elm.index(True) if any(elm) else None
    starts: list[int] = []
    ends: list[int] = []
    axes: list[int] = []
    steps: list[int] = []
    shrink: list[int] = []
    new_out: list[int] = []
    in_axis: int | None = 0
    out_pos = 0
    for j in range(n):
        later = range(j, n)
        if ell is not None and j == ell:
            in_axis = None
            continue
        if nam[j]:
            new_out.append(out_pos if in_axis is not None else -sum(1 for k in later if nam[k] or not sam[k]))
            out_pos += 1
            continue
        if in_axis is not None:
            ax, in_axis = in_axis, in_axis + 1
        else:
            ax = -sum(1 for k in later if not nam[k])
        s = int(st[j])
        if s == 0:
            raise ModelError(f"{e.where()}: stride 0 at position {j}")
        if sam[j]:
            start = int(b[j])
            starts.append(start)
            ends.append(start + 1 if start != -1 else INT64_MAX)
            steps.append(1)
            axes.append(ax)
            shrink.append(ax)
            continue
        starts.append(0 if bm[j] and s > 0 else INT64_MAX if bm[j] else int(b[j]))
        ends.append((INT64_MAX if s > 0 else INT64_MIN) if em[j] else int(en[j]))
        steps.append(s)
        axes.append(ax)
        out_pos += 1
    y = x
    if axes:
        y = e.add("Slice", [x, _axes(e, starts), _axes(e, ends), _axes(e, axes), _axes(e, steps)])
    if shrink:
        y = e.add("Squeeze", [y, _axes(e, shrink)])
    if new_out:
        y = e.add("Unsqueeze", [y, _axes(e, new_out)])
    return [e.add("Identity", [y], e.out())]


def _slice_fits(axis: int, b: int, s: int) -> Callable[[int], str | None]:
    end = b if s == -1 else b + s

    def check(d: int) -> str | None:
        return None if end <= d else f"begin {b} + size {s} on axis {axis} pass its size {d}"
    return check


def _check_slice(e: Emitter, begin: list[int], size: list[int]) -> None:
    """TF's Slice rules (ONNX's Slice clamps instead): 0 <= begin, size >= -1, and begin + size
    within each dim (checked once shapes are inferred)."""
    for axis, (b, s) in enumerate(zip(begin, size)):
        if b < 0 or s < -1:
            raise ModelError(f"{e.where()}: begin {begin} / size {size}: axis {axis} has begin {b}, size {s} "
                             "(TensorFlow needs begin >= 0 and size >= -1)")
        if e.graph is e.root:
            e.names.dim_checks.append((e.where(), e.input(0), axis, _slice_fits(axis, b, s)))


def slice_(e: Emitter) -> list[str]:
    begin, size = e.int64(e.input(1)), e.int64(e.input(2))
    bc, sc = e.root.initializers.get(begin), e.root.initializers.get(size)
    if bc is not None and sc is not None:
        _check_slice(e, np.ravel(bc).tolist(), np.ravel(sc).tolist())
    if bc is not None and sc is not None:
        ends = e.constant(np.where(sc == -1, INT64_MAX, bc + sc).astype(np.int64), "ends")
    else:
        big = e.constant(np.int64(INT64_MAX), "max")
        ends = e.add("Where", [e.add("Equal", [size, e.constant(np.int64(-1), "m1")]), big, e.add("Add", [begin, size])])
    axes = e.add("Range", [e.constant(np.int64(0), "zero"), e.add("Size", [begin]), e.constant(np.int64(1), "one")])
    return [e.add("Slice", [e.input(0), begin, ends, axes], e.out())]


def transpose(e: Emitter) -> list[str]:
    perm = [int(v) for v in np.ravel(e.need_const(1, "perm"))]
    x = e.input(0)
    t = e.twin.get(x)
    if t is not None and len(perm) == 4:  # x = twin.transpose(TO_NHWC): compose the permutations
        composed = [TO_NHWC[p] for p in perm]
        if composed == [0, 1, 2, 3]:
            return [e.add("Identity", [t], e.out())]
        return [e.add("Transpose", [t], e.out(), perm=composed)]
    return [e.add("Transpose", [x], e.out(), perm=perm)]


def gather(e: Emitter) -> list[str]:
    if int(e.attr("batch_dims", 0)) != 0:
        raise ModelError(f"{e.where()}: batch_dims={e.attr('batch_dims')} is not supported (0 only)")
    axis = 0 if e.op == "Gather" else int(np.ravel(e.need_const(2, "axis"))[0])
    return [e.add("Gather", [e.input(0), e.input(1)], e.out(), axis=axis)]


def _int_out(e: Emitter, y: str) -> str:
    out_type = e.dtype("out_type") if "out_type" in e.node.attr else DType.INT32
    return e.add("Cast", [y], e.out(), to=int(out_type))


def shape(e: Emitter) -> list[str]:
    return [_int_out(e, e.add("Shape", [e.input(0)]))]


def size(e: Emitter) -> list[str]:
    return [_int_out(e, e.add("Size", [e.input(0)]))]


def rank(e: Emitter) -> list[str]:
    return [e.add("Cast", [e.add("Size", [e.add("Shape", [e.input(0)])])], e.out(), to=int(DType.INT32))]


def fill(e: Emitter) -> list[str]:
    return [e.add("Expand", [e.input(1), e.int64(e.input(0))], e.out())]


def _like(value: int) -> Converter:
    def conv(e: Emitter) -> list[str]:
        dt = e.dtype()
        from pycann.dtypes import to_numpy  # noqa: PLC0415 - pycann.dtypes' own table

        c = e.constant(np.array(value, dtype=to_numpy(dt)), "v")
        return [e.add("Expand", [c, e.add("Shape", [e.input(0)])], e.out())]

    return conv


def tile(e: Emitter) -> list[str]:
    return [e.add("Tile", [e.input(0), e.int64(e.input(1))], e.out())]


def range_(e: Emitter) -> list[str]:
    return [e.add("Range", e.inputs()[:3], e.out())]


def one_hot(e: Emitter) -> list[str]:
    idx, depth, on, off = e.inputs()[:4]
    d = e.const(1)
    if d is not None and int(np.ravel(d)[0]) < 0:  # TF refuses it; ONNX gave a [.., 0] tensor
        raise ModelError(f"{e.where()}: depth {int(np.ravel(d)[0])} must be >= 0")
    ti = e.dtype("TI") if e.attr("TI") is not None else DType.INT64
    if ti in (DType.INT8, DType.INT16, DType.INT32, DType.INT64):
        # TF: a negative index gives a row of off_value; ONNX wraps it (-1 is depth - 1). Move
        # negative indices to depth, outside ONNX's [-depth, depth - 1]: off_value there too
        if ti in (DType.INT8, DType.INT16):  # (depth, an int32, may not fit: int8 200 is -56, a wrapped index)
            idx, ti = e.add("Cast", [idx], to=int(DType.INT32)), DType.INT32
        zero = e.constant(np.zeros((), to_numpy(ti)), "zero")
        past = e.add("Cast", [depth], to=int(ti))
        idx = e.add("Where", [e.add("Less", [idx, zero]), past, idx])
    values = e.add("Concat", [e.add("Reshape", [v, e.constant(np.array([1], np.int64), "one")]) for v in (off, on)],
                   axis=0)
    return [e.add("OneHot", [idx, depth, values], e.out(), axis=int(e.attr("axis", -1)))]


def top_k(e: Emitter) -> list[str]:
    k = e.add("Reshape", [e.int64(e.input(1)), e.constant(np.array([1], np.int64), "shape")])
    vals, idx = e.out(0), e.names.fresh(f"{e.name}/indices")
    e.add_node("TopK", [e.input(0), k], [vals, idx], axis=-1, largest=1, sorted=1)
    return [vals, e.add("Cast", [idx], e.out(1), to=int(DType.INT32))]


def non_max_suppression(e: Emitter) -> list[str]:
    """NonMaxSuppression V2-V5 (boxes [N, 4] as y1, x1, y2, x2 in either corner order; keep a box
    whose score > score_threshold and whose IoU with every kept box is <= iou_threshold) as ONNX
    NonMaxSuppression on one batch and class; selected indices int32 like TF."""
    v = int(e.op[-1]) if e.op[-1].isdigit() else 1
    boxes, scores, max_out = (e.input(i) for i in range(3))
    iou = e.input(3) if v >= 2 else e.constant(np.float32(e.attr("iou_threshold", 0.5)), "iou")
    if v == 5:
        sigma = e.need_const(5, "soft_nms_sigma")
        if float(np.ravel(sigma)[0]) != 0.0:
            raise ModelError(f"{e.where()}: soft NMS (soft_nms_sigma != 0) has no ONNX equivalent")
    one = e.constant(np.array([1], np.int64), "one")
    zero = e.constant(np.array([0], np.int64), "zero")
    thr = e.input(4) if v >= 3 else e.constant(np.float32(-np.inf), "no_threshold")
    b3 = e.add("Unsqueeze", [boxes, zero])
    s3 = e.add("Unsqueeze", [scores, e.constant(np.array([0, 1], np.int64), "axes")])
    args = [b3, s3, e.add("Reshape", [e.int64(max_out), one]), e.add("Reshape", [iou, one]), e.add("Reshape", [thr, one])]
    sel = e.add("NonMaxSuppression", args, center_point_box=0)
    idx = e.add("Gather", [sel, e.constant(np.int64(2), "col")], axis=1)
    count = e.add("Cast", [e.add("Size", [idx])], to=int(DType.INT32))
    if v == 4 and e.attr("pad_to_max_output_size", False):
        pad = e.add("Sub", [e.add("Reshape", [e.int64(max_out), one]), e.add("Size", [idx])])
        idx = e.add("Pad", [idx, e.add("Concat", [zero, pad], axis=0)], mode="constant")
    out = e.add("Cast", [idx], e.out(0), to=int(DType.INT32))
    if v == 4:
        return [out, e.add("Identity", [count], e.out(1))]
    if v == 5:
        if e.attr("pad_to_max_output_size", False):
            raise ModelError(f"{e.where()}: pad_to_max_output_size=True is not supported for V5")
        return [out, e.add("Gather", [scores, idx], e.out(1)), e.add("Identity", [count], e.out(2))]
    return [out]


def einsum(e: Emitter) -> list[str]:
    return [e.add("Einsum", e.inputs(), e.out(), equation=str(e.attr("equation")))]


def cumsum(e: Emitter) -> list[str]:
    return [e.add("CumSum", [e.input(0), e.int64(e.input(1))], e.out(),
                  exclusive=int(bool(e.attr("exclusive", False))), reverse=int(bool(e.attr("reverse", False))))]


TENSOR_OPS: dict[str, Converter] = {
    "Reshape": reshape, "Squeeze": squeeze, "ExpandDims": expand_dims, "ConcatV2": concat, "Concat": concat,
    "Pack": pack, "Unpack": unpack, "Split": split, "SplitV": split_v, "Pad": pad, "PadV2": pad,
    "MirrorPad": pad, "StridedSlice": strided_slice, "Slice": slice_, "Transpose": transpose,
    "Gather": gather, "GatherV2": gather, "Shape": shape, "Size": size, "Rank": rank, "Fill": fill,
    "ZerosLike": _like(0), "OnesLike": _like(1), "Tile": tile, "Range": range_, "OneHot": one_hot,
    "TopKV2": top_k, "Einsum": einsum, "Cumsum": cumsum, "NonMaxSuppression": non_max_suppression,
    "NonMaxSuppressionV2": non_max_suppression, "NonMaxSuppressionV3": non_max_suppression,
    "NonMaxSuppressionV4": non_max_suppression, "NonMaxSuppressionV5": non_max_suppression,
}
