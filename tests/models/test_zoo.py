"""The bench zoo (torchvision models, random weights, both exporters; scripts/model_zoo.py ``ZOO``): each one
compiled with static shapes, run by pycann and compared with ONNX Runtime. Models that were not exported yet
(``python scripts/export_torch_models.py --zoo``, minutes per model) are skipped, never exported here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import pycann
from pycann.acl.session import InferSession
from scripts.model_zoo import ZOO

pytestmark = pytest.mark.models


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    s = ZOO[name]
    if not s.path.is_file():
        pytest.skip(f"{name} is not exported (python scripts/export_torch_models.py {name})")
    feeds = s.test_inputs(0)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    cm = pycann.compile_model(str(s.path), pycann.CompileOptions(input_shape=shapes))
    cm.save(tmp_path / f"{name}.om")
    got = InferSession(0, str(tmp_path / f"{name}.om")).infer(feeds)
    want = ort.InferenceSession(str(s.path), providers=["CPUExecutionProvider"]).run(None, feeds)
    s.assert_close([np.asarray(g) for g in got], want)
