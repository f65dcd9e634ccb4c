"""A compiled model echoed in a REPL (or printed) is one line that names what it is, not its weights."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions


def _big_model() -> object:
    w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                          "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256])],
                          [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_compiled_model_repr_is_a_summary() -> None:
    cm = compile_model(_big_model(), CompileOptions(precision_mode="force_fp16", soc_version="Ascend310P3"))
    text = repr(cm)
    # the dataclass repr printed the 256x256 weights (and the manifest's memory plan): ~100 KB
    assert len(text) < 400 and "\n" not in text and "array(" not in text, text
    assert text.startswith("CompiledModel(Graph('mm', ")
    assert "inputs: x FLOAT[N,256]" in text and "outputs: y FLOAT[N,256]" in text
    assert "soc_version='Ascend310P3'" in text and "precision='force_fp16'" in text
    assert f"{256 * 256 * 2 / 1024:.1f} KiB" in text  # the float16 weights
    counts = ", ".join(f"{k} {v}" for k, v in sorted(cm.graph.op_counts().items()))
    assert f"{len(cm.graph.nodes)} nodes ({counts})" in text
