"""PYCANN_NUM_THREADS reaches libgomp (OMP_NUM_THREADS) and the background plan builder adopts the
caller's OpenMP thread count (pycann/config.py, pycann/kernels/providers/openmp.py, pycann/ge/plan_builder.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pycann.config import apply_omp_num_threads


def test_pycann_num_threads_becomes_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("PYCANN_NUM_THREADS", "1")
    try:
        assert apply_omp_num_threads() == 1
        assert os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)  # set by pycann, not by monkeypatch: undo it here


def test_user_omp_num_threads_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("PYCANN_NUM_THREADS", "1")
    assert apply_omp_num_threads() == 3
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_unset_leaves_libgomp_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("PYCANN_NUM_THREADS", raising=False)
    assert apply_omp_num_threads() is None
    assert "OMP_NUM_THREADS" not in os.environ


_LOAD_LIBDNNL = ("from pycann.kernels.providers import onednn_capi as c, openmp\n"
                 "try:\n    c.load()\nexcept OSError:\n    print('NOLIB'); raise SystemExit\n")


def _run_with_libdnnl(code: str, **env: str) -> str:
    """Run ``code`` in a fresh process after loading libdnnl (and with it libgomp); skips the test
    when libdnnl is not installed."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYCANN_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", _LOAD_LIBDNNL + code], capture_output=True, text=True,
                         env={**base, **env}, check=True).stdout.strip()
    if out == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    return out


def test_libdnnl_threads_follow_pycann_num_threads() -> None:
    """In a fresh process, PYCANN_NUM_THREADS=1 gives libgomp (loaded with libdnnl) one thread in every
    thread, the main one and a new one (where background plans create their primitives)."""
    code = ("import threading\n"
            "seen = []\nt = threading.Thread(target=lambda: seen.append(openmp.max_threads())); t.start(); t.join()\n"
            "print(openmp.max_threads(), seen[0])")  # fmt: skip
    out = _run_with_libdnnl(code, PYCANN_NUM_THREADS="1")
    assert out == "1 1"


def test_background_builder_adopts_the_callers_thread_count() -> None:
    """omp_set_num_threads(1) in the caller (what torch.set_num_threads does) holds the builder thread's
    builds to one thread too; without a caller setting, the builder keeps libgomp's default."""
    code = ("from pycann.ge.run.plan_builder import BackgroundBuilder\n"
            "seen = []\nb = BackgroundBuilder(lambda sig, shapes, values: seen.append(openmp.max_threads()))\n"
            "default = openmp.max_threads()\nb.submit('a', [], {}); b.wait()\n"
            "openmp.set_max_threads(1); b.submit('b', [], {}); b.wait()\n"
            "print(seen == [default, 1], default)")  # fmt: skip
    out = _run_with_libdnnl(code, OMP_NUM_THREADS="2")
    assert out == "True 2"


def test_set_max_threads_rejects_zero() -> None:
    from pycann.kernels.providers import openmp

    with pytest.raises(ValueError, match="must be >= 1"):
        openmp.set_max_threads(0)


def test_keep_warm_is_a_no_op_without_libgomp_and_runs_every_team() -> None:
    """``openmp.keep_warm`` loads nothing (no libgomp in a fresh process without libdnnl) and, once
    libgomp is there, runs its empty region on the calling thread's team: two threads, one thread, and
    a thread that never ran a region before; the ICV it leaves is the caller's."""
    bare = subprocess.run([sys.executable, "-c", "from pycann.kernels.providers import openmp\n"
                           "openmp.keep_warm(); print(openmp.library() is None)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert bare == "True"
    code = ("import threading\n"
            "openmp.set_max_threads(2); openmp.keep_warm(); two = openmp.max_threads()\n"
            "openmp.set_max_threads(1); openmp.keep_warm(); one = openmp.max_threads()\n"
            "seen = []\nt = threading.Thread(target=lambda: (openmp.keep_warm(), seen.append(1))); t.start(); t.join()\n"
            "print(two, one, seen)")  # fmt: skip
    assert _run_with_libdnnl(code) == "2 1 [1]"
