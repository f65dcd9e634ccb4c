"""Every real model of the set: compiled with atc into an .om, loaded with InferSession, and
compared with ONNX Runtime on fixed inputs. Tolerances per model live in scripts/model_zoo.py
(fp32 models: rtol 1e-3 / atol 1e-5 unless stated; det heads atol 1e-6 on sigmoid outputs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from pycann.acl.session import InferSession
from pycann.tools.atc import main as atc_main
from tests.models.conftest import MODELS, spec

pytestmark = pytest.mark.models


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _atc(src: Path, out: Path) -> Path:
    rc = atc_main([f"--model={src}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3"])
    assert rc == 0, "atc failed"
    return out.with_suffix(".om")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name: str, om_dir: Path) -> None:
    s = spec(name)
    src = s.ensure()
    om = _atc(src, om_dir / name)
    sess = InferSession(0, str(om))
    feeds = s.test_inputs(0)
    got = sess.infer(feeds)
    want = _ort(src, feeds)
    assert [o.name for o in sess.get_outputs()] == [o.name for o in ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_outputs()]
    s.assert_close(got, want)
    # a second, different input through the cached plan
    feeds2 = s.test_inputs(1)
    s.assert_close(sess.infer(feeds2), _ort(src, feeds2))


def test_silero_vad_streams_state_through_20_windows(om_dir: Path) -> None:
    s = spec("silero_vad")
    src = s.ensure()
    sess = InferSession(0, str(_atc(src, om_dir / "silero_stream")))
    osess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    t = np.arange(576 * 20) / 16000.0
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * (t > 0.3) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    state_p = state_o = np.zeros((2, 1, 128), np.float32)
    sr = np.array(16000, dtype=np.int64)
    probs_p, probs_o = [], []
    for i in range(20):
        window = audio[i * 576:(i + 1) * 576][None, :]
        out_p, state_p = sess.infer({"input": window, "state": state_p, "sr": sr})
        out_o, state_o = osess.run(None, {"input": window, "state": state_o, "sr": sr})
        probs_p.append(float(out_p.reshape(-1)[0]))
        probs_o.append(float(out_o.reshape(-1)[0]))
        np.testing.assert_allclose(state_p, state_o, rtol=1e-4, atol=1e-5, err_msg=f"state after window {i}")
    np.testing.assert_allclose(probs_p, probs_o, rtol=1e-4, atol=1e-5)
    assert len(set(round(p, 6) for p in probs_p)) > 1, "state must actually evolve"


def test_dynamic_hw_replans_per_shape(om_dir: Path) -> None:
    s = spec("ppocrv5_det")
    src = s.ensure()
    sess = InferSession(0, str(_atc(src, om_dir / "det_dyn")))
    rng = np.random.default_rng(3)
    for h, w in [(64, 96), (96, 64), (64, 96)]:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        got = sess.infer([x])[0]
        assert got.shape == (1, 1, h, w)
        s.assert_close([got], _ort(src, {"x": x}))
    sess.model.executor.wait_builds()  # a new shape's first call runs the generic plan; its own plan comes after
    assert len(sess.model.executor._cache) == 2  # one plan per distinct shape


def _silero_fixed(om_dir: Path, name: str, window: int) -> tuple[Path, InferSession]:
    """silero_vad.onnx compiled by atc with --input_shape fixed to a ``window``-sample input, and its session."""
    src = spec("silero_vad").ensure()
    out = om_dir / name
    rc = atc_main([f"--model={src}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   f"--input_shape=input:1,{window};state:2,1,128;sr:"])
    assert rc == 0
    return src, InferSession(0, str(out.with_suffix(".om")))

def test_silero_vad_compiles_with_fixed_input_shape(om_dir: Path) -> None:
    """With --input_shape fixed to a 16 kHz window, the 8 kHz If branch cannot type-check; it is
    never taken, so the compile must succeed (branch shapes left unknown) and results match ORT."""
    s = spec("silero_vad")
    src, sess = _silero_fixed(om_dir, "silero_fixed", 576)
    feeds = s.test_inputs(0)
    s.assert_close(sess.infer(feeds), _ort(src, feeds))


def test_silero_vad_if_outputs_static_with_fixed_input_shape(om_dir: Path) -> None:
    """A 256-sample window fits both sample rates' branches: with --input_shape fixed, the If's
    outputs (and the model's) are static, as ONNX Runtime's shapes, where they used to be -1: the
    branches' inner Ifs test their state's batch (Shape of an outer value), which now folds."""
    s = spec("silero_vad")
    src, sess = _silero_fixed(om_dir, "silero_static_if", 256)
    (node,) = [n for n in sess.model.graph.nodes if n.op_type == "If"]
    assert [sess.model.graph.descs[o].shape for o in node.outputs] == [(1, 1), (2, 1, 128)]
    assert [o.shape for o in sess.get_outputs()] == [[1, 1], [2, 1, 128]]
    rng = np.random.default_rng(5)
    for sr in (8000, 16000):
        feeds = {"input": rng.standard_normal((1, 256)).astype(np.float32),
                 "state": rng.standard_normal((2, 1, 128)).astype(np.float32), "sr": np.array(sr, np.int64)}
        got, want = sess.infer(feeds), _ort(src, feeds)
        assert [g.shape for g in got] == [w.shape for w in want]
        s.assert_close(got, want)
