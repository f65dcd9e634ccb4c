"""Named-dims fuzzer (tests/fuzz/named_dims_models.py). Property: on the shape-generic plan
(``PlanPolicy.GENERIC``: named dims read from one input, equal nodes computed once), every call
that ONNX Runtime (optimisations off) runs gives ORT's output shapes and values, and a call ORT
runs is never refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import strategies as st

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.fuzz.budget import fuzz
from tests.fuzz.named_dims_models import named_dims_feeds, named_dims_model

ort = pytest.importorskip("onnxruntime")
pytestmark = [pytest.mark.fuzz, pytest.mark.filterwarnings("ignore")]


def _session(model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    # (ORT's graph optimiser rewrites some Reshapes it should refuse: no oracle for those)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def check_seed(seed: int) -> None:
    try:
        model, inputs = named_dims_model(seed)
        sess = _session(model)
    except Exception:  # noqa: BLE001 - a model ONNX or ORT refuses is no verdict on pycann
        return
    calls = []
    for k in range(4):
        feeds = named_dims_feeds(seed * 4 + k, inputs)
        try:
            want = sess.run(None, {x: f for (x, _), f in zip(inputs, feeds)})
        except Exception:  # noqa: BLE001 - sizes the graph cannot take
            continue
        if max(np.size(w) for w in want) <= 100_000:
            calls.append((feeds, want))
    if not calls:
        return
    lm = LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    for feeds, want in calls:
        got = lm.run(feeds)
        for i, (g, w) in enumerate(zip(got, want)):
            assert np.shape(g) == np.shape(w), (seed, [f.shape for f in feeds], i, np.shape(g), np.shape(w))
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed} output {i}")


def test_named_dims_fuzz() -> None:
    fuzz(st.integers(0, 2**31 - 1), check_seed, examples=40)


@pytest.mark.parametrize("seed", [
    4976,  # Expand of a 0-d value to its own (empty) shape gave a 1-element vector (ops/tensor_gen.py)
    869,  # a Reshape target read from a '?' dim: the generic plan's build raised KeyError: '?'
])
def test_named_dims_cases(seed: int) -> None:
    """Seeds that failed once, kept as regression cases."""
    check_seed(seed)
