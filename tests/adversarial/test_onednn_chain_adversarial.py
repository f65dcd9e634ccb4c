"""Adversarial end-to-end checks of the oneDNN ElementwiseChain (providers/onednn_binary.py,
prepared_onednn._chain), the channels-last oneDNN Concat (providers/onednn_concat.py,
prepared_onednn._concat) and FusedConvTranspose (ops/fused_deconv.py, ge/compile/passes/fuse_conv_act.py)
against ONNX Runtime.

Every model is compiled with ``compile_model`` and run through ``LoadedModel``; results are compared
with ONNX Runtime (rtol/atol 1e-5 for Add/Sub/Mul/Div-only chains, 1e-4 otherwise), NaN positions
and the signs of zeros and infinities included where the case is about them.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(20240611)
ONEDNN = providers.available("onednn")
EXACT = {"rtol": 1e-5, "atol": 1e-5}
LOOSE = {"rtol": 1e-4, "atol": 1e-4}


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits=None, opset=17, out_type=F) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(o, out_type, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, init),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _n(op: str, ins: list[str], out: str, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], **attrs)


def _kernels(lm: LoadedModel, op_type: str) -> list[Any]:
    return [step.bound for plan, _ in lm.executor._cache.values()
            for node, step in zip(plan.nodes, plan.steps) if node.op_type == op_type]


def _onednn_bound(lm: LoadedModel, op_type: str) -> bool:
    """Whether some step of ``op_type`` runs the oneDNN-bound kernel (true without oneDNN)."""
    if not ONEDNN:
        return True
    return any(k is not None and k.openmp and k.keep is not None for k in _kernels(lm, op_type))


def _same(got: np.ndarray, want: np.ndarray, tol: dict[str, float], signs: bool = False) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    if signs:
        z = (want == 0) | np.isinf(want)
        np.testing.assert_array_equal(np.signbit(got[z]), np.signbit(want[z]))


def _check(m: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]], tol: dict[str, float] = LOOSE,
           signs: bool = False, cm: Any = None) -> LoadedModel:
    lm = LoadedModel.from_compiled(cm if cm is not None else compile_model(m))
    for feeds in feeds_list:
        got = lm.run_dict(feeds)
        want = run_ort(m, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(np.asarray(g), w, tol, signs)
    return lm


def _ops(cm: Any) -> list[str]:
    return [n.op_type for n in cm.graph.nodes]


# ---------------------------------------------------------------- ElementwiseChain: shapes


@pytest.mark.parametrize("shape", [
    (1, 16, 64, 64),      # exactly MIN_ELEMENTS
    (1, 16, 64, 63),      # just below: numpy
    (1, 16, 64, 65),      # just above, odd last dim
    (3, 7, 61, 53),       # batch > 1, primes
    (65537,),             # 1-D
    (257, 263),           # 2-D
    (2, 3, 5, 67, 71),    # 5-D
])
def test_chain_shapes_around_threshold(shape: tuple[int, ...]) -> None:
    c = _f32(*shape[-1:])
    d = _f32(*(1,) * (len(shape) - 1), 1)
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "d"], "b"), _n("Sub", ["b", "x"], "y")]
    m = _model(nodes, [("x", F, shape)], ["y"], {"c": c, "d": d})
    cm = compile_model(m)
    assert "ElementwiseChain" in _ops(cm)
    lm = _check(m, [{"x": _f32(*shape)} for _ in range(2)], EXACT, cm=cm)
    if int(np.prod(shape)) >= 65536:
        assert _onednn_bound(lm, "ElementwiseChain")


@pytest.mark.parametrize("oshape", [
    (1, 32, 1, 1), (2, 1, 48, 48), (), (48,), (48, 48), (1,), (2, 32, 48, 48), (32, 1, 1), (2, 32, 1, 48),
])
def test_chain_operand_broadcasts(oshape: tuple[int, ...]) -> None:
    xs = (2, 32, 48, 48)
    nodes = [_n("Add", ["x", "o"], "a"), _n("Mul", ["a", "o"], "b"), _n("Div", ["b", "k"], "c"),
             _n("Sub", ["c", "o"], "y")]
    m = _model(nodes, [("x", F, xs), ("o", F, oshape)], ["y"], {"k": np.float32(1.7)})
    feeds = [{"x": _f32(*xs), "o": np.asarray(_f32(*oshape) + np.float32(3.0))} for _ in range(2)]
    lm = _check(m, feeds, EXACT)
    if oshape in [(1, 32, 1, 1), (), (1,), (2, 32, 48, 48)]:  # oneDNN may decline other broadcasts
        assert _onednn_bound(lm, "ElementwiseChain")


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
@pytest.mark.parametrize("x_first", [True, False])
def test_chain_operand_larger_than_chain_input_enlarges(op: str, x_first: bool) -> None:
    """The chain's input is (1,C,1,1), its first operand the full map: the result enlarges."""
    small, big = (1, 24, 1, 1), (2, 24, 40, 40)
    first = _n(op, ["s", "b"] if x_first else ["b", "s"], "a")
    nodes = [first, _n("Mul", ["a", "k"], "m"), _n("Add", ["m", "s"], "y")]
    m = _model(nodes, [("s", F, small), ("b", F, big)], ["y"], {"k": np.float32(0.5)})
    feeds = [{"s": _f32(*small) + np.float32(2.5), "b": _f32(*big) + np.float32(2.5)} for _ in range(2)]
    _check(m, feeds, EXACT)


