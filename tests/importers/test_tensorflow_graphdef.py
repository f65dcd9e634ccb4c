"""The TensorFlow importer on GraphDefs written here with TensorFlow's protobuf messages (no
TensorFlow needed: these always run). Goldens: numpy, with TensorFlow's documented semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorboard")

from tensorboard.compat.proto import graph_pb2, types_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from pycann.errors import ModelError, UnsupportedOpError  # noqa: E402
from pycann.ge.compile.compiler import compile_model  # noqa: E402
from pycann.ge.compile.importers.tensorflow import import_graph_def  # noqa: E402
from pycann.ge.run.model import LoadedModel  # noqa: E402
from pycann.tools.atc import main as atc  # noqa: E402

F32 = types_pb2.DT_FLOAT


class G:
    """A tiny GraphDef builder."""

    def __init__(self) -> None:
        self.gd = graph_pb2.GraphDef()

    def node(self, op: str, name: str, inputs: list[str] = (), **attrs: Any) -> str:  # type: ignore[assignment]
        n = self.gd.node.add(op=op, name=name)
        n.input.extend(inputs)
        for k, v in attrs.items():
            a = n.attr[k]
            if isinstance(v, bool):
                a.b = v
            elif isinstance(v, int):
                a.i = v
            elif isinstance(v, float):
                a.f = v
            elif isinstance(v, str):
                a.s = v.encode()
            elif isinstance(v, tuple) and v[0] == "type":
                a.type = v[1]
            elif isinstance(v, tuple) and v[0] == "shape":
                for d in v[1]:
                    a.shape.dim.add(size=d)
            elif isinstance(v, list):
                a.list.i.extend(v)
        return name

    def placeholder(self, name: str, shape: tuple[int, ...], dtype: int = F32) -> str:
        return self.node("Placeholder", name, dtype=("type", dtype), shape=("shape", shape))

    def const(self, name: str, value: Any) -> str:
        n = self.gd.node.add(op="Const", name=name)
        t = tensor_util.make_tensor_proto(np.asarray(value))
        n.attr["value"].tensor.CopyFrom(t)
        n.attr["dtype"].type = t.dtype
        return name


def _run(gd: Any, feeds: list[np.ndarray], out_nodes: list[tuple[str, int]] = ()) -> list[np.ndarray]:  # type: ignore[assignment]
    return LoadedModel.from_compiled(compile_model(import_graph_def(gd, out_nodes))).run(feeds)


def _slice_spec(idx: tuple[Any, ...]) -> dict[str, Any]:
    """TensorFlow's StridedSlice encoding of a Python index (tf's _slice_helper, restated)."""
    b, e, s = [], [], []
    masks = dict(begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    for i, item in enumerate(idx):
        if item is Ellipsis:
            b.append(0), e.append(0), s.append(1)
            masks["ellipsis_mask"] |= 1 << i
        elif item is None:
            b.append(0), e.append(0), s.append(1)
            masks["new_axis_mask"] |= 1 << i
        elif isinstance(item, slice):
            b.append(item.start or 0), e.append(item.stop or 0), s.append(item.step or 1)
            if item.start is None:
                masks["begin_mask"] |= 1 << i
            if item.stop is None:
                masks["end_mask"] |= 1 << i
        else:
            b.append(item), e.append(item + 1), s.append(1)
            masks["shrink_axis_mask"] |= 1 << i
    return {"begin": b, "end": e, "strides": s, **masks}


CASES = [
    (slice(1, None), Ellipsis, slice(None, None, -1)),
    (Ellipsis, 0),
    (slice(None), None, 2),
    (-1,),
    (slice(None, None, 2), slice(1, 3)),
    (Ellipsis, None, slice(-3, None), 1),
    (1, slice(None, None, -2), Ellipsis, None),
    (slice(-2, -5, -1), slice(None), slice(None), slice(4, 0, -3)),
]


@pytest.mark.parametrize("idx", CASES, ids=[str(i) for i in range(len(CASES))])
def test_strided_slice_masks_match_numpy(idx: tuple[Any, ...]) -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    spec = _slice_spec(idx)
    g = G()
    g.placeholder("x", x.shape)
    ins = ["x"] + [g.const(k, np.array(spec[k], np.int32)) for k in ("begin", "end", "strides")]
    g.node("StridedSlice", "ss", ins, T=("type", F32), Index=("type", types_pb2.DT_INT32),
           **{k: v for k, v in spec.items() if k.endswith("mask")})
    (got,) = _run(g.gd, [x])
    np.testing.assert_array_equal(got, x[idx])


def test_math_ops_follow_tensorflow_semantics() -> None:
    """FloorDiv/FloorMod floor (not truncate) for negative ints; empty reduction axes reduce nothing."""
    a = np.array([7, -7, 7, -7, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    g = G()
    g.placeholder("a", a.shape, types_pb2.DT_INT32)
    g.placeholder("b", b.shape, types_pb2.DT_INT32)
    g.node("FloorDiv", "fd", ["a", "b"], T=("type", types_pb2.DT_INT32))
    g.node("FloorMod", "fm", ["a", "b"], T=("type", types_pb2.DT_INT32))
    g.const("noaxes", np.zeros(0, np.int32))
    g.node("Sum", "s", ["a", "noaxes"], T=("type", types_pb2.DT_INT32), keep_dims=False)
    fd, fm, s = _run(g.gd, [a, b], [("fd", 0), ("fm", 0), ("s", 0)])
    np.testing.assert_array_equal(fd, a // b)  # Python's // is TF's floor division
    np.testing.assert_array_equal(fm, a % b)
    np.testing.assert_array_equal(s, a)


def test_conv_nhwc_chain_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (1, 7, 7, 3)).astype(np.float32)
    w = rng.normal(0, 1, (3, 3, 3, 4)).astype(np.float32)
    bias = rng.normal(0, 1, 4).astype(np.float32)
    g = G()
    g.placeholder("x", x.shape)
    g.const("w", w)
    g.const("bias", bias)
    g.node("Conv2D", "conv", ["x", "w"], T=("type", F32), strides=[1, 2, 2, 1], padding="SAME")
    g.node("BiasAdd", "ba", ["conv", "bias"], T=("type", F32))
    g.node("Relu", "relu", ["ba"], T=("type", F32))
    (got,) = _run(g.gd, [x])
    # SAME, stride 2 on 7: 4 outputs, total padding (4-1)*2+3-7 = 2 -> 1 before, 1 after
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((1, 4, 4, 4), np.float64)
    for i in range(4):
        for j in range(4):
            ref[0, i, j] = np.einsum("hwc,hwco->o", xp[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w)
    np.testing.assert_allclose(got, np.maximum(ref + bias, 0), rtol=1e-5, atol=1e-5)
    assert got.shape == (1, 4, 4, 4)  # NHWC kept at the boundary


def test_text_graph_def_reads_like_the_binary(tmp_path: Path) -> None:
    from google.protobuf import text_format

    from pycann.ge.compile.importers.tensorflow import load_tensorflow

    g = G()
    g.placeholder("x", (2, 3))
    g.node("Tanh", "t", ["x"], T=("type", F32))
    (tmp_path / "g.pbtxt").write_text(text_format.MessageToString(g.gd))
    (tmp_path / "g.pb").write_bytes(g.gd.SerializeToString())
    a, b = load_tensorflow(tmp_path / "g.pbtxt"), load_tensorflow(tmp_path / "g.pb")
    assert a.inputs == b.inputs == ["x"] and a.outputs == b.outputs == ["t:0"]
    (tmp_path / "empty.pb").write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        load_tensorflow(tmp_path / "empty.pb")
    (tmp_path / "junk.pb").write_bytes(b"\xff\xff\xff not a graph")
    with pytest.raises(ModelError, match="cannot parse"):
        load_tensorflow(tmp_path / "junk.pb")


def test_every_unsupported_op_listed_at_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    g = G()
    g.placeholder("x", (2, 3))
    g.node("FancyOp", "first/fancy", ["x"])
    g.node("Relu", "relu", ["first/fancy"], T=("type", F32))
    g.node("OtherOp", "second/other", ["relu"])
    g.node("Unused", "not/needed", ["x"])  # not an ancestor of the output: pruned, not reported
    with pytest.raises(UnsupportedOpError) as ei:
        import_graph_def(g.gd, [("second/other", 0)])
    msg = str(ei.value)
    assert ei.value.code == "E19010" and "first/fancy (FancyOp)" in msg and "second/other (OtherOp)" in msg
    assert "not/needed" not in msg
    pb = tmp_path / "bad.pb"
    pb.write_bytes(g.gd.SerializeToString())
    rc = atc([f"--model={pb}", "--framework=3", f"--output={tmp_path / 'o'}", "--soc_version=Ascend310P3",
              "--out_nodes=second/other:0"])
    out = capsys.readouterr().out
    assert rc == 1 and "E19010" in out and "FancyOp" in out and "OtherOp" in out


def test_unfrozen_graph_asks_for_freezing() -> None:
    g = G()
    g.node("VarHandleOp", "w", dtype=("type", F32))
    g.node("ReadVariableOp", "read", ["w"], dtype=("type", F32))
    g.node("Identity", "out", ["read"], T=("type", F32))
    with pytest.raises(ModelError, match="not frozen.*convert_variables_to_constants"):
        import_graph_def(g.gd)


def test_runtime_computed_filter_is_a_clear_error() -> None:
    g = G()
    g.placeholder("x", (1, 4, 4, 2))
    g.placeholder("w", (3, 3, 2, 1))
    g.node("DepthwiseConv2dNative", "dw", ["x", "w"], T=("type", F32), strides=[1, 1, 1, 1], padding="VALID")
    with pytest.raises(ModelError, match=r"node dw \(DepthwiseConv2dNative\): input 1 \(filter\) must be a constant"):
        import_graph_def(g.gd)


def test_atc_rejects_caffe_without_weight(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    proto = tmp_path / "n.prototxt"
    proto.write_text('input: "data"\n')
    rc = atc([f"--model={proto}", "--framework=0", f"--output={tmp_path / 'o'}", "--soc_version=Ascend310P3"])
    assert rc == 1 and "E10054" in capsys.readouterr().out


UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Rsqrt": lambda v: 1 / np.sqrt(v),
    "Square": np.square, "Reciprocal": np.reciprocal, "Inv": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round, "Sign": np.sign, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Sinh": np.sinh,
    "Cosh": np.cosh, "Atan": np.arctan, "Tanh": np.tanh, "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "Relu": lambda v: np.maximum(v, 0), "Relu6": lambda v: np.clip(v, 0, 6), "Elu": lambda v: np.where(v > 0, v, np.expm1(v)),
    "Softplus": lambda v: np.log1p(np.exp(v)), "Softsign": lambda v: v / (1 + np.abs(v)), "Log1p": np.log1p,
    "Selu": lambda v: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * np.expm1(v)),
}
BINARY = {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "RealDiv": np.divide, "Div": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "Pow": np.power, "SquaredDifference": lambda a, b: (a - b) ** 2,
    "Less": np.less, "Greater": np.greater, "LessEqual": np.less_equal, "GreaterEqual": np.greater_equal,
    "Equal": np.equal, "NotEqual": np.not_equal,
}


def test_elementwise_ops_match_numpy() -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 3.0, (3, 4)).astype(np.float32)
    y = np.round(rng.uniform(0.1, 3.0, (3, 4)), 1).astype(np.float32)
    y[0, 0] = x[0, 0]  # one equal pair for Equal/NotEqual/LessEqual
    g = G()
    g.placeholder("x", x.shape)
    g.placeholder("y", y.shape)
    outs, refs = [], []
    for op, fn in UNARY.items():
        outs.append((g.node(op, f"u_{op}", ["x"], T=("type", F32)), 0))
        refs.append(fn(x.astype(np.float64)))
    for op, fn in BINARY.items():
        outs.append((g.node(op, f"b_{op}", ["x", "y"], T=("type", F32)), 0))
        refs.append(fn(x.astype(np.float64), y.astype(np.float64)))
    g.node("AddN", "addn", ["x", "y", "x"], T=("type", F32))
    outs.append(("addn", 0))
    refs.append(2 * x + y)
    g.const("lo", np.float32(0.5))
    g.const("hi", np.float32(2.0))
    g.node("ClipByValue", "clip", ["x", "lo", "hi"], T=("type", F32))
    outs.append(("clip", 0))
    refs.append(np.clip(x, 0.5, 2.0))
    g.node("Less", "mask", ["x", "y"], T=("type", F32))
    g.node("Select", "sel", ["mask", "x", "y"], T=("type", F32))
    outs.append(("sel", 0))
    refs.append(np.where(x < y, x, y))
    g.const("rows", np.array([True, False, True]))
    g.node("Select", "rowsel", ["rows", "x", "y"], T=("type", F32))  # v1: a vector picks rows
    outs.append(("rowsel", 0))
    refs.append(np.where(np.array([True, False, True])[:, None], x, y))
    got = _run(g.gd, [x, y], outs)
    for (name, _), gv, rv in zip(outs, got, refs):
        np.testing.assert_allclose(np.asarray(gv, np.float64), rv, rtol=2e-6, atol=1e-6, err_msg=name)


def test_shape_ops_and_reductions_match_numpy() -> None:
    """Shape/Size/Rank (int32 like TF), a dynamic Reshape built from Shape, Range, Fill, *Like,
    reductions with keep_dims, All/Any, ArgMin, Concat (axis first), Split, Gather, PadV2, MirrorPad."""
    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, (2, 3, 4)).astype(np.float32)
    i32 = types_pb2.DT_INT32
    g = G()
    g.placeholder("x", x.shape)
    g.node("Shape", "shape", ["x"], T=("type", F32), out_type=("type", i32))
    g.node("Size", "size", ["x"], T=("type", F32), out_type=("type", i32))
    g.node("Rank", "rank", ["x"], T=("type", F32))
    g.const("b0", np.array([0], np.int32))
    g.const("b1", np.array([1], np.int32))
    g.const("s1", np.array([1], np.int32))
    g.node("StridedSlice", "batch", ["shape", "b0", "b1", "s1"], T=("type", i32), Index=("type", i32),
           shrink_axis_mask=1)
    g.const("m1", np.int32(-1))
    g.node("Pack", "newshape", ["batch", "m1"], T=("type", i32), N=2, axis=0)
    g.node("Reshape", "flat", ["x", "newshape"], T=("type", F32))
    g.const("r0", np.int32(0))
    g.const("r1", np.int32(3))
    g.node("Range", "range", ["r0", "size", "r1"], Tidx=("type", i32))
    g.const("half", np.float32(0.5))
    g.node("Fill", "fill", ["shape", "half"], T=("type", F32))
    g.node("ZerosLike", "zeros", ["x"], T=("type", F32))
    g.node("OnesLike", "ones", ["x"], T=("type", F32))
    g.const("ax", np.array([0, 2], np.int32))
    for op, name in (("Max", "rmax"), ("Min", "rmin"), ("Prod", "rprod"), ("Mean", "rmean")):
        g.node(op, name, ["x", "ax"], T=("type", F32), keep_dims=True)
    g.node("Greater", "pos", ["x", "r0f"], T=("type", F32))
    g.const("r0f", np.float32(0))
    g.const("ax1", np.int32(1))
    g.node("All", "all", ["pos", "ax1"], keep_dims=False)
    g.node("Any", "any", ["pos", "ax1"], keep_dims=False)
    g.node("ArgMin", "argmin", ["x", "ax1"], T=("type", F32), output_type=("type", i32))
    g.node("Concat", "cat", ["ax1", "x", "x"], T=("type", F32), N=2)
    g.node("Split", "split", ["ax1", "cat"], T=("type", F32), num_split=2)
    g.const("idx", np.array([1, 0, 1], np.int32))
    g.node("Gather", "gather", ["x", "idx"], Tparams=("type", F32), Tindices=("type", i32))
    g.const("pads", np.array([[0, 0], [1, 2], [2, 1]], np.int32))
    g.const("pv", np.float32(9))
    g.node("PadV2", "padv2", ["x", "pads", "pv"], T=("type", F32))
    g.node("MirrorPad", "mirror", ["x", "pads"], T=("type", F32), mode="REFLECT")
    names = ["shape", "size", "rank", "flat", "range", "fill", "zeros", "ones", "rmax", "rmin", "rprod", "rmean",
             "all", "any", "argmin", "split", "gather", "padv2", "mirror"]
    got = dict(zip(names, _run(g.gd, [x], [(n, 0) for n in names])))
    assert got["shape"].dtype == np.int32 and got["shape"].tolist() == [2, 3, 4]
    assert int(got["size"]) == 24 and int(got["rank"]) == 3
    np.testing.assert_array_equal(got["flat"], x.reshape(2, -1))
    np.testing.assert_array_equal(got["range"], np.arange(0, 24, 3))
    np.testing.assert_array_equal(got["fill"], np.full(x.shape, 0.5, np.float32))
    np.testing.assert_array_equal(got["zeros"], np.zeros_like(x))
    np.testing.assert_array_equal(got["ones"], np.ones_like(x))
    for name, fn in (("rmax", np.max), ("rmin", np.min), ("rprod", np.prod), ("rmean", np.mean)):
        np.testing.assert_allclose(got[name], fn(x, axis=(0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(got["all"], (x > 0).all(axis=1))
    np.testing.assert_array_equal(got["any"], (x > 0).any(axis=1))
    assert got["argmin"].dtype == np.int32
    np.testing.assert_array_equal(got["argmin"], x.argmin(axis=1))
    np.testing.assert_array_equal(got["split"], x)
    np.testing.assert_array_equal(got["gather"], x[[1, 0, 1]])
    pads = ((0, 0), (1, 2), (2, 1))
    np.testing.assert_array_equal(got["padv2"], np.pad(x, pads, constant_values=9))
    np.testing.assert_array_equal(got["mirror"], np.pad(x, pads, mode="reflect"))


def _nms_reference(boxes: np.ndarray, scores: np.ndarray, k: int, iou_thr: float, score_thr: float) -> list[int]:
    """TensorFlow's greedy NMS (non_max_suppression_op.cc), restated."""
    def iou(a: np.ndarray, b: np.ndarray) -> float:
        ya, xa, yb, xb = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
        yc, xc, yd, xd = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
        inter = max(0.0, min(yb, yd) - max(ya, yc)) * max(0.0, min(xb, xd) - max(xa, xc))
        union = (yb - ya) * (xb - xa) + (yd - yc) * (xd - xc) - inter
        return inter / union if union > 0 else 0.0

    keep: list[int] = []
    for i in sorted(range(len(scores)), key=lambda j: -scores[j]):
        if scores[i] <= score_thr or len(keep) == k:
            continue
        if all(iou(boxes[i], boxes[j]) <= iou_thr for j in keep):
            keep.append(i)
    return keep


