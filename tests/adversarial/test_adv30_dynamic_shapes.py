"""Defects found by differential fuzzing of symbolic-dims models (shape-generic and specialised plans)
against ONNX Runtime (session adv30). Each test builds a small model with symbolic input dims, runs it
under the plan policies at several sizes, and asserts ORT's values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(30)


def _model(nodes: list, inputs: list, inits: list, opset: int = 17):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("k", [8, 1 << 19])
def test_gemm_to_one_output_with_a_scalar_c(trans_b: int, k: int) -> None:
    """Gemm (M, K) x (K, 1) + a 0-d C (a regression head): the shape-generic plan's binder read the
    bias's shape[-1] and raised IndexError building the plan, so every call of the model failed.
    k = 2^19 is a product large enough to bind the packed matmul at one row."""
    w = (RNG.standard_normal((1, k) if trans_b else (k, 1)) * 0.01).astype(np.float32)

    def gemm(rows: int | str):  # type: ignore[no-untyped-def]
        return _model([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=trans_b, beta=2.0)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.5, np.float32), "c")])

    x = RNG.standard_normal((3, k)).astype(np.float32)  # a static model binds the same product (bind.py)
    np.testing.assert_allclose(LoadedModel.from_compiled(compile_model(gemm(3))).run([x])[0],
                               run_ort(gemm(3), {"x": x})[0], rtol=1e-4, atol=1e-4)
    m = gemm("M")
    for policy in ("generic", "auto", "specialize"):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        for rows in (3, 1, 2, 1):
            x = RNG.standard_normal((rows, k)).astype(np.float32)
            np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_plan_cache_config_takes_a_byte_text_and_refuses_what_is_not_a_count() -> None:
    """``PlanCacheConfig(max_bytes="64K")`` was kept as a string: the model ran (no plan was built to
    compare it with) until ``plan_cache_stats().summary()`` divided it (TypeError). The byte text is
    parsed as PYCANN_PLAN_CACHE_BYTES is; a float, negative or non-numeric bound is a ConfigError."""
    from pycann.config import ConfigError

    assert PlanCacheConfig(max_bytes="64K").max_bytes == 64 << 10  # type: ignore[arg-type]
    assert PlanCacheConfig(max_bytes=np.int64(5), max_plans=np.int64(2)).max_plans == 2  # type: ignore[arg-type]
    for bad in ({"max_bytes": "lots"}, {"max_bytes": -1}, {"max_bytes": 1.5}, {"max_plans": 0},
                {"max_plans": "3"}, {"max_bytes": None}):
        with pytest.raises(ConfigError, match="PlanCacheConfig"):
            PlanCacheConfig(**bad)  # type: ignore[arg-type]
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])], [])
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(max_bytes="1M", policy="specialize"))  # type: ignore[arg-type]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(lm.run([x])[0], run_ort(m, {"x": x})[0])
    assert "of 1 MiB" in lm.plan_cache_stats().summary()


def test_reshape_refusal_names_the_dims_its_zeros_copied() -> None:
    """A zero-size call reshaped back to its own Shape: the target [1, 0, 8] copies the input's dim 1
    (allowzero 0), so the refused shape is [1, 8, 8]; the error said "cannot reshape FLOAT[0x8] to
    [1, 0, 8]: element counts differ", two counts of 0. ORT refuses the call too."""
    from pycann.errors import ShapeError

    nodes = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "i2"], ["d"], axis=0),
             helper.make_node("Concat", ["m1", "d"], ["t2"], axis=0), helper.make_node("Reshape", ["x", "t2"], ["x2"]),
             helper.make_node("Relu", ["x2"], ["r"]), helper.make_node("Reshape", ["r", "sh"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", "D"])],
               [numpy_helper.from_array(np.array([-1], np.int64), "m1"), numpy_helper.from_array(np.array([2], np.int64), "i2")])
    with pytest.raises(Exception):  # noqa: B017 - ORT's own error type
        run_ort(m, {"x": np.zeros((1, 0, 8), np.float32)})
    for policy in ("generic", "specialize"):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
        np.testing.assert_array_equal(lm.run([x])[0], run_ort(m, {"x": x})[0])
        with pytest.raises(ShapeError, match=r"\[1, 0, 8\] \(its 0s copy the input's dims: \[1, 8, 8\]"):
            lm.run([np.zeros((1, 0, 8), np.float32)])


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("shape, pads", [((1, 0, 6, 1), [1, 0, 2, 1, 1, 0, 0, 1]), ((0, 1, 1, 1), [0, 1, 0, 3, 0, 1, 0, 0]),
                                         ((1, 0, 1, 1), [1, 0, 0, 0, 1, 0, 0, 0]), ((2, 3, 4, 5), [0, 1, 2, 3, 0, 1, 2, 3])])
def test_pad_of_an_empty_call_mirrors_nothing(mode: str, shape: tuple[int, ...], pads: list[int]) -> None:
    """An empty call (a 0 dim) reflect-padded on a non-empty axis of size 1: ORT returns the empty
    (3, 0, 8, 3); pycann refused it ("pads axis 0 by 1 in reflect mode, more than its size 1 - 1"),
    on the generic and the specialised plan alike. Padding the empty axis itself stays refused, in
    reflect and edge modes as ORT, and in wrap mode (nothing to repeat)."""
    from pycann.errors import ShapeError

    def pad(m: str):  # type: ignore[no-untyped-def]
        return _model([helper.make_node("Pad", ["x", "p"], ["y"], mode=m)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B", "C", "D"])],
                      [numpy_helper.from_array(np.array(pads, np.int64), "p")], opset=19)

    x = RNG.standard_normal(shape).astype(np.float32)
    for policy in ("generic", "specialize"):
        got = LoadedModel.from_compiled(compile_model(pad(mode)), plan_cache=PlanCacheConfig(policy=policy)).run([x])[0]
        want = run_ort(pad(mode), {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        empty_axis = _model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
                            [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "p")], opset=19)
        with pytest.raises(Exception):  # noqa: B017 - ORT: "Cannot use 'reflect' mode to pad dimension with a value of 0"
            run_ort(empty_axis, {"x": np.zeros((2, 0), np.float32)})
        for m in (mode, "wrap"):
            lm = LoadedModel.from_compiled(compile_model(_model([helper.make_node("Pad", ["x", "p"], ["y"], mode=m)],
                                                                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
                                                                [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "p")],
                                                                opset=19)), plan_cache=PlanCacheConfig(policy=policy))
            with pytest.raises(ShapeError, match="pads the empty axis 1"):
                lm.run([np.zeros((2, 0), np.float32)])


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER"])
def test_convtranspose_output_shape_beyond_the_full_result(auto_pad: str) -> None:
    """output_shape [8, 5] from a 3x1 input (stride 2 / 3, kernel 3: full result 7 x 3): ORT clamps the
    negative total padding at 0, so the result starts at row 0 and the extra rows hold the bias alone;
    pycann split the negative total as padding (its rows shifted by one: [0, 1, 1, 5...] for
    [1, 1, 5, ...]). An output_shape that implies another input size ((out - span) // stride + 1),
    [9, 5] or [8, 6] here, ORT refuses ("inconsistent with input spatial dimensions"): so does pycann,
    on the generic plan and in shape inference."""
    from pycann.errors import PycannError

    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)

    def deconv(oshape: list[int]):  # type: ignore[no-untyped-def]
        attrs = {"strides": [2, 3], "output_shape": oshape, **({} if auto_pad == "NOTSET" else {"auto_pad": auto_pad})}
        return _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])

    x = RNG.standard_normal((1, 2, 3, 1)).astype(np.float32)
    for policy in ("generic", "specialize"):
        for oshape in ([8, 5], [7, 3], [6, 4], [5, 2]):
            m = deconv(oshape)
            got = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy)).run([x])[0]
            want = run_ort(m, {"x": x})[0]
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        for oshape in ([9, 5], [8, 6]):
            m = deconv(oshape)
            with pytest.raises(Exception):  # noqa: B017 - ORT's own error type
                run_ort(m, {"x": x})
            with pytest.raises(PycannError, match="output_shape"):
                LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy)).run([x])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_over_an_empty_axis_of_an_empty_call(op: str, keepdims: int, last: int) -> None:
    """ArgMax over an empty axis when another dim is 0 too: the result is empty and ORT returns it
    ((0, 2, 2, 1) for (0, 2, 2, 0) on axis 3); numpy's argmax raised "attempt to get argmax of an empty
    sequence" (a KernelError). An empty axis with a non-empty result stays refused, as ORT."""
    from pycann.errors import PycannError

    m = _model([helper.make_node(op, ["x"], ["y"], axis=3, keepdims=keepdims, select_last_index=last)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B", "C", "D"])], [], opset=18)
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    for policy in ("generic", "specialize"):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        for shape in [(2, 3, 4, 5), (0, 2, 2, 0), (1, 0, 3, 0), (2, 3, 4, 5)]:
            x = RNG.standard_normal(shape).astype(np.float32)
            got, want = lm.run([x])[0], run_ort(m, {"x": x})[0]
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        with pytest.raises(Exception):  # noqa: B017 - ORT's own error type
            run_ort(m, {"x": np.zeros((2, 3, 4, 0), np.float32)})
        with pytest.raises(PycannError, match="empty axis 3"):
            lm.run([np.zeros((2, 3, 4, 0), np.float32)])


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("pads", [[-1, 1, 0, 0], [-1, 0, 0, 0], [0, -2, 0, 0]])
def test_pad_cropping_an_axis_to_nothing_in_a_mirroring_mode_is_refused(mode: str, pads: list[int]) -> None:
    """A non-empty input whose negative pads crop an axis to 0 in reflect / edge mode: ORT refuses it
    ("invalid mode ... with zero effective input extent"); pycann returned an empty array (only an input
    that is empty itself was checked), on the generic and the specialised plan alike."""
    from pycann.errors import ShapeError

    m = _model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
               [numpy_helper.from_array(np.array(pads, np.int64), "p")], opset=19)
    x = RNG.standard_normal((1, 2)).astype(np.float32)
    with pytest.raises(Exception, match="zero effective input extent"):
        run_ort(m, {"x": x})
    for policy in ("generic", "specialize"):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        with pytest.raises(ShapeError, match=f"crops axis {0 if pads[0] else 1} to nothing in {mode} mode"):
            lm.run([x])