def test_chain_later_step_enlarges_result() -> None:
    """A later step's operand is bigger than the running value (the result grows mid-chain)."""
    nodes = [_n("Mul", ["x", "k"], "a"), _n("Add", ["a", "b"], "c"), _n("Sigmoid", ["c"], "y")]
    m = _model(nodes, [("x", F, (1, 8, 1, 64)), ("b", F, (3, 8, 64, 64))], ["y"], {"k": np.float32(2.0)})
    _check(m, [{"x": _f32(1, 8, 1, 64), "b": _f32(3, 8, 64, 64)}])


def test_chain_rank_lower_input_and_higher_rank_operand() -> None:
    nodes = [_n("Mul", ["x", "b"], "a"), _n("Add", ["a", "x"], "c"), _n("Tanh", ["c"], "y")]
    m = _model(nodes, [("x", F, (64, 64)), ("b", F, (2, 9, 64, 64))], ["y"])
    _check(m, [{"x": _f32(64, 64), "b": _f32(2, 9, 64, 64)} for _ in range(2)])


def test_chain_input_reused_as_later_operands() -> None:
    s = (1, 20, 60, 60)
    nodes = [_n("Mul", ["x", "x"], "a"), _n("Add", ["a", "x"], "b"), _n("Mul", ["x", "b"], "c"),
             _n("Sub", ["c", "x"], "d"), _n("Div", ["d", "k"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"k": np.float32(3.0)})
    lm = _check(m, [{"x": _f32(*s)} for _ in range(2)], EXACT)
    assert _onednn_bound(lm, "ElementwiseChain")


@pytest.mark.parametrize("order", ["c_sub_x", "c_div_x", "cur_right_sub", "cur_right_div", "b_sub_x"])
def test_chain_swapped_operand_order(order: str) -> None:
    s = (1, 16, 80, 80)
    c = np.abs(_f32(1, 16, 1, 1)) + np.float32(1.0)
    if order == "c_sub_x":
        nodes = [_n("Sub", ["c", "x"], "a"), _n("Mul", ["a", "c"], "y")]
    elif order == "c_div_x":
        nodes = [_n("Div", ["c", "x"], "a"), _n("Add", ["a", "c"], "y")]
    elif order == "cur_right_sub":
        nodes = [_n("Mul", ["x", "c"], "a"), _n("Sub", ["b", "a"], "y")]
    elif order == "cur_right_div":
        nodes = [_n("Add", ["x", "c"], "a"), _n("Div", ["b", "a"], "y")]
    else:
        nodes = [_n("Sub", ["b", "x"], "a"), _n("Div", ["a", "c"], "y")]
    m = _model(nodes, [("x", F, s), ("b", F, s)], ["y"], {"c": c})
    feeds = [{"x": np.abs(_f32(*s)) + np.float32(0.5), "b": _f32(*s)} for _ in range(2)]
    _check(m, feeds, EXACT)


# ---------------------------------------------------------------- ElementwiseChain: special values


def _specials(shape: tuple[int, ...]) -> np.ndarray:
    x = _f32(*shape)
    flat = x.reshape(-1)
    vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e38, -1e38, 1e-45, -1e-45, 3e38], np.float32)
    idx = RNG.choice(flat.size, 4000, replace=False)
    flat[idx] = np.resize(vals, idx.size)
    return x


