"""pycann.config: the OpenMP wait knob (PYCANN_OMP_WAIT) and its precedence."""

from __future__ import annotations

import pytest

from pycann.config import ConfigError, apply_openmp_wait, openmp_wait_env


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "PYCANN_OMP_WAIT"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_default_is_passive(clean: pytest.MonkeyPatch) -> None:
    assert openmp_wait_env() == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize("value, want", [("spin", {}), ("20000", {"GOMP_SPINCOUNT": "20000"}),
                                         (" Passive ", {"OMP_WAIT_POLICY": "PASSIVE"})])
def test_values(clean: pytest.MonkeyPatch, value: str, want: dict[str, str]) -> None:
    clean.setenv("PYCANN_OMP_WAIT", value)
    assert openmp_wait_env() == want


@pytest.mark.parametrize("name", ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT"])
def test_user_openmp_settings_win(clean: pytest.MonkeyPatch, name: str) -> None:
    clean.setenv(name, "ACTIVE" if name == "OMP_WAIT_POLICY" else "100")
    clean.setenv("PYCANN_OMP_WAIT", "passive")
    assert openmp_wait_env() == {}
    apply_openmp_wait()
    import os

    assert os.environ.get("OMP_WAIT_POLICY", "") in ("", "ACTIVE")


def test_bad_value_names_the_variable(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("PYCANN_OMP_WAIT", "sometimes")
    with pytest.raises(ConfigError, match="PYCANN_OMP_WAIT='sometimes'"):
        openmp_wait_env()


def test_apply_sets_the_environment(clean: pytest.MonkeyPatch) -> None:
    apply_openmp_wait()
    import os

    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
