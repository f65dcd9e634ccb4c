"""The interim plan's numpy ConvTranspose (col2im, below the FLOPs bound) over the attributes a
det head may carry: groups, output_padding, dilations, asymmetric pads, auto_pad, output_shape,
no bias, 1-D and 3-D, a fused activation with NaN/inf inputs. Values against ONNX Runtime on the
calls before the background build (interim plan) and after it (the shape's own plan)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.algorithm import INTERIM_CONV_TRANSPOSE
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(11)
C = 8


def _model(nd: int, group: int, k: int, attrs: dict[str, Any], bias: bool = True, act: str = "") -> Any:
    """x [1, 3, *spatial] -> Conv 3 (pads 1) + Relu -> ConvTranspose(group, k, attrs) (+ act)."""
    spatial = ["D", "H", "W"][-nd:]
    w1 = (RNG.standard_normal((C, 3) + (3,) * nd) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((C, C // group) + (k,) * nd) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    ins = ["r", "w2"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(C).astype(np.float32), "b2"))
        ins.append("b2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * (2 * nd)), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ConvTranspose", ins, ["d"] if act else ["y"], group=group, **attrs)]
    if act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["d"], ["y"], alpha=0.1))
    elif act:
        nodes.append(helper.make_node(act, ["d"], ["y"]))
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3] + spatial)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


S2 = [(6, 6), (7, 9), (6, 6)]
CASES = {
    "group_output_padding": (2, 2, 3, {"strides": [2, 2], "output_padding": [1, 0]}, True, "", S2),
    "depthwise_pads": (2, C, 4, {"strides": [2, 2], "pads": [1, 0, 0, 2]}, True, "", S2),
    "dilations": (2, 1, 3, {"strides": [2, 2], "dilations": [2, 1]}, False, "", S2),
    "same_lower": (2, 1, 4, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, True, "", S2),
    "output_shape": (2, 1, 3, {"strides": [2, 2], "output_shape": [13, 13]}, True, "", [(6, 6), (6, 6)]),
    "leaky_nan": (2, 1, 2, {"strides": [2, 2]}, True, "LeakyRelu", S2),
    "sigmoid_nan": (2, 2, 3, {"strides": [2, 2]}, True, "Sigmoid", S2),
    "1d_group": (1, 4, 3, {"strides": [3], "output_padding": [2]}, True, "", [(7,), (12,), (7,)]),
    "3d_group": (3, 2, 3, {"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 0, 1]}, True, "", [(3, 4, 5), (4, 4, 4)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_interim_conv_transpose_variants_before_and_after_the_build(case: str) -> None:
    nd, group, k, attrs, bias, act, shapes = CASES[case]
    m = _model(nd, group, k, attrs, bias, act)
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(build=PlanBuild.BACKGROUND))
    ex = lm.executor
    deconv = [st for st in ex.generic_plan().steps if "ConvTranspose" in st.node.op_type]
    assert len(deconv) == 1 and deconv[0].attrs.get("_algo") == INTERIM_CONV_TRANSPOSE

    def check() -> None:
        for s in shapes:
            x = RNG.standard_normal((1, 3) + s).astype(np.float32)
            if act:
                x.reshape(-1)[[5, -3]] = [np.nan, np.inf]
            got, want = lm.run([x])[0], run_ort(m, {"x": x})[0]
            assert got.shape == want.shape and np.array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    check()  # the interim plan (first calls of each shape)
    assert ex.wait_builds(timeout=120)
    check()  # the shapes' own plans
