"""Adversarial end-to-end checks of ``onednn:conv_winograd`` (oneDNN v2's Winograd kernels) against
ONNX Runtime: geometries at the eligibility edges, chains, consumers that read the channels-last
result (Transpose, Reshape, Concat, Add), odd feed layouts, symbolic and changing batch sizes,
threads, two models, .om round trips, BatchNormalization folding, fused activations that must
not take Winograd, run-time weights, float16, ``--op_select_implmode``, shared scratch growth,
plan-cache lifetime, NaN / inf / huge / subnormal values. Winograd rounds differently, so values
are compared with atol = 2e-5 * max|ref| (rtol 0); ``_algo`` of the specialised plan is checked.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compiler import compile_model
from pycann.ge.model import LoadedModel
from pycann.ge.options import CompileOptions
from pycann.ops.nn.spatial import Window
from pycann.ops.providers import numpy_blas as nb
from pycann.ops.providers import onednn_wino
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.skipif(not onednn_wino.available(), reason="libdnnl.so.2 missing: scripts/fetch_onednn2.py"),
              pytest.mark.usefixtures("default_providers")]

F, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
WINO, DIRECT = "onednn:conv_winograd", "onednn:conv_nhwc"
REL = 2e-5
RNG = np.random.default_rng(20261201)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


class Net:
    """Collects nodes and initializers; ``conv`` adds a 3x3 Conv with fresh weights."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.n = 0

    def conv(self, x: str, y: str, cin: int = 64, cout: int = 64, pads: Sequence[int] = (1, 1, 1, 1),
             bias: bool = True, wscale: float | None = None, k: int = 3, **attrs: Any) -> str:
        i = self.n
        self.n += 1
        self.inits[f"W{i}"] = _f32(cout, cin // attrs.get("group", 1), k, k,
                                   scale=wscale if wscale is not None else 1 / np.sqrt(9 * cin))
        ins = [x, f"W{i}"]
        if bias:
            self.inits[f"B{i}"] = _f32(cout, scale=0.1)
            ins.append(f"B{i}")
        if "auto_pad" not in attrs:
            attrs["pads"] = list(pads)
        self.nodes.append(helper.make_node("Conv", ins, [y], name=f"conv{i}", **attrs))
        return y

    def op(self, op_type: str, ins: list[str], out: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, ins, [out], **attrs))
        return out

    def const(self, name: str, value: Any) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def model(self, inputs: Sequence[tuple[str, Sequence[Any]]], outputs: Sequence[str],
              dtype: int = F) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs],
                              [helper.make_tensor_value_info(o, dtype if dtype != F else F, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def _one_conv(c: int = 64, m: int = 64, h: int = 16, w: int = 16, batch: Any = 1, act: str | None = None,
              **kw: Any) -> onnx.ModelProto:
    net = Net()
    y = net.conv("x", "c", c, m, **kw)
    if act:
        y = net.op(act, [y], "y")
    return net.model([("x", [batch, c, h, w])], [y])


def _load(m: onnx.ModelProto, **opts: Any) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(m, CompileOptions(**opts) if opts else None))


def _algos(lm: LoadedModel, feeds: Sequence[np.ndarray]) -> list[str]:
    plan, _ = lm.executor.plan_for(list(feeds))
    return [str(n.attrs.get("_algo")) for n in plan.graph.nodes if "Conv" in n.op_type]


def _close(got: np.ndarray, want: np.ndarray, rel: float = REL, what: str = "") -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    fin = np.isfinite(want)
    scale = float(np.abs(want[fin]).max()) if fin.any() else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * (scale or 1.0), equal_nan=True, err_msg=what)


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], lm: LoadedModel | None = None,
           repeat: int = 2, rel: float = REL) -> LoadedModel:
    lm = lm or _load(m)
    want = run_ort(m, {k: np.ascontiguousarray(v) for k, v in feeds.items()})
    for r in range(repeat):  # later runs reuse the arena and the bound kernels
        for i, (g, w) in enumerate(zip(lm.run_dict(feeds), want, strict=True)):
            _close(g, w, rel, f"run {r} output {i}")
    return lm


# ------------------------------------------------------------------ geometries


