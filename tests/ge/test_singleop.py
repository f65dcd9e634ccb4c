"""GE single-op entry point (pycann.ge.run.singleop.run_op): one op per family against numpy or ONNX
Runtime, plus the error paths (unknown op, subgraph op, missing attribute, bad shapes, kernel
failure, output check)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.errors import KernelError, ShapeError, UnsupportedOpError
from pycann.ge.run.singleop import AttrError, OutputCountError, run_op
from pycann.ops.opdef import OpDef
from pycann.ops.registry import REGISTRY
from tests.ops.oracle import run_ort, single_node_model

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ort(op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None = None, n: int = 1,
        opset: int = 17) -> list[np.ndarray]:
    model, feeds = single_node_model(op, inputs, attrs or {}, n, opset)
    return run_ort(model, feeds)


def same(op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None = None, n: int = 1,
         opset: int = 17, rtol: float = 1e-5, atol: float = 1e-5) -> list[np.ndarray]:
    """run_op == ONNX Runtime for the same single-node model."""
    got = run_op(op, inputs, attrs, opset=opset, n_outputs=n)
    want = ort(op, inputs, attrs, n, opset)
    assert len(got) == n
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def test_elementwise_broadcasts() -> None:
    a, b = rand(2, 3, 4), rand(3, 1)
    (y,) = run_op("Add", [a, b])
    np.testing.assert_array_equal(y, a + b)
    same("Where", [a > 0, a, b])


def test_activation() -> None:
    x = rand(3, 5)
    (y,) = run_op("LeakyRelu", [x], {"alpha": 0.25})
    np.testing.assert_array_equal(y, np.where(x > 0, x, 0.25 * x))
    same("Gelu", [x], opset=20)


def test_cast() -> None:
    x = np.array([1.5, -2.25, 7000.0], np.float32)
    (y,) = run_op("Cast", [x], {"to": 10})  # FLOAT16
    np.testing.assert_array_equal(y, x.astype(np.float16))


def test_reduce_axes_input_and_defaults() -> None:
    x = rand(2, 3, 4)
    (y,) = run_op("ReduceSum", [x, np.array([1], np.int64)], {"keepdims": 0})
    np.testing.assert_allclose(y, x.sum(1), rtol=1e-6)
    (m,) = run_op("ReduceMean", [x])  # defaults: all axes, keepdims=1
    np.testing.assert_allclose(m, x.mean(keepdims=True), rtol=1e-6)


def test_tensor_split_needs_output_count() -> None:
    x = rand(2, 6)
    parts = run_op("Split", [x], {"axis": 1}, n_outputs=3)
    for p, w in zip(parts, np.split(x, 3, axis=1)):
        np.testing.assert_array_equal(p, w)
    (r,) = run_op("Reshape", [x, np.array([3, -1], np.int64)])
    assert r.shape == (3, 4)


def test_indexing() -> None:
    x = rand(5, 3)
    (g,) = run_op("Gather", [x, np.array([[4, 0]], np.int64)], {"axis": 0})
    np.testing.assert_array_equal(g, x[[[4, 0]]])
    same("GatherElements", [x, np.array([[0, 2, 1]], np.int64)], {"axis": 1})


def test_matmul_and_gemm() -> None:
    a, b = rand(2, 3, 4), rand(4, 5)
    (y,) = run_op("MatMul", [a, b])
    np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-6)
    same("Gemm", [rand(3, 4), rand(5, 4), rand(5)], {"transB": 1, "alpha": 0.5})


def test_conv() -> None:
    same("Conv", [rand(1, 2, 6, 6), rand(4, 2, 3, 3), rand(4)], {"pads": [1, 1, 1, 1], "strides": [2, 2]})


def test_pool_with_indices() -> None:
    x = rand(1, 2, 6, 6)
    same("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, n=2)
    same("AveragePool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})


def test_norm() -> None:
    x = rand(2, 3, 4, 4)
    same("BatchNormalization", [x, rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.5], {"epsilon": 1e-3})
    same("LayerNormalization", [x, rand(4), rand(4)], {"axis": -1})


def test_rnn_three_outputs() -> None:
    x, w, r, b = rand(4, 2, 3), rand(1, 16, 3), rand(1, 16, 4), rand(1, 32)
    same("LSTM", [x, w, r, b], {"hidden_size": 4}, n=3, rtol=1e-4)


def test_resize() -> None:
    x = rand(1, 2, 3, 4)
    same("Resize", [x, None, np.array([1, 1, 2, 1.5], np.float32)], {"mode": "linear"}, opset=19)


def test_quant() -> None:
    x = rand(2, 5) * 10
    scale, zp = np.float32(0.1), np.uint8(128)
    q = same("QuantizeLinear", [x, np.array(scale), np.array(zp)])[0]
    (dq,) = run_op("DequantizeLinear", [q, np.array(scale), np.array(zp)])
    np.testing.assert_allclose(dq, (q.astype(np.float32) - 128) * scale, rtol=1e-6)


def test_sequence_in_and_out() -> None:
    a, b = rand(2, 3), rand(1, 3)
    (seq,) = run_op("SequenceConstruct", [a, b])
    assert isinstance(seq, list) and len(seq) == 2
    (cat,) = run_op("ConcatFromSequence", [seq], {"axis": 0})
    np.testing.assert_array_equal(cat, np.concatenate([a, b]))


# ------------------------------------------------------------------------------- errors
def test_unknown_and_subgraph_ops() -> None:
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        run_op("NoSuchOp", [rand(2)])
    with pytest.raises(UnsupportedOpError, match="If has subgraphs"):
        run_op("If", [np.array(True)])


def test_bad_attributes_and_shapes_name_the_op() -> None:
    with pytest.raises(AttrError, match=r"Cast \(opset \d+\): required attribute 'to'"):
        run_op("Cast", [rand(2)])
    with pytest.raises(ShapeError, match=r"Add.*do not broadcast"):
        run_op("Add", [rand(2, 3), rand(3, 2)])
    with pytest.raises(ShapeError, match="Conv"):
        run_op("Conv", [rand(1, 3, 5, 5), rand(4, 2, 3, 3)])
    with pytest.raises(OutputCountError, match=r"Relu .*2 outputs requested, the op has 1"):
        run_op("Relu", [rand(2)], n_outputs=2)


def test_kernel_failure_is_a_kernel_error() -> None:
    with pytest.raises(KernelError, match=r"Gather \(opset \d+\): kernel failed .*IndexError"):
        run_op("Gather", [rand(2, 3), np.array([7], np.int64)])


def test_outputs_are_checked_against_inference(monkeypatch: pytest.MonkeyPatch) -> None:
    def infer(ctx: Any) -> list[Any]:
        return [ctx.input(0)]

    def kernel(x: Any, a: Any) -> list[np.ndarray]:
        return [np.asarray(x[0], np.float64)]  # wrong dtype: inference said float32

    monkeypatch.setitem(REGISTRY, ("", "BadOp"), [OpDef("BadOp", infer, kernel)])
    with pytest.raises(KernelError, match=r"BadOp .*output 0 is float64\[2\], but inference gave FLOAT\[2\]"):
        run_op("BadOp", [rand(2)])


def test_input_count_is_checked_against_onnx_schema() -> None:
    """run_op refuses an input count outside the op's ONNX schema with a ShapeError naming the op and
    the counts; None stands for an omitted optional input (Clip's min), which counts."""
    with pytest.raises(ShapeError, match=r"Add \(opset \d+\): takes 2 input\(s\), 1 given"):
        run_op("Add", [np.ones(3, np.float32)])
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    np.testing.assert_array_equal(run_op("Clip", [x, None, np.float32(1)])[0], [-2.0, 0.5, 1.0])