@pytest.mark.parametrize("steps", [
    ["Div:x/o", "Mul:k"],
    ["Div:o/x", "Add:k"],
    ["Sub:x-o", "Div:o"],
    ["Mul:o", "Div:o", "Sub:o"],
    ["Add:o", "Sub:x", "Mul:neg0"],
])
def test_chain_div_zero_inf_nan_signed_zero(steps: list[str]) -> None:
    s = (1, 16, 64, 72)
    nodes, cur = [], "x"
    for i, st in enumerate(steps):
        op, spec = st.split(":")
        out = f"t{i}"
        if spec == "x/o":
            ins = ["x", "o"]
        elif spec == "o/x":
            ins = ["o", "x"]
        elif spec == "x-o":
            ins = ["x", "o"]
        elif spec == "neg0":
            ins = [cur, "nz"]
        elif spec == "x":
            ins = [cur, "x"]
        else:
            ins = [cur, spec]
        nodes.append(_n(op, ins, out))
        cur = out
    nodes[-1].output[0] = "y"
    m = _model(nodes, [("x", F, s), ("o", F, s)], ["y"],
               {"k": np.float32(-2.0), "nz": np.full((1, 16, 1, 1), -0.0, np.float32)})
    feeds = [{"x": _specials(s), "o": _specials(s)} for _ in range(2)]
    lm = _check(m, feeds, EXACT, signs=True)
    assert _onednn_bound(lm, "ElementwiseChain")


