"""float32 -> bfloat16 / float16 Casts in slabs on the plan's team (pycann/kernels/providers/
parallel_cast.py): the values numpy's ``astype`` gives (ONNX Cast-19/21), bit for bit, whatever the
team, layout or destination."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from pycann.dtypes import bfloat16
from pycann.kernels.providers import nan_guard, parallel_cast, slabs
from pycann.ops.cast import _k_cast

BF = bfloat16()
_TO = {BF: 16, np.dtype(np.float16): 10}


def _awkward(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Normal values with NaN, +-inf, subnormals, values that round to even, and float16 overflows."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 100
    flat = x.reshape(-1)
    flat[::1013] = np.nan
    flat[1::2039] = np.inf
    flat[2::3001] = -np.inf
    flat[3::997] = 1e-40      # float32 subnormal: bf16 rounds it (oneDNN would flush it to zero)
    flat[4::991] = -2.5e-39
    flat[5::983] = 1e5        # beyond float16's 65504: inf there
    flat[6::977] = np.float32(1.00390625)  # halfway between two bf16 values: round to even
    flat[7::971] = 3.4e38     # rounds to inf in bf16
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


@pytest.mark.parametrize("dst", [BF, np.dtype(np.float16)])
@pytest.mark.parametrize("team", [1, 2, 3])
@pytest.mark.parametrize("layout", ["nchw", "channels_last", "odd"])
def test_slabs_equal_astype_bit_for_bit(dst: Any, team: int, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = (1, 24, 96, 120) if layout != "odd" else (3, 5, 7, 2999)
    x = _awkward(shape)
    if layout == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    monkeypatch.setattr(slabs.openmp, "team", lambda: team)
    k = parallel_cast.bound_narrowing_cast(shape, np.dtype(np.float32), dst, _k_cast)
    assert k is not None
    with np.errstate(over="ignore"):
        want = x.astype(dst)
    (y,) = k.run([x], {"to": _TO[np.dtype(dst)]})
    assert y.dtype == dst and y.shape == shape
    np.testing.assert_array_equal(_bits(y), _bits(want))
    if layout == "channels_last":
        assert y.strides[1] == y.itemsize  # laid out as the input


def test_writes_into_an_out_view_of_another_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slabs.openmp, "team", lambda: 2)
    shape = (1, 16, 128, 130)
    x = _awkward(shape, 1)
    out = np.empty((1, 128, 130, 16), BF).transpose(0, 3, 1, 2)
    k = parallel_cast.bound_narrowing_cast(shape, np.dtype(np.float32), BF, _k_cast)
    assert k is not None
    (y,) = k.run([x], {"to": 16}, [out])
    assert y is out
    np.testing.assert_array_equal(_bits(out), _bits(x.astype(BF)))


def test_small_tensors_and_other_pairs_are_not_taken() -> None:
    f32 = np.dtype(np.float32)
    assert parallel_cast.bound_narrowing_cast((1, 8, 8, 8), f32, BF, _k_cast) is None  # below MIN_ELEMENTS
    assert parallel_cast.bound_narrowing_cast((1, 64, 128, 128), BF, f32, _k_cast) is None  # widening
    assert parallel_cast.bound_narrowing_cast((1, 64, 128, 128), f32, np.dtype(np.int8), _k_cast) is None


def test_another_shape_or_dtype_runs_the_generic_cast() -> None:
    shape = (1, 16, 128, 128)
    k = parallel_cast.bound_narrowing_cast(shape, np.dtype(np.float32), BF, _k_cast)
    assert k is not None
    x = _awkward((1, 16, 64, 64)).astype(np.float64)
    (y,) = k.run([x], {"to": 16})
    np.testing.assert_array_equal(_bits(y), _bits(x.astype(BF)))


@pytest.mark.parametrize(("dst", "value", "passed"), [(BF, 1e5, True), (np.dtype(np.float16), 1e3, True),
                                                      (np.dtype(np.float16), 1e5, False)])
def test_the_input_bound_goes_on_unless_float16_overflows(dst: Any, value: float, passed: bool) -> None:
    shape = (1, 16, 128, 128)
    x = np.full(shape, value, np.float32)
    k = parallel_cast.bound_narrowing_cast(shape, np.dtype(np.float32), dst, _k_cast)
    assert k is not None
    nan_guard.new_run()
    try:
        nan_guard.record(x, value)
        (y,) = k.run([x], {"to": _TO[np.dtype(dst)]})
        got = nan_guard.proven(y)
    finally:
        nan_guard.end_run()
    if passed:
        assert got is not None and float(np.abs(y.astype(np.float32)).max()) <= got
    else:
        assert got is None  # float16's inf: no bound may claim the output finite


_FORK = r"""
import os, signal
import numpy as np
from pycann.dtypes import bfloat16
from pycann.kernels.providers import parallel_cast
x = np.random.default_rng(0).standard_normal((1, 32, 128, 128)).astype(np.float32)
y = np.empty(x.shape, bfloat16())
parallel_cast.narrow(x, y, 2)  # the parent's helper thread exists now
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    z = np.empty(x.shape, bfloat16())
    parallel_cast.narrow(x, z, 2)  # the child's own helper (the parent's is not there)
    os._exit(0 if np.array_equal(z.view(np.uint16), x.astype(bfloat16()).view(np.uint16)) else 3)
print("child", os.waitpid(pid, 0)[1])
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_casts_on_its_own_helper_thread(tmp_path: Any) -> None:
    script = tmp_path / "fork_cast.py"
    script.write_text(_FORK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])
