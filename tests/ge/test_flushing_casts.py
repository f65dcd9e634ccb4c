"""Narrowing Casts that feed only bf16 matrix operands (``ge/compile/passes/flushing_casts.py``) run as
oneDNN reorders, which read float32 subnormals as zero, as the native bf16 kernels after them read
bf16 subnormals: which Casts qualify, the kernel's values against ml_dtypes, and a model's outputs
with and without the fast Casts (the golden: the same compile with the exact casts)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.dtypes import DType, TensorDesc, bfloat16
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import precision
from pycann.ge.compile.passes.flushing_casts import ATTR, mark_flushing_casts
from pycann.ge.ir import Graph, Node
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import onednn_bf16, onednn_cast
from pycann.ops.cast import _k_cast

RNG = np.random.default_rng(31)
BF16, F32 = int(DType.BFLOAT16), int(DType.FLOAT)
OPTS = {"precision_mode": "allow_fp32_to_bf16", "soc_version": "Ascend910B2"}


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64, 64])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _neck(extra_reader: str | None = None) -> onnx.ModelProto:
    """conv -> float32 Mul (a vector op: its output is cast back to bf16) -> Resize -> Concat -> conv;
    ``extra_reader``: the Mul's output is also read by a Relu that is a graph output, or is one itself."""
    scales = np.array([1, 1, 1, 1], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c1", "c1"], ["m"]),
             helper.make_node("Resize", ["m", "", "scales"], ["u"], mode="nearest"),
             helper.make_node("Concat", ["u", "c1"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"], pads=[1, 1, 1, 1])]
    outs = ["y"]
    if extra_reader == "relu":
        nodes.append(helper.make_node("Relu", ["m"], ["r"]))
        outs.append("r")
    elif extra_reader == "output":
        outs.append("m")
    return _model(nodes, {"w1": _w(8, 8, 3, 3), "w2": _w(4, 16, 3, 3), "scales": scales}, outs)


def _narrowing_casts(cm: Any) -> list[Any]:
    g = cm.graph
    return [n for n in g.nodes if n.op_type == "Cast" and int(n.attrs.get("to", 0)) == BF16
            and g.descs[n.inputs[0]].dtype == F32]


def test_casts_read_only_by_matrix_operands_are_marked() -> None:
    cm = compile_model(_neck(), CompileOptions(**OPTS))
    casts = _narrowing_casts(cm)
    assert casts and all(n.attrs.get(ATTR) == 1 for n in casts), [(n.name, n.attrs) for n in casts]
    assert cm.manifest["precision"]["casts_readers_flush"] == len(casts)


def _ir(readers: list[tuple[str, str, int]], output: bool = False, subgraph: bool = False) -> tuple[Graph, Node]:
    """x (float32) -> Cast to bf16 -> v, read by ``readers`` ((domain, op type, input index): a node
    whose other inputs are fresh bf16 values); ``output``: v is a graph output; ``subgraph``: an If
    branch reads v."""
    g = Graph(name="g", opsets={"": 19, "pycann": 1})
    g.inputs, g.outputs = ["x"], []
    g.descs["x"] = TensorDesc(F32, (1, 8, 4, 4))
    cast = Node("Cast", ["x"], ["v"], {"to": BF16}, name="cast", opset=19)
    g.descs["v"] = TensorDesc(BF16, (1, 8, 4, 4))
    g.nodes.append(cast)
    for j, (domain, op, i) in enumerate(readers):
        ins = [f"o{j}_{k}" for k in range(max(i + 1, 2))]
        for x in ins:
            g.descs[x] = TensorDesc(BF16, (1, 8, 4, 4))
        ins[i] = "v"
        attrs: dict[str, Any] = {"mode": "linear"} if op == "Resize" and j == 99 else {}
        g.nodes.append(Node(op, ins, [f"y{j}"], attrs, name=f"n{j}", domain=domain))
        g.descs[f"y{j}"] = TensorDesc(BF16, (1, 8, 4, 4))
        g.outputs.append(f"y{j}")
    if output:
        g.outputs.append("v")
    if subgraph:
        body = Graph(name="then", opsets={"": 19})
        body.nodes.append(Node("Identity", ["v"], ["z"], {}, name="id"))
        body.outputs = ["z"]
        g.nodes.append(Node("If", ["c"], ["w"], {"then_branch": body, "else_branch": body}, name="if"))
    return g, cast


@pytest.mark.parametrize("readers", [[("", "Conv", 0)], [("", "Conv", 1)], [("pycann", "FusedConv", 0)],
                                     [("", "MatMul", 1), ("pycann", "FusedMatMul", 0)], [("", "Gemm", 0)]])
def test_matrix_operands_vouch_for_a_cast(readers: list[tuple[str, str, int]]) -> None:
    g, cast = _ir(readers)
    assert mark_flushing_casts(g) == 1 and cast.attrs[ATTR] == 1


def test_data_moving_ops_pass_the_question_on() -> None:
    g, cast = _ir([("", "Concat", 1)])
    g.outputs.remove("y0")  # the Concat's output read by a conv
    g.nodes.append(Node("Conv", ["y0", "w"], ["z"], {}, name="conv"))
    g.outputs.append("z")
    assert mark_flushing_casts(g) == 1 and cast.attrs[ATTR] == 1
    g.outputs.append("y0")  # ... and returned: exact
    assert mark_flushing_casts(g) == 0 and ATTR not in cast.attrs


@pytest.mark.parametrize("case", ["residual", "bias", "vector op", "output", "subgraph", "nothing", "mixed",
                                  "deconv"])
def test_other_readers_keep_the_exact_cast(case: str) -> None:
    """(A ConvTranspose outside its kernel == stride form widens its bf16 operands: it would see them.)"""
    readers = {"residual": [("pycann", "FusedConv", 3)], "bias": [("", "Conv", 2)], "vector op": [("", "Add", 0)],
               "deconv": [("", "ConvTranspose", 0)],
               "output": [("", "Conv", 0)], "subgraph": [("", "Conv", 0)], "nothing": [],
               "mixed": [("", "Conv", 0), ("", "Relu", 0)]}[case]
    g, cast = _ir(readers, output=case == "output", subgraph=case == "subgraph")
    cast.attrs = {**cast.attrs, ATTR: 1}  # (a stale mark from an earlier run of the pass goes)
    assert mark_flushing_casts(g) == 0 and ATTR not in cast.attrs


def test_must_keep_origin_dtype_marks_nothing() -> None:
    cm = compile_model(_neck(), CompileOptions(precision_mode="must_keep_origin_dtype"))
    assert not any(ATTR in n.attrs for n in cm.graph.nodes)


def _one_conv(w: np.ndarray, x_shape: tuple[int, ...], stride: int,
              monkeypatch: pytest.MonkeyPatch) -> tuple[LoadedModel, LoadedModel]:
    """A 3x3 conv (pads 1) of weight ``w`` compiled in the bf16 mode with the fast Casts and with
    every Cast exact: (fast, exact)."""
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[stride] * 2)],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    fast = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
    with monkeypatch.context() as mp:
        mp.setattr(precision, "mark_flushing_casts", lambda g: 0)
        exact = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
    return fast, exact


native = pytest.mark.skipif(not onednn_bf16.native(), reason="needs a bf16 CPU (avx512_bf16 / amx_bf16) and libdnnl")


@native
def test_the_flushing_reorder_rounds_as_ml_dtypes_and_flushes_subnormals() -> None:
    tiny = np.finfo(np.float32).tiny
    special = np.array([0.0, -0.0, 1.0, -1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4e38, -3.4e38, np.inf, -np.inf,
                        tiny, -tiny, tiny * 0.5, -tiny * 0.25, 1e-45, tiny * (1 - 2 ** -9)], np.float32)
    x = np.concatenate([special, (RNG.standard_normal(1 << 16) * 10.0 ** RNG.integers(-30, 30, 1 << 16))
                        .astype(np.float32)])
    x = np.concatenate([x, np.full(3, np.nan, np.float32)])
    k = onednn_cast.bound_cast(x.shape, np.dtype(np.float32), bfloat16(), _k_cast, narrowing=True)
    assert k is not None and k.impl == "onednn:reorder_cast_flush"
    got = k.run([x], {"to": BF16})[0]
    want = x.astype(bfloat16())
    sub = (np.abs(x) < tiny) & (x != 0)
    nan = np.isnan(x)
    ok = ~sub & ~nan
    assert np.array_equal(got[ok].view(np.uint16), want[ok].view(np.uint16))
    assert np.all(got[sub].astype(np.float32) == 0.0)
    assert np.all(np.signbit(got[sub].astype(np.float32)) == np.signbit(x[sub]))
    assert np.all(np.isnan(got[nan].astype(np.float32)))


@native
def test_a_model_gives_the_exact_casts_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The neck with the fast Casts against the same compile with every Cast exact, on inputs with
    float32 subnormals (not within half a bf16 step of 2**-126): bit for bit, since the bf16 convs read
    the exact Casts' bf16 subnormals as zero too."""
    m = _neck()
    made: list[str] = []
    real = onednn_cast.bound_cast

    def spy(*a: Any, **kw: Any) -> Any:
        k = real(*a, **kw)
        if k is not None:
            made.append(k.impl)
        return k

    with monkeypatch.context() as mp:
        mp.setattr(onednn_cast, "bound_cast", spy)
        fast = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
        fast.run([np.zeros((1, 8, 64, 64), np.float32)])
    assert "onednn:reorder_cast_flush" in made, made  # (the maps are 8 x 64 x 64: above MIN_ELEMENTS)
    with monkeypatch.context() as mp:
        mp.setattr(precision, "mark_flushing_casts", lambda g: 0)
        exact = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
    tiny = np.finfo(np.float32).tiny
    for scale in (1.0, 1e-20, tiny * 2.0 ** -4):  # (the last: the conv outputs are subnormal)
        x = (RNG.standard_normal((1, 8, 64, 64)) * scale).astype(np.float32)
        x.flat[::7] = tiny * 0.25
        y_fast, y_exact = fast.run([x])[0], exact.run([x])[0]
        assert np.array_equal(y_fast, y_exact), float(np.abs(y_fast - y_exact).max())


@native
def test_a_three_channel_stem_differs_at_most_by_the_subnormals_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN's jit_bf16 conv on a 3-channel input widens its operands: on all-subnormal inputs the
    exact casts' bf16 subnormals count there and the reorder's zeros do not, a difference below
    2**-126 times the weights' absolute sum per output."""
    w = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
    fast, exact = _one_conv(w, (1, 3, 128, 128), 2, monkeypatch)
    tiny = np.finfo(np.float32).tiny
    bound = tiny * float(np.abs(w).reshape(16, -1).sum(axis=1).max())
    for scale in (1.0, tiny * 0.5):
        x = (RNG.standard_normal((1, 3, 128, 128)) * scale).astype(np.float32)
        d = np.abs(fast.run([x])[0].astype(np.float64) - exact.run([x])[0])
        assert float(d.max()) <= bound, (scale, float(d.max()), bound)


def _own_marked_cast() -> onnx.ModelProto:
    """A model whose own float32 -> bf16 -> float32 Casts arrive with ``_readers_flush`` set (a graph
    output reads the value: nothing vouches for a flush)."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BFLOAT16, _readers_flush=1),
             helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "allow_fp32_to_bf16"])
def test_a_models_own_mark_is_dropped(mode: str) -> None:
    """Only PrecisionMode's verdict lets a Cast flush: in must_keep_origin_dtype (which marks nothing)
    the model's own mark went to the kernel binding, and float32 subnormals came out as zeros."""
    cm = compile_model(_own_marked_cast(), CompileOptions(precision_mode=mode, soc_version="Ascend910B2"))
    assert not any(ATTR in n.attrs for n in cm.graph.nodes), [(n.op_type, n.attrs) for n in cm.graph.nodes]
    x = np.full((64, 1024), 1e-39, np.float32)
    y = LoadedModel.from_compiled(cm).run([x])[0]
    assert np.array_equal(y, x.astype(bfloat16()).astype(np.float32)) and float(y.min()) > 0.0


def test_a_mark_in_a_subgraph_is_dropped() -> None:
    """Subgraphs are not marked: a Cast there that arrives marked loses the mark."""
    g, _ = _ir([("", "Conv", 0)])
    body = Graph(name="then", opsets={"": 19})
    body.descs["x"] = TensorDesc(F32, (1, 8, 4, 4))
    body.nodes.append(Node("Cast", ["x"], ["z"], {"to": BF16, ATTR: 1}, name="inner", opset=19))
    body.outputs = ["z"]
    g.nodes.append(Node("If", ["c"], ["w"], {"then_branch": body, "else_branch": body}, name="if"))
    assert mark_flushing_casts(g) == 1 and ATTR not in body.nodes[0].attrs


@native
def test_subnormals_that_round_to_the_smallest_normal_differ_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 subnormal within half a bf16 step of 2**-126 rounds up to bfloat16's smallest normal
    under the exact cast (which no kernel flushes) and to zero in the reorder: even on the native
    kernels the outputs then differ, by at most 2**-126 times the weights' absolute sum."""
    w = (RNG.standard_normal((16, 16, 3, 3)) * 100.0).astype(np.float32)
    fast, exact = _one_conv(w, (1, 16, 64, 64), 1, monkeypatch)
    tiny = np.finfo(np.float32).tiny
    x = np.full((1, 16, 64, 64), tiny * (1 - 2 ** -9), np.float32)
    assert float(x.astype(bfloat16()).astype(np.float32).min()) == tiny  # (the exact cast: a normal)
    y_fast, y_exact = fast.run([x])[0], exact.run([x])[0]
    assert not np.any(y_fast) and np.count_nonzero(y_exact) > 0  # (the reorder's zeros)
    bound = tiny * float(np.abs(w).reshape(16, -1).sum(axis=1).max())
    assert float(np.abs(y_fast.astype(np.float64) - y_exact).max()) <= bound


@pytest.mark.parametrize("alpha", [1.0, 0.5, -1.0, 2.0, -1e30])
def test_a_gemm_vouches_only_without_an_alpha_above_one(alpha: float) -> None:
    """A Gemm that canonicalize keeps (transA) runs in oneDNN's bf16 gemm, which widens its operands:
    its alpha scales the subnormals' share, so only |alpha| <= 1 keeps the difference within the bound."""
    g, cast = _ir([("", "Gemm", 0)])
    g.nodes[1].attrs = {"transA": 1, "alpha": alpha}
    assert mark_flushing_casts(g) == (1 if abs(alpha) <= 1.0 else 0)
    assert (ATTR in cast.attrs) == (abs(alpha) <= 1.0)


@native
def test_a_scaled_gemm_keeps_the_exact_cast() -> None:
    """Gemm(transA=1, alpha=1e30) of 1e-39 inputs and ones: 256 x 1e-39 x 1e30 with the exact casts
    (the bf16 gemm widens them), 0 had the reorder flushed them."""
    g = helper.make_graph([helper.make_node("Gemm", ["a", "b"], ["y"], transA=1, alpha=1e30)], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [256, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.ones((256, 256), np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    cm = compile_model(m, CompileOptions(**OPTS))
    assert not any(ATTR in n.attrs for n in cm.graph.nodes)
    a = np.full((256, 256), 1e-39, np.float32)
    want = 256 * float(a.astype(bfloat16()).astype(np.float32)[0, 0]) * 1e30
    y = LoadedModel.from_compiled(cm).run([a])[0]
    np.testing.assert_allclose(y, want, rtol=2e-2)
