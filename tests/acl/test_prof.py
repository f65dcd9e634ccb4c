"""acl.prof: CANN's in-application profiling sequence writes msprof's layout, with pyACL's codes."""

from __future__ import annotations

import csv
import glob
import os
from pathlib import Path

import numpy as np
import pytest

import pycann.acl as acl
from pycann.acl import constants as C
from pycann.profiler import hooks
from tests.acl.helpers import dataset_of, from_device, to_device

from .conftest import small_ref


def _run_model(om: Path, times: int) -> np.ndarray:
    mid, ret = acl.mdl.load_from_file(str(om))
    assert ret == 0, acl.get_recent_err_msg()
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    xin, yout, zout = to_device(x), to_device(np.zeros((2, 3), np.float32)), to_device(np.zeros((2, 3), np.float32))
    ds, _ = dataset_of([(xin, x.nbytes)])
    out, _ = dataset_of([(yout, 24), (zout, 24)])
    for _ in range(times):
        assert acl.mdl.execute(mid, ds, out) == 0, acl.get_recent_err_msg()
    np.testing.assert_allclose(from_device(zout, (2, 3)), small_ref(x)[1], rtol=1e-6)
    assert acl.mdl.unload(mid) == 0
    for p in (xin, yout, zout):
        assert acl.rt.free(p) == 0
    return x


def _op_counts(folder: Path) -> dict[str, int]:
    (path,) = glob.glob(str(folder / "PROF_*" / "mindstudio_profiler_output" / "op_statistic_*.csv"))
    with open(path, newline="", encoding="utf-8") as f:
        return {row["OP Type"]: int(row["Count"]) for row in csv.DictReader(f)}


def test_prof_sequence_profiles_start_to_stop(acl_ready: int, small_om: Path, tmp_path: Path) -> None:
    out = tmp_path / "prof"
    assert acl.prof.start(1) == C.ACL_ERROR_PROF_NOT_RUN  # before init
    assert acl.prof.init(str(out)) == 0
    assert acl.prof.init(str(out)) == C.ACL_ERROR_REPEAT_INITIALIZE
    cfg = acl.prof.create_config([0], C.ACL_AICORE_NONE, 0, C.ACL_PROF_ACL_API | C.ACL_PROF_TASK_TIME)
    assert cfg != 0
    _run_model(small_om, 2)  # before start: not profiled
    assert acl.prof.start(cfg) == 0 and hooks.active()
    assert acl.prof.start(cfg) == C.ACL_ERROR_PROF_ALREADY_RUN
    _run_model(small_om, 3)
    assert acl.prof.stop(cfg) == 0 and not hooks.active()
    assert acl.prof.stop(cfg) == C.ACL_ERROR_PROF_NOT_RUN
    assert acl.prof.destroy_config(cfg) == 0
    assert acl.prof.destroy_config(cfg) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.prof.finalize() == 0
    assert acl.prof.finalize() == C.ACL_ERROR_PROF_NOT_RUN
    counts = _op_counts(out)  # the 3 runs between start and stop (not the 2 before), each op once a run
    assert counts and set(counts.values()) == {3}, counts
    (api,) = glob.glob(str(out / "PROF_*" / "mindstudio_profiler_output" / "api_statistic_*.csv"))
    with open(api, newline="", encoding="utf-8") as f:
        calls = {row["API Name"]: int(row["Count"]) for row in csv.DictReader(f)}
    assert calls["acl.mdl.execute"] == 3, calls


def test_bad_configs_and_paths_are_refused(acl_ready: int, tmp_path: Path) -> None:
    assert acl.prof.create_config([7], 0, 0, 1) == 0
    assert "device 7" in acl.get_recent_err_msg()
    assert acl.prof.create_config([], 0, 0, 1) == 0
    assert acl.prof.create_config([0], 42, 0, 1) == 0
    assert "aicore_metrics 42" in acl.get_recent_err_msg()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert acl.prof.init(str(blocker / "sub")) == C.ACL_ERROR_INVALID_PARAM
    with pytest.raises(TypeError):
        acl.prof.init(3)  # type: ignore[arg-type]


def test_prof_is_refused_under_msprof(acl_ready: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PROFILE_DIR", str(tmp_path / "msprof"))
    assert acl.prof.init(str(tmp_path / "p")) == C.ACL_ERROR_PROF_ALREADY_RUN
    assert "another profiling mode" in acl.get_recent_err_msg()


def test_acl_finalize_writes_a_started_config(no_acl: None, small_om: Path, tmp_path: Path) -> None:
    """An app that ends with acl.finalize while profiling keeps its results, as at interpreter exit."""
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    out = tmp_path / "prof"
    assert acl.prof.init(str(out)) == 0
    cfg = acl.prof.create_config([0], 0, 0, 0)
    assert acl.prof.start(cfg) == 0
    _run_model(small_om, 1)
    assert acl.rt.reset_device(0) == 0
    assert acl.finalize() == 0
    assert not hooks.active() and set(_op_counts(out).values()) == {1}
    assert os.listdir(out)


def test_unwritable_folder_fails_at_start_not_at_stop(acl_ready: int, tmp_path: Path) -> None:
    """A folder of acl.prof.init that is gone (here a file in its place) by acl.prof.start: start refuses
    it with ACL_ERROR_INVALID_PROFILING_CONFIG and nothing is started (was 0, then 500000 at stop)."""
    folder = tmp_path / "p"
    assert acl.prof.init(str(folder)) == 0
    folder.rmdir()
    folder.write_text("x")
    cfg = acl.prof.create_config([0], C.ACL_AICORE_NONE, 0, C.ACL_PROF_ACL_API)
    assert cfg != 0
    assert acl.prof.start(cfg) == C.ACL_ERROR_INVALID_PROFILING_CONFIG == 100010
    assert "cannot" in acl.get_recent_err_msg() or "not a folder" in acl.get_recent_err_msg()
    assert not hooks.active()
    assert acl.prof.stop(cfg) == C.ACL_ERROR_PROF_NOT_RUN  # it never started
    assert acl.prof.destroy_config(cfg) == 0 and acl.prof.finalize() == 0
