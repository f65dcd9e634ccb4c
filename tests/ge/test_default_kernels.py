"""The fast kernels are the default install (issue 23 item 6), and a missing provider is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model

ROOT = Path(__file__).resolve().parents[2]


def test_onednn_is_a_default_dependency_on_linux_x86_64() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    onednn = [d for d in deps if d.startswith("onednn-cpu-gomp")]
    assert onednn and "platform_machine == 'x86_64'" in onednn[0] and "sys_platform == 'linux'" in onednn[0]


def _conv_model():
    w = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "W")
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_missing_onednn_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.kernels import providers

    real = providers.available
    monkeypatch.setattr(providers, "available", lambda name: False if name == "onednn" else real(name))
    lines: list[str] = []
    compile_model(_conv_model(), log=lines.append)
    sel = [ln for ln in lines if ln.startswith("[KernelSelection]")]
    assert sel and "oneDNN kernels missing" in sel[0] and "pip install onednn-cpu-gomp" in sel[0], sel


def test_no_note_when_onednn_is_there() -> None:
    from pycann.kernels import providers

    if not providers.available("onednn"):
        pytest.skip("oneDNN wheel not installed here")
    lines: list[str] = []
    compile_model(_conv_model(), log=lines.append)
    assert not any("oneDNN kernels missing" in ln for ln in lines)


def test_onednn_left_out_by_the_user_is_not_called_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """PYCANN_PROVIDERS=numpy: the note says the user's setting left oneDNN out, not to install it."""
    from pycann.kernels import providers

    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    try:
        lines: list[str] = []
        compile_model(_conv_model(), log=lines.append)
    finally:
        monkeypatch.delenv("PYCANN_PROVIDERS")
        providers.reset()
    sel = [ln for ln in lines if ln.startswith("[KernelSelection]")]
    assert sel and "PYCANN_PROVIDERS leaves oneDNN out" in sel[0] and "pip install" not in sel[0], sel


@pytest.mark.parametrize("second,reported", [("Concat", False), ("Relu", True)])
def test_conv_read_by_several_nodes_is_a_missed_fusion_only_beside_an_activation(second: str, reported: bool) -> None:
    """DenseNet's convs read only by Concats have no activation to fuse: no "not applied" line; a conv
    whose output also feeds a Relu keeps it apart, and says why."""
    w = numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "W")
    readers = [helper.make_node("Concat", ["c", "x"], ["a"], axis=1),
               helper.make_node(second, ["c", "x"] if second == "Concat" else ["c"], ["b"], **(
                   {"axis": 1} if second == "Concat" else {}))]
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"], name="conv"), *readers], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("a", "b")], [w])
    lines: list[str] = []
    compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), log=lines.append)
    missed = [ln for ln in lines if "ConvActivationFusion" in ln and "conv:" in ln]
    assert bool(missed) is reported, lines
