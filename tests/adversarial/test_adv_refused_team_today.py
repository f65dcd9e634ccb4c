"""A refused call on a plan bound for a smaller OpenMP team (other processes keep the CPUs busy:
``ge/run/contention.py``) leaves the counters as they were, as on the full team: the team path
counted a hit and a team run before the run refused the inputs (an index out of range)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.errors import KernelError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import openmp


class _Busy:
    """A governor that always reports one CPU left by other processes (no run-delay probes)."""

    def contended(self) -> float:
        return 1.0

    def probe_begin(self, full: bool) -> None:
        return None

    def probe_end(self, token: object) -> None:
        pass

    def quiet(self) -> bool:
        return False


def _model() -> onnx.ModelProto:
    """Conv (loads the OpenMP runtime) then a Gather whose index values only the kernel checks."""
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["c", "i"], ["y"], axis=1, name="n0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, ["K"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("policy", [PlanPolicy.SPECIALIZE, PlanPolicy.GENERIC])
def test_a_refused_call_on_a_reduced_team_counts_nothing(policy: PlanPolicy) -> None:
    lm = LoadedModel.from_compiled(compile_model(_model()),
                                   plan_cache=PlanCacheConfig(policy=policy, build=PlanBuild.INLINE))
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    good, bad = np.array([0, 7], np.int64), np.array([0, 9], np.int64)
    lm.run([x, good])
    if (openmp.max_threads() or 1) < 2:
        pytest.skip("no OpenMP runtime with more than one thread: no smaller team")
    lm.executor._governor = _Busy()  # type: ignore[assignment]
    for _ in range(3):  # the team's plan is built by the builder thread, then runs
        lm.run([x, good])
        lm.executor.wait_builds(30)
    before = lm.plan_cache_stats()
    assert before.team_runs >= 1
    with pytest.raises(KernelError, match="n0"):
        lm.run([x, bad])
    assert lm.plan_cache_stats() == before
