"""acl.json switches: ``acl.init`` starts profiling / dumping, ``acl.finalize`` writes them, and
acl API calls (memcpy on its own track) appear on the timeline."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np
import pytest

import pycann.acl as acl
from pycann.profiler import hooks
from tests.acl.helpers import dataset_of, from_device, to_device


def test_acl_json_profiler_records_api_and_memcpy(tmp_path: Path) -> None:
    cfg = tmp_path / "acl.json"
    out = tmp_path / "prof"
    cfg.write_text(json.dumps({"profiler": {"switch": "on", "output": str(out)}}))
    assert acl.init(str(cfg)) == 0
    try:
        assert hooks.active()
        assert acl.rt.set_device(0) == 0
        x = np.arange(6, dtype=np.float32)
        dev = to_device(x)
        np.testing.assert_array_equal(from_device(dev, (6,)), x)
        assert acl.rt.free(dev) == 0
        assert acl.rt.reset_device(0) == 0
    finally:
        assert acl.finalize() == 0
    assert not hooks.active()
    traces = glob.glob(os.path.join(out, "PROF_*", "mindstudio_profiler_output", "msprof_*.json"))
    assert traces, list(out.rglob("*"))
    events = json.loads(Path(traces[0]).read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name") for e in events}
    assert "acl.rt.memcpy" in names and "acl.rt.malloc" in names


def test_op_summary_model_id_is_the_loaded_model_id(no_acl: None, small_om: Path, tmp_path: Path) -> None:
    """op_summary's Model ID is the id acl.mdl.load_from_file returned (as in CANN, and as the dump's
    folder names it), also when the app unloaded the model before acl.finalize wrote the report."""
    out = tmp_path / "prof"
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"profiler": {"switch": "on", "output": str(out)}}))
    assert acl.init(str(cfg)) == 0
    try:
        assert acl.rt.set_device(0) == 0
        first, _ = acl.mdl.load_from_file(str(small_om))  # (ids count from 1: never 0)
        mid, ret = acl.mdl.load_from_file(str(small_om))
        assert ret == 0 and mid == first + 1
        assert acl.mdl.unload(first) == 0
        _execute_and_unload([mid], [mid])
        assert acl.rt.reset_device(0) == 0
    finally:
        assert acl.finalize() == 0
    rows = _op_summary(out)
    assert rows and {r["Model ID"] for r in rows} == {str(mid)}


def test_the_same_om_loaded_twice_has_two_model_ids_in_op_summary(no_acl: None, small_om: Path, tmp_path: Path) -> None:
    """One .om loaded twice (both loads alive): each load's runs carry its own Model ID, the id
    acl.mdl.load_from_file returned for it, as in CANN, and Infer IDs count per load (both were
    reported under the second load's id, the runs counted together)."""
    out = tmp_path / "prof"
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"profiler": {"switch": "on", "output": str(out)}}))
    assert acl.init(str(cfg)) == 0
    try:
        assert acl.rt.set_device(0) == 0
        first, ret1 = acl.mdl.load_from_file(str(small_om))
        second, ret2 = acl.mdl.load_from_file(str(small_om))
        assert ret1 == ret2 == 0 and first != second
        _execute_and_unload([first, second, first], [first, second])
        assert acl.rt.reset_device(0) == 0
    finally:
        assert acl.finalize() == 0
    rows = _op_summary(out)
    runs = sorted({(r["Model Name"], r["Model ID"], r["Infer ID"]) for r in rows})
    name = small_om.stem
    assert runs == sorted([(name, str(first), "0"), (name, str(first), "1"), (name, str(second), "0")]), runs


def _execute_and_unload(runs: list[int], loaded: list[int]) -> None:
    """Execute the small model (x: 2x4 ones) once per id in ``runs``, then unload ``loaded`` and free
    the buffers."""
    x = np.ones((2, 4), np.float32)
    dx, dy, dz = to_device(x), acl.rt.malloc(24, 0)[0], acl.rt.malloc(24, 0)[0]
    ind, _ = dataset_of([(dx, 32)])
    outd, _ = dataset_of([(dy, 24), (dz, 24)])
    for mid in runs:
        assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    for mid in loaded:
        assert acl.mdl.unload(mid) == 0
    for p in (dx, dy, dz):
        assert acl.rt.free(p) == 0


def _op_summary(out: Path) -> list[dict[str, str]]:
    """The rows of the op_summary CSV the profiler wrote under ``out``."""
    import csv

    summaries = glob.glob(os.path.join(out, "PROF_*", "mindstudio_profiler_output", "op_summary_*.csv"))
    with open(summaries[0], encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.filterwarnings("ignore:acl.json. dump and profiling are both on")
def test_acl_json_profiler_output_that_cannot_be_written_fails_init(no_acl: None, tmp_path: Path) -> None:
    """acl.json's profiler.output under a file: acl.init returns ACL_ERROR_INVALID_PROFILING_CONFIG and
    starts nothing (no profiler, no dump, acl not initialised), instead of a write error at acl.finalize."""
    from pycann.acl import constants as C

    blocker = tmp_path / "file"
    blocker.write_text("x")
    dump = tmp_path / "dump"
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"profiler": {"switch": "on", "output": str(blocker / "prof")},
                               "dump": {"dump_path": str(dump), "dump_list": []}}))
    assert acl.init(str(cfg)) == C.ACL_ERROR_INVALID_PROFILING_CONFIG == 100010
    assert "profiler.output" in acl.get_recent_err_msg() and str(blocker) in acl.get_recent_err_msg()
    assert not hooks.active()
    assert acl.rt.set_device(0) == C.ACL_ERROR_UNINITIALIZE  # not initialised
    assert not dump.exists()  # the dump did not start either
    cfg.write_text(json.dumps({"profiler": {"switch": "on", "output": str(tmp_path / "prof")}}))
    assert acl.init(str(cfg)) == 0  # a writable folder: works, after the refused init
    assert hooks.active()
    assert acl.finalize() == 0
