"""A refused call (inputs a node cannot take: a size, an index out of range) leaves the plan cache as
it was: no plan built or cached, no counter moved (hits, misses, built, generic runs, plans, bytes);
under ``PlanPolicy.GENERIC`` nothing is ever specialised for it (``Specializer.specialized`` and the
pass-pipeline runs stay 0). Later calls run as before. Values against ONNX Runtime; no timings."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.errors import KernelError, ShapeError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.adversarial.generic_shape_cases import CASES, f32
from tests.ops.oracle import run_ort

# a size the graph cannot take (shape inference names it) and an index out of range (only the
# kernels see it: specialisation succeeds, the plan's run refuses)
REFUSALS = {"maxpool_kernel_larger": ShapeError, "gather_index_out_of_range": KernelError,
            "matmul_k_mismatch_const": ShapeError}


def _load(name: str, policy: PlanPolicy) -> LoadedModel:
    case = CASES[name]
    return LoadedModel.from_compiled(compile_model(case.model()),
                                     plan_cache=PlanCacheConfig(policy=policy, build=PlanBuild.INLINE))


def _good_then_bad(lm: LoadedModel, name: str, pipelines: bool = True) -> None:
    """One good call (checked against ORT), then the refused one: stats and cache unchanged by it
    (``pipelines`` False: but for the pass-pipeline runs, whose template for the model's symbolic
    signature a specialisation may have made and kept for later shapes)."""
    case = CASES[name]
    good = case.arrays(case.good)
    for got, want in zip(lm.run([good[n] for n in case.feeds]), run_ort(case.model(), good)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    before, plans = lm.plan_cache_stats(), list(lm.executor._cache._entries)
    bad = case.arrays(case.bad)
    with pytest.raises(REFUSALS[name], match="node n0"):
        lm.run([bad[n] for n in case.feeds])
    after = lm.plan_cache_stats()
    assert (after if pipelines else replace(after, pipelines=before.pipelines)) == before
    assert list(lm.executor._cache._entries) == plans


@pytest.mark.parametrize("name", list(REFUSALS))
def test_generic_policy_never_specialises_a_refused_call(name: str) -> None:
    """Under GENERIC the refused call builds no plan and runs no specialisation: its signature stays
    off the cache, the counters are those of the good call alone (one miss, one generic run)."""
    lm = _load(name, PlanPolicy.GENERIC)
    _good_then_bad(lm, name)
    st = lm.plan_cache_stats()
    assert (st.plans, st.built, st.misses, st.generic_runs, st.pipelines) == (0, 0, 1, 1, 0)
    assert lm.specializer.specialized == 0 and lm.specializer.compiled_reused == 0
    assert not lm.executor._generic_failed


@pytest.mark.parametrize("policy", [PlanPolicy.AUTO, PlanPolicy.SPECIALIZE])
@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_refused_call_caches_no_plan(name: str, policy: PlanPolicy) -> None:
    """Other policies may specialise the call to find out, but a plan whose first run is refused is
    closed, not cached, and the call counts nothing."""
    lm = _load(name, policy)
    _good_then_bad(lm, name, pipelines=False)
    assert not lm.executor._generic_failed


def test_a_refused_signature_does_not_count_toward_auto() -> None:
    """AUTO without convolutions specialises a signature on its second call: a refused first call
    of it is not that first call (the next good call of another shape still runs generic, and the
    refused shape coming back is refused again without a plan)."""
    name = "maxpool_kernel_larger"
    lm = _load(name, PlanPolicy.AUTO)
    _good_then_bad(lm, name)
    _good_then_bad(lm, name)
    x = f32(1, 2, 8, 9)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(CASES[name].model(), {"x": x})[0])
    st = lm.plan_cache_stats()
    # the good shape came twice: its plan was built on the second call; 8x9 ran generic
    assert (st.built, st.plans, st.misses, st.hits, st.generic_runs) == (1, 1, 3, 0, 2)


def test_generic_policy_refusal_then_new_shapes_stay_generic() -> None:
    """After a refused call under GENERIC, new shapes run the generic plan with ORT's values and
    no plan is ever built."""
    name = "maxpool_kernel_larger"
    lm = _load(name, PlanPolicy.GENERIC)
    _good_then_bad(lm, name)
    for h in (8, 9, 8):
        x = f32(1, 2, h, 9)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(CASES[name].model(), {"x": x})[0])
    st = lm.plan_cache_stats()
    assert (st.built, st.plans, st.generic_runs, st.pipelines) == (0, 0, 4, 0)
    assert lm.specializer.specialized == 0


def test_a_call_refused_by_its_feeds_counts_nothing() -> None:
    """docs/dynamic-shapes.md "Counters": a call that raised counts nothing, a feed of the wrong dtype or
    rank (refused before any plan is looked up) included; the good calls count as before."""
    name = "maxpool_kernel_larger"
    lm = _load(name, PlanPolicy.GENERIC)
    case = CASES[name]
    good = case.arrays(case.good)
    feeds = [good[n] for n in case.feeds]
    lm.run(feeds)
    before = lm.plan_cache_stats()
    for bad in ([f.astype(np.float64) for f in feeds], [f[None] for f in feeds]):
        with pytest.raises(Exception, match="input"):
            lm.run(bad)
        assert lm.plan_cache_stats() == before
    lm.run(feeds)
    st = lm.plan_cache_stats()
    assert (st.misses, st.generic_runs) == (before.misses + 1, before.generic_runs + 1)