@pytest.mark.parametrize("unary", ["Sigmoid", "Tanh", "Exp"])
def test_chain_unary_huge_and_infinite_values(unary: str) -> None:
    s = (1, 16, 64, 64)
    x = _f32(*s, scale=40.0)
    x.reshape(-1)[:12] = [88.7, 88.8, 89.0, 100.0, 1e30, -1e30, -88.0, -104.0, np.inf, -np.inf, 0.0, -0.0]
    nodes = [_n("Mul", ["x", "k"], "a"), _n(unary, ["a"], "b"), _n("Add", ["b", "z"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"k": np.float32(1.0), "z": np.zeros((1, 16, 1, 1), np.float32)})
    lm = _check(m, [{"x": x}, {"x": _f32(*s, scale=3.0)}], LOOSE, signs=True)
    # Exp stays on numpy (oneDNN's exp turns NaN into +inf); the others run in oneDNN
    if ONEDNN:
        assert _onednn_bound(lm, "ElementwiseChain") == (unary != "Exp")


@pytest.mark.parametrize("unary", ["Sigmoid", "Tanh"])
def test_chain_unary_nan_propagates(unary: str) -> None:
    s = (1, 16, 64, 64)
    x = _f32(*s)
    x[0, 3, 5, :9] = np.nan
    nodes = [_n("Add", ["x", "k"], "a"), _n(unary, ["a"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"k": np.float32(0.25)})
    _check(m, [{"x": x}])


def test_chain_exp_nan_propagates() -> None:
    s = (1, 16, 64, 64)
    x = _f32(*s)
    x[0, 3, 5, :9] = np.nan
    nodes = [_n("Add", ["x", "k"], "a"), _n("Exp", ["a"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"k": np.float32(0.25)})
    _check(m, [{"x": x}])


def test_chain_exp_nan_is_fine_below_threshold() -> None:
    """The same chain below MIN_ELEMENTS runs numpy and keeps NaN (contrast for the xfail above)."""
    s = (1, 16, 64, 32)
    x = _f32(*s)
    x[0, 3, 5, :9] = np.nan
    nodes = [_n("Add", ["x", "k"], "a"), _n("Exp", ["a"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"k": np.float32(0.25)})
    _check(m, [{"x": x}])


# ---------------------------------------------------------------- ElementwiseChain: NHWC conv chains


def _rse_fpn(c: int = 24, hw: int = 56, n: int = 1,
             se: tuple[int, ...] | None = None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """conv -> Mul(se) -> Add(conv) -> Add(other conv) (PP-OCR det's RSE-FPN), then a conv."""
    nodes = [_n("Conv", ["x", "W0"], "c0", pads=[1, 1, 1, 1]),
             _n("Conv", ["x", "W1"], "c1", pads=[1, 1, 1, 1]),
             _n("Mul", ["c0", "se"], "m"), _n("Add", ["m", "c0"], "a"), _n("Add", ["a", "c1"], "b"),
             _n("Conv", ["b", "W2"], "y", pads=[1, 1, 1, 1])]
    inits = {"W0": _f32(c, 8, 3, 3, scale=0.2), "W1": _f32(c, 8, 3, 3, scale=0.2), "W2": _f32(8, c, 3, 3, scale=0.1)}
    se = se or (1, c, 1, 1)
    m = _model(nodes, [("x", F, (n, 8, hw, hw)), ("se", F, se)], ["y", "b"], inits)
    return m, {"x": _f32(n, 8, hw, hw), "se": _f32(*se)}


@pytest.mark.parametrize("n", [1, 3])
def test_chain_inside_nhwc_conv_chain(n: int) -> None:
    m, feeds = _rse_fpn(n=n)
    cm = compile_model(m)
    chains = [nd for nd in cm.graph.nodes if nd.op_type == "ElementwiseChain"]
    assert chains
    lm = _check(m, [feeds, _rse_fpn(n=n)[1]], LOOSE, cm=cm)
    if any(nd.attrs.get("_layout") == "NHWC" for nd in chains):
        assert _onednn_bound(lm, "ElementwiseChain")


@pytest.mark.parametrize("se", [(1, 1, 56, 56), (56,), (2, 24, 56, 56), (24, 1, 56), (2, 1, 1, 56), (1,)])
def test_chain_inside_nhwc_conv_chain_with_nchw_user_operand(se: tuple[int, ...]) -> None:
    """The chain runs channels-last but its operand is an NCHW (C-order) array from the user."""
    m, feeds = _rse_fpn(n=2, se=se)
    _check(m, [feeds, _rse_fpn(n=2, se=se)[1]], LOOSE)


def test_chain_nhwc_repeated_and_threaded_runs_equal_sequential() -> None:
    m, _ = _rse_fpn(c=16, hw=64)
    lm = LoadedModel.from_compiled(compile_model(m))
    feeds = [_rse_fpn(c=16, hw=64)[1] for _ in range(4)]
    seq = [[np.array(o) for o in lm.run_dict(f)] for f in feeds]
    for f, s in zip(feeds, seq):
        for g, w in zip(s, run_ort(m, f)):
            _same(g, w, LOOSE)
    results: dict[int, list[list[np.ndarray]]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            results[t] = [[np.array(o) for o in lm.run_dict(feeds[(t + k) % 4])] for k in range(3)]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t, outs in results.items():
        for k, got in enumerate(outs):
            for g, w in zip(got, seq[(t + k) % 4]):
                np.testing.assert_array_equal(g, w)


def test_chain_threads_on_plain_chain_equal_sequential() -> None:
    s = (2, 16, 64, 64)
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "o"], "b"), _n("Div", ["b", "k"], "y")]
    m = _model(nodes, [("x", F, s), ("o", F, s)], ["y"], {"c": _f32(1, 16, 1, 1), "k": np.float32(3.0)})
    lm = LoadedModel.from_compiled(compile_model(m))
    feeds = [{"x": _f32(*s), "o": _f32(*s)} for _ in range(6)]
    want = [run_ort(m, f)[0] for f in feeds]
    out: dict[int, np.ndarray] = {}

    def worker(i: int) -> None:
        for _ in range(3):
            out[i] = np.array(lm.run_dict(feeds[i])[0])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(6):
        _same(out[i], want[i], EXACT)


# ---------------------------------------------------------------- ElementwiseChain: user arrays


@pytest.mark.parametrize("kind", ["fortran", "channels_last", "strided_view", "negative_stride", "broadcast_view",
                                  "unaligned"])
def test_chain_graph_inputs_with_odd_memory_layouts(kind: str) -> None:
    s = (2, 16, 48, 48)
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "o"], "b"), _n("Sub", ["b", "x"], "y")]
    m = _model(nodes, [("x", F, s), ("o", F, s)], ["y"], {"c": _f32(1, 16, 1, 1)})
    lm = LoadedModel.from_compiled(compile_model(m))
    x, o = _f32(*s), _f32(*s)
    if kind == "fortran":
        x, o = np.asfortranarray(x), np.asfortranarray(o)
    elif kind == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    elif kind == "strided_view":
        x = _f32(2, 16, 96, 48)[:, :, ::2, :]
    elif kind == "negative_stride":
        o = _f32(*s)[:, :, ::-1, :]
    elif kind == "broadcast_view":
        o = np.broadcast_to(_f32(1, 16, 48, 48), s)
    else:
        buf = np.zeros(x.size * 4 + 1, np.uint8)
        x2 = np.frombuffer(buf[1:].data, np.float32).reshape(s)
        x2[...] = x
        x = x2
    feeds = {"x": x, "o": o}
    ref = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
    want = run_ort(m, ref)[0]
    for _ in range(2):
        _same(np.asarray(lm.run_dict(feeds)[0]), want, EXACT)
    np.testing.assert_array_equal(x, ref["x"])  # the chain's input is never modified


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_chain_float16_float64_models_do_not_take_float32_path(dtype: type) -> None:
    s = (1, 16, 64, 80)
    t = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.DOUBLE
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "o"], "b"), _n("Sigmoid", ["b"], "y")]
    m = _model(nodes, [("x", t, s), ("o", t, s)], ["y"], {"c": _f32(1, 16, 1, 1).astype(dtype)}, out_type=t)
    feeds = {"x": _f32(*s).astype(dtype), "o": _f32(*s).astype(dtype)}
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {"rtol": 1e-12, "atol": 1e-12}
    lm = _check(m, [feeds], tol)
    assert not any(k is not None and k.keep is not None for k in _kernels(lm, "ElementwiseChain"))


