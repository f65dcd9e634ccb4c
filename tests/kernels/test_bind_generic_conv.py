"""The shape-generic plan's per-shape conv kernels (``kernels/bind_generic_conv.py``) and the sized
pointwise runner (``onednn_pointwise.Pointwise.sized``) against ONNX Runtime: a model with
symbolic H and W fed sizes in turn (each size bound once, then served by its kernel), NaN kept by
fused ReLUs, the per-node table bounded, calls the table cannot serve taking the generic kernel,
Winograd shapes left to it, and concurrent runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.errors import OperandError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import algorithm, bind_generic_conv
from pycann.kernels.providers import onednn
from tests.adversarial.threads import mismatches_from_threads
from tests.kernels.test_onednn_provider import ATOL, RTOL, _data, _ort_conv
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")]

from pycann.kernels.providers import onednn_pointwise as pw  # noqa: E402

SIZES = [(24, 40), (16, 16), (33, 21), (24, 40), (8, 56), (16, 16), (33, 21)]  # (H, W), some coming back


def _model() -> onnx.ModelProto:
    """A small backbone with symbolic H and W: a 3-channel stem (3x3 stride 2) + ReLU, a depthwise
    3x3, a pointwise conv + HardSwish, a residual block (3x3 conv + Add + ReLU: FusedConv with a
    residual), a pointwise conv without bias, and a tiny 1x1 head (numpy's im2col)."""
    rng = np.random.default_rng(11)

    def t(name: str, *shape: int) -> onnx.TensorProto:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["a0"]),
             helper.make_node("Conv", ["a0", "wd", "bd"], ["cd"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["cd", "w1", "b1"], ["c1"]),
             helper.make_node("HardSwish", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "a1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["c3"]),
             helper.make_node("Conv", ["c3", "w4", "b4"], ["y"])]
    graph = helper.make_graph(nodes, "backbone", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [t("w0", 16, 3, 3, 3), t("b0", 16), t("wd", 16, 1, 3, 3), t("bd", 16), t("w1", 32, 16, 1, 1),
                               t("b1", 32), t("w2", 32, 32, 3, 3), t("b2", 32), t("w3", 24, 32, 1, 1), t("w4", 2, 24, 1, 1),
                               t("b4", 2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _generic(model: onnx.ModelProto) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                     build=PlanBuild.INLINE))


def _conv_steps(lm: LoadedModel) -> list[Any]:
    plan = lm.executor.generic_plan()
    return [st for st in plan.steps if st.node.op_type in ("Conv", "FusedConv")]


def _tables(lm: LoadedModel) -> list[dict[Any, Any]]:
    return [st.bound.keep[2] for st in _conv_steps(lm) if st.bound is not None]


def test_each_size_bound_once_and_values_match_ort() -> None:
    model = _model()
    lm = _generic(model)
    steps = _conv_steps(lm)
    assert steps and all(st.bound is not None and st.bound.impl == "generic:conv_per_shape" for st in steps)
    rng = np.random.default_rng(0)
    for h, w in SIZES:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        (y,) = lm.run([x])
        np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    distinct = len(set(SIZES))
    for table in _tables(lm):
        assert len(table) == distinct  # one kernel per size, the returning sizes found theirs
    # every conv of this model is one the table binds (oneDNN, pointwise or numpy's tiny im2col)
    assert all(kb is not None for table in _tables(lm) for kb in table.values())
    assert lm.plan_cache_stats().built == 0  # all on the shape-generic plan


def test_pointwise_convs_share_one_matmul_per_weight() -> None:
    before = set(pw._plans)
    lm = _generic(_model())
    rng = np.random.default_rng(1)
    for h, w in SIZES:
        lm.run([rng.standard_normal((1, 3, h, w)).astype(np.float32)])
    made = set(pw._plans) - before
    assert 1 <= len(made) <= 3  # w1 (+HardSwish), w3 (no bias), w4 (made at load): not one per size


def test_pointwise_matmuls_are_made_at_load_not_in_the_first_call() -> None:
    model = _model()
    before = set(pw._plans)
    lm = _generic(model)
    at_load = set(pw._plans) - before
    # w1, w3 and the head w4 (its spatial size is unknown at load: numpy's im2col takes it only at
    # small sizes): each pointwise conv's run-time-rows matmul, keyed by its weight
    assert len(at_load) == 3
    assert {k[2] for k in at_load} == {(32, 16, 1, 1), (24, 32, 1, 1), (2, 24, 1, 1)}
    x = np.random.default_rng(5).standard_normal((1, 3, 64, 72)).astype(np.float32)
    (y,) = lm.run([x])
    assert set(pw._plans) - before == at_load  # the first call found them
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


def test_a_pointwise_conv_on_a_known_tiny_image_gets_no_matmul_at_load() -> None:
    """A squeeze-and-excitation conv (1 x 1 image after GlobalAveragePool): numpy's product takes
    it at every batch size, so the load makes no oneDNN matmul for it."""
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((8, 16, 1, 1)) / 4).astype(np.float32)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Conv", ["g", "w"], ["y"])]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before = set(pw._plans)
    lm = _generic(model)
    assert not {k for k in set(pw._plans) - before if k[2] == (8, 16, 1, 1)}
    x = rng.standard_normal((2, 16, 9, 7)).astype(np.float32)
    (y,) = lm.run([x])
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


def test_fused_relu_keeps_nan_as_onnxruntime() -> None:
    model = _model()
    lm = _generic(model)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 24)).astype(np.float32)
    lm.run([x])  # bound for the size
    x[0, 1, 5, 7] = np.nan
    got, want = lm.run([x])[0], run_ort(model, {"x": x})[0]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_the_table_is_bounded_and_an_evicted_size_binds_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bind_generic_conv, "MAX_SHAPES", 3)
    model = _model()
    lm = _generic(model)
    rng = np.random.default_rng(3)
    sizes = [(8, 8), (8, 16), (16, 8), (16, 16), (24, 8), (8, 8), (16, 16)]
    for h, w in sizes:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
        assert all(len(t) <= 3 for t in _tables(lm))
    stem = next(st for st in _conv_steps(lm) if st.node.inputs[0] == "x")
    # least recently bound first out: (8, 8) came back after two evictions and was bound again
    assert [k[0][2:] for k in stem.bound.keep[2]] == [(16, 16), (24, 8), (8, 8)]