GEOMETRIES = [  # (c, m, h, w, pads): every one eligible
    (48, 16, 14, 14, (1, 1, 1, 1)), (64, 17, 16, 16, (1, 1, 1, 1)), (64, 33, 16, 16, (1, 1, 1, 1)),
    (64, 64, 16, 16, (0, 1, 1, 0)), (64, 64, 16, 16, (1, 0, 0, 1)), (64, 64, 16, 16, (0, 0, 0, 0)),
    (64, 64, 16, 16, (1, 1, 0, 0)), (64, 48, 14, 40, (1, 1, 1, 1)), (64, 48, 40, 14, (1, 1, 1, 1)),
    (64, 64, 1, 200, (1, 1, 1, 1)), (64, 64, 200, 1, (1, 1, 1, 1)), (64, 64, 3, 200, (0, 0, 0, 0)),
    (64, 64, 2, 100, (1, 1, 1, 1)), (512, 32, 14, 14, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("c,m,h,w,pads", GEOMETRIES)
def test_eligible_geometries(c: int, m: int, h: int, w: int, pads: tuple[int, ...], batch: int) -> None:
    model = _one_conv(c, m, h, w, batch, pads=pads)
    x = _f32(batch, c, h, w)
    lm = _check(model, {"x": x})
    assert _algos(lm, [x]) == [WINO]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad(auto_pad: str) -> None:
    model = _one_conv(h=16, w=17, auto_pad=auto_pad)  # VALID: 14x15 outputs, still enough
    x = _f32(1, 64, 16, 17)
    assert _algos(_check(model, {"x": x}), [x]) == [WINO]


INELIGIBLE = {  # one rule broken each: the direct conv, same values as ORT
    "c32": dict(c=32), "c56": dict(c=56), "m8": dict(m=8), "out13x13": dict(h=13, w=13),
    "out7x28_is_enough": dict(h=7, w=28), "stride2": dict(strides=[2, 2]), "dilated": dict(dilations=[2, 2], pads=(2,) * 4),
    "group2": dict(group=2), "pads2": dict(pads=(2, 2, 2, 2)), "5x5": dict(k=5, pads=(2, 2, 2, 2)),
}


@pytest.mark.parametrize("case", list(INELIGIBLE))
def test_ineligible_convs_run_direct(case: str) -> None:
    kw = dict(INELIGIBLE[case])
    c, m, h, w = kw.pop("c", 64), kw.pop("m", 64), kw.pop("h", 16), kw.pop("w", 16)
    model = _one_conv(c, m, h, w, **kw)
    x = _f32(1, c, h, w)
    lm = _check(model, {"x": x}, rel=1e-5)
    assert _algos(lm, [x]) == [WINO if case == "out7x28_is_enough" else DIRECT]


# ------------------------------------------------------------------ graph structure


def test_chain_of_winograd_convs_with_changing_widths() -> None:
    net = Net()
    v = "x"
    for i, (a, b) in enumerate([(64, 48), (48, 96), (96, 64), (64, 64)]):
        v = net.op("Relu", [net.conv(v, f"c{i}", a, b)], f"r{i}") if i % 2 == 0 else net.conv(v, f"c{i}", a, b)
    model = net.model([("x", [2, 64, 20, 20])], [v])
    x = _f32(2, 64, 20, 20)
    assert _algos(_check(model, {"x": x}), [x]) == [WINO] * 4


def test_conv_output_is_a_graph_output_and_feeds_others() -> None:
    """c1 is returned, read by a Relu that is returned too (no fusion into c1) and by a second conv."""
    net = Net()
    c1 = net.conv("x", "c1")
    r = net.op("Relu", [c1], "r")
    c2 = net.conv(c1, "c2")
    s = net.op("Add", [c2, r], "s")
    model = net.model([("x", [1, 64, 16, 16])], [c1, r, s])
    x = _f32(1, 64, 16, 16)
    assert _algos(_check(model, {"x": x}), [x])[0] == WINO


CONSUMERS = ["transpose", "reshape", "flatten", "concat1", "concat0", "add_input", "add_two_convs", "slice",
             "reduce", "maxpool"]


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_consumers_of_the_channels_last_result(consumer: str) -> None:
    net = Net()
    c1 = net.conv("x", "c1")
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    if consumer == "transpose":
        y = net.op("Transpose", [c1], "y", perm=[0, 2, 3, 1])
    elif consumer == "reshape":
        y = net.op("Reshape", [c1, net.const("shp", i64([2, 64, -1]))], "y")
    elif consumer == "flatten":
        y = net.op("Flatten", [c1], "y", axis=2)
    elif consumer == "concat1":
        y = net.op("Concat", [c1, net.conv("x", "c2", cout=48), "x"], "y", axis=1)
    elif consumer == "concat0":
        y = net.op("Concat", [c1, net.conv("x", "c2")], "y", axis=0)
    elif consumer == "add_input":
        y = net.op("Add", [c1, "x"], "y")
    elif consumer == "add_two_convs":
        y = net.op("Add", [c1, net.conv("x", "c2")], "y")
    elif consumer == "slice":
        y = net.op("Slice", [c1, net.const("st", i64([3])), net.const("en", i64([40])), net.const("ax", i64([1]))], "y")
    elif consumer == "reduce":
        y = net.op("ReduceSum", [c1, net.const("axes", i64([1]))], "y", keepdims=0)
    else:
        y = net.op("MaxPool", [c1], "y", kernel_shape=[2, 2], strides=[2, 2])
    model = net.model([("x", [2, 64, 16, 16])], [y])
    x = _f32(2, 64, 16, 16)
    assert WINO in _algos(_check(model, {"x": x}), [x])


FEEDS = ["fortran", "window_view", "channels_last", "channel_reversed", "misaligned", "batch_strided"]


@pytest.mark.parametrize("layout", FEEDS)
def test_odd_feed_layouts(layout: str) -> None:
    model = _one_conv(batch=2, act="Relu")
    x = _f32(2, 64, 16, 16)
    if layout == "fortran":
        feed = np.asfortranarray(x)
    elif layout == "window_view":
        big = _f32(3, 80, 20, 21)
        big[1:, 5:69, 2:18, 3:19] = x
        feed = big[1:, 5:69, 2:18, 3:19]
    elif layout == "channels_last":
        feed = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    elif layout == "channel_reversed":
        feed = np.ascontiguousarray(x[:, ::-1])[:, ::-1]
    elif layout == "misaligned":
        buf = np.empty(x.nbytes + 1, np.uint8)
        feed = np.ndarray(x.shape, np.float32, buf, offset=1)
        feed[...] = x
    else:
        big = np.zeros((4, 64, 16, 16), np.float32)
        big[::2] = x
        feed = big[::2]
    before = feed.copy()
    lm = _check(model, {"x": feed})
    assert _algos(lm, [feed]) == [WINO]
    np.testing.assert_array_equal(feed, before)  # the feed is not written


# ------------------------------------------------------------------ shapes, runs, threads, files


def _block_model(batch: Any = "N", h: Any = 16, w: Any = 16) -> onnx.ModelProto:
    net = Net()
    r = net.op("Relu", [net.conv("x", "c1")], "r")
    y = net.op("Relu", [net.conv(r, "c2", cout=48)], "y")
    return net.model([("x", [batch, 64, h, w])], [y])


def test_symbolic_batch_1_to_9_then_back() -> None:
    model = _block_model()
    lm = _load(model)
    for n in [*range(1, 10), 1, 8, 1]:
        x = _f32(n, 64, 16, 16)
        _check(model, {"x": x}, lm, repeat=1)
        assert _algos(lm, [x]) == [WINO] * 2, n


def test_symbolic_spatial_size_crosses_the_eligibility_edge() -> None:
    model = _block_model(1, "H", "W")
    lm = _load(model)
    for h, w, want in [(16, 16, WINO), (13, 13, DIRECT), (14, 14, WINO), (7, 28, WINO), (6, 30, DIRECT), (16, 16, WINO)]:
        x = _f32(1, 64, h, w)
        _check(model, {"x": x}, lm, repeat=1)
        assert _algos(lm, [x]) == [want] * 2, (h, w)


def test_earlier_outputs_survive_later_runs() -> None:
    model = _block_model()
    lm = _load(model)
    xs = [_f32(n, 64, 16, 16) for n in (2, 2, 5, 2)]
    outs = [lm.run([x])[0] for x in xs]
    for x, y in zip(xs, outs):
        _close(y, run_ort(model, {"x": x})[0])


def test_two_loaded_models_alternately() -> None:
    model = _block_model()
    cm = compile_model(model)
    a, b = LoadedModel.from_compiled(cm), LoadedModel.from_compiled(cm)
    for i, n in enumerate([1, 4, 4, 1, 2]):
        x = _f32(n, 64, 16, 16)
        _check(model, {"x": x}, a if i % 2 else b, repeat=1)
        _check(model, {"x": x}, b if i % 2 else a, repeat=1)


def test_threads_two_models_several_batches() -> None:
    models = [_block_model(), _one_conv(48, 32, 20, 20, "N", act="Relu")]
    lms = [_load(m) for m in models] + [_load(models[0])]
    cases = []
    for k, lm in enumerate(lms):
        m = models[k % 2]
        c, h = (64, 16) if k % 2 == 0 else (48, 20)
        for n in (1, 3, 8):
            x = _f32(n, c, h, h)
            cases.append((lm, x, run_ort(m, {"x": x})[0]))
    errors: list[str] = []

    def worker(i: int) -> None:
        for j in range(12):
            lm, x, want = cases[(i * 5 + j) % len(cases)]
            got = lm.run([x])[0]
            if not np.allclose(got, want, rtol=0, atol=REL * float(np.abs(want).max())):
                errors.append(f"thread {i} case {j} batch {x.shape[0]}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_om_round_trip_replans_other_batches(tmp_path: Path) -> None:
    """Mapped .om weights leave the resident set after the first plan packs them; a later batch
    size packs them again from the file."""
    model = _block_model()
    path = tmp_path / "m.om"
    compile_model(model).save(path)
    lm = LoadedModel.from_file(path)
    for n in (1, 4, 1, 2):
        x = _f32(n, 64, 16, 16)
        _check(model, {"x": x}, lm)
        assert _algos(lm, [x]) == [WINO] * 2


# ------------------------------------------------------------------ epilogues, weights, dtypes, modes


@pytest.mark.parametrize("act,want", [(None, WINO), ("Relu", WINO), ("Clip", DIRECT), ("LeakyRelu", DIRECT),
                                      ("Sigmoid", None), ("HardSwish", None)])
def test_activation_decides_the_algorithm(act: str | None, want: str | None) -> None:
    net = Net()
    c = net.conv("x", "c")
    y = c
    if act == "Clip":
        y = net.op("Clip", [c, net.const("lo", np.float32(0)), net.const("hi", np.float32(6))], "y")
    elif act:
        y = net.op(act, [c], "y")
    model = net.model([("x", [1, 64, 16, 16])], [y])
    x = _f32(1, 64, 16, 16)
    got = _algos(_check(model, {"x": x}), [x])
    if want is not None:
        assert got == [want]
    else:  # not fused: either a plain Winograd conv then the activation, or a fused direct conv
        assert got in ([WINO], [DIRECT])


@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_folds_into_a_winograd_conv(relu: bool) -> None:
    net = Net()
    c = net.conv("x", "c", bias=False)
    bn = [net.const("g", _f32(64) + 1.5), net.const("bt", _f32(64)), net.const("mu", _f32(64)),
          net.const("var", np.abs(_f32(64)) + 0.1)]
    y = net.op("BatchNormalization", [c, *bn], "bn", epsilon=1e-3)
    if relu:
        y = net.op("Relu", [y], "y")
    model = net.model([("x", [2, 64, 16, 16])], [y])
    x = _f32(2, 64, 16, 16)
    assert _algos(_check(model, {"x": x}), [x]) == [WINO]


def test_relu_then_batchnorm_is_not_winograd() -> None:
    """BN after the ReLU becomes a post-ReLU scale/shift (``post_affine``): no Winograd kernel."""
    net = Net()
    r = net.op("Relu", [net.conv("x", "c")], "r")
    bn = [net.const("g", _f32(64) + 1.5), net.const("bt", _f32(64)), net.const("mu", _f32(64)),
          net.const("var", np.abs(_f32(64)) + 0.1)]
    y = net.op("BatchNormalization", [r, *bn], "y")
    model = net.model([("x", [1, 64, 16, 16])], [y])
    x = _f32(1, 64, 16, 16)
    assert WINO not in [a for a in _algos(_check(model, {"x": x}), [x]) if "affine" in a]


def test_weight_that_is_a_graph_input_is_not_winograd() -> None:
    net = Net()
    net.nodes.append(helper.make_node("Conv", ["x", "wt"], ["y"], pads=[1, 1, 1, 1]))
    model = net.model([("x", [1, 64, 16, 16]), ("wt", [64, 64, 3, 3])], ["y"])
    x, wt = _f32(1, 64, 16, 16), _f32(64, 64, 3, 3, scale=0.05)
    lm = _check(model, {"x": x, "wt": wt}, rel=1e-5)
    assert WINO not in _algos(lm, [x, wt])
    _check(model, {"x": x, "wt": wt * -3}, lm, rel=1e-5)  # a new weight each run


def test_one_weight_shared_by_convs_with_other_biases_and_activations() -> None:
    net = Net()
    net.conv("x", "c0")
    b2 = net.const("B_other", _f32(64))
    net.nodes.append(helper.make_node("Conv", ["x", "W0", b2], ["c1"], pads=[1, 1, 1, 1]))
    r = net.op("Relu", ["c1"], "r")
    net.nodes.append(helper.make_node("Conv", ["big", "W0", "B0"], ["c2"], pads=[1, 1, 1, 1]))
    model = net.model([("x", [1, 64, 16, 16]), ("big", [2, 64, 24, 24])], ["c0", r, "c2"])
    x, big = _f32(1, 64, 16, 16), _f32(2, 64, 24, 24)
    assert _algos(_check(model, {"x": x, "big": big}), [x, big]) == [WINO] * 3


def test_float16_conv_is_not_winograd_but_a_cast_to_float32_is() -> None:
    net = Net()
    net.inits["W16"] = _f32(64, 64, 3, 3, scale=0.04).astype(np.float16)
    net.nodes.append(helper.make_node("Conv", ["x", "W16"], ["c16"], pads=[1, 1, 1, 1]))
    x32 = net.op("Cast", ["x"], "x32", to=F)
    c32 = net.op("Cast", [net.conv(x32, "c32")], "y32", to=F16)
    model = net.model([("x", [1, 64, 16, 16])], ["c16", c32], dtype=F16)
    x = _f32(1, 64, 16, 16).astype(np.float16)
    lm = _check(model, {"x": x}, rel=2e-3)
    assert sorted(_algos(lm, [x])) == sorted([WINO, _algos(lm, [x])[0]]) and _algos(lm, [x])[0] != WINO


@pytest.mark.parametrize("opts,want", [({}, WINO), ({"op_select_implmode": "high_performance"}, WINO),
                                       ({"op_select_implmode": "high_precision"}, DIRECT),
                                       ({"op_select_implmode": "high_precision_for_all"}, DIRECT),
                                       ({"op_select_implmode": "high_precision", "optypelist_for_implmode": ["Gemm"]},
                                        WINO)])
def test_implmode_picks_the_algorithms(opts: dict[str, Any], want: str) -> None:
    model = _block_model(2)
    x = _f32(2, 64, 16, 16)
    lm = _load(model, **opts)
    assert _algos(lm, [x]) == [want] * 2
    _check(model, {"x": x}, lm, rel=REL if want == WINO else 2e-6)


# ------------------------------------------------------------------ shared state: scratch, plan cache


def test_scratch_grows_and_shrinks_between_models() -> None:
    small, big = _one_conv(48, 16, 14, 14, 1), _one_conv(128, 96, 48, 48, 6)
    lms = {id(m): _load(m) for m in (small, big)}
    seq = [(small, (1, 48, 14, 14)), (big, (6, 128, 48, 48)), (small, (1, 48, 14, 14)), (big, (6, 128, 48, 48))]
    for m, shape in seq:
        x = _f32(*shape)
        _check(m, {"x": x}, lms[id(m)], repeat=1)
        assert _algos(lms[id(m)], [x]) == [WINO]


def test_plans_are_dropped_with_their_model_and_a_new_model_is_right() -> None:
    gc.collect()
    base = len(onednn_wino._plans)
    model = _block_model()
    lm = _load(model)
    for n in (1, 3):
        _check(model, {"x": _f32(n, 64, 16, 16)}, lm, repeat=1)
    assert len(onednn_wino._plans) >= base + 4
    del lm
    gc.collect()
    assert len(onednn_wino._plans) == base
    model2 = _block_model()  # new weights, likely at the freed addresses
    _check(model2, {"x": _f32(3, 64, 16, 16)})


def test_direct_call_with_a_converted_bias_each_call_is_not_stale() -> None:
    """The plan cache keys the bias by id/address; a float64 bias is copied into the plan, so its id
    can be reused by the next call's bias."""
    x, w = _f32(1, 64, 16, 16), _f32(64, 64, 3, 3, scale=0.04)
    win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (16, 16))
    for i in range(8):
        b = np.full(64, float(i), np.float32)
        y = onednn_wino.conv_winograd(x, w, b, 1, win)
        _close(y, nb.conv_im2col_gemm(x, w, b, 1, win))
        del b


@pytest.mark.xfail(strict=True, reason="BUG: onednn_wino.plan keys the bias by (id, address) but the plan keeps a "
                   "float32 copy of a float64 / strided bias; a later bias reusing the id gets the stale plan")
@pytest.mark.parametrize("kind", ["float64", "strided"])
def test_direct_call_with_a_converted_bias_each_call(kind: str) -> None:
    x, w = _f32(1, 64, 16, 16), _f32(64, 64, 3, 3, scale=0.04)
    win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (16, 16))
    big = _f32(128)
    for i in range(8):
        b = np.full(64, float(i)) if kind == "float64" else (big + i)[::2]
        y = onednn_wino.conv_winograd(x, w, b, 1, win)
        _close(y, nb.conv_im2col_gemm(x, w, np.ascontiguousarray(b, np.float32), 1, win), what=f"call {i}")
        del b


# ------------------------------------------------------------------ special values


@pytest.mark.parametrize("wscale,xscale", [(1e30, 1.0), (1.0, 1e30), (1e-30, 1.0), (1e-30, 1e-5), (1e5, 1e-5)])
@pytest.mark.parametrize("batch", [1, 4])
def test_large_and_small_magnitudes(wscale: float, xscale: float, batch: int) -> None:
    model = _one_conv(batch=batch, bias=False, wscale=wscale)
    x = _f32(batch, 64, 16, 16, scale=xscale)
    assert _algos(_check(model, {"x": x}, repeat=1), [x]) == [WINO]


def test_nan_with_the_2x3_kernel_matches_ort() -> None:
    model = _one_conv(batch=1)
    x = _f32(1, 64, 16, 16)
    x[0, 3, 7, 8] = np.nan
    _check(model, {"x": x})


NONFINITE = "known difference (docs/kernels.md): "


@pytest.mark.xfail(strict=True, reason=NONFINITE + "with the 4x3 kernel (batch 4) a NaN input spreads to a 5x5 "
                   "output tile instead of the 3x3 neighbourhood ORT gives")
def test_nan_with_the_4x3_kernel() -> None:
    model = _one_conv(batch=4)
    x = _f32(4, 64, 16, 16)
    x[0, 3, 7, 8] = np.nan
    _check(model, {"x": x}, repeat=1)


@pytest.mark.xfail(strict=True, reason="DIFFERENCE: an inf input gives NaN (inf - inf inside the Winograd "
                   "transforms) where ORT gives +-inf, even with the 2x3 kernel (batch 1) and no activation")
def test_inf_input_with_the_2x3_kernel() -> None:
    model = _one_conv(batch=1)
    x = _f32(1, 64, 16, 16)
    x[0, 3, 7, 8] = np.inf
    _check(model, {"x": x}, repeat=1)


@pytest.mark.xfail(strict=True, reason="DIFFERENCE: NaN input + fused ReLU with the 4x3 kernel gives 0 at "
                   "outputs where ORT is finite and non-zero (the 5x5 NaN tile, then relu(NaN) = 0): wrong finite values")
def test_nan_with_relu_and_the_4x3_kernel_only_where_ort_is_finite() -> None:
    model = _one_conv(batch=4, act="Relu")
    x = _f32(4, 64, 16, 16)
    x[0, 3, 7, 8] = np.nan
    want = run_ort(model, {"x": x})[0]
    got = _load(model).run([x])[0]
    fin = np.isfinite(want)
    _close(got[fin], want[fin])


@pytest.mark.xfail(strict=True, reason="DIFFERENCE: 4x3 kernel overflows to inf for results near the float32 "
                   "limit (|y| ~ 1e38) that ORT computes finite")
def test_results_near_float32_max_with_the_4x3_kernel() -> None:
    model = _one_conv(batch=4, bias=False, wscale=1e36)
    x = _f32(4, 64, 16, 16)
    _check(model, {"x": x}, repeat=1)


@pytest.mark.xfail(strict=True, reason="DIFFERENCE: subnormal results (|y| ~ 1e-40) lose relative precision "
                   "in the transforms: error ~5e-4 of the range (the direct conv matches ORT exactly)")
def test_subnormal_results() -> None:
    model = _one_conv(batch=1, bias=False, wscale=1e-21)
    x = _f32(1, 64, 16, 16, scale=1e-21)
    _check(model, {"x": x}, repeat=1)