def test_chain_dynamic_shapes() -> None:
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "o"], "b"), _n("Div", ["b", "k"], "y")]
    m = _model(nodes, [("x", F, ["n", 16, -1, -1]), ("o", F, ["n", 16, -1, -1])], ["y"],
               {"c": _f32(1, 16, 1, 1), "k": np.float32(-3.0)})
    shapes = [(1, 16, 64, 64), (2, 16, 30, 70), (1, 16, 8, 8), (1, 16, 64, 64), (3, 16, 65, 67)]
    lm = LoadedModel.from_compiled(compile_model(m))
    for s in shapes:
        f = {"x": _f32(*s), "o": _f32(*s)}
        _same(np.asarray(lm.run_dict(f)[0]), run_ort(m, f)[0], EXACT)


def test_chain_output_does_not_alias_inputs_across_runs() -> None:
    """Results of a previous run are not overwritten by the next one (returned arrays are owned)."""
    s = (1, 16, 64, 64)
    nodes = [_n("Mul", ["x", "c"], "a"), _n("Add", ["a", "x"], "y")]
    m = _model(nodes, [("x", F, s)], ["y"], {"c": np.float32(2.0)})
    lm = LoadedModel.from_compiled(compile_model(m))
    x1, x2 = _f32(*s), _f32(*s)
    y1 = lm.run_dict({"x": x1})[0]
    keep = np.array(y1)
    lm.run_dict({"x": x2})
    np.testing.assert_array_equal(y1, keep)


# ---------------------------------------------------------------- Concat inside an NHWC chain