def _kernel(w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any], seen: list[Any]) -> Any:
    from pycann.kernels import conv as kconv

    def fallback(inputs: Any, a: Any) -> list[np.ndarray]:
        seen.append(inputs[0].dtype)
        return [kconv.conv(inputs, a)]

    descs = [onnx_desc((1, w.shape[1], "h", "w")), onnx_desc(w.shape)] + ([onnx_desc(b.shape)] if b is not None else [])
    k = bind_generic_conv.conv(attrs, descs, [None, w, b], [None], fallback)
    assert k is not None
    return k


def onnx_desc(shape: tuple[Any, ...]) -> Any:
    from pycann.dtypes import TensorDesc

    return TensorDesc(1, tuple(shape))


def test_calls_the_table_cannot_serve_take_the_generic_kernel() -> None:
    x, w, b = _data((1, 8, 9, 11), (12, 8, 3, 3), True)
    attrs = {"pads": [1, 1, 1, 1], "group": 1}
    seen: list[Any] = []
    k = _kernel(w, b, attrs, seen)
    want = _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1)
    np.testing.assert_allclose(k.run([x, w, b], attrs)[0], want, rtol=RTOL, atol=ATOL)
    assert seen == []
    got = k.run([x.astype(np.float64), w, b], attrs)[0]  # another dtype: the generic kernel, as before
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert seen == [np.float64]
    with pytest.raises(ValueError, match="channel"):  # a wrong channel count: the generic kernel's error
        k.run([np.zeros((1, 5, 9, 11), np.float32), w, b], attrs)


def test_recorded_algorithm_or_computed_weight_is_not_bound() -> None:
    _, w, b = _data((1, 8, 9, 11), (12, 8, 3, 3), True)
    descs = [onnx_desc((1, 8, "h", "w")), onnx_desc(w.shape), onnx_desc(b.shape)]
    fb = lambda i, a: []  # noqa: E731
    assert bind_generic_conv.conv({"_algo": algorithm.ONEDNN_CONV_NHWC}, descs, [None, w, b], [None], fb) is None
    assert bind_generic_conv.conv({}, descs, [None, None, b], [None], fb) is None
    assert bind_generic_conv.conv({}, descs, [None, w, None], [None], fb) is None  # a computed bias


def test_winograd_shapes_keep_the_generic_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.kernels import providers

    x, w, b = _data((1, 16, 20, 20), (16, 16, 3, 3), True)
    real = providers.resolve
    monkeypatch.setattr(providers, "resolve",
                        lambda algo, spec, **kw: real(algorithm.ONEDNN_CONV_WINOGRAD, spec, **kw))
    attrs = {"pads": [1, 1, 1, 1], "group": 1}
    seen: list[Any] = []
    k = _kernel(w, b, attrs, seen)
    np.testing.assert_allclose(k.run([x, w, b], attrs)[0], _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1),
                               rtol=RTOL, atol=ATOL)
    assert seen == [np.float32] and list(k.keep[2].values()) == [None]


def test_concurrent_runs_of_several_sizes() -> None:
    model = _model()
    lm = _generic(model)
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((1, 3, h, w)).astype(np.float32)} for h, w in SIZES[:3]]
    assert mismatches_from_threads(lm, model, feeds, threads=4, rounds=9) == [0, 0, 0, 0]


@pytest.mark.parametrize("residual", [False, True])
def test_pointwise_sized_runner(residual: bool) -> None:
    x, w, b = _data((2, 6, 5, 7), (4, 6, 1, 1), True)
    k = pw.plan(w, True, None, residual)
    assert k is not None
    run = k.sized(x.shape, b)
    r = np.random.default_rng(5).standard_normal((2, 4, 5, 7)).astype(np.float32) if residual else None
    want = _ort_conv(x, w, b, {}, 1, residual=r)
    for _ in range(2):  # the memories made once serve every call
        np.testing.assert_allclose(run(x, r), want, rtol=RTOL, atol=ATOL)
    with pytest.raises(OperandError, match="bound for X"):
        run(x[:, :, :4], r)
    with pytest.raises(OperandError, match="input channels"):
        k.sized((2, 5, 5, 7), b)
    with pytest.raises(OperandError, match="bias"):
        k.sized(x.shape, None)
    if residual:
        with pytest.raises(OperandError, match="residual"):
            run(x, None)
        with pytest.raises(OperandError, match="broadcast"):
            run(x, np.zeros((3, 4, 5, 7), np.float32))
