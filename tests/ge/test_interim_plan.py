"""The interim plan: the shape-generic plan that serves a vision model's new signatures while
their own plans build in the background computes small overlapping ConvTransposes with numpy (no
per-shape oneDNN deconvolution primitive, which costs more to create than the call), larger ones
and kernel-equals-stride ones (oneDNN's patch GEMM, no per-size primitive) as before. Values against ONNX Runtime on the first call, the calls before the build and after it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels.algorithm import INTERIM_CONV_TRANSPOSE, NUMPY_COL2IM
from pycann.kernels.providers import ConvSpec
from pycann.ops.nn.conv import conv_transpose_geometry
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(7)
C = 16


def _model() -> object:
    """x [1, 3, H, W] -> Conv 3x3 (+Relu) -> ConvTranspose 2x2 stride 2 (+Sigmoid): a det head."""
    w1 = (RNG.standard_normal((C, 3, 3, 3)) * 0.2).astype(np.float32)
    w2 = (RNG.standard_normal((C, C, 2, 2)) * 0.2).astype(np.float32)
    b2 = RNG.standard_normal(C).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "w2", "b2"], ["d"], strides=[2, 2]),
             helper.make_node("Sigmoid", ["d"], ["y"])]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(b2, "b2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _spec(h: int, w: int, k: int = 3) -> ConvSpec:
    """A 3x3 stride-2 (overlapping) ConvTranspose, or with ``k=2`` the det head's 2x2 stride 2."""
    win, outs = conv_transpose_geometry((h, w), (k, k), {"strides": [2, 2], "pads": [k - 2] * 4,
                                                         "dilations": [1, 1], "kernel_shape": [k, k]})
    return ConvSpec("ConvTranspose", (1, C, h, w), (C, C, k, k), 1, win, tuple(outs), "float32")


def test_interim_choice_is_numpy_below_the_flops_bound_and_the_static_choice_above() -> None:
    small, large = _spec(8, 10), _spec(160, 160)
    bound = providers.INTERIM_NUMPY_FLOPS["ConvTranspose"]
    assert small.flops < bound <= large.flops and not small.patches
    assert providers.resolve(INTERIM_CONV_TRANSPOSE, lambda: small).algo == NUMPY_COL2IM
    assert providers.resolve(INTERIM_CONV_TRANSPOSE, lambda: large) is providers.resolve(None, lambda: large)
    # kernel == stride: the patch GEMM needs no per-size primitive, so it keeps the static choice
    patch = _spec(8, 10, k=2)
    assert patch.patches and patch.flops < bound
    assert providers.resolve(INTERIM_CONV_TRANSPOSE, lambda: patch) is providers.resolve(None, lambda: patch)


@pytest.mark.parametrize("build", [PlanBuild.BACKGROUND, PlanBuild.INLINE])
def test_interim_plan_values_before_and_after_the_build(build: PlanBuild) -> None:
    m = _model()
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(build=build))
    ex = lm.executor
    for h, w in ((8, 8), (12, 20), (8, 8), (30, 14), (12, 20)):
        x = RNG.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert ex.wait_builds(timeout=120)
    for h, w in ((8, 8), (30, 14)):  # on their own plans now
        x = RNG.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    deconv = [st for st in ex.generic_plan().steps if "ConvTranspose" in st.node.op_type]
    assert len(deconv) == 1
    # only the plan that stands in for background builds takes the interim choice
    want = INTERIM_CONV_TRANSPOSE if build is PlanBuild.BACKGROUND else None
    assert deconv[0].attrs.get("_algo") == want
