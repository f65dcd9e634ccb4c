"""NaN, inf and huge values through every fused kernel, against ONNX Runtime (issue 14 item 2).

ONNX Runtime keeps a NaN through Conv+Relu/Clip/HardSigmoid (fused or not); oneDNN's fused
max(x, 0) post-ops turn it into 0, so pycann checks the operands first (``nan_guard``) and runs
the unfused formulation when a NaN/inf could reach the activation. ORT's LSTM and GRU with a bias
input clip their gate pre-activations, which maps NaN to +FLT_MAX (finite outputs): pycann's
recurrent kernels do the same (``rnn.gate_clip``). Each graph is compiled (static shapes, so
the prepared oneDNN kernels are bound) and run twice: a non-finite input, then a finite one
through the same bound kernels.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(2014)


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], xs: tuple[int, ...], inits: dict[str, np.ndarray], opset: int = 17,
           extra: list[tuple[str, tuple[int, ...]]] | None = None) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("x", F, list(xs))]
    ins += [helper.make_tensor_value_info(n, F, list(s)) for n, s in (extra or [])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _poison(x: np.ndarray, kind: str) -> np.ndarray:
    x = x.copy()
    flat = x.reshape(-1)
    if kind == "nan":
        flat[flat.size // 3] = np.nan
    elif kind == "inf":
        flat[flat.size // 3] = np.inf
    elif kind == "ninf":
        flat[flat.size // 2] = -np.inf
    elif kind == "big":
        x *= np.float32(1e30)
    elif kind == "all_nan":
        x[...] = np.nan
    return x


KINDS = ["nan", "inf", "ninf", "big", "all_nan"]


def _check(m: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    lm = LoadedModel.from_compiled(compile_model(m))
    names = [i.name for i in m.graph.input]
    for feeds in feeds_list:
        got = lm.run([feeds[n] for n in names])
        want = run_ort(m, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions differ from ORT")
            np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w), err_msg="+inf positions differ from ORT")
            np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg="-inf positions differ from ORT")
            fin = np.isfinite(w)
            np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=atol * max(1.0, float(np.abs(w[fin]).max(
                initial=0.0))))


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the arrays the NaN guard reads from now on (``nan_guard._norm2`` calls)."""
    from pycann.kernels.providers import nan_guard

    reads: list[int] = []
    orig = nan_guard._norm2
    monkeypatch.setattr(nan_guard, "_norm2", lambda a: reads.append(a.size) or orig(a))
    return reads


def _conv_act(act: str, residual: bool = False, depthwise: bool = False) -> onnx.ModelProto:
    c, m = (32, 32) if depthwise else (16, 32)
    w = _f(m, 1 if depthwise else c, 3, 3, scale=0.2)
    inits = {"w": w, "b": _f(m)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=c if depthwise else 1)]
    cur = "c"
    extra = None
    if residual:
        nodes.append(helper.make_node("Add", [cur, "r"], ["s"]))
        cur, extra = "s", [("r", (1, m, 24, 24))]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", [cur], ["y"]))
    elif act == "Clip":
        inits.update(lo=np.array(0.0, np.float32), hi=np.array(6.0, np.float32))
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["y"]))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", [cur], ["y"], alpha=0.2, beta=0.5))
    elif act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [cur], ["y"], alpha=0.1))
    elif act == "HardSwish":
        nodes.append(helper.make_node("HardSwish", [cur], ["y"]))
    return _model(nodes, (1, c, 24, 24), inits, extra=extra)


@pytest.mark.parametrize("act", ["Relu", "Clip", "HardSigmoid", "LeakyRelu", "HardSwish"])
@pytest.mark.parametrize("kind", KINDS)
def test_conv_activation_keeps_nan(act: str, kind: str) -> None:
    x = _f(1, 16, 24, 24)
    _check(_conv_act(act), [{"x": _poison(x, kind)}, {"x": x}])


@pytest.mark.parametrize("kind", ["nan", "inf", "big"])
def test_depthwise_conv_relu_keeps_nan(kind: str) -> None:
    x = _f(1, 32, 24, 24)
    _check(_conv_act("Relu", depthwise=True), [{"x": _poison(x, kind)}, {"x": x}])


@pytest.mark.parametrize("where", ["x", "residual"])
def test_conv_residual_relu_keeps_nan(where: str) -> None:
    """Conv + Add + Relu (one FusedConv with the residual as a oneDNN post-op)."""
    x, r = _f(1, 16, 24, 24), _f(1, 32, 24, 24)
    bad = {"x": _poison(x, "nan"), "r": r} if where == "x" else {"x": x, "r": _poison(r, "nan")}
    _check(_conv_act("Relu", residual=True), [bad, {"x": x, "r": r}])