def _concat_model(sizes: list[int], axis: int, hw: int = 40, extra_out: bool = False, twice: bool = False,
                  self_concat: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    nodes, inits, cat_ins = [], {}, []
    for i, c in enumerate(sizes):
        inits[f"W{i}"] = _f32(c, 8, 3, 3, scale=0.2)
        nodes.append(_n("Conv", ["x", f"W{i}"], f"c{i}", pads=[1, 1, 1, 1]))
        cat_ins.append(f"c{i}")
    if twice:
        cat_ins = [cat_ins[0], *cat_ins, cat_ins[0]]
    if self_concat:
        cat_ins = [cat_ins[0], cat_ins[0]]
    nodes.append(_n("Concat", cat_ins, "cat", axis=axis))
    total_c = sizes[0] * 2 if self_concat else (sum(sizes) + (2 * sizes[0] if twice else 0))
    if axis % 4 == 1:
        inits["Wout"] = _f32(8, total_c, 1, 1, scale=0.1)
    else:
        inits["Wout"] = _f32(8, sizes[0], 1, 1, scale=0.1)
    nodes.append(_n("Conv", ["cat", "Wout"], "y"))
    outs = ["y", "cat"] + (["c0"] if extra_out else [])
    m = _model(nodes, [("x", F, (2, 8, hw, hw))], outs, inits)
    return m, {"x": _f32(2, 8, hw, hw)}


@pytest.mark.parametrize("sizes,axis", [
    ([24, 24, 24, 24], 1), ([8, 16, 24, 3, 1, 40], 1), ([24, 24], -3), ([16, 16, 16], 2), ([16, 16], 3),
    ([16, 16], -1), ([16, 16, 16, 16, 16, 16, 16, 16, 16], 1),
])
@pytest.mark.parametrize("hw", [40, 96])
def test_concat_nhwc(sizes: list[int], axis: int, hw: int) -> None:
    """Values equal ORT's; a channels-last Concat runs on oneDNN where ``onednn_concat.takes`` says
    (large, or thick parts), else as numpy's strided copy into the arena."""
    from pycann.kernels.providers import onednn_concat

    if axis % 4 != 1 and len(set(sizes)) != 1:
        pytest.skip("non-channel concat needs equal channels")
    m, feeds = _concat_model(sizes, axis, hw=hw)
    cm = compile_model(m)
    assert "Concat" in _ops(cm)
    lm = _check(m, [feeds, _concat_model(sizes, axis, hw=hw)[1]], LOOSE, cm=cm)
    cat = next(nd for nd in cm.graph.nodes if nd.op_type == "Concat")
    if cat.attrs.get("_layout") == "NHWC":
        shape = cm.graph.descs[cat.outputs[0]].shape
        assert _onednn_bound(lm, "Concat") == onednn_concat.takes(shape, axis % 4, len(cat.inputs)), shape


@pytest.mark.parametrize("case", ["input_is_graph_output", "input_used_twice", "self_concat"])
def test_concat_nhwc_aliasing(case: str) -> None:
    kw = {"extra_out": case == "input_is_graph_output", "twice": case == "input_used_twice",
          "self_concat": case == "self_concat"}
    m, feeds = _concat_model([24, 16], 1, **kw)
    lm = _check(m, [feeds, _concat_model([24, 16], 1, **kw)[1]], LOOSE)
    assert lm is not None


def test_concat_nhwc_different_spatial_sizes_along_axis() -> None:
    """Concat along H of conv outputs with different heights (different strides per input)."""
    nodes = [_n("Conv", ["x", "W0"], "c0", pads=[1, 1, 1, 1]),
             _n("Conv", ["x", "W1"], "c1", pads=[0, 1, 0, 1]),
             _n("Conv", ["x", "W2"], "c2", pads=[3, 1, 3, 1]),
             _n("Concat", ["c0", "c1", "c2"], "cat", axis=2),
             _n("Conv", ["cat", "W3"], "y")]
    inits = {f"W{i}": _f32(16, 8, 3, 3, scale=0.2) for i in range(3)}
    inits["W3"] = _f32(4, 16, 1, 1)
    m = _model(nodes, [("x", F, (1, 8, 48, 48))], ["y", "cat"], inits)
    _check(m, [{"x": _f32(1, 8, 48, 48)} for _ in range(2)], LOOSE)


def test_concat_nhwc_with_graph_input_operand() -> None:
    """One concat operand comes straight from the user (NCHW, C-contiguous; or Fortran order)."""
    nodes = [_n("Conv", ["x", "W0"], "c0", pads=[1, 1, 1, 1]), _n("Concat", ["c0", "g"], "cat", axis=1),
             _n("Conv", ["cat", "W1"], "y")]
    m = _model(nodes, [("x", F, (1, 8, 48, 48)), ("g", F, (1, 20, 48, 48))], ["y"],
               {"W0": _f32(24, 8, 3, 3, scale=0.2), "W1": _f32(8, 44, 1, 1, scale=0.1)})
    lm = LoadedModel.from_compiled(compile_model(m))
    for g in (_f32(1, 20, 48, 48), np.asfortranarray(_f32(1, 20, 48, 48)),
              np.ascontiguousarray(_f32(1, 48, 48, 20)).transpose(0, 3, 1, 2)):
        f = {"x": _f32(1, 8, 48, 48), "g": g}
        want = run_ort(m, {k: np.ascontiguousarray(v) for k, v in f.items()})[0]
        _same(np.asarray(lm.run_dict(f)[0]), want, LOOSE)


def test_concat_nhwc_threads_equal_sequential() -> None:
    m, _ = _concat_model([24, 24, 24], 1)
    lm = LoadedModel.from_compiled(compile_model(m))
    feeds = [_concat_model([24, 24, 24], 1)[1] for _ in range(4)]
    seq = [[np.array(o) for o in lm.run_dict(f)] for f in feeds]
    out: dict[int, list[np.ndarray]] = {}

    def worker(i: int) -> None:
        for _ in range(2):
            out[i] = [np.array(o) for o in lm.run_dict(feeds[i])]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(4):
        for g, w in zip(out[i], seq[i]):
            np.testing.assert_array_equal(g, w)


# ---------------------------------------------------------------- FusedConvTranspose


ACTS: dict[str, tuple[list[onnx.NodeProto], dict[str, Any]]] = {}


def _act_nodes(act: str, src: str, out: str) -> tuple[list[onnx.NodeProto], dict[str, Any]]:
    if act == "Clip":
        return [helper.make_node("Clip", [src, "lo", "hi"], [out])], {"lo": np.float32(-0.5), "hi": np.float32(0.7)}
    if act == "ClipMinOnly":
        return [helper.make_node("Clip", [src, "lo"], [out])], {"lo": np.float32(0.0)}
    if act == "ClipMinGtMax":
        return [helper.make_node("Clip", [src, "lo", "hi"], [out])], {"lo": np.float32(0.5), "hi": np.float32(-0.5)}
    if act == "HardSigmoid":
        return [helper.make_node("HardSigmoid", [src], [out], alpha=0.3, beta=0.4)], {}
    if act == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [src], [out], alpha=0.15)], {}
    if act == "Swish":
        return [helper.make_node("Sigmoid", [src], [src + "_s"]), helper.make_node("Mul", [src, src + "_s"], [out])], {}
    return [helper.make_node(act, [src], [out])], {}


