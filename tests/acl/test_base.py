"""Top-level acl.*: init/finalize and acl.json, versions, data buffers, tensor descs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pycann.acl as acl
from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._config import AclConfigWarning


def test_init_finalize_cycle(no_acl: None) -> None:
    assert acl.finalize() in (C.ACL_ERROR_UNINITIALIZE, C.ACL_ERROR_REPEAT_FINALIZE)
    assert acl.rt.set_device(0) == C.ACL_ERROR_UNINITIALIZE
    assert acl.init() == 0
    assert acl.init() == C.ACL_ERROR_REPEAT_INITIALIZE
    assert "already" in acl.get_recent_err_msg()
    assert acl.finalize() == 0
    assert acl.finalize() == C.ACL_ERROR_REPEAT_FINALIZE
    assert acl.init() == 0  # a new cycle works
    assert acl.finalize() == 0


def test_init_reads_acl_json(no_acl: None, tmp_path: Path) -> None:
    cfg = {"dump": {"dump_path": str(tmp_path), "dump_list": [], "dump_mode": "output"},
           "profiler": {"switch": "off", "output": str(tmp_path)}, "max_opqueue_num": 100, "shiny_new_key": 1}
    p = tmp_path / "acl.json"
    p.write_text(json.dumps(cfg))
    with pytest.warns(AclConfigWarning, match="shiny_new_key"):
        assert acl.init(str(p)) == 0
    assert _state.config is not None
    assert _state.config.dump_enabled and not _state.config.profiling_enabled
    assert _state.config.unknown == ["shiny_new_key"]
    assert _state.config.raw["max_opqueue_num"] == 100


@pytest.mark.parametrize("text, code", [
    ("{not json", C.ACL_ERROR_PARSE_FILE),
    ("[1, 2]", C.ACL_ERROR_PARSE_FILE),
    ('{"dump": {"dump_list": []}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_mode": "sideways"}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"profiler": {"switch": "maybe"}}', C.ACL_ERROR_INVALID_PROFILING_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [], "dump_step": "abc"}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [], "dump_step": "3-1"}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [], "dump_step": "0|-2"}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    # malformed dump_list entries were acl.init's internal error (500000), or a model name never matched
    ('{"dump": {"dump_path": "/tmp", "dump_list": [5]}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [{"model_name": "m", "layer": 7}]}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [{"model_name": "m", "layer": [1]}]}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"dump": {"dump_path": "/tmp", "dump_list": [{"model_name": 5}]}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    # a number as a folder: the dump or the profile went to a folder of that name in the working folder
    ('{"dump": {"dump_path": 5, "dump_list": []}}', C.ACL_ERROR_INVALID_DUMP_CONFIG),
    ('{"profiler": {"switch": "on", "output": 5}}', C.ACL_ERROR_INVALID_PROFILING_CONFIG),
])
def test_bad_acl_json(no_acl: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, code: int) -> None:
    p = tmp_path / "acl.json"
    p.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert acl.init(str(p)) == code
    assert not _state.initialized
    assert "acl.json" in acl.get_recent_err_msg()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["acl.json"]  # nothing written


def test_a_dump_path_that_cannot_be_a_folder_is_a_dump_config_error(no_acl: None, tmp_path: Path) -> None:
    """A dump_path under a regular file made acl.init return ACL_ERROR_INTERNAL_ERROR ("internal error
    NotADirectoryError"); expected ACL_ERROR_INVALID_DUMP_CONFIG naming the path, nothing left started
    (a profiler of the same acl.json included), and a later acl.init working."""
    from pycann.profiler import session

    (tmp_path / "a_file").write_text("x")
    p = tmp_path / "acl.json"
    p.write_text(json.dumps({"dump": {"dump_path": str(tmp_path / "a_file" / "dump"), "dump_list": []},
                             "profiler": {"switch": "on", "output": str(tmp_path / "prof")}}))
    with pytest.warns(AclConfigWarning, match="both on"):
        assert acl.init(str(p)) == C.ACL_ERROR_INVALID_DUMP_CONFIG
    msg = acl.get_recent_err_msg()
    assert "dump_path" in msg and "a_file" in msg and "Not a directory" in msg
    assert not _state.initialized and not any(x.running for x in session._MANAGED)
    assert not (tmp_path / "prof").exists()
    assert acl.init() == 0


def test_missing_acl_json_and_empty_one(no_acl: None, tmp_path: Path) -> None:
    assert acl.init(str(tmp_path / "nope.json")) == C.ACL_ERROR_INVALID_FILE
    assert acl.init(str(tmp_path)) == C.ACL_ERROR_INVALID_FILE
    assert "is a folder, not a file" in acl.get_recent_err_msg()  # (it said "does not exist")
    (tmp_path / "empty.json").write_text("")
    assert acl.init(str(tmp_path / "empty.json")) == 0
    with pytest.raises(TypeError):
        acl.init(42)  # type: ignore[arg-type]


def test_version_soc_log() -> None:
    major, minor, patch, ret = acl.get_version()
    assert ret == 0 and (major, minor, patch) >= (0, 0, 0)
    assert "Ascend310P" in acl.get_soc_name()
    acl.app_log(C.ACL_INFO, "hello")
    assert acl.float16_to_float(acl.float_to_float16(1.5)) == 1.5
    assert acl.float_to_float16(1.0) == 0x3C00


def test_finalize_reports_leaks(no_acl: None, small_om: Path) -> None:
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    _, ret = acl.rt.malloc(1000, 0)
    _, ret2 = acl.rt.malloc_host(10)
    acl.rt.create_stream()
    acl.rt.create_event()
    acl.mdl.load_from_file(str(small_om))
    assert ret == ret2 == 0
    with pytest.warns(acl.AclLeakWarning, match=r"2 allocation\(s\) \(1010 bytes\)"):
        assert acl.finalize() == 0
    report = "\n".join(_state.last_leak_report)
    assert "test_base.py" in report  # allocation sites point at the caller
    assert "not unloaded" in report and "stream" in report and "event" in report


def test_data_buffers() -> None:
    b = acl.create_data_buffer(0x1234, 64)
    assert b and acl.get_data_buffer_addr(b) == 0x1234
    assert acl.get_data_buffer_size(b) == acl.get_data_buffer_size_v2(b) == 64
    assert acl.update_data_buffer(b, 0x5678, 32) == 0
    assert (acl.get_data_buffer_addr(b), acl.get_data_buffer_size(b)) == (0x5678, 32)
    assert acl.update_data_buffer(b, 1, -1) == C.ACL_ERROR_INVALID_PARAM
    assert acl.destroy_data_buffer(b) == 0
    assert acl.destroy_data_buffer(b) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.get_data_buffer_addr(b) == 0 and acl.get_data_buffer_size(b) == 0
    assert acl.create_data_buffer(0, 0) != 0  # an empty buffer is legal
    assert acl.create_data_buffer(-5, 4) == 0
    with pytest.raises(TypeError):
        acl.create_data_buffer("ptr", 4)  # type: ignore[arg-type]


def test_tensor_descs() -> None:
    d = acl.create_tensor_desc(C.ACL_FLOAT16, [2, 3, 4], C.ACL_FORMAT_NCHW)
    assert acl.get_tensor_desc_type(d) == C.ACL_FLOAT16
    assert acl.get_tensor_desc_format(d) == C.ACL_FORMAT_NCHW
    assert acl.get_tensor_desc_num_dims(d) == 3
    assert acl.get_tensor_desc_element_count(d) == 24
    assert acl.get_tensor_desc_size(d) == 48
    assert acl.get_tensor_desc_dim(d, 1) == 3
    assert acl.get_tensor_desc_dim_v2(d, 2) == (4, 0)
    assert acl.get_tensor_desc_dim_v2(d, 3) == (-1, C.ACL_ERROR_INVALID_PARAM)
    assert acl.get_tensor_desc_dim(d, -1) == -1
    acl.set_tensor_desc_name(d, "x")
    assert acl.get_tensor_desc_name(d) == "x"
    assert acl.set_tensor_shape(d, [5]) == 0 and acl.get_tensor_desc_size(d) == 10
    assert acl.set_tensor_format(d, C.ACL_FORMAT_ND) == 0 and acl.get_tensor_desc_format(d) == C.ACL_FORMAT_ND
    dyn = acl.create_tensor_desc(C.ACL_FLOAT, [-1, 3], C.ACL_FORMAT_ND)
    assert acl.get_tensor_desc_size(dyn) == 0
    assert acl.destroy_tensor_desc(d) is None
    assert acl.get_tensor_desc_type(d) == C.ACL_DT_UNDEFINED
    assert acl.get_tensor_desc_format(d) == C.ACL_FORMAT_UNDEFINED
    assert acl.destroy_tensor_desc(d) is None  # void, never raises
    assert acl.create_tensor_desc(C.ACL_FLOAT, [-7], C.ACL_FORMAT_ND) == 0
    with pytest.raises(TypeError):
        acl.create_tensor_desc(C.ACL_FLOAT, 3, C.ACL_FORMAT_ND)  # type: ignore[arg-type]
    assert acl.data_type_size(C.ACL_INT64) == 8 and acl.data_type_size(C.ACL_STRING) == 0
    assert acl.data_type_size(999) == 0


def test_set_tensor_shape_refuses_what_create_tensor_desc_refuses() -> None:
    """``set_tensor_shape`` took dims ``create_tensor_desc`` refuses (a -7 dim, 200 dims), which then
    gave a size of 0; expected ACL_ERROR_INVALID_PARAM and the desc as it was."""
    d = acl.create_tensor_desc(C.ACL_FLOAT, [2, 3], C.ACL_FORMAT_ND)
    assert acl.create_tensor_desc(C.ACL_FLOAT, [1] * (C.ACL_MAX_DIM_CNT + 1), C.ACL_FORMAT_ND) == 0
    for bad in ([-7, 3], [1] * (C.ACL_MAX_DIM_CNT + 1), [2, -3]):
        assert acl.set_tensor_shape(d, bad) == C.ACL_ERROR_INVALID_PARAM
        assert "invalid dims" in acl.get_recent_err_msg()
        assert acl.get_tensor_desc_num_dims(d) == 2 and acl.get_tensor_desc_size(d) == 24
    assert acl.set_tensor_shape(d, [-1, 3]) == 0 and acl.get_tensor_desc_dim(d, 0) == -1
    assert acl.set_tensor_shape(d, [-2]) == 0 and acl.get_tensor_desc_num_dims(d) == 1
    assert acl.set_tensor_shape(d, [1] * C.ACL_MAX_DIM_CNT) == 0 and acl.get_tensor_desc_size(d) == 4
    assert acl.set_tensor_shape(12345, [1]) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    with pytest.raises(TypeError):
        acl.set_tensor_shape(d, None)  # type: ignore[arg-type]
    acl.destroy_tensor_desc(d)


def test_constants_module() -> None:
    assert C.ACL_ERROR_INVALID_PARAM == 100000 and C.ACL_MEMCPY_DEVICE_TO_HOST == 2
    assert C.ACL_INT32 == 3 and C.ACL_UINT8 == 4 and C.ACL_FORMAT_ND == 2
    assert C.error_name(100000) == "ACL_ERROR_INVALID_PARAM" and C.error_name(0) == "ACL_SUCCESS"
    assert C.error_name(1) == "UNKNOWN(1)"


def test_docs_modules_listed_as_not_present_are_absent() -> None:
    """docs/acl.md's "Other modules" line names the pyACL sub-modules pycann lacks; each really is
    absent (``acl.media`` exists: it was listed there)."""
    import importlib
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "acl.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in doc.splitlines() if ln.endswith("✗ (not present).")]
    names = re.findall(r"`acl\.(\w+)`", line)
    assert names
    for name in names:
        assert not hasattr(acl, name), name
        with pytest.raises(ImportError):
            importlib.import_module(f"pycann.acl.{name}")


def _dump_session(tmp_path: Path, small_om: Path) -> tuple[int, int]:
    """acl initialised to dump every model's outputs into tmp_path/dump, device 0 set, and
    ``small_om`` loaded twice: (the first load's id, the later one's)."""
    p = tmp_path / "acl.json"
    p.write_text(json.dumps({"dump": {"dump_path": str(tmp_path / "dump"), "dump_list": [], "dump_mode": "output"}}))
    assert acl.init(str(p)) == 0
    assert acl.rt.set_device(0) == 0
    first, _ = acl.mdl.load_from_file(str(small_om))
    later, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0 and later != first
    return first, later


def _run_dumped(tmp_path: Path, mid: int) -> list[dict[str, str]]:
    """Run ``small_om``'s model ``mid`` once, unload it, free its buffers and finalize acl; the rows of
    the dump index it wrote under tmp_path/dump."""
    import csv

    import numpy as np

    from tests.acl.helpers import dataset_of, to_device

    x = to_device(np.ones((2, 4), np.float32))
    ind, _ = dataset_of([(x, 32)])
    bufs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
    outd, _ = dataset_of([(b, 24) for b in bufs])
    assert acl.mdl.execute(mid, ind, outd) == 0
    assert acl.mdl.unload(mid) == 0
    for b in (x, *bufs):
        assert acl.rt.free(b) == 0
    assert acl.finalize() == 0
    (index,) = list((tmp_path / "dump").glob("*/dump_index.csv"))
    with open(index, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_dump_folders_use_the_model_id_load_returned(no_acl: None, small_om: Path, tmp_path: Path) -> None:
    """CANN's dump layout is {model_name}/{model_id}/{iteration}: the id is acl.mdl.load_*'s (it was a
    per-dump count from 0, so the app's model 2 dumped into folder 0)."""
    first, mid = _dump_session(tmp_path, small_om)
    assert mid != 0
    assert acl.mdl.unload(first) == 0
    rows = _run_dumped(tmp_path, mid)
    assert rows and {r["model_id"] for r in rows} == {str(mid)}
    assert all(Path(r["file"]).parts[:3] == ("0", "small", str(mid)) for r in rows)


def test_dump_of_a_model_loaded_twice_after_the_later_load_is_unloaded(no_acl: None, small_om: Path,
                                                                        tmp_path: Path) -> None:
    """The same .om loaded twice, the later load unloaded, the first run: its dump went into the
    unloaded model's {model_id} folder (the id was recorded per graph name at each load)."""
    first, later = _dump_session(tmp_path, small_om)
    assert acl.mdl.unload(later) == 0
    rows = _run_dumped(tmp_path, first)
    assert rows and {r["model_id"] for r in rows} == {str(first)}
