"""The CPU runtime's device count: PYCANN_DEVICE_COUNT, else a launcher's LOCAL_WORLD_SIZE (so
`torchrun --nproc_per_node=4` ranks can set_device(LOCAL_RANK)), else 1; bad values are errors."""

from __future__ import annotations

import pytest

from pycann import config
from pycann.errors import PycannError


@pytest.mark.parametrize("env,want", [({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 4),
                                      ({"PYCANN_DEVICE_COUNT": "2", "LOCAL_WORLD_SIZE": "4"}, 2)])
def test_device_count_sources(monkeypatch: pytest.MonkeyPatch, env: dict, want: int) -> None:
    monkeypatch.delenv("PYCANN_DEVICE_COUNT", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert config.device_count() == want
    from pycann.runtime.device import Runtime

    assert len(Runtime().devices) == want


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_bad_device_count_is_named(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("PYCANN_DEVICE_COUNT", bad)
    with pytest.raises(PycannError, match="PYCANN_DEVICE_COUNT"):
        config.device_count()