def test_non_max_suppression_matches_tensorflow_semantics() -> None:
    rng = np.random.default_rng(7)
    centers = rng.uniform(0, 1, (40, 2))
    sizes = rng.uniform(0.05, 0.3, (40, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1).astype(np.float32)
    boxes[::3] = boxes[::3][:, [2, 3, 0, 1]]  # corners in the other order, which TF accepts
    scores = rng.uniform(0, 1, 40).astype(np.float32)
    g = G()
    g.placeholder("boxes", boxes.shape)
    g.placeholder("scores", scores.shape)
    g.const("k", np.int32(35))  # more than the 29 boxes NMS keeps: V4 pads
    g.const("iou", np.float32(0.3))
    g.const("thr", np.float32(0.2))
    g.const("sigma", np.float32(0.0))
    g.node("NonMaxSuppressionV3", "nms3", ["boxes", "scores", "k", "iou", "thr"], T=("type", F32))
    g.node("NonMaxSuppressionV4", "nms4", ["boxes", "scores", "k", "iou", "thr"], T=("type", F32),
           pad_to_max_output_size=True)
    g.node("NonMaxSuppressionV5", "nms5", ["boxes", "scores", "k", "iou", "thr", "sigma"], T=("type", F32))
    sel3, sel4, valid4, sel5, scores5 = _run(g.gd, [boxes, scores],
                                             [("nms3", 0), ("nms4", 0), ("nms4", 1), ("nms5", 0), ("nms5", 1)])
    ref = _nms_reference(boxes, scores, 35, 0.3, 0.2)
    assert sel3.dtype == np.int32 and sel3.tolist() == ref and len(ref) == 29
    assert int(valid4) == len(ref) and sel4.tolist() == ref + [0] * (35 - len(ref))
    assert sel5.tolist() == ref
    np.testing.assert_array_equal(scores5, scores[ref])


def test_malformed_attributes_name_the_node() -> None:
    g = G()
    g.placeholder("x", (1, 4, 4, 2))
    g.const("w", np.ones((3, 3, 2, 2), np.float32))
    g.node("Conv2D", "conv", ["x", "w"], T=("type", F32), strides=[1, 1], padding="SAME")  # 2 strides, not 4
    with pytest.raises(ModelError, match=r"node conv \(Conv2D\): strides must have 4 entries"):
        import_graph_def(g.gd)
    g2 = G()
    g2.placeholder("x", (2, 3))
    g2.node("Unpack", "u", ["x"], T=("type", F32))  # no "num" attribute
    with pytest.raises(ModelError, match=r"node u \(Unpack\): cannot convert"):
        import_graph_def(g2.gd, [("u", 0)])
    g3 = G()
    g3.placeholder("x", (2, 3))
    g3.node("Relu", "r", ["missing_node"], T=("type", F32))
    with pytest.raises(ModelError, match=r"node r \(Relu\): input 'missing_node' is produced by no node"):
        import_graph_def(g3.gd, [("r", 0)])


def test_ops_on_nchw_twins_match_numpy() -> None:
    """Transposes, reductions, concat and pads of a conv's output read its NCHW twin: the results
    must still be TensorFlow's (NHWC) ones."""
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, (2, 5, 6, 3)).astype(np.float32)
    g = G()
    g.placeholder("x", x.shape)
    g.const("w", np.eye(3, dtype=np.float32).reshape(1, 1, 3, 3))  # 1x1 identity conv: y == x
    g.node("Conv2D", "conv", ["x", "w"], T=("type", F32), strides=[1, 1, 1, 1], padding="VALID")
    g.node("Relu", "act", ["conv"], T=("type", F32))
    cases: dict[str, Any] = {}
    for i, perm in enumerate(([0, 3, 1, 2], [0, 2, 1, 3], [3, 2, 1, 0], [0, 1, 2, 3])):
        g.const(f"p{i}", np.array(perm, np.int32))
        g.node("Transpose", f"t{i}", ["act", f"p{i}"], T=("type", F32))
        cases[f"t{i}"] = lambda v, perm=perm: v.transpose(perm)
    for i, (axes, keep) in enumerate((([1, 2], False), ([1, 2], True), ([3], False), ([1], False), ([-1, 0], True))):
        g.const(f"a{i}", np.array(axes, np.int32))
        g.node("Mean", f"m{i}", ["act", f"a{i}"], T=("type", F32), keep_dims=keep)
        cases[f"m{i}"] = lambda v, axes=axes, keep=keep: v.mean(axis=tuple(axes), keepdims=keep)
    g.const("ax", np.int32(-1))
    g.node("ConcatV2", "cat", ["act", "act", "ax"], T=("type", F32), N=2)
    cases["cat"] = lambda v: np.concatenate([v, v], axis=-1)
    g.const("pads", np.array([[0, 1], [2, 0], [1, 1], [0, 2]], np.int32))
    g.node("Pad", "pad", ["act", "pads"], T=("type", F32))
    cases["pad"] = lambda v: np.pad(v, ((0, 1), (2, 0), (1, 1), (0, 2)))
    g.const("bias", np.array([1.0, -2.0, 0.5], np.float32))
    g.node("BiasAdd", "ba", ["act", "bias"], T=("type", F32))
    g.node("AddV2", "res", ["ba", "act"], T=("type", F32))  # twin + twin
    cases["res"] = lambda v: 2 * v + np.array([1.0, -2.0, 0.5])
    got = _run(g.gd, [x], [(n, 0) for n in cases])
    act = np.maximum(x, 0).astype(np.float64)
    for (name, fn), gv in zip(cases.items(), got):
        np.testing.assert_allclose(gv, fn(act), rtol=1e-5, atol=1e-6, err_msg=name)