@pytest.mark.parametrize("kind", ["nan", "inf", "big"])
def test_conv_transpose_relu_keeps_nan(kind: str) -> None:
    inits = {"w": _f(16, 8, 2, 2, scale=0.3), "b": _f(8)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    x = _f(1, 16, 20, 20)
    _check(_model(nodes, (1, 16, 20, 20), inits), [{"x": _poison(x, kind)}, {"x": x}])


@pytest.mark.parametrize("kind", ["nan", "inf", "big"])
def test_matmul_bias_relu_keeps_nan(kind: str) -> None:
    inits = {"w": _f(256, 512, scale=0.1), "b": _f(512)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    x = _f(64, 256)
    _check(_model(nodes, (64, 256), inits), [{"x": _poison(x, kind)}, {"x": x}])


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_gemm_relu_keeps_nan(kind: str) -> None:
    inits = {"w": _f(512, 256, scale=0.1), "b": _f(512)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["m"], transB=1), helper.make_node("Relu", ["m"], ["y"])]
    x = _f(64, 256)
    _check(_model(nodes, (64, 256), inits), [{"x": _poison(x, kind)}, {"x": x}])


@pytest.mark.parametrize("op,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["nan", "inf", "ninf", "big", "all_nan"])
def test_recurrent_ops_match_ort_on_nonfinite(op: str, gates: int, bias: bool, kind: str) -> None:
    """ORT's LSTM/GRU with B clip gate pre-activations (NaN -> +max: finite outputs); without B,
    and for RNN, NaN propagates. Silero VAD's LSTM (with B) hit the first case."""
    hidden, inp = 8, 5
    inits = {"W": _f(1, gates * hidden, inp), "R": _f(1, gates * hidden, hidden)}
    if bias:
        inits["B"] = _f(1, 2 * gates * hidden)
    node = helper.make_node(op, ["x", "W", "R"] + (["B"] if bias else []), ["y"], hidden_size=hidden)
    x = _f(3, 2, inp)
    _check(_model([node], (3, 2, inp), inits, opset=14), [{"x": _poison(x, kind)}, {"x": x}])


def test_lstm_nan_initial_state_matches_ort() -> None:
    hidden, inp = 8, 5
    inits = {"W": _f(1, 4 * hidden, inp), "R": _f(1, 4 * hidden, hidden), "B": _f(1, 8 * hidden)}
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0"], ["y"], hidden_size=hidden)
    h0 = _f(1, 2, hidden)
    h0[0, 1, 3] = np.nan
    x = _f(3, 2, inp)
    _check(_model([node], (3, 2, inp), inits, opset=14, extra=[("h0", (1, 2, hidden))]),
           [{"x": x, "h0": h0}, {"x": x, "h0": _f(1, 2, hidden)}])


def test_guard_is_what_keeps_the_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the guard the fused oneDNN ReLU gives 0 where ORT gives NaN: the tests above can fail."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")
    x = _poison(_f(1, 16, 24, 24), "nan")
    m = _conv_act("Relu")
    want = run_ort(m, {"x": x})[0]
    monkeypatch.setenv("PYCANN_NAN_GUARD", "0")
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    assert np.isnan(want).sum() > 0 and np.isnan(got).sum() < np.isnan(want).sum()
    monkeypatch.setenv("PYCANN_NAN_GUARD", "1")
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def _torch_ok() -> bool:
    providers.reset()
    return providers.available("torch")


@pytest.mark.skipif(not _torch_ok(), reason="torch is not installed")
@pytest.mark.parametrize("act", ["Relu", "Clip"])
@pytest.mark.parametrize("kind", ["nan", "inf", "big"])
def test_torch_provider_conv_activation_keeps_nan(act: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through torch's oneDNN convs (``torch:conv2d_nhwc`` with its fused post-ops)."""
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,torch")
    providers.reset()
    x = _f(1, 16, 24, 24)
    _check(_conv_act(act), [{"x": _poison(x, kind)}, {"x": x}])
    _check(_conv_act(act, residual=True), [{"x": _poison(x, kind), "r": _f(1, 32, 24, 24)}])


def _two_convs(between: str | None) -> onnx.ModelProto:
    """conv+relu -> [an op that can create inf/NaN from finite values] -> conv+relu."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(32, 32, 3, 3, scale=0.2), "b2": _f(32),
             "big": np.array(1e37, np.float32), "zero": np.array(0.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"])]
    cur = "r1"
    if between == "mul_big":  # finite * 1e37 overflows to inf
        nodes.append(helper.make_node("Mul", [cur, "big"], ["m"]))
        cur = "m"
    elif between == "div_zero":  # 0 / 0 is NaN
        nodes.append(helper.make_node("Div", [cur, "zero"], ["m"]))
        cur = "m"
    nodes += [helper.make_node("Conv", [cur, "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c2"], ["y"])]
    return _model(nodes, (1, 16, 24, 24), inits)


@pytest.mark.parametrize("between", ["mul_big", "div_zero"])
def test_nan_created_between_two_guarded_convs(between: str) -> None:
    """The second conv's input is not the first conv's proven output: it is checked itself."""
    x = _f(1, 16, 24, 24)
    _check(_two_convs(between), [{"x": x}, {"x": _poison(x, "nan")}, {"x": x}])


def test_proven_bound_of_a_guarded_conv_saves_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """conv+relu -> conv+relu: the second conv needs no read of its input (the first proved it),
    and a NaN run in between (first conv unfused) still gives ORT's NaNs in the second."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")

    m = _two_convs(None)
    lm = LoadedModel.from_compiled(compile_model(m))
    x = _f(1, 16, 24, 24)
    lm.run([x])
    reads = _count_reads(monkeypatch)
    for feeds in ({"x": x}, {"x": _poison(x, "nan")}, {"x": x}):
        reads.clear()
        got = lm.run([feeds["x"]])[0]
        want = run_ort(m, feeds)[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-4, atol=1e-4)
        if not np.isnan(feeds["x"]).any():
            assert reads == [x.size], reads  # only the first conv's input was read


def _conv_pool_conv() -> onnx.ModelProto:
    """conv+relu -> MaxPool (large enough for oneDNN's pooling) -> conv+relu, as ResNet's stem."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(32, 32, 3, 3, scale=0.2), "b2": _f(32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"])]
    return _model(nodes, (1, 16, 48, 48), inits)


def test_max_pool_passes_the_proven_bound_on_and_forgets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MaxPool between two guarded convs reads neither its output (no all-NaN-window check) nor
    makes the second conv read it, while the first conv proved its input finite; a NaN run in
    between (first conv unfused) must not leave that bound on record: its NaNs reach the output
    exactly as the numpy provider computes them, and the finite runs equal ORT."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")

    m = _conv_pool_conv()
    lm = LoadedModel.from_compiled(compile_model(m))
    x = _f(1, 16, 48, 48)
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    try:
        ref = LoadedModel.from_compiled(compile_model(m))
        poisoned = [_poison(x, "nan"), _poison(x, "all_nan")]
        want_nan = [ref.run([p])[0] for p in poisoned]
    finally:
        monkeypatch.delenv("PYCANN_PROVIDERS")
        providers.reset()
    lm.run([x])
    reads = _count_reads(monkeypatch)
    for feeds, want in ((x, None), (poisoned[0], want_nan[0]), (x, None), (poisoned[1], want_nan[1]), (x, None)):
        reads.clear()
        got = lm.run([feeds])[0]
        if want is None:
            np.testing.assert_allclose(got, run_ort(m, {"x": feeds})[0], rtol=1e-4, atol=1e-4)
            assert reads == [x.size], reads  # only the first conv's input was read
        else:
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)


def _pre_activation() -> onnx.ModelProto:
    """conv -> Concat(conv, x) -> BatchNormalization -> Relu -> conv+relu: DenseNet's layer, whose
    BatchNormalization + Relu is one ElementwiseChain run whole on oneDNN behind the NaN guard."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(24, 48, 1, 1, scale=0.2), "b2": _f(24),
             "g": _f(48) + 2.0, "be": _f(48), "mu": _f(48), "var": np.abs(_f(48)) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c1", "x"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "g", "be", "mu", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["y"])]
    return _model(nodes, (1, 16, 48, 48), inits)


@pytest.mark.parametrize("kind", KINDS)
def test_pre_activation_batch_norm_relu_keeps_nan(kind: str) -> None:
    x = _f(1, 16, 48, 48)
    _check(_pre_activation(), [{"x": x}, {"x": _poison(x, kind)}, {"x": x}])


def test_guarded_chain_reads_its_input_once_and_proves_the_next_conv(monkeypatch: pytest.MonkeyPatch) -> None:
    """The BatchNormalization + Relu chain reads its input (the Concat) once to bound it and records
    its output's bound, so the 1x1 conv+relu after it reads nothing; a NaN run in between leaves
    no bound on record (the conv then reads its input and keeps ORT's NaNs)."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")

    m = _pre_activation()
    lm = LoadedModel.from_compiled(compile_model(m))
    steps = {st.node.op_type: st for st in lm.executor.plan_for(lm.check_feeds([_f(1, 16, 48, 48)]))[0].steps}
    assert steps["ElementwiseChain"].bound is not None and steps["ElementwiseChain"].bound.guarded is not None
    x = _f(1, 16, 48, 48)
    lm.run([x])
    reads = _count_reads(monkeypatch)
    for feeds in (x, _poison(x, "nan"), x):
        reads.clear()
        got = lm.run([feeds])[0]
        want = run_ort(m, {"x": feeds})[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)
        if not np.isnan(feeds).any():
            assert reads == [48 * 48 * 48], reads  # the chain's input only
        else:
            assert reads[0] == 48 * 48 * 48 and len(reads) >= 2, reads  # no bound recorded: the conv reads


def _dense_block(layers: int = 4) -> onnx.ModelProto:
    """DenseNet's pattern: conv+relu, then per layer Concat(all features) -> BatchNormalization ->
    Relu -> 1x1 conv+relu -> 3x3 conv (no activation), then AveragePool of the last concat."""
    inits: dict[str, np.ndarray] = {"w0": _f(16, 8, 3, 3, scale=0.3), "b0": _f(16)}
    nodes = [_conv_node("x", "w0", "b0", "f0", pads=1), helper.make_node("Relu", ["f0"], ["r0"])]
    feats, c = ["r0"], 16
    for i in range(layers):
        nodes.append(helper.make_node("Concat", list(feats), [f"cat{i}"], axis=1))
        inits.update({f"g{i}": _f(c) + 2.0, f"be{i}": _f(c), f"mu{i}": _f(c), f"v{i}": np.abs(_f(c)) + 0.5,
                      f"w1_{i}": _f(24, c, 1, 1, scale=0.3), f"b1_{i}": _f(24), f"w2_{i}": _f(8, 24, 3, 3, scale=0.3)})
        nodes += [helper.make_node("BatchNormalization", [f"cat{i}", f"g{i}", f"be{i}", f"mu{i}", f"v{i}"], [f"bn{i}"]),
                  helper.make_node("Relu", [f"bn{i}"], [f"a{i}"]),
                  _conv_node(f"a{i}", f"w1_{i}", f"b1_{i}", f"h{i}"), helper.make_node("Relu", [f"h{i}"], [f"q{i}"]),
                  _conv_node(f"q{i}", f"w2_{i}", None, f"n{i}", pads=1)]
        feats.append(f"n{i}")
        c += 8
    nodes += [helper.make_node("Concat", list(feats), ["last"], axis=1),
              helper.make_node("AveragePool", ["last"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return _model(nodes, (1, 8, 64, 64), inits)


def _conv_node(x: str, w: str, b: str | None, y: str, pads: int = 0) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], pads=[pads] * 4)


def test_dense_block_passes_bounds_on_and_keeps_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds travel through plain convs, Concat (largest part) and the BatchNormalization + Relu
    chains, so a finite run reads only the model input; runs alternating NaN, inf, huge and finite
    inputs all equal ORT (no bound of an earlier run survives into the next)."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")

    m = _dense_block()
    lm = LoadedModel.from_compiled(compile_model(m))
    x = _f(1, 8, 64, 64)
    lm.run([x])
    reads = _count_reads(monkeypatch)
    for kind in ("finite", "nan", "finite", "inf", "big", "finite", "all_nan", "finite"):
        feeds = x if kind == "finite" else _poison(x, kind)
        reads.clear()
        got = lm.run([feeds])[0]
        want = run_ort(m, {"x": feeds})[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=kind)
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want[fin]).max(
            initial=0.0))), err_msg=kind)
        if kind == "finite":
            assert reads == [x.size], reads  # the model input alone


def test_a_bound_counts_only_in_the_run_that_proved_it() -> None:
    from pycann.kernels.providers import nan_guard

    y = np.ones((4, 4), np.float32)
    nan_guard.record(y, 2.0)
    assert nan_guard.proven(y) == 2.0
    nan_guard.new_run()
    try:
        assert nan_guard.proven(y) is None
    finally:
        nan_guard.end_run()  # (a run left open pins PYCANN_NAN_GUARD as read now for later kernels: other tests)
