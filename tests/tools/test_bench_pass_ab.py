"""bench/pass_ab.py refuses a pass name no ``--fusion_switch_file`` knows (a typo compiled two identical
models and printed a ratio of noise) and a pass that changes nothing in the model, before any timed run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.ge.onnx_graphs import const, float_model
from tests.tools.scripts import load_script


def _pass_ab() -> Any:
    return load_script("bench/pass_ab.py", "bench_pass_ab")


def _se_model() -> onnx.ModelProto:
    """x -> GlobalAveragePool -> 1x1 Conv + Relu -> 1x1 Conv + Sigmoid -> Mul(x, gate): one SE block."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["s"]),
             helper.make_node("Conv", ["s", "w1", "b1"], ["z"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["z"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["g"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["g"], ["gs"]),
             helper.make_node("Mul", ["x", "gs"], ["y"])]
    inits = [const("w1", rng.standard_normal((4, 8, 1, 1)).astype(np.float32)), const("b1", np.zeros(4, np.float32)),
             const("w2", rng.standard_normal((8, 4, 1, 1)).astype(np.float32)), const("b2", np.zeros(8, np.float32))]
    return float_model(nodes, [("x", [1, 8, 16, 16])], "y", inits)


class _Spec:
    def __init__(self, path: Path) -> None:
        self.path = path

    def inputs(self, seed: int, batch: int) -> dict[str, np.ndarray]:
        return {"x": np.random.default_rng(seed).standard_normal((batch, 8, 16, 16)).astype(np.float32)}

    def ensure(self) -> Path:
        return self.path


@pytest.fixture
def zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import scripts.model_zoo as model_zoo

    path = tmp_path / "se.onnx"
    onnx.save(_se_model(), path)
    monkeypatch.setattr(model_zoo, "ALL_MODELS", {"tiny_se": _Spec(path)})
    return tmp_path


def test_unknown_pass_is_refused_before_compiling(zoo: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import pycann

    compiled: list[object] = []
    monkeypatch.setattr(pycann, "compile_model", lambda *a, **k: compiled.append(a))
    with pytest.raises(SystemExit) as e:
        _pass_ab().main(["--model", "tiny_se", "--pass", "SqueezeExciteFusoin", "--runs", "10",
                         "--cache-dir", str(zoo / "cache")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and not compiled
    assert "no pass named 'SqueezeExciteFusoin'" in err and "SqueezeExciteFusion" in err


def test_pass_that_changes_nothing_is_refused(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _pass_ab().main(["--model", "tiny_se", "--pass", "AttentionFusion", "--runs", "10",
                          "--cache-dir", str(zoo / "cache")])
    out = capsys.readouterr()
    assert rc == 2 and "AttentionFusion changes nothing in tiny_se" in out.err and "on/off" not in out.out


def test_pass_that_changes_the_model_is_timed(zoo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _pass_ab().main(["--model", "tiny_se", "--pass", "SqueezeExciteFusion", "--runs", "10",
                          "--cache-dir", str(zoo / "cache")])
    assert rc == 0 and "tiny_se@1 SqueezeExciteFusion: on " in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [(["--batch", "0"], "--batch must be at least 1, got 0"),
                                        (["--runs", "0"], "--runs must be at least 10")])
def test_bad_counts_are_refused(zoo: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    with pytest.raises(SystemExit) as e:
        _pass_ab().main(["--model", "tiny_se", "--pass", "SqueezeExciteFusion", "--cache-dir", str(zoo / "cache"), *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err
