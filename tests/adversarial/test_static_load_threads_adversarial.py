"""Adversarial checks of the static .om load path (issue 23 item 5) under threads and failures:
threads loading a file while it is replaced, the weights' CRC on a thread when the constructor
fails or the weights are corrupt, the collector's state after a load, numpy's OpenBLAS thread
count set from many threads (``blas_threads``), and concurrent runs of an in-place residual block
with NaN / inf inputs. Values against ONNX Runtime (test_static_load_adversarial.py has the edited
files and the models)."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pycann.ge.om as om
from pycann.ge.compile.compiler import compile_model
from pycann.ge.om import OmFormatError
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import blas_threads, onednn_wino
from tests.adversarial.test_static_load_adversarial import _assert_ort, _block, needs_dnnl, residual_net
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(2313)


def _crc_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pycann-om-crc"]


# --------------------------------------------------------------------------- concurrency, CRC thread
def test_many_threads_load_and_run_one_file_while_it_is_replaced(tmp_path: Path) -> None:
    m = residual_net()
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    data = path.read_bytes()
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    want = run_ort(m, {"x": x})[0]
    errors: list[BaseException] = []
    stop = threading.Event()

    def replace() -> None:  # atomic replacement: a mapped file keeps its old contents
        i = 0
        while not stop.is_set():
            tmp = tmp_path / f"next{i % 2}.om"
            tmp.write_bytes(data)
            os.replace(tmp, path)
            i += 1

    def work() -> None:
        try:
            for _ in range(3):
                lm = LoadedModel.from_file(path)
                for _ in range(2):
                    np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    r = threading.Thread(target=replace)
    r.start()
    workers = [threading.Thread(target=work) for _ in range(6)]
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=300)
    finally:
        stop.set()
        r.join()
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in workers)
    assert not _crc_threads()


def _corrupt_weights(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    wo = om._HEAD.unpack_from(raw)[8]
    raw[wo + 5] ^= 0x40
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("corrupt", [False, True])
def test_a_constructor_error_waits_for_the_crc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt: bool) -> None:
    path = tmp_path / "m.om"
    compile_model(residual_net()).save(path)
    if corrupt:
        _corrupt_weights(path)
    calls: list[int] = []

    def boom(self: Any, *a: Any, **k: Any) -> None:
        calls.append(1)
        raise RuntimeError("constructor failed")

    monkeypatch.setattr(LoadedModel, "__init__", boom)
    with pytest.raises(OmFormatError if corrupt else RuntimeError):
        LoadedModel.from_file(path)
    assert calls == [1] and not _crc_threads()


def test_corrupt_weights_fail_the_load_after_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "m.om"
    compile_model(residual_net()).save(path)
    _corrupt_weights(path)
    for _ in range(3):
        with pytest.raises(OmFormatError, match="weights checksum"):
            LoadedModel.from_file(path)
    assert not _crc_threads()


# --------------------------------------------------------------------------- the collector's state
@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("outcome", ["ok", "corrupt", "constructor_error"])
def test_gc_state_is_the_callers_after_a_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool,
                                              outcome: str) -> None:
    path = tmp_path / "m.om"
    compile_model(residual_net()).save(path)
    if outcome == "corrupt":
        _corrupt_weights(path)
    if outcome == "constructor_error":
        monkeypatch.setattr(LoadedModel, "precompile_static", lambda self: (_ for _ in ()).throw(MemoryError("x")))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        try:
            LoadedModel.from_file(path)
        except (OmFormatError, MemoryError):
            assert outcome != "ok"
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


# --------------------------------------------------------------------------- OpenBLAS thread count
def test_one_thread_nested_from_many_threads_restores_the_count() -> None:
    wheel = blas_threads.numpy_wheel_openblas()
    if wheel is None:
        pytest.skip("numpy without its wheel's pthreads OpenBLAS")
    get, set_ = wheel
    before = int(get())
    set_(2)
    try:
        inside: list[int] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(200):
                    with blas_threads.OneThread(get, set_):
                        with blas_threads.OneThread(get, set_):
                            a = np.ones((8, 8), np.float32)
                            inside.append(int((a @ a)[0, 0]))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors and set(inside) == {8}
        assert int(get()) == 2  # every exit restored what its enter saw; the last one the caller's
        with pytest.raises(ValueError), blas_threads.OneThread(get, set_):
            assert int(get()) == 1
            raise ValueError
        assert int(get()) == 2
    finally:
        set_(before)


@needs_dnnl
@pytest.mark.parametrize("precompile", [True, False])
def test_threads_mixing_nan_and_clean_runs_of_one_om(tmp_path: Path, precompile: bool, in_place_calls: dict[str, int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent runs (one arena each) of an in-place residual block, some with NaN / inf inputs:
    the guard's proven bounds and the in-place sums of one run never leak into another's; without
    precompilation the first runs also build their plans on the compiled graph at the same time."""
    monkeypatch.setattr(onednn_wino, "available", lambda: False)  # (the direct conv: the in-place form)
    m = _block()
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    if precompile:
        lm = LoadedModel.from_file(path)
    else:
        o = om.load_om(path)
        lm = LoadedModel(o.graph, o.manifest, str(path), precompile=False)
    feeds = [RNG.standard_normal((2, 32, 16, 16)).astype(np.float32) for _ in range(3)]
    feeds[1][0, 4, 5, 6] = np.nan
    feeds[2][1, 2, 3, 3], feeds[2][1, 2, 3, 4] = np.inf, -np.inf
    with np.errstate(all="ignore"):
        wants = [run_ort(m, {"x": f})[0] for f in feeds]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for i in range(12):
                j = (i + k) % 3
                with np.errstate(all="ignore"):
                    _assert_ort(lm.run([feeds[j]])[0], wants[j])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errors, errors[0]
    assert lm.specializer.pipeline_runs == 0 and in_place_calls["n"] > 0


def test_a_gc_disable_from_another_thread_during_a_load_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.om"
    compile_model(residual_net()).save(path)
    real = LoadedModel.precompile_static

    def other_thread_disables(self: LoadedModel) -> bool:
        t = threading.Thread(target=gc.disable)  # the application turns the collector off meanwhile
        t.start()
        t.join()
        return real(self)

    monkeypatch.setattr(LoadedModel, "precompile_static", other_thread_disables)
    was = gc.isenabled()
    gc.enable()
    try:
        LoadedModel.from_file(path)
        assert not gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()
