"""Canonicalize's Softmax13Spelling: the version converter's opset-13 form of an older Softmax
(``Reshape(Softmax(Flatten(x, axis)), Shape(x))``) becomes ``Softmax(x, axis=-1)`` when the
Flatten keeps every axis but the last, so attention fusion sees the model's own Softmax (a
quantised model, lifted to opset 13 for per-channel DequantizeLinear, ran its attention unfused)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.ge.onnx_graphs import canonicalized, check_compiled, const, float_model

RNG = np.random.default_rng(11)


def _lifted(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int]]], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    """An opset-12 model lifted to 13 by ONNX's version converter (what AMCT and ORT's quantiser
    do), converted with the inputs' shapes unknown (as for PP-OCRv4 rec, whose shapes the converter
    cannot follow: then it writes the Flatten form even for the last axis), then given them back."""
    m = float_model(nodes, [(n, None) for n, _ in inputs], "y", inits, opset=12)
    m = onnx.version_converter.convert_version(m, 13)
    for vi, (_, shape) in zip(m.graph.input, inputs):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, onnx.TensorProto.FLOAT, shape))
    return m


_K = RNG.standard_normal((2, 16, 6)).astype(np.float32)
_V = RNG.standard_normal((2, 6, 16)).astype(np.float32)


def _attention(axis: int) -> onnx.ModelProto:
    k, v = _K, _V
    return _lifted([helper.make_node("MatMul", ["q", "K"], ["s"]),
                    helper.make_node("Softmax", ["s"], ["p"], axis=axis),
                    helper.make_node("MatMul", ["p", "V"], ["y"])],
                   [("q", [2, 5, 16])], [const("K", k), const("V", v)])


def test_converted_last_axis_softmax_is_restored() -> None:
    """The lifted model compiles to the same ops as the source model (the attention fusion's
    input), with ORT's values."""
    m = _attention(2)
    assert any(n.op_type == "Flatten" for n in m.graph.node)  # the converter's form
    g, counts, _ = canonicalized(m)
    assert counts.get("Softmax13Spelling") == 1
    assert [n.op_type for n in g.nodes if n.op_type in ("Flatten", "Reshape", "Shape")] == []
    q = RNG.standard_normal((2, 5, 16)).astype(np.float32)
    ops = check_compiled(m, {"q": q}, absent=("Flatten", "Reshape", "Shape"))
    src = float_model([helper.make_node("MatMul", ["q", "K"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=2),
                       helper.make_node("MatMul", ["p", "V"], ["y"])], [("q", [2, 5, 16])], "y",
                      [const("K", _K), const("V", _V)], opset=12)
    assert ops == check_compiled(src, {"q": q})


def test_converted_softmax_over_several_axes_is_kept() -> None:
    """Softmax-12 with axis 1 on a rank-3 input normalises over axes 1 and 2 together: no
    single opset-13 Softmax says that, so the converter's form stays (values still ORT's)."""
    m = _attention(1)
    _, counts, missed = canonicalized(m)
    assert "Softmax13Spelling" not in counts
    assert any("more than the last axis" in r for r in missed)
    q = RNG.standard_normal((2, 5, 16)).astype(np.float32)
    check_compiled(m, {"q": q})
