"""Adversarial checks of the late changes: the plan-time nearest Resize (``kernels/bind_resize.py``),
the oneDNN bfloat16 -> float32 Cast (``providers/onednn_cast.py``), Cast in LayoutSelection and the
auto plan policy's vision signature limit, against ONNX Runtime / ml_dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import pycann
from tests.ops.oracle import run_ort


def _resize_model(xs: tuple[int, ...], *, roi: list[float] | None, sizes: list[int] | None = None,
                  scales: list[float] | None = None, coord: str, nearest: str = "round_prefer_floor",
                  ev: float = 0.0, dtype: int = TensorProto.FLOAT) -> Any:
    inits = []
    names = ["x", "roi" if roi is not None else "", "scales" if scales is not None else ""]
    if roi is not None:
        inits.append(numpy_helper.from_array(np.array(roi, np.float32), "roi"))
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
    if sizes is not None:
        names.append("sizes")
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    node = helper.make_node("Resize", names, ["y"], mode="nearest", coordinate_transformation_mode=coord,
                            nearest_mode=nearest, extrapolation_value=ev)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, list(xs))],
                          [helper.make_tensor_value_info("y", dtype, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def _pycann(m: Any, x: np.ndarray, tmp_path: Any, **kw: Any) -> np.ndarray:
    import onnx

    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    return pycann.InferSession(0, str(p), **kw).infer([x])[0]  # type: ignore[no-any-return]


def test_resize_tf_crop_extrapolated_row_is_not_bound(tmp_path: Any) -> None:
    # roi H [-0.2, 1] maps output rows 0..3 to -0.2 (outside: extrapolation_value), 0.2, 0.6, 1.0:
    # on the probe (values = flat index) row 0's extrapolated 0.0 equals pixel 0's value, so the
    # bound repeat copied x's row 0 where ONNX Runtime writes 0
    m = _resize_model((1, 3, 2, 1), roi=[0, 0, -0.2, 0, 1, 1, 1.0, 1], sizes=[1, 3, 4, 1],
                      coord="tf_crop_and_resize")
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 3, 2, 1)
    np.testing.assert_array_equal(_pycann(m, x, tmp_path), run_ort(m, {"x": x})[0])


_MODES = [("asymmetric", "floor"), ("asymmetric", "ceil"), ("asymmetric", "round_prefer_ceil"),
          ("half_pixel", "round_prefer_floor"), ("half_pixel", "floor"), ("align_corners", "round_prefer_floor"),
          ("pytorch_half_pixel", "round_prefer_ceil"), ("half_pixel_symmetric", "round_prefer_floor"),
          ("tf_half_pixel_for_nn", "round_prefer_floor")]


@pytest.mark.parametrize("coord,nearest", _MODES)
@pytest.mark.parametrize("form", ["scales", "sizes", "kh1", "big"])
def test_resize_modes_and_forms_match_ort(coord: str, nearest: str, form: str, tmp_path: Any) -> None:
    xs = (2, 3, 5, 4)
    kw: dict[str, Any] = {"scales": [1, 1, 2, 3]} if form == "scales" else \
        {"sizes": [2, 3, 10, 12]} if form == "sizes" else {"scales": [1, 1, 1, 2]} if form == "kh1" else \
        {"scales": [1, 1, 9, 16]}
    m = _resize_model(xs, roi=None, coord=coord, nearest=nearest, **kw)
    x = np.random.default_rng(1).standard_normal(xs).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    got, want = _pycann(m, x, tmp_path), run_ort(m, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT8, TensorProto.FLOAT16, TensorProto.BOOL,
                                   TensorProto.UINT8])
def test_resize_dtypes_match_ort(dtype: int, tmp_path: Any) -> None:
    from onnx import helper as h

    xs = (1, 4, 3, 5)
    m = _resize_model(xs, roi=None, scales=[1, 1, 2, 2], coord="asymmetric", nearest="floor", dtype=dtype)
    npt = h.tensor_dtype_to_np_dtype(dtype)
    x = (np.random.default_rng(2).integers(0, 2 if dtype == TensorProto.BOOL else 100, xs)).astype(npt)
    try:
        want = run_ort(m, {"x": x})[0]
    except Exception:  # noqa: BLE001 - a dtype ORT's CPU Resize lacks
        pytest.skip("ORT has no kernel for this dtype")
    np.testing.assert_array_equal(_pycann(m, x, tmp_path), want)


def test_resize_into_concat_and_output(tmp_path: Any) -> None:
    # the bound Resize writes an arena view that a Concat reads and that is also a graph output
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Relu", ["r"], ["a"]),
             helper.make_node("Concat", ["r", "a", "z"], ["c"], axis=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                                       helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 16, 16])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, None)], [scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    import onnx

    p = tmp_path / "c.onnx"
    onnx.save(m, str(p))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    z = rng.standard_normal((1, 2, 16, 16)).astype(np.float32)
    sess = pycann.InferSession(0, str(p))
    want = run_ort(m, {"x": x, "z": z})
    for _ in range(2):
        got = sess.run(None, {"x": x, "z": z})
        for g_, w_ in zip(got, want):
            np.testing.assert_array_equal(g_, w_)


@pytest.mark.parametrize("opset", [10, 11])
def test_resize_old_opsets_match_ort(opset: int, tmp_path: Any) -> None:
    xs = (1, 2, 3, 4)
    sc = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    if opset == 10:
        node = helper.make_node("Resize", ["x", "scales"], ["y"], mode="nearest")
        inits = [sc]
    else:
        node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest",
                                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi"), sc]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    x = np.random.default_rng(5).standard_normal(xs).astype(np.float32)
    np.testing.assert_array_equal(_pycann(m, x, tmp_path), run_ort(m, {"x": x})[0])


def test_bf16_tanh_conv_records_no_bound_for_nan() -> None:
    # a NaN-keeping activation's conv runs even when its (recorded) input's bound can overflow;
    # Tanh's output bound 1.01 was then recorded for an output of NaN (-inf + inf bias), and a
    # guarded ReLU conv after it trusted the record and dropped the NaN (ONNX keeps it)
    from pycann.dtypes import bfloat16
    from pycann.kernels import fused
    from pycann.kernels.providers import nan_guard, onednn_bf16

    if not onednn_bf16.native():
        pytest.skip("no native bf16 oneDNN")
    bf, c = bfloat16(), 16
    nan_guard.new_run()
    try:
        x = np.full((1, c, 8, 8), 1e36, np.float32).astype(bf)
        nan_guard.record(x, 1.01e36)
        w = np.zeros((c, c, 1, 1), np.float32)
        w[:, 0] = -1e3
        b = np.full(c, np.inf, np.float32).astype(bf)
        attrs = {"activation": "Tanh", "kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                 "dilations": [1, 1], "group": 1}
        y = fused._bf16_conv_fused([x, w.astype(bf), b], attrs, False)
        assert y is not None and np.isnan(y.astype(np.float32)).all()
        assert nan_guard.proven(y) is None
        w2 = np.full((c, c, 1, 1), 0.1, np.float32).astype(bf)
        y2 = fused.k_fused_conv([y, w2], {**attrs, "activation": "Relu"})[0]
        assert np.isnan(y2.astype(np.float32)).all()
    finally:
        nan_guard.end_run()


def _graph(nodes: list[Any], outs: list[tuple[str, int]], inits: dict[str, np.ndarray],
           xs: tuple[int, ...] = (1, 8, 20, 24)) -> Any:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info(o, t, None) for o, t in outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _cast_models() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    c = 16
    w = {"W0": (rng.standard_normal((c, 8, 3, 3)) * 0.3).astype(np.float32),
         "W1": (rng.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32)}
    conv0 = helper.make_node("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1])
    conv1 = helper.make_node("Conv", ["f", "W1"], ["y"], pads=[1, 1, 1, 1])
    mk = helper.make_node
    return {
        # int32 round trip between convs (truncation in a channels-last chain)
        "int32": _graph([conv0, mk("Mul", ["c0", "k"], ["m"]), mk("Cast", ["m"], ["ci"], to=TensorProto.INT32),
                         mk("Cast", ["ci"], ["f"], to=TensorProto.FLOAT), conv1],
                        [("y", TensorProto.FLOAT)], {**w, "k": np.array(10, np.float32)}),
        # int64 read by a layout-sensitive Reshape and Gather / ReduceSum / Flatten
        "int64": _graph([conv0, mk("Cast", ["c0"], ["ci"], to=TensorProto.INT64), mk("Reshape", ["ci", "sh"], ["r"]),
                         mk("Gather", ["ci", "gi"], ["g"], axis=1), mk("ReduceSum", ["ci", "ax"], ["s"], keepdims=0),
                         mk("Flatten", ["ci"], ["fl"]), mk("Relu", ["c0"], ["f"]), conv1],
                        [("r", TensorProto.INT64), ("g", TensorProto.INT64), ("s", TensorProto.INT64),
                         ("fl", TensorProto.INT64), ("y", TensorProto.FLOAT)],
                        {**w, "sh": np.array([1, -1], np.int64), "gi": np.array([3, 0], np.int64),
                         "ax": np.array([3], np.int64)}),
        # bool through Not, float16 through MaxPool and a Transpose output, uint8 output
        "bool_f16_u8": _graph([conv0, mk("Cast", ["c0"], ["b"], to=TensorProto.BOOL), mk("Not", ["b"], ["nb"]),
                               mk("Cast", ["nb"], ["fb"], to=TensorProto.FLOAT), mk("Mul", ["fb", "c0"], ["f"]), conv1,
                               mk("Cast", ["c0"], ["h"], to=TensorProto.FLOAT16),
                               mk("MaxPool", ["h"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                               mk("Transpose", ["h"], ["t"], perm=[0, 2, 3, 1]),
                               mk("Clip", ["c0", "lo", "hi"], ["cl"]), mk("Cast", ["cl"], ["u"], to=TensorProto.UINT8)],
                              [("y", TensorProto.FLOAT), ("nb", TensorProto.BOOL), ("p", TensorProto.FLOAT16),
                               ("t", TensorProto.FLOAT16), ("u", TensorProto.UINT8)],
                              {**w, "lo": np.array(0, np.float32), "hi": np.array(255, np.float32)}),
    }


@pytest.mark.parametrize("name", ["int32", "int64", "bool_f16_u8"])
@pytest.mark.parametrize("bf16", [False, True])
def test_cast_in_conv_chains_matches_without_layout_selection(name: str, bf16: bool) -> None:
    from pycann import CompileOptions
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel

    m = _cast_models()[name]
    opts: dict[str, Any] = {"precision_mode": "allow_fp32_to_bf16", "soc_version": "Ascend910B2"} if bf16 else {}
    x = (np.random.default_rng(8).standard_normal((1, 8, 20, 24)) * 3).astype(np.float32)
    got = LoadedModel.from_compiled(compile_model(m, CompileOptions(**opts))).run_dict({"x": x})
    off = LoadedModel.from_compiled(compile_model(m, CompileOptions(**opts, disabled_passes=["LayoutSelection"])))
    want_off = off.run_dict({"x": x})
    ref = run_ort(m, {"x": x})
    for g, o, r in zip(got, want_off, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        if g.dtype.kind in "iub" or not bf16:
            np.testing.assert_array_equal(g, o)
        if not bf16:
            if r.dtype.kind in "iub":
                np.testing.assert_array_equal(g, r)
            else:
                np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_vision_signature_limit_then_early_shapes_and_fork() -> None:
    import os

    from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.ge.test_plan_cache import _conv_model, _img

    m = _conv_model()
    name = m.graph.input[0].name
    cfg = PlanCacheConfig(policy=PlanPolicy.AUTO, build=PlanBuild.BACKGROUND)
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=cfg)
    ex = lm.executor

    def check(h: int, w: int) -> None:
        x = _img(h, w)
        for g, r in zip(lm.run_dict({name: x}), run_ort(m, {name: x})):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)

    shapes = [(8 + i, 9) for i in range(20)]
    for s in shapes[:16]:
        check(*s)
        assert ex.wait_builds(60)
    for s in shapes[16:]:  # past the limit: generic, nothing queued
        check(*s)
    assert ex.wait_builds(60) and lm.plan_cache_stats().built == ex.AUTO_VISION_SIGNATURES
    for s in shapes[:16]:  # the early shapes hit their plans
        check(*s)
    st = lm.plan_cache_stats()
    assert st.hits == 16 and st.built == 16
    # fork while builds are queued: the child builds its own and answers right
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=cfg)
    ex = lm.executor
    with ex._lock:
        for s in shapes[:4]:
            check(*s)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                for s in shapes[:6] * 2:
                    check(*s)
                code = 0 if ex.wait_builds(30) else 2
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert ex.wait_builds(60)


def test_resize_probe_is_bounded_by_the_output() -> None:
    # _PROBE_MAX bounded the probe's input pixels, but its result (and the repeat it is compared
    # with) has the output's: a 2 x 2 int8 map resized x 4096 x 2048 (32 MB of output) made ~540 MB
    # of float64 probes and ~2 s at load; now such a node keeps the generic kernel
    import tracemalloc

    from pycann.dtypes import TensorDesc
    from pycann.kernels.bind_resize import PREPARE_RESIZE

    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor",
             "keep_aspect_ratio_policy": "stretch"}
    tracemalloc.start()
    try:
        k = PREPARE_RESIZE[("", "Resize")](attrs, [TensorDesc(3, (1, 1, 2, 2)), None, TensorDesc(1, (4,))],
                                           [None, None, np.array([1, 1, 4096, 2048], np.float32)],
                                           [TensorDesc(3, (1, 1, 8192, 4096))])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert k is None and peak < 64 << 20


def test_bf16_input_cast_bits_over_feed_layouts(tmp_path: Any) -> None:
    # a bfloat16 graph input Cast to float32 (the oneDNN reorder from 32K values): every bit pattern
    # (NaN payloads, infs, subnormals) as ml_dtypes widens it, for C-order, strided, reversed and
    # channels-last feeds, twice (the cached primitives)
    import ml_dtypes
    import onnx

    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["y2"], to=TensorProto.FLOAT), helper.make_node("Relu", ["y2"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 64, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    p = tmp_path / "c.onnx"
    onnx.save(m, str(p))
    sess = pycann.InferSession(0, str(p))
    base = np.random.default_rng(0).integers(0, 65536, (1, 64, 32, 64), dtype=np.uint16).view(ml_dtypes.bfloat16)
    feeds = [np.ascontiguousarray(base[..., :32]), base[..., ::2], base[..., ::-1][..., :32],
             np.ascontiguousarray(base[..., :32].transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)]
    for x in feeds:
        want = np.ascontiguousarray(x).astype(np.float32)
        for _ in range(2):
            y = sess.infer([x])[0]
            np.testing.assert_array_equal(np.ascontiguousarray(y).view(np.uint32), want.view(np.uint32))
