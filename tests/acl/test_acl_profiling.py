"""acl.json switches: ``acl.init`` starts profiling / dumping, ``acl.finalize`` writes them, and
acl API calls (memcpy on its own track) appear on the timeline."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np

import pycann.acl as acl
from pycann.profiler import hooks
from tests.acl.helpers import from_device, to_device


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
