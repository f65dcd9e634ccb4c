"""Adversarial end-to-end checks of the prepared (plan-time bound) kernels against ONNX Runtime.

Each model is compiled, loaded and run at least twice with different inputs (the second run
uses the cached plan and reused buffers). Covers the oneDNN-bound LayerNormalization,
FusedAttention and pooling, the tiny-signature kernels (ReduceMean/Sum, Pow, LSTM, im2col
convs), FusedMatMul's residual input and graph outputs outside the arena.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(1234)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits=None, opset=17, out_type=F) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, out_type, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _check(m: onnx.ModelProto, feeds_list, rtol=1e-4, atol=1e-5) -> LoadedModel:
    lm = LoadedModel.from_compiled(compile_model(m))
    names = [i.name for i in m.graph.input]
    for feeds in feeds_list:
        got = lm.run([feeds[n] for n in names])
        want = run_ort(m, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return lm


def _step_kernels(lm: LoadedModel, op_type: str) -> list[object]:
    return [step.bound for plan, _ in lm.executor._cache.values()
            for node, step in zip(plan.nodes, plan.steps) if node.op_type == op_type]


def _bound(lm: LoadedModel, op_type: str) -> bool:
    """Whether every step of ``op_type`` runs a oneDNN-bound prepared kernel (vacuously true
    without the ``onednn`` provider, e.g. ``PYCANN_PROVIDERS=numpy``: the values are still
    checked against ONNX Runtime, through the numpy kernels)."""
    if not providers.available("onednn"):
        return True
    ks = _step_kernels(lm, op_type)
    return bool(ks) and all(k is not None and k.impl and k.openmp for k in ks)


# ------------------------------------------------------------------ LayerNormalization


@pytest.mark.parametrize("axis", [-1, -2, 0, 1])
def test_layer_norm_axes(axis: int) -> None:
    xs = (3, 16, 96)
    n = xs[axis % 3:]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis)
    m = _model([node], [("x", F, xs)], ["y"], {"s": _f32(*n), "b": _f32(*n)})
    lm = _check(m, [{"x": _f32(*xs)} for _ in range(2)])
    assert _bound(lm, "LayerNormalization")


@pytest.mark.parametrize("case", ["scale_1n", "no_bias", "const_rows_eps0", "huge", "nan_inf", "mean_out"])
def test_layer_norm_edges(case: str) -> None:
    xs = (4, 32, 64)
    ins, outs = ["x", "s", "b"], ["y"]
    inits = {"s": _f32(64), "b": _f32(64)}
    attrs: dict[str, float] = {}
    feeds = [{"x": _f32(*xs)} for _ in range(2)]
    if case == "scale_1n":
        inits = {"s": _f32(1, 64), "b": _f32(1, 1, 64)}
    elif case == "no_bias":
        ins, inits = ["x", "s"], {"s": _f32(64)}
    elif case == "const_rows_eps0":
        attrs["epsilon"] = 0.0
        feeds = [{"x": np.full(xs, 3.0, np.float32)}, {"x": np.ones(xs, np.float32)}]
    elif case == "huge":
        feeds = [{"x": _f32(*xs, scale=1e19)}, {"x": _f32(*xs, scale=1e30)}]
    elif case == "nan_inf":
        x = _f32(*xs)
        x[0, 1, 2], x[1, 2, 3], x[2, 3, 4] = np.nan, np.inf, -np.inf
        feeds = [{"x": x}, {"x": _f32(*xs)}]
    elif case == "mean_out":
        outs = ["y", "mean", "inv"]
    node = helper.make_node("LayerNormalization", ins, outs, **attrs)
    _check(_model([node], [("x", F, xs)], outs, inits), feeds)


# ------------------------------------------------------------------ FusedAttention


def _attention(qs, ks, vs, mask_shape=None, where=False, fill=-1e9, mask_init=None) -> onnx.ModelProto:
    nd = len(ks)
    inputs = [("q", F, qs), ("k", F, ks), ("v", F, vs)]
    inits: dict[str, np.ndarray] = {"c": np.array(np.sqrt(qs[-1]), np.float32)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=list(range(nd - 2)) + [nd - 1, nd - 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]),
             helper.make_node("Div", ["s0", "c"], ["s1"])]
    cur = "s1"
    if mask_shape is not None:
        if mask_init is not None:
            inits["m"] = mask_init
        else:
            inputs.append(("m", TensorProto.BOOL if where else F, mask_shape))
        if where:
            inits["fill"] = np.array(fill, np.float32)
            nodes.append(helper.make_node("Where", ["m", cur, "fill"], ["s2"]))
        else:
            nodes.append(helper.make_node("Add", [cur, "m"], ["s2"]))
        cur = "s2"
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, inputs, ["y"], inits)


def _att_feeds(qs, ks, vs, mask_shape=None, where=False, n=2):
    out = []
    for _ in range(n):
        f = {"q": _f32(*qs), "k": _f32(*ks), "v": _f32(*vs)}
        if mask_shape is not None:
            hit = RNG.random(mask_shape) < 0.3
            f["m"] = ~hit if where else np.where(hit, -1e4, 0).astype(np.float32)
        out.append(f)
    return out


B, H, S, D = 2, 3, 24, 16


@pytest.mark.parametrize("mask_shape", [None, (S,), (1, S), (B, 1, 1, S), (1, 1, S, S), (B, H, S, S),
                                        (1, H, S, 1), (B, 1, S, 1), (H, S, S), (1,)])
def test_attention_mask_shapes(mask_shape) -> None:
    qs = (B, H, S, D)
    lm = _check(_attention(qs, qs, qs, mask_shape), _att_feeds(qs, qs, qs, mask_shape))
    assert _bound(lm, "FusedAttention")


@pytest.mark.parametrize("mask_shape", [(B, 1, 1, S), (1, 1, S, S)])
def test_attention_where_mask_neg_inf(mask_shape) -> None:
    qs = (B, H, S, D)
    _check(_attention(qs, qs, qs, mask_shape, where=True, fill=-np.inf),
           _att_feeds(qs, qs, qs, mask_shape, where=True))


@pytest.mark.parametrize("shapes", [
    ((B, H, 5, D), (B, H, 31, D), (B, H, 31, 20)),   # cross attention, Dv != D
    ((B, H, 1, D), (B, H, S, D), (B, H, S, D)),      # S = 1
    ((B, H, S, 1), (B, H, S, 1), (B, H, S, 1)),      # head_dim 1
    ((B, H, S, D), (1, H, S, D), (1, H, S, D)),      # K, V batch broadcast
    ((B, H, S, D), (B, 1, S, D), (B, 1, S, D)),      # multi-query
    ((6, S, D), (6, S, D), (6, S, D)),               # rank 3
])
def test_attention_geometries(shapes) -> None:
    qs, ks, vs = shapes
    mask = (1,) * (len(qs) - 1) + (ks[-2],)
    _check(_attention(qs, ks, vs, mask), _att_feeds(qs, ks, vs, mask))


def test_attention_fully_masked_rows_are_nan_like_ort() -> None:
    qs = (B, H, S, D)
    causal = np.triu(np.full((1, 1, S, S), -np.inf, np.float32), 1)
    causal[..., 3, :] = -np.inf  # one row with every key masked: NaN in both
    _check(_attention(qs, qs, qs, (1, 1, S, S), mask_init=causal), _att_feeds(qs, qs, qs))


# ------------------------------------------------------------------ pooling


POOLS = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[4, 4], strides=[3, 3], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], strides=[5, 5]),
    dict(kernel_shape=[2, 3], strides=[4, 1], pads=[0, 1, 1, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], dilations=[2, 2]),
]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePool_pad"])
@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("xs", [(1, 16, 65, 67), (1, 3, 20, 21)])  # above and below POOL_MIN_ELEMENTS
def test_pool_windows(op: str, attrs: dict, xs) -> None:
    extra = {"count_include_pad": 1} if op.endswith("_pad") else {}
    node = helper.make_node(op.split("_")[0], ["x"], ["y"], **attrs, **extra)
    _check(_model([node], [("x", F, xs)], ["y"], opset=19), [{"x": _f32(*xs)} for _ in range(2)])


@pytest.mark.parametrize("xs,k", [((2, 8, 5000), [3]), ((1, 4, 10, 40, 40), [2, 3, 3])])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalAveragePool"])
def test_pool_1d_3d(xs, k, op: str) -> None:
    nd = len(k)
    attrs = {} if op.startswith("Global") else dict(kernel_shape=k, strides=[2] * nd, pads=[1] * (2 * nd), ceil_mode=1)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    _check(_model([node], [("x", F, xs)], ["y"], opset=19), [{"x": _f32(*xs)} for _ in range(2)])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_nan_bound_equals_generic(op: str) -> None:
    """NaN/-inf windows: the bound kernel answers exactly as the generic numpy kernel."""
    from pycann.ops.nn import pool as P
    from pycann.ops.registry import lookup

    xs = (1, 16, 65, 67)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    m = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, xs)], ["y"], opset=19)
    cm = compile_model(m)
    lm = LoadedModel.from_compiled(cm)
    node = cm.graph.nodes[0]
    full = lookup(node.op_type, node.domain, node.opset).with_defaults(node.attrs)
    full["_n_outputs"] = 1
    generic = P._k_max_pool if op == "MaxPool" else P._k_average_pool
    for frac in (0.001, 0.3):
        x = _f32(*xs)
        x[RNG.random(xs) < frac] = np.nan
        x[RNG.random(xs) < frac] = -np.inf
        x[0, 2, 10:14, 10:14] = np.nan
        got = lm.run([x])[0]
        np.testing.assert_array_equal(got, generic([x], full)[0])
    assert _bound(lm, op)


@pytest.mark.parametrize("pool", [("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                  ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
                                  ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2],
                                                       ceil_mode=1, count_include_pad=1))])
@pytest.mark.parametrize("tail", ["conv", "gap", "pool_out"])
def test_pool_in_channels_last_conv_chain(pool, tail: str) -> None:
    """Conv -> Relu -> pool -> Conv (-> GlobalAveragePool): the chain runs channels-last."""
    op, attrs = pool
    xs, c = (1, 8, 64, 64), 32
    inits = {"w1": _f32(c, 8, 3, 3, scale=0.2), "b1": _f32(c), "w2": _f32(c, c, 3, 3, scale=0.1), "b2": _f32(c)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node(op, ["r1"], ["p1"], **attrs),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"])]
    outs = ["r2"]
    if tail == "gap":
        nodes.append(helper.make_node("GlobalAveragePool", ["r2"], ["g"]))
        outs = ["g"]
    elif tail == "pool_out":
        outs = ["r2", "p1"]
    _check(_model(nodes, [("x", F, xs)], outs, inits, opset=19), [{"x": _f32(*xs)} for _ in range(2)],
           rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ FusedMatMul residual


@pytest.mark.parametrize("pattern", [
    ["bias", "res_x"], ["bias", "res_x_left"], ["bias_left", "res_x", "Relu"], ["bias", "res_x", "Gelu"],
    ["res_x"], ["res_x", "bias"], ["bias", "res_used_elsewhere"], ["bias", "res_bcast"], ["bias", "res_self"],
    ["bias", "res_x", "mm_out"],
])
def test_matmul_residual(pattern: list[str]) -> None:
    xs, k, n = (4, 32, 128), 128, 128
    inits = {"W": _f32(k, n, scale=0.1), "b": _f32(n)}
    inputs = [("x", F, xs)]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"])]
    outs, cur = ["y"], "m"
    for i, p in enumerate(pattern):
        nxt = f"t{i}"
        if p == "bias":
            nodes.append(helper.make_node("Add", [cur, "b"], [nxt]))
        elif p == "bias_left":
            nodes.append(helper.make_node("Add", ["b", cur], [nxt]))
        elif p == "res_x":
            nodes.append(helper.make_node("Add", [cur, "x"], [nxt]))
        elif p == "res_x_left":
            nodes.append(helper.make_node("Add", ["x", cur], [nxt]))
        elif p == "res_used_elsewhere":
            nodes += [helper.make_node("Relu", ["x"], ["rx"]), helper.make_node("Add", [cur, "rx"], [nxt])]
            outs.append("rx")
        elif p == "res_bcast":
            inputs.append(("r", F, (1, 32, 1)))
            nodes.append(helper.make_node("Add", [cur, "r"], [nxt]))
        elif p == "res_self":
            nodes.append(helper.make_node("Add", [cur, cur], [nxt]))
        elif p == "mm_out":
            outs.append("m")
            continue
        else:
            nodes.append(helper.make_node(p, [cur], [nxt]))
        cur = nxt
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    m = _model(nodes, inputs, outs, inits, opset=20)
    feeds = [{"x": _f32(*xs), **({"r": _f32(1, 32, 1)} if "res_bcast" in pattern else {})} for _ in range(2)]
    _check(m, feeds, atol=1e-4)


# ------------------------------------------------------------------ graph outputs


def test_outputs_duplicated_consumed_and_stable_across_runs() -> None:
    xs = (4, 32, 128)
    inits = {"W": _f32(128, 128, scale=0.1), "b": _f32(128), "shp": np.array([4, 32 * 128], np.int64)}
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["rs"]),
             helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Relu", ["mb"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"]),
             helper.make_node("Transpose", ["r"], ["rt"], perm=[2, 1, 0])]
    m = _model(nodes, [("x", F, xs)], ["y", "rs", "r", "rt", "y", "r"], inits)
    feeds = [{"x": _f32(*xs)} for _ in range(3)]
    lm = _check(m, feeds)
    first = lm.run([feeds[0]["x"]])
    lm.run([feeds[1]["x"]])
    again = lm.run([feeds[0]["x"]])
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ tiny static signatures


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([-1], 0), ([1, 2], 0), ([2, 1], 1), ([0], 1), (None, 0), ([], 1)])
def test_reduce(op: str, axes, keepdims: int) -> None:
    xs = (4, 5, 6)
    inits = {} if axes is None else {"axes": np.array(axes, np.int64)}
    node = helper.make_node(op, ["x"] + list(inits), ["y"], keepdims=keepdims,
                            noop_with_empty_axes=1 if axes == [] else 0)
    _check(_model([node], [("x", F, xs)], ["y"], inits, opset=18), [{"x": _f32(*xs)} for _ in range(2)], atol=1e-6)


@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((4, 5), (5,)), ((5,), (4, 5)), ((4, 1), (1, 5))])
def test_pow(shapes) -> None:
    a, b = shapes
    node = helper.make_node("Pow", ["a", "b"], ["y"])
    m = _model([node], [("a", F, a), ("b", F, b)], ["y"], opset=18)
    feeds = [{"a": _f32(*a, scale=3), "b": RNG.integers(-3, 4, b).astype(np.float32)} for _ in range(2)]
    _check(m, feeds)


@pytest.mark.parametrize("batch,initial,peephole", [(1, True, False), (3, True, False), (3, False, False),
                                                     (2, True, True)])
def test_lstm(batch: int, initial: bool, peephole: bool) -> None:
    seq, inp, hid = 5, 16, 8
    inits = {"W": _f32(1, 4 * hid, inp, scale=0.3), "R": _f32(1, 4 * hid, hid, scale=0.3), "B": _f32(1, 8 * hid, scale=0.3)}
    names = ["x", "W", "R", "B", ""]
    inputs = [("x", F, (seq, batch, inp))]
    if initial:
        names += ["h0", "c0"]
        inputs += [("h0", F, (1, batch, hid)), ("c0", F, (1, batch, hid))]
    if peephole:
        names += ["" , ""] if not initial else []
        names.append("P")
        inits["P"] = np.zeros((1, 3 * hid), np.float32)
    nodes = [helper.make_node("LSTM", names, ["Y", "Yh", "Yc"], hidden_size=hid)]
    m = _model(nodes, inputs, ["Y", "Yh", "Yc"], inits, opset=14)
    feeds = [{n: _f32(*s) for n, _, s in inputs} for _ in range(2)]
    _check(m, feeds)


@pytest.mark.parametrize("xs,k,attrs", [
    ((1, 3, 12, 12), (3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 3, 12, 12), (3, 3), dict(pads=[0, 1, 2, 0], strides=[2, 2])),
    ((1, 3, 12, 13), (3, 2), dict(dilations=[2, 3], pads=[1, 2, 1, 0])),
    ((1, 3, 12, 12), (1, 1), dict(strides=[2, 2])),
    ((2, 8, 12, 12), (3, 3), dict(group=8, pads=[1, 1, 1, 1])),
    ((1, 4, 64), (5,), dict(strides=[3])),
    ((1, 2, 6, 6, 6), (3, 3, 3), dict(pads=[1] * 6)),
])
def test_tiny_conv(xs, k, attrs) -> None:
    group = attrs.get("group", 1)
    m_out = 8
    inits = {"w": _f32(m_out, xs[1] // group, *k, scale=0.3), "b": _f32(m_out)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(k), **attrs)
    relu = helper.make_node("Relu", ["c"], ["y"])
    _check(_model([node, relu], [("x", F, xs)], ["y"], inits), [{"x": _f32(*xs)} for _ in range(2)])


def test_tiny_conv_residual_relu() -> None:
    xs = (1, 3, 12, 12)
    inits = {"w": _f32(3, 3, 3, 3, scale=0.3), "b": _f32(3)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    _check(_model(nodes, [("x", F, xs)], ["y"], inits), [{"x": _f32(*xs)} for _ in range(2)])


# ------------------------------------------------------------------ concurrency


def test_four_threads_one_model() -> None:
    """One loaded model (bound LayerNorm, attention and FusedMatMul with residual) run from 4 threads."""
    bsz, seq, e, h = 2, 32, 64, 4
    d = e // h
    inits = {"Wq": _f32(e, e, scale=0.1), "Wo": _f32(e, e, scale=0.1), "bo": _f32(e), "g": _f32(e), "be": _f32(e),
             "s4": np.array([bsz, seq, h, d], np.int64), "s3": np.array([bsz, seq, e], np.int64),
             "c": np.array(np.sqrt(d), np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q0"]), helper.make_node("Reshape", ["q0", "s4"], ["q1"]),
             helper.make_node("Transpose", ["q1"], ["Q"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["q1"], ["Kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["Q", "Kt"], ["s0"]), helper.make_node("Div", ["s0", "c"], ["s1"]),
             helper.make_node("Add", ["s1", "m"], ["s2"]), helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "Q"], ["o0"]), helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["o1", "s3"], ["o2"]),
             helper.make_node("MatMul", ["o2", "Wo"], ["o3"]), helper.make_node("Add", ["o3", "bo"], ["o4"]),
             helper.make_node("Add", ["o4", "x"], ["o5"]),
             helper.make_node("LayerNormalization", ["o5", "g", "be"], ["y"], axis=-1)]
    m = _model(nodes, [("x", F, (bsz, seq, e)), ("m", F, (bsz, 1, 1, seq))], ["y"], inits)
    feeds = [{"x": _f32(bsz, seq, e), "m": np.where(RNG.random((bsz, 1, 1, seq)) < 0.2, -1e4, 0).astype(np.float32)}
             for _ in range(4)]
    wants = [run_ort(m, f)[0] for f in feeds]
    lm = LoadedModel.from_compiled(compile_model(m))
    errors: list[str] = []

    def worker(t: int) -> None:
        for it in range(10):
            i = (t + it) % len(feeds)
            got = lm.run([feeds[i]["x"], feeds[i]["m"]])[0]
            if not np.allclose(got, wants[i], rtol=1e-4, atol=1e-4):
                errors.append(f"thread {t} iteration {it}: max diff {np.abs(got - wants[i]).max()}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
