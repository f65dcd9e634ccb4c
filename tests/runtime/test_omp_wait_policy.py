"""PYCANN_OMP_WAIT_POLICY -> OMP_WAIT_POLICY before pycann loads an OpenMP library (pycann/config.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pycann.config import ConfigError, apply_omp_wait_policy, omp_wait_policy


def test_default_is_brief(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.config import BRIEF_SPINCOUNT

    monkeypatch.delenv("PYCANN_OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert omp_wait_policy() == "brief"
    try:
        assert apply_omp_wait_policy() == "BRIEF"
        assert os.environ["GOMP_SPINCOUNT"] == str(BRIEF_SPINCOUNT) and "OMP_WAIT_POLICY" not in os.environ
    finally:
        os.environ.pop("GOMP_SPINCOUNT", None)  # set by pycann, not by monkeypatch: undo it here


def test_passive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "passive")
    assert apply_omp_wait_policy() == "PASSIVE"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_user_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "passive")
    assert apply_omp_wait_policy() == "active"
    assert os.environ["OMP_WAIT_POLICY"] == "active"


def test_active_and_inherit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)  # pycann's default (brief) may have set it at import
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "Active")
    assert apply_omp_wait_policy() == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "inherit")
    assert apply_omp_wait_policy() is None
    assert "OMP_WAIT_POLICY" not in os.environ


def test_brief_sets_a_short_libgomp_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.config import BRIEF_SPINCOUNT

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "brief")
    assert apply_omp_wait_policy() == "BRIEF"
    try:
        assert os.environ["GOMP_SPINCOUNT"] == str(BRIEF_SPINCOUNT) and "OMP_WAIT_POLICY" not in os.environ
    finally:
        os.environ.pop("GOMP_SPINCOUNT", None)  # set by pycann, not by monkeypatch: undo it here


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("PYCANN_OMP_WAIT_POLICY", "spin")
    with pytest.raises(ConfigError, match="PYCANN_OMP_WAIT_POLICY='spin'.*brief, passive, active, inherit"):
        apply_omp_wait_policy()


def test_set_before_libdnnl_loads() -> None:
    """In a fresh process, loading the oneDNN provider leaves the default (brief: GOMP_SPINCOUNT) behind."""
    from pycann.kernels.providers import onednn_capi

    try:
        onednn_capi.library_candidates()
    except Exception as e:  # pragma: no cover
        pytest.skip(str(e))
    code = ("import os; from pycann.kernels.providers import onednn_capi as c\n"
            "try:\n    c.load()\nexcept OSError:\n    print('NOLIB'); raise SystemExit\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")  # fmt: skip
    drop = ("OMP_WAIT_POLICY", "PYCANN_OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    if out.strip() == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    from pycann.config import BRIEF_SPINCOUNT

    assert out.strip() == f"None {BRIEF_SPINCOUNT}"


@pytest.mark.parametrize("knob, value, pattern", [
    ("PYCANN_OMP_WAIT_POLICY", "bad", r"PYCANN_OMP_WAIT_POLICY='bad': expected one of brief"),
    ("PYCANN_NUM_THREADS", "abc", r"PYCANN_NUM_THREADS='abc': expected a positive thread count"),
    ("PYCANN_NUM_THREADS", "0", r"PYCANN_NUM_THREADS='0': expected a positive thread count"),
])
def test_a_bad_knob_fails_the_load_naming_it(knob: str, value: str, pattern: str) -> None:
    """In a fresh process (libdnnl loads there first), compiling and running a conv: a bad value is reported as the knob's ConfigError,
    not taken as "oneDNN unavailable" (every conv then ran on numpy, and atc --log=info advised a pip
    install) nor silently ignored."""
    code = (
        "import numpy as np, onnx\n"
        "from onnx import TensorProto, helper, numpy_helper\n"
        "from pycann.acl.session import InferSession\n"
        "import pycann\n"
        "w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), 'W')\n"
        "g = helper.make_graph([helper.make_node('Conv', ['x', 'W'], ['c']), helper.make_node('Relu', ['c'], ['y'])],\n"
        "    'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 8, 8])],\n"
        "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)], [w])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
        "try:\n"
        "    from pycann.ge.run.model import LoadedModel\n"
        "    lm = LoadedModel.from_compiled(pycann.compile_model(m))\n"
        "    lm.run([np.ones((1, 3, 8, 8), np.float32)])\n"
        "    print('no error')\n"
        "except pycann.config.ConfigError as e:\n"
        "    print('ConfigError', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env[knob] = value
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.startswith("ConfigError") and re.search(pattern, out.stdout), out.stdout + out.stderr


def test_nan_guard_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.config import nan_guard

    for value, on in (("1", True), ("0", False), ("", True)):
        monkeypatch.setenv("PYCANN_NAN_GUARD", value)
        assert nan_guard() is on
    monkeypatch.setenv("PYCANN_NAN_GUARD", "x")
    with pytest.raises(ConfigError, match=r"PYCANN_NAN_GUARD='x': expected 1"):
        nan_guard()


def test_the_docs_state_the_brief_spin_the_code_sets() -> None:
    """README and docs/kernels.md give the brief policy's spin as BRIEF_SPINCOUNT rounds, and
    docs/dynamic-shapes.md marks its older 2000 as a past value (a reader took it for the default)."""
    from pathlib import Path

    from pycann.config import BRIEF_SPINCOUNT

    root = Path(__file__).resolve().parents[2]
    assert f"spin {BRIEF_SPINCOUNT} rounds" in (root / "README.md").read_text()
    assert f"GOMP_SPINCOUNT={BRIEF_SPINCOUNT}" in (root / "docs/kernels.md").read_text()
    dyn = (root / "docs/dynamic-shapes.md").read_text()
    assert f"`GOMP_SPINCOUNT=2000` then, {BRIEF_SPINCOUNT} rounds\n  since" in dyn
