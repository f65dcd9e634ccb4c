"""Shared fixtures (opt-in: a module asks for them with ``pytest.mark.usefixtures``), and two
autouse fixtures: the tests never read or write the user's AOE knowledge bank, and plans keep their
full OpenMP team whatever else runs on the machine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pycann.kernels import providers


@pytest.fixture(autouse=True, scope="session")
def _own_tune_bank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``TUNE_BANK_PATH`` at an empty folder of the session: a bank the user's ``aoe`` runs filled
    (~/.cache/pycann/aoe) must not change the kernels the tests compile (docs/aoe.md)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TUNE_BANK_PATH", str(tmp_path_factory.mktemp("tune_bank")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def _full_teams() -> Iterator[None]:
    """``PYCANN_ADAPTIVE_THREADS=off``: a busy CI machine (or the suite's own subprocesses) would
    otherwise make models build extra plans for a smaller team, and the tests that count plans would
    read another number. tests/ge/test_contention.py turns it on with a scripted governor. A test's
    own ``PlanCacheConfig(adaptive_threads=True, ...)`` overrides the env var, so the process governor
    is one without data too: it always answers the full team."""
    from pycann.ge.run import contention

    mp = pytest.MonkeyPatch()
    mp.setenv("PYCANN_ADAPTIVE_THREADS", "off")
    mp.setattr(contention, "_governor", contention.ThreadGovernor(lambda: None, 1))
    yield
    mp.undo()


@pytest.fixture
def default_providers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every kernel provider allowed (``PYCANN_PROVIDERS`` unset) and provider choices recomputed
    for the test, then forgotten again (a test may narrow the providers itself)."""
    monkeypatch.delenv("PYCANN_PROVIDERS", raising=False)
    providers.reset()
    yield
    providers.reset()


@pytest.fixture
def in_place_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts calls of the oneDNN bound conv's ``_Plan.in_place`` (asked for its accumulate-into-dst form)."""
    from pycann.kernels.providers import onednn_conv_plan

    calls = {"n": 0}
    original = onednn_conv_plan._Plan.in_place

    def counted(self: Any) -> Any:
        calls["n"] += 1
        return original(self)

    monkeypatch.setattr(onednn_conv_plan._Plan, "in_place", counted)
    return calls


@pytest.fixture(autouse=True)
def _fresh_kernel_store_budget() -> Iterator[None]:
    """Each test starts with the whole budget of weights that may keep brgemm kernels in oneDNN's store
    (``onednn_kernel_store.MAX_FIRSTS``): the suite loads thousands of conv weights in one process, and a
    test late in it would otherwise see jit kernels only (the tests that check brgemm choices skipped).
    Only when the module is loaded already (no oneDNN import for tests that never use it)."""
    import sys

    store = sys.modules.get("pycann.kernels.providers.onednn_kernel_store")
    if store is not None:
        store._granted[0] = 0
    yield
