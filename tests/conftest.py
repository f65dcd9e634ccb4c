"""Shared fixtures (opt-in: a module asks for them with ``pytest.mark.usefixtures``)."""

from __future__ import annotations

from collections.abc import Iterator

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
