"""Writes tests/data/om/algo_strings_v1.om with the pycann that imports (run it with a checkout from
before typed kernel algorithms, commit 5369ec7, on a machine with the onednn provider):

    PYTHONPATH=<old checkout> python tests/data/om/make_algo_strings_om.py

A Conv -> Relu -> 1x1 Conv -> GlobalAveragePool -> MatMul model; its .om nodes carry ``_algo``
strings ("onednn:conv_nhwc", ...) and ``_layout = "NHWC"``. tests/ge/test_om_algorithms.py rebuilds
the same model with ``old_model`` to check the file's values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import pycann


def old_model() -> tuple[onnx.ModelProto, np.ndarray]:
    """The fixture's ONNX model and an input for it (seed 0; the input is drawn after the weights).
    tests/ge/test_om_algorithms.py rebuilds the model with this function to check the file's values."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 32, 1, 1)) * 0.1).astype(np.float32)
    m = (rng.standard_normal((32, 10)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], name="conv2"),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "m"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "old_om", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(m, "m")])
    x = rng.standard_normal((1, 16, 24, 24)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x


def main() -> None:
    model, _ = old_model()
    onnx.checker.check_model(model)
    cm = pycann.compile_model(model)
    print({n.name: n.attrs.get("_algo") for n in cm.graph.nodes})
    cm.save(Path(__file__).with_name("algo_strings_v1.om"))


if __name__ == "__main__":
    main()
