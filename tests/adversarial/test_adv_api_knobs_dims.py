"""Bad knob values and input_shape dims reach the user as ConfigError / OptionError (E10001), not as a
provider silently "unavailable" or a bare ValueError (adversarial review of 713a86b and 187eea5)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pycann.config import ConfigError, num_threads


@pytest.mark.parametrize("knob, value", [("PYCANN_NUM_THREADS", "abc"), ("PYCANN_OMP_WAIT_POLICY", "spin")])
def test_bad_knob_is_not_torch_unavailable(knob: str, value: str) -> None:
    pytest.importorskip("torch")
    code = ("from pycann.config import ConfigError\nfrom pycann.kernels import providers as P\n"
            "try:\n    print('available', P.available('torch'))\nexcept ConfigError as e:\n    print('ConfigError', e)\n")
    drop = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT", "PYCANN_PROVIDERS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env[knob] = value
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.startswith(f"ConfigError {knob}="), out.stdout + out.stderr


def test_num_threads_unicode_digit_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_NUM_THREADS", "\u00b2")  # '²'.isdigit() is True, int('²') raises
    with pytest.raises(ConfigError, match="PYCANN_NUM_THREADS"):
        num_threads()


@pytest.mark.parametrize("dim", ["--1", "\u00b2", "-", "8~--1"])
def test_input_shape_text_dim_is_option_error(dim: str) -> None:
    from pycann.errors import OptionError
    from pycann.ge.compile.compiler import _input_dim

    with pytest.raises(OptionError, match="E10001"):
        _input_dim("x", 2, dim)