def _deconv_model(x_shape: tuple[int, ...], w_shape: tuple[int, ...], act: str, attrs: dict[str, Any],
                  bias: bool = True, extra_out: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    ins = ["x", "W", "B"] if bias else ["x", "W"]
    nodes = [helper.make_node("ConvTranspose", ins, ["d"], **attrs)]
    act_nodes, inits = _act_nodes(act, "d", "y")
    nodes += act_nodes
    inits = {**inits, "W": _f32(*w_shape, scale=0.3)}
    if bias:
        inits["B"] = _f32(w_shape[1] * int(attrs.get("group", 1)))
    outs = ["y", "d"] if extra_out else ["y"]
    m = _model(nodes, [("x", F, x_shape)], outs, inits)
    return m, {"x": _f32(*x_shape)}


ALL_ACTS = ["Relu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Swish", "ClipMinOnly",
            "ClipMinGtMax"]


@pytest.mark.parametrize("act", ALL_ACTS)
def test_fused_deconv_every_activation(act: str) -> None:
    m, feeds = _deconv_model((2, 16, 20, 20), (16, 12, 4, 4), act, {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    cm = compile_model(m)
    ops = _ops(cm)
    if act != "ClipMinGtMax":
        assert "FusedConvTranspose" in ops and "ConvTranspose" not in ops, ops
    _check(m, [feeds, {"x": _f32(2, 16, 20, 20, scale=4.0)}], LOOSE, cm=cm)


@pytest.mark.parametrize("name,xs,ws,attrs", [
    ("strides_pads", (1, 8, 17, 19), (8, 6, 3, 3), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ("output_padding", (1, 8, 17, 19), (8, 6, 3, 3), {"strides": [2, 2], "output_padding": [1, 0]}),
    ("output_shape", (1, 8, 17, 19), (8, 6, 3, 3), {"strides": [2, 2], "output_shape": [36, 39]}),
    ("dilations", (1, 8, 17, 19), (8, 6, 3, 3), {"dilations": [2, 3], "pads": [1, 1, 1, 1]}),
    ("group", (2, 12, 15, 15), (12, 4, 3, 3), {"group": 3, "strides": [2, 2]}),
    ("depthwise", (1, 16, 20, 20), (16, 1, 4, 4), {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("same_upper", (1, 8, 17, 19), (8, 6, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("same_lower", (1, 8, 17, 19), (8, 6, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("valid", (1, 8, 17, 19), (8, 6, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ("kernel_1x1", (1, 8, 30, 30), (8, 6, 1, 1), {}),
    ("1d", (2, 8, 300), (8, 6, 5), {"strides": [3], "pads": [1, 2]}),
    ("3d", (1, 4, 6, 7, 8), (4, 3, 3, 3, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
])
@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "LeakyRelu"])
def test_fused_deconv_geometry(name: str, xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any],
                               act: str) -> None:
    m, feeds = _deconv_model(xs, ws, act, attrs, bias=name != "kernel_1x1")
    cm = compile_model(m)
    assert "FusedConvTranspose" in _ops(cm), _ops(cm)
    _check(m, [feeds], LOOSE, cm=cm)


def test_fused_deconv_activation_input_is_graph_output_is_not_fused() -> None:
    m, feeds = _deconv_model((1, 8, 16, 16), (8, 6, 4, 4), "Sigmoid", {"strides": [2, 2]}, extra_out=True)
    cm = compile_model(m)
    assert "FusedConvTranspose" not in _ops(cm)
    _check(m, [feeds], LOOSE, cm=cm)


def test_fused_deconv_two_readers_is_not_fused() -> None:
    nodes = [helper.make_node("ConvTranspose", ["x", "W"], ["d"], strides=[2, 2]),
             helper.make_node("Relu", ["d"], ["r"]), helper.make_node("Add", ["d", "r"], ["y"])]
    m = _model(nodes, [("x", F, (1, 8, 16, 16))], ["y"], {"W": _f32(8, 6, 4, 4)})
    cm = compile_model(m)
    assert "FusedConvTranspose" not in _ops(cm)
    _check(m, [{"x": _f32(1, 8, 16, 16)}], LOOSE, cm=cm)


def test_fused_deconv_clip_opset10_attribute_bounds() -> None:
    """Clip-6..10 keeps its bounds in attributes (min/max), not inputs."""
    nodes = [helper.make_node("ConvTranspose", ["x", "W", "B"], ["d"], strides=[2, 2]),
             helper.make_node("Clip", ["d"], ["y"], min=0.0, max=0.5)]
    m = _model(nodes, [("x", F, (1, 8, 16, 16))], ["y"], {"W": _f32(8, 6, 4, 4), "B": _f32(6)}, opset=10)
    _check(m, [{"x": _f32(1, 8, 16, 16, scale=3.0)}], LOOSE)


def test_conv_clip_opset10_attribute_bounds() -> None:
    """The same for a plain Conv + Clip-6 (Relu6 of old exporters)."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d"], ["y"], min=0.0, max=0.5)]
    m = _model(nodes, [("x", F, (1, 8, 16, 16))], ["y"], {"W": _f32(6, 8, 3, 3), "B": _f32(6)}, opset=10)
    _check(m, [{"x": _f32(1, 8, 16, 16, scale=3.0)}], LOOSE)


@pytest.mark.parametrize("act", ["Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Swish"])
def test_fused_deconv_nan_inf_input_propagates(act: str) -> None:
    m, _ = _deconv_model((1, 8, 16, 16), (8, 6, 3, 3), act, {"strides": [2, 2]})
    x = _f32(1, 8, 16, 16)
    x[0, 2, 3, 4] = np.nan
    x[0, 5, 10, 11] = np.inf
    _check(m, [{"x": x}], LOOSE)


def _nan_deconv(act: str, kernel: int, special: float, stride: int = 2) -> None:
    m, _ = _deconv_model((1, 8, 16, 16), (8, 6, kernel, kernel), act, {"strides": [stride, stride]})
    x = _f32(1, 8, 16, 16)
    x[0, 2, 3, 4] = special
    _check(m, [{"x": x}], LOOSE)


def test_fused_deconv_sigmoid_nan_input() -> None:
    """oneDNN's logistic post-op maps NaN to 0 on this stride-2 3x3 deconv; the NaN guard
    (kernels/providers/nan_guard.py) runs the activation in numpy then, keeping ORT's NaN."""
    _nan_deconv("Sigmoid", 3, np.nan)


def test_fused_deconv_relu_minus_inf() -> None:
    """oneDNN's Relu post-op turns a -inf pre-activation into NaN (0 * -inf) on this deconv; with
    a non-finite input the guard takes the unfused path, giving ORT's Relu(-inf) = 0."""
    _nan_deconv("Relu", 3, np.inf)


@pytest.mark.parametrize("act,kernel,stride", [("Relu", 1, 1), ("Clip", 3, 2)])
def test_fused_deconv_nan_input_relu_clip(act: str, kernel: int, stride: int) -> None:
    _nan_deconv(act, kernel, np.nan, stride)


def test_fused_deconv_in_nhwc_chain_batch_and_repeat() -> None:
    """conv -> deconv+Relu -> conv: the deconv inside a channels-last chain, batch 3, run twice."""
    nodes = [_n("Conv", ["x", "W0"], "c0", pads=[1, 1, 1, 1]),
             _n("ConvTranspose", ["c0", "W1", "B1"], "d", strides=[2, 2], pads=[1, 1, 1, 1]),
             _n("HardSwish", ["d"], "h"),
             _n("Conv", ["h", "W2"], "y", pads=[1, 1, 1, 1])]
    inits = {"W0": _f32(16, 8, 3, 3, scale=0.2), "W1": _f32(16, 12, 4, 4, scale=0.2), "B1": _f32(12),
             "W2": _f32(4, 12, 3, 3, scale=0.2)}
    m = _model(nodes, [("x", F, (3, 8, 24, 24))], ["y"], inits)
    cm = compile_model(m)
    assert "FusedConvTranspose" in _ops(cm)
    _check(m, [{"x": _f32(3, 8, 24, 24)} for _ in range(2)], LOOSE, cm=cm)


def test_fused_deconv_float64_model() -> None:
    d = TensorProto.DOUBLE
    nodes = [helper.make_node("ConvTranspose", ["x", "W", "B"], ["d"], strides=[2, 2]),
             helper.make_node("Sigmoid", ["d"], ["y"])]
    m = _model(nodes, [("x", d, (1, 8, 16, 16))], ["y"],
               {"W": _f32(8, 6, 4, 4).astype(np.float64), "B": _f32(6).astype(np.float64)}, out_type=d)
    x = _f32(1, 8, 16, 16)
    cm = compile_model(m)
    got = np.asarray(LoadedModel.from_compiled(cm).run_dict({"x": x.astype(np.float64)})[0])
    assert got.dtype == np.float64
    # ORT has no float64 ConvTranspose: the float32 model's ORT result is the reference
    m32 = _model(nodes, [("x", F, (1, 8, 16, 16))], ["y"],
                 {"W": numpy_helper.to_array(m.graph.initializer[0]).astype(np.float32),
                  "B": numpy_helper.to_array(m.graph.initializer[1]).astype(np.float32)})
    np.testing.assert_allclose(got, run_ort(m32, {"x": x})[0], **LOOSE)
