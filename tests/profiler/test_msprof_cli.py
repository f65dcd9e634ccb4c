"""msprof command line (cann-interfaces.md §4.1/§4.2) end to end, and the ``pycann`` dispatcher."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from pycann.tools import cli, msprof

APP = """
import time
import numpy as np
import pycann
import pycann.profiler

sess = pycann.InferSession(0, "tiny.onnx")
x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
for _ in range(2):
    sess.infer([x])
t = time.perf_counter_ns()
pycann.profiler.record_api("aclrtMemcpy", t, t + 2000, track="memcpy")
print("app done")
"""


def test_msprof_end_to_end(tiny_model: onnx.ModelProto, tmp_path: Path) -> None:
    onnx.save(tiny_model, tmp_path / "tiny.onnx")
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    env = dict(os.environ, PYCANN_PEAK_GFLOPS="100", PYCANN_PEAK_GBPS="20")
    out = tmp_path / "prof"
    r = subprocess.run([sys.executable, "-m", "pycann.tools.msprof", f"--output={out}", "--aic-metrics=PipeUtilization",
                        f"--application={sys.executable} app.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "app done" in r.stdout and "Top ops by time" in r.stdout and "results in" in r.stdout
    assert "--aic-metrics is accepted" in r.stdout
    (prof,) = glob.glob(str(out / "PROF_*"))
    files = {os.path.basename(p).split("_2")[0] for p in glob.glob(os.path.join(prof, "mindstudio_profiler_output", "*"))}
    assert {"msprof", "op_summary", "op_statistic", "api_statistic", "summary", "README.txt"} <= files
    (summary_csv,) = glob.glob(os.path.join(prof, "mindstudio_profiler_output", "op_summary_*.csv"))
    with open(summary_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 6 and {r["Infer ID"] for r in rows} == {"0", "1"}
    assert {r["Model Name"] for r in rows} == {"tiny"}
    (api_csv,) = glob.glob(os.path.join(prof, "mindstudio_profiler_output", "api_statistic_*.csv"))
    assert "aclrtMemcpy" in open(api_csv, encoding="utf-8").read()


def test_msprof_app_without_model_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "noop.py").write_text("import sys; sys.exit(3)\n", encoding="utf-8")
    rc = msprof.main([f"--output={tmp_path}", str(tmp_path / "noop.py")])
    assert rc == 3 and "no profiling data" in capsys.readouterr().out


def test_msprof_removes_the_acl_shims_after_the_app(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # every msprof run left a /tmp/pycann-run-* folder (the app's `import acl` shims) behind
    app = tmp_path / "shim.py"
    app.write_text("import os, acl  # acl: pycann.acl through the shims\n"
                   "shim = os.environ['PYTHONPATH'].split(os.pathsep)[0]\n"
                   "assert os.path.isfile(os.path.join(shim, 'acl', '__init__.py')) and acl.__name__ == 'pycann.acl'\n"
                   "open(os.path.join(os.path.dirname(__file__), 'shim.txt'), 'w').write(shim)\n", encoding="utf-8")
    rc = msprof.main([f"--output={tmp_path}", str(app)])
    capsys.readouterr()
    shim = Path((tmp_path / "shim.txt").read_text(encoding="utf-8"))
    assert rc == 0 and shim.name.startswith("pycann-run-")
    assert not shim.exists()


def test_msprof_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert msprof.main([]) == 2
    assert msprof.main(["--bogus=1", "app"]) == 2
    assert msprof.main(["--type=db", "app"]) == 2
    assert "unknown option(s): --bogus" in capsys.readouterr().err
    assert msprof.parse_args(["--output", "d", "python", "a.py", "--x"]) == ({"output": "d"}, ["python", "a.py", "--x"])
    assert msprof.parse_args(['--application=python "my app.py" 1'])[1] == ["python", "my app.py", "1"]


def test_pycann_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0 and "compare" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2
    assert cli.main([]) == 2
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])


def test_an_unwritable_profile_dir_is_reported_at_the_first_load(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    """``PYCANN_PROFILE_DIR=/proc/x python app.py``: the folder cannot be written, which was said
    only when the program exited, after the whole run; now at the first model load (no profiler
    starts), naming the variable and the folder."""
    from pycann.profiler import session

    a_file = tmp_path / "f"
    a_file.write_text("")
    for bad in ("/proc/pycann-profile", str(a_file / "sub")):
        monkeypatch.setenv("PYCANN_PROFILE_DIR", bad)
        assert session.start_from_env() is None
        err = capsys.readouterr().err
        assert f"PYCANN_PROFILE_DIR={bad!r}" in err and "not profiling" in err, err
