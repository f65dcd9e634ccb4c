"""Real models with NaN, inf and huge inputs against ONNX Runtime (issue 14 item 2): the same NaN and
inf positions as ORT, the same finite values elsewhere at the model's tolerance.

Before the fixes, one NaN pixel into PP-OCR det or cls gave finite, confident outputs (oneDNN's
fused ReLU maps NaN to 0; ORT's output is NaN), and Silero VAD gave NaN where ORT is finite
(ORT's LSTM clips gate pre-activations, which maps NaN to a finite value).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from pycann.acl.session import InferSession
from tests.models.conftest import spec

pytestmark = pytest.mark.models

MODELS = ["rapidocr_ppocrv4_det", "rapidocr_ppocr_mobile_v2_cls", "silero_vad"]
KINDS = ["nan_one", "inf_one", "ninf_one", "scaled_1e30", "one_1e30", "all_nan"]


def _poison(x: np.ndarray, kind: str) -> np.ndarray:
    x = x.copy()
    flat = x.reshape(-1)
    i = flat.size // 3
    if kind == "nan_one":
        flat[i] = np.nan
    elif kind == "inf_one":
        flat[i] = np.inf
    elif kind == "ninf_one":
        flat[i] = -np.inf
    elif kind == "scaled_1e30":
        x *= np.float32(1e30)
    elif kind == "one_1e30":
        flat[i] = 1e30
    elif kind == "all_nan":
        x[...] = np.nan
    return x


@pytest.fixture(scope="module")
def sessions() -> dict[str, tuple[InferSession, ort.InferenceSession]]:
    out = {}
    for name in MODELS:
        path = Path(spec(name).ensure())
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        out[name] = (InferSession(0, str(path)), ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", MODELS)
def test_nonfinite_inputs_match_onnxruntime(name: str, kind: str, sessions: dict) -> None:
    s = spec(name)
    mine, theirs = sessions[name]
    feeds = s.test_inputs(0)
    first = next(iter(feeds))  # the image / the audio window
    feeds[first] = _poison(feeds[first], kind)
    got = mine.infer(dict(feeds))
    want = theirs.run(None, feeds)
    for out_name, g, w in zip(s.outputs, got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, out_name
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{name}/{out_name}: NaN positions")
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=f"{name}/{out_name}: inf positions")
        fin = np.isfinite(w)
        np.testing.assert_allclose(g[fin], w[fin], rtol=s.rtol, atol=s.atol, err_msg=f"{name}/{out_name}")
    # and the same session still answers ordinary inputs as ORT does afterwards
    clean = s.test_inputs(1)
    s.assert_close(mine.infer(dict(clean)), theirs.run(None, clean))
