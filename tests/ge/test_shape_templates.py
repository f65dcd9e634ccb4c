"""The pass pipeline runs once per symbolic signature (specialize.specialize, SpecializeMemo): a new
input shape gets shape inference, folding and the size-dependent choices on a copy of its
signature's template. Counters prove it; values are checked against ONNX Runtime; no timings."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from onnx import TensorProto, helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(11)
MODELS = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models")))


def _model(nodes: list, inputs: list, outputs: list) -> object:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _branch(name: str, op: str) -> object:
    """A body reading the outer ``x``: ``op(x)``."""
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_y"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])


def _load(model: object) -> LoadedModel:
    cfg = PlanCacheConfig(policy=PlanPolicy.SPECIALIZE, build=PlanBuild.INLINE)
    return LoadedModel.from_compiled(compile_model(model), plan_cache=cfg)


def test_one_template_per_control_value() -> None:
    """An If on a scalar control input: one signature (template, pipeline run) per value of the
    flag, whatever the shapes of ``x``."""
    m = _model([helper.make_node("If", ["flag"], ["y"], then_branch=_branch("t", "Relu"), else_branch=_branch("e", "Neg"))],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
                helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])])
    lm = _load(m)
    for b in (1, 3, 5, 2):
        for flag in (True, False):
            x, f = RNG.standard_normal((b, 4)).astype(np.float32), np.array(flag)
            np.testing.assert_allclose(lm.run([x, f])[0], run_ort(m, {"x": x, "flag": f})[0], rtol=1e-6)
    memo = lm.executor._memo
    assert (len(memo.templates), memo.pipeline_runs, memo.specialized) == (2, 2, 8)


def test_if_on_a_shape_is_optimised_per_shape() -> None:
    """An If whose condition is a size stays in the template (None: no flat template); each
    shape that inlines it gets the pipeline for its flat graph, with the right branch."""
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    three = helper.make_tensor("three", TensorProto.INT64, [], [3])
    m = _model([helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
                helper.make_node("Greater", ["b", "three"], ["c"]),
                helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Relu"), else_branch=_branch("e", "Neg"))],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])])
    m.graph.initializer.extend([zero, three])
    lm = _load(m)
    for b in (1, 5, 2, 7):
        x = RNG.standard_normal((b, 4)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-6)
    memo = lm.executor._memo
    assert list(memo.templates.values()) == [None] and memo.pipeline_runs == 4 and memo.specialized == 4


REC = MODELS / "rapidocr_ppocrv4_rec.onnx"


@pytest.mark.skipif(not REC.exists(), reason="PP-OCRv4 rec not downloaded (scripts/fetch_models.py --group ocr)")
def test_ppocr_rec_many_widths_one_pipeline_bounded_bytes() -> None:
    """PP-OCRv4 rec over 12 widths under an 8 MiB plan budget: one pipeline run, every width's
    values equal ORT's, each plan still absorbs the 4 residual Adds into its FusedMatMuls (a
    size-dependent choice), and the plans held stay within the budget (evicted beyond it)."""
    import onnxruntime as ort

    cfg = PlanCacheConfig(build=PlanBuild.INLINE, max_bytes=8 << 20)
    lm = LoadedModel.from_file(REC, plan_cache=cfg)
    sess = ort.InferenceSession(str(REC), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    widths = [64, 96, 160, 200, 256, 320, 384, 448, 512, 576, 640, 100]
    for w in widths:
        x = RNG.random((1, 3, 48, w), dtype=np.float32)
        np.testing.assert_allclose(lm.run([x])[0], sess.run(None, {name: x})[0], rtol=1e-3, atol=1e-4)
        plan = lm.executor._cache.peek(lm.executor._signature([x])[0]).plan
        fused = [n for n in plan.graph.nodes if n.op_type == "FusedMatMul" and len(n.inputs) > 3 and n.inputs[3]]
        assert len(fused) == 4
    st = lm.plan_cache_stats()
    assert (st.pipelines, st.built, lm.executor._memo.specialized) == (1, len(widths), len(widths))
    assert st.bytes_held <= 8 << 20 or st.plans == 1
    assert st.evictions == len(widths) - st.plans
