"""Narrowing Casts moved above data-moving ops (``ge/compile/passes/hoist_casts.py``), inside
PrecisionMode: the rewritten graph's outputs equal the unrewritten graph's bit for bit (the golden:
the same compile with the rewrite off), NaN and infinities included; where a reader needs the wide
value, or the op computes new values (linear Resize), nothing moves."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.dtypes import DType
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import precision
from pycann.ge.run.model import LoadedModel

RNG = np.random.default_rng(23)
BF16, F16, F32 = int(DType.BFLOAT16), int(DType.FLOAT16), int(DType.FLOAT)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], outputs: list[str],
           x_shape: tuple[int, ...] = (1, 8, 16, 16)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "neck", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _fpn(mode: str = "nearest", concat_is_output: bool = False) -> onnx.ModelProto:
    """PP-OCR det's neck in small: conv maps combined by float32 vector ops (Mul, Add), one
    upsampled by a Resize read only by the Concat, one also read by an Add, then a conv."""
    scales = np.array([1, 1, 2, 2], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Mul", ["c2", "c2"], ["s2"]),
             helper.make_node("Resize", ["s2", "", "scales"], ["u2"], mode=mode),
             helper.make_node("Resize", ["s2", "", "scales"], ["u3"], mode=mode),
             helper.make_node("Add", ["c1", "u2"], ["s1"]),
             helper.make_node("Concat", ["u3", "s1"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], pads=[1, 1, 1, 1])]
    outs = ["y", "cat"] if concat_is_output else ["y"]
    return _model(nodes, {"w1": _w(8, 8, 3, 3), "w2": _w(8, 8, 3, 3), "w3": _w(4, 16, 3, 3), "scales": scales}, outs)


def _compile(m: onnx.ModelProto, mode: str, hoist: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as mp:
        if not hoist:
            mp.setattr(precision, "hoist_casts", lambda g, **kw: 0)
        return compile_model(m, CompileOptions(precision_mode=mode, soc_version="CPU"))


def _casts(cm: Any) -> int:
    return sum(1 for n in cm.graph.nodes if n.op_type == "Cast")


def _dtype_read(cm: Any, op_type: str) -> set[int]:
    g = cm.graph
    return {g.descs[i].dtype for n in g.nodes if n.op_type == op_type for i in n.inputs[:1] if i in g.descs}


def _both(m: onnx.ModelProto, mode: str, x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    on, off = _compile(m, mode, True, monkeypatch), _compile(m, mode, False, monkeypatch)
    got = LoadedModel.from_compiled(on).run([x])
    want = LoadedModel.from_compiled(off).run([x])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)  # bit for bit (NaN where NaN)
    return on, off


@pytest.mark.parametrize("mode", ["allow_fp32_to_bf16", "allow_fp32_to_fp16"])
def test_casts_move_above_concat_and_nearest_resize_bit_exact(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _fpn()
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    on, off = _both(m, mode, x, monkeypatch)
    narrow = BF16 if "bf16" in mode else F16
    assert _dtype_read(off, "Concat") == {F32}
    # the Concat and the Resize it alone reads now move narrow values; the Resize whose output an
    # Add also reads keeps float32
    g = on.graph
    cat = next(n for n in g.nodes if n.op_type == "Concat")
    assert {g.descs[i].dtype for i in cat.inputs} == {narrow}
    assert sorted(g.descs[n.inputs[0]].dtype for n in g.nodes if n.op_type == "Resize") == sorted([F32, narrow])
    assert _casts(on) >= _casts(off)  # (two small casts replace the big one after the Concat)
    big = [n for n in g.nodes if n.op_type == "Cast" and n.outputs[0] in cat.inputs]
    assert big and all(tuple(g.descs[n.outputs[0]].shape) == (1, 8, 16, 16) for n in big)


def test_nan_and_infinities_move_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32) * 1e20  # Mul overflows to inf
    x[0, 1, 3, 4] = np.nan
    x[0, 2, :, 7] = -np.inf
    _both(_fpn(), "allow_fp32_to_bf16", x, monkeypatch)


def test_a_concat_read_in_float32_keeps_its_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    on, off = _both(_fpn(concat_is_output=True), "allow_fp32_to_bf16", x, monkeypatch)
    assert _dtype_read(on, "Concat") == {F32} and _casts(on) == _casts(off)


def test_a_linear_resize_keeps_its_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear interpolation computes new values: rounding before it is not rounding after."""
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    on, _ = _both(_fpn(mode="linear"), "allow_fp32_to_bf16", x, monkeypatch)
    assert _dtype_read(on, "Resize") == {F32}
    cat = next(n for n in on.graph.nodes if n.op_type == "Concat")
    assert {on.graph.descs[i].dtype for i in cat.inputs} == {BF16}  # the Concat itself still moves


def test_widening_then_narrowing_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bf16 convs concatenated for a third: the Concat read float32 copies of bf16 values and
    narrowed the result again; after the move it reads the convs' bf16 outputs, no Cast between."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, {"w1": _w(8, 8, 3, 3), "w2": _w(8, 8, 3, 3), "w3": _w(4, 16, 3, 3)}, ["y"])
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    on, off = _both(m, "allow_fp32_to_bf16", x, monkeypatch)
    g = on.graph
    prod = g.producers()
    cat = next(n for n in g.nodes if n.op_type == "Concat")
    assert all(prod[i].op_type in ("Conv", "FusedConv") for i in cat.inputs)
    assert _casts(on) == _casts(off) - 3  # two widening Casts and the narrowing one gone


def test_reshape_transpose_chain_before_a_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    m = _model(nodes, {"shape": np.array([1, 256, 8], np.int64), "w": _w(8, 5)}, ["y"])
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    on, off = _both(m, "allow_fp32_to_bf16", x, monkeypatch)
    assert _dtype_read(on, "Transpose") == {BF16} and _dtype_read(off, "Transpose") == {F32}


@pytest.mark.parametrize("mode,narrow", [("allow_fp32_to_bf16", BF16), ("allow_fp32_to_fp16", F16)])
def test_a_fused_deconv_in_a_narrow_mode_returns_the_dtype_the_graph_says(mode: str, narrow: int) -> None:
    """A FusedConvTranspose (ConvTranspose + Relu) in a reduced-precision mode: the graph gives its
    output the narrow dtype, so the kernel must round to it (bfloat16's numpy kind is "V", and a
    test of kind "f" handed the next node float32); values are the float32 result rounded once."""
    from pycann.dtypes import to_numpy

    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["d"], strides=[2, 2]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "w2"], ["y"], strides=[2, 2])]
    m = _model(nodes, {"w": _w(8, 4, 2, 2), "w2": _w(4, 1, 2, 2)}, ["y"])
    cm = compile_model(m, CompileOptions(precision_mode=mode, soc_version="CPU"))
    fused = [n for n in cm.graph.nodes if n.op_type == "FusedConvTranspose"]
    assert fused and cm.graph.descs[fused[0].outputs[0]].dtype == narrow
    lm = LoadedModel.from_compiled(cm)
    plan = lm.executor.plan_for([np.zeros((1, 8, 16, 16), np.float32)]).plan
    seen: list[np.dtype] = []
    for st in plan.steps:
        if st.node.op_type == "FusedConvTranspose":
            run = st.run
            st.run = lambda *a, _r=run, **k: seen.append((out := _r(*a, **k))[0].dtype) or out  # type: ignore[method-assign]
    plan._fast = None
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    lm.run([x])
    assert seen == [to_numpy(narrow)]