def _function(g: G, name: str, args: list[str], outputs: dict[str, str], body: list[tuple[str, str, list[str]]]) -> None:
    f = g.gd.library.function.add()
    f.signature.name = name
    for a in args:
        f.signature.input_arg.add(name=a, type=F32)
    for o, ref in outputs.items():
        f.signature.output_arg.add(name=o, type=F32)
        f.ret[o] = ref
    for op, node_name, ins in body:
        n = f.node_def.add(op=op, name=node_name)
        n.input.extend(ins)
        n.attr["T"].type = F32


def test_functional_if_and_unsupported_ops_inside_functions() -> None:
    g = G()
    g.placeholder("x", (3,))
    g.placeholder("flag", (), types_pb2.DT_BOOL)
    _function(g, "then_fn", ["a"], {"out": "t:y:0"}, [("Tanh", "t", ["a"])])
    _function(g, "else_fn", ["a"], {"out": "n:y:0"}, [("Neg", "n", ["a"])])
    n = g.gd.node.add(op="StatelessIf", name="cond")
    n.input.extend(["flag", "x"])
    n.attr["then_branch"].func.name = "then_fn"
    n.attr["else_branch"].func.name = "else_fn"
    n.attr["Tout"].list.type.append(F32)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    m = LoadedModel.from_compiled(compile_model(import_graph_def(g.gd, [("cond", 0)])))
    np.testing.assert_allclose(m.run([x, np.array(True)])[0], np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(m.run([x, np.array(False)])[0], -x, rtol=1e-6)
    g.gd.library.function[1].node_def[0].op = "NotAnOp"
    with pytest.raises(UnsupportedOpError, match=r"else_fn/n \(NotAnOp\)"):
        import_graph_def(g.gd, [("cond", 0)])


def test_transpose_perm_computed_from_constants_is_folded() -> None:
    """tf.nn.softmax(x, axis=1) on a rank-3 tensor: TF builds the Transpose perm from Range, Sub,
    Pack and ConcatV2 of constants (int32); they fold at import, so the perm is a constant."""
    x = np.random.default_rng(11).normal(0, 1, (2, 3, 4)).astype(np.float32)
    i32 = types_pb2.DT_INT32
    g = G()
    g.placeholder("x", x.shape)
    g.const("r_start", np.int32(0))
    g.const("r_limit", np.int32(1))
    g.const("r_delta", np.int32(1))
    g.node("Range", "range", ["r_start", "r_limit", "r_delta"], Tidx=("type", i32))
    g.const("rank", np.int32(3))
    g.const("one", np.int32(1))
    g.node("Sub", "last", ["rank", "one"], T=("type", i32))
    g.node("Pack", "packed", ["last"], T=("type", i32), N=1, axis=0)
    g.const("r1_start", np.int32(2))
    g.node("Range", "range_1", ["r1_start", "last", "r_delta"], Tidx=("type", i32))
    g.const("axis_v", np.array([1], np.int32))
    g.const("cat_axis", np.int32(0))
    g.node("ConcatV2", "perm", ["range", "packed", "range_1", "axis_v", "cat_axis"], T=("type", i32), N=4,
           Tidx=("type", i32))
    g.node("Transpose", "t", ["x", "perm"], T=("type", F32), Tperm=("type", i32))
    g.node("Softmax", "sm", ["t"], T=("type", F32))
    g.node("Transpose", "y", ["sm", "perm"], T=("type", F32), Tperm=("type", i32))
    got = _run(g.gd, [x], [("y", 0)])[0]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_out_nodes_take_tensor_names_and_refuse_other_entries() -> None:
    """``out_nodes`` as TensorFlow tensor names (``"fd:0"``, ``"fm"`` = output 0) choose the same
    outputs as the pairs; an entry of neither form is E10016 naming it (it was a raw unpacking error)."""
    from pycann.errors import OptionError

    a = np.array([7, -7, 7], np.int32)
    b = np.array([2, 2, -2], np.int32)
    g = G()
    g.placeholder("a", a.shape, types_pb2.DT_INT32)
    g.placeholder("b", b.shape, types_pb2.DT_INT32)
    g.node("FloorDiv", "fd", ["a", "b"], T=("type", types_pb2.DT_INT32))
    g.node("FloorMod", "fm", ["a", "b"], T=("type", types_pb2.DT_INT32))
    fm, fd = _run(g.gd, [a, b], ["fm", "fd:0"])  # type: ignore[list-item]
    np.testing.assert_array_equal(fd, a // b)
    np.testing.assert_array_equal(fm, a % b)
    for bad in ("fd:x", ":0", ("fd",), ("fd", -1), ("fd", True), 3):
        with pytest.raises(OptionError, match="E10016.*out_nodes entry"):
            import_graph_def(g.gd, [bad])  # type: ignore[list-item]
