"""Fixtures for the framework importers' tests.

TensorFlow is not importable next to pycann (the shared venv's protobuf/numpy pins): the frozen
graphs and TensorFlow's outputs are made by scripts/make_tf_models.py under a separate Python
(``$PYCANN_TF_PYTHON``, default ``~/.cache/pycann/tf-venv/bin/python``; scripts/make_tf_venv.sh makes it)
and cached in ``$PYCANN_CACHE_DIR/tf_models`` (default ``~/.cache/pycann``). Without that Python
the TensorFlow-model tests skip; the TF-free ones (GraphDefs written by hand) always run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# the models scripts/make_tf_models.py makes (names of its MODELS table)
TF_MODELS = ["tf_mobilenet_v2", "tf_resnet50", "tf_densenet121", "tf_efficientnet_b0", "tf_convnet_ops",
             "tf_transformer_block", "tf_misc_ops", "tf2_while_lowered",
             "tf2_functional", "tf1_while", "tf1_nested_while", "tf1_cond"]


def _tf_python() -> str | None:
    exe = os.environ.get("PYCANN_TF_PYTHON", os.path.expanduser("~/.cache/pycann/tf-venv/bin/python"))
    return exe if Path(exe).is_file() else None


def tf_cache_dir() -> Path:
    return Path(os.environ.get("PYCANN_CACHE_DIR", Path.home() / ".cache" / "pycann")) / "tf_models"


@pytest.fixture(scope="session")
def tf_models() -> Path:
    """The folder of generated TensorFlow models (made once; skips when TensorFlow is absent)."""
    out = tf_cache_dir()
    if all((out / n / "meta.json").is_file() for n in TF_MODELS):
        return out
    exe = _tf_python()
    if exe is None:
        pytest.skip("no TensorFlow Python: set PYCANN_TF_PYTHON or run scripts/make_tf_venv.sh")
    r = subprocess.run([exe, str(ROOT / "scripts" / "make_tf_models.py"), str(out), *TF_MODELS],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"scripts/make_tf_models.py failed:\n{r.stderr[-3000:]}")
    return out


def load_case(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """meta.json and io.npz of one generated model."""
    meta = json.loads((folder / "meta.json").read_text())
    with np.load(folder / "io.npz") as z:
        return meta, {k: z[k] for k in z.files}


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (the issue's "about 1e-4 relative")."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))

