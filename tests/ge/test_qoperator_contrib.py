"""ONNX Runtime's QOperator contrib ops beyond QLinearAdd / QGemm / QLinearGlobalAveragePool, as its
``quantize_static(quant_format=QOperator)`` writes them (QLinearSoftmax after a classifier,
QLinearSigmoid + QLinearMul in swish blocks, QLinearLeakyRelu, QLinearConcat): atc refused such a
model ("no parser is registered for op QLinearSoftmax"). Golden: ONNX Runtime's own kernels (within
one unit of the output quantisation, as its fixed-point requantisation rounds) and the
dequantise-op-quantise arithmetic (exactly)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel

MS = "com.microsoft"
XS, XZ = np.float32(0.05), np.uint8(128)


def _c(name: str, v: object, dt: type) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dt), name)


def _model(softmax_opset: int = 13, softmax_axis: int = -1) -> onnx.ModelProto:
    """x uint8 [2, 3, 8] -> sigmoid, leaky relu, mul, concat, softmax (all QLinear, com.microsoft)."""
    q = "xs", "xz"
    nodes = [
        helper.make_node("QLinearSigmoid", ["x", *q, "ss", "sz"], ["s"], domain=MS),
        helper.make_node("QLinearLeakyRelu", ["x", *q, "ls", "lz"], ["l"], domain=MS, alpha=0.2),
        helper.make_node("QLinearMul", ["x", *q, "s", "ss", "sz", "ms", "mz"], ["m"], domain=MS),
        helper.make_node("QLinearConcat", ["cs", "cz", "m", "ms", "mz", "l", "ls", "lz"], ["c"], domain=MS, axis=1),
        helper.make_node("QLinearSoftmax", ["c", "cs", "cz", "ys", "yz"], ["y"], domain=MS, axis=softmax_axis,
                         opset=softmax_opset),
    ]
    inits = [_c("xs", XS, np.float32), _c("xz", XZ, np.uint8), _c("ss", 1 / 256, np.float32), _c("sz", 0, np.uint8),
             _c("ls", 0.04, np.float32), _c("lz", 100, np.uint8), _c("ms", 0.03, np.float32),
             _c("mz", 90, np.uint8), _c("cs", 0.05, np.float32), _c("cz", 110, np.uint8),
             _c("ys", 1 / 256, np.float32), _c("yz", 0, np.uint8)]
    g = helper.make_graph(nodes, "qop", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 6, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _reference(x: np.ndarray, softmax_opset: int, axis: int) -> np.ndarray:
    def dq(q: np.ndarray, s: float, z: int) -> np.ndarray:
        return ((q.astype(np.float32) - np.float32(z)) * np.float32(s)).astype(np.float32)

    def q8(v: np.ndarray, s: float, z: int) -> np.ndarray:
        return np.clip(np.rint(v.astype(np.float32) / np.float32(s)) + z, 0, 255).astype(np.uint8)

    xf = dq(x, XS, XZ)
    s = q8(1 / (1 + np.exp(-xf)), 1 / 256, 0)
    l_ = q8(np.where(xf >= 0, xf, xf * np.float32(0.2)), 0.04, 100)
    m = q8(xf * dq(s, 1 / 256, 0), 0.03, 90)
    c = dq(q8(np.concatenate([dq(m, 0.03, 90), dq(l_, 0.04, 100)], axis=1), 0.05, 110), 0.05, 110)
    two_d = softmax_opset < 13  # (before opset 13 Softmax coerced its input to 2-D at axis)
    v = c.reshape(int(np.prod(c.shape[:axis % c.ndim])), -1) if two_d else c
    ax = 1 if two_d else axis
    e = np.exp(v - v.max(axis=ax, keepdims=True))
    return q8((e / e.sum(axis=ax, keepdims=True)).reshape(c.shape), 1 / 256, 0)


@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (11, 1), (11, -1)])
@pytest.mark.parametrize("implmode", ["high_precision", "high_performance"])
def test_qoperator_contrib_ops_match_onnxruntime(opset: int, axis: int, implmode: str) -> None:
    model = _model(opset, axis)
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 8), dtype=np.uint8)
    cm = compile_model(model, CompileOptions(op_select_implmode=implmode))
    got = LoadedModel.from_compiled(cm).run([x])[0]
    ours = _reference(x, opset, axis)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == np.uint8 and got.shape == (2, 6, 8)
    if implmode == "high_precision":  # the exact QDQ arithmetic, and ORT's kernels within 1 LSB
        np.testing.assert_array_equal(got, ours)
        assert np.abs(got.astype(int) - theirs.astype(int)).max() <= 1
    else:  # the Q -> DQ pairs between float ops are bypassed (README): the float chain, quantised once
        xf = (x.astype(np.float32) - np.float32(XZ)) * XS
        c = np.concatenate([xf / (1 + np.exp(-xf)), np.where(xf >= 0, xf, xf * np.float32(0.2))], axis=1)
        v = c.reshape(int(np.prod(c.shape[:axis % 3])), -1) if opset < 13 else c
        ax = 1 if opset < 13 else axis
        e = np.exp(v - v.max(axis=ax, keepdims=True))
        p = (e / e.sum(axis=ax, keepdims=True)).reshape(c.shape)
        assert np.abs(got.astype(int) - np.clip(np.rint(p * 256), 0, 255)).max() <= 1
    ops = cm.graph.op_counts()
    # opset < 13 Softmax over the axes from 1 on (rank 3) is not opset 13's: kept on its reference kernel
    assert ("QLinearSoftmax" in ops) == (opset < 13 and axis % 3 != 2), ops
    assert not any(k in ops for k in ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearMul", "QLinearConcat")), ops


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                    "count_include_pad": 1},
                                   {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
                                   {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}])
def test_qlinear_average_pool_is_the_qdq_arithmetic(attrs: dict[str, object]) -> None:
    """QLinearAveragePool (an Inception block's pooling under QOperator): equal to ONNX Runtime's
    unoptimised DQ -> AveragePool -> Q, within 1 LSB of its QLinearAveragePool kernel."""
    inits = [_c("xs", 0.1, np.float32), _c("xz", 120, np.uint8), _c("ys", 0.07, np.float32), _c("yz", 130, np.uint8)]
    xin = [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 9, 9])]
    yout = [helper.make_tensor_value_info("y", TensorProto.UINT8, None)]
    qop = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)],
        "qpool", xin, yout, inits), opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    qdq = helper.make_model(helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]), helper.make_node("AveragePool", ["d"], ["a"], **attrs),
         helper.make_node("QuantizeLinear", ["a", "ys", "yz"], ["y"])], "qdq", xin, yout, inits),
        opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).integers(0, 256, (1, 3, 9, 9), dtype=np.uint8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(qdq.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    kern = ort.InferenceSession(qop.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for implmode in ("high_precision", "high_performance"):
        cm = compile_model(qop, CompileOptions(op_select_implmode=implmode))
        assert "QLinearAveragePool" not in cm.graph.op_counts()
        got = LoadedModel.from_compiled(cm).run([x])[0]
        np.testing.assert_array_equal(got, ref)
        assert np.abs(got.astype(int) - kern.astype(int)).max() <= 1
    # the reference kernel (what runs when the rewrite declines) computes the same
    from pycann.ops.quant_ms import _k_qlinear_avgpool

    ins = [x, np.float32(0.1), np.uint8(120), np.float32(0.07), np.uint8(130)]
    np.testing.assert_array_equal(_k_qlinear_avgpool(ins, {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
                                                            "pads": [], "strides": [], **attrs})[0], ref)


@pytest.mark.parametrize("opset,axis", [(13, -1), (11, 1)])
def test_reference_kernels_without_the_rewrite(opset: int, axis: int) -> None:
    """With QOperatorToQDQ switched off (--fusion_switch_file ALL:off) the contrib ops run on their
    reference kernels: the same dequantise-op-quantise values."""
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 8), dtype=np.uint8)
    cm = compile_model(_model(opset, axis), CompileOptions(disabled_passes=["QOperatorToQDQ"]))
    assert set(cm.graph.op_counts()) == {"QLinearConcat", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid",
                                         "QLinearSoftmax"}
    np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([x])[0], _reference(x, opset, axis))
