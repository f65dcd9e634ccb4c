"""Shared fixtures (opt-in: a module asks for them with ``pytest.mark.usefixtures``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pycann.ops import providers


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
    from pycann.ops.providers import onednn

    calls = {"n": 0}
    original = onednn._Plan.in_place

    def counted(self: Any) -> Any:
        calls["n"] += 1
        return original(self)

    monkeypatch.setattr(onednn._Plan, "in_place", counted)
    return calls
