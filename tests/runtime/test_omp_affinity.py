"""The OpenMP team pinned one thread per CPU while a plan runs (pycann/kernels/providers/omp_affinity.py).

Each case runs in a fresh process (pinning is decided once per process and changes thread masks):
a small oneDNN convolution model is loaded and run, then the masks are read: the caller's during a
run (through a profiler observer) and after it, each team thread's (a ``GOMP_parallel`` callback), a
thread started afterwards, and another thread's during its own run. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import ConfigError, omp_bind

_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(_CPUS) < 2, reason="pinning needs a process with two or more CPUs")

# the masks of the calling thread's OpenMP team, thread number -> CPUs (a GOMP_parallel callback in each)
_TEAM_MASKS = r"""
import ctypes, os
def team_masks():
    from pycann.kernels.providers import openmp
    lib, seen = openmp.library(), {}
    def look(_):
        seen[str(int(lib.omp_get_thread_num()))] = sorted(os.sched_getaffinity(0))
    cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(look)
    lib.GOMP_parallel(ctypes.cast(cb, ctypes.c_void_p), None, int(lib.omp_get_max_threads()), 0)
    return seen
"""

_PROBE = r"""
import ctypes, json, os, sys, threading
import numpy as np
from pycann.kernels.providers import onednn_capi
try:
    onednn_capi.load()
except OSError:
    print(json.dumps("NOLIB")); raise SystemExit
from pycann.ge.run.model import LoadedModel
from pycann.ge.run import contention
from pycann.kernels.providers import omp_affinity, openmp
from pycann.profiler import hooks

class Script:  # scripted CPU samples: others take `load` CPUs per second (no real load, no timing)
    def __init__(self):
        self.wall = self.busy = self.own = 0.0
        self.load = 0.0
    def __call__(self):
        self.wall += 1.0
        self.busy += 1.0 + self.load
        self.own += 1.0
        return contention.CpuSample(self.wall, self.busy, self.own)
script = Script()
script.load = float(sys.argv[3])
contention._governor = contention.ThreadGovernor(script, len(os.sched_getaffinity(0)), window=0.0)

m = LoadedModel.from_file(sys.argv[1])
x = np.load(sys.argv[2])
during = []
class Seen:
    def on_node(self, node, ins, outs, t0, t1, graph):
        during.append(sorted(os.sched_getaffinity(0)))
    def on_run(self, graph, a, b):
        pass
y0 = [m.run([x])[0] for _ in range(3)][0]  # the governor needs two windows before it calls the machine quiet
hooks.add_observer(Seen())
y1 = m.run([x])[0]
hooks.OBSERVERS = ()
after = sorted(os.sched_getaffinity(0))
team = team_masks()
script.load = 1.0  # a neighbour gets busy: the next run lets the workers go
y_busy = m.run([x])[0]
team_busy = team_masks()
other = {}
def other_run():
    other["y"] = m.run([x])[0].tolist()
    other["mask"] = sorted(os.sched_getaffinity(0))
t = threading.Thread(target=other_run); t.start(); t.join()
p = omp_affinity.pinning()
print(json.dumps({"during": during, "after": after, "team": team, "team_busy": team_busy, "y_busy": y_busy.tolist(),
                  "other_mask": other["mask"], "pinned": None if p is None else list(p.cpus),
                  "y0": y0.tolist(), "y1": y1.tolist(), "y_other": other["y"]}))
"""


def _conv_model(path: Path) -> np.ndarray:
    """A 3x3 convolution 8 -> 16 channels on 1x8x32x32 with a Relu (oneDNN's kernel); returns its input."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return rng.standard_normal((1, 8, 32, 32)).astype(np.float32)


def _run(tmp_path: Path, script: str, arg: str, **env: str) -> tuple[dict, np.ndarray]:
    """Run ``script`` (with ``team_masks``) in a fresh process on the conv model, without the OpenMP and
    pycann thread variables of this one plus ``env``; (its JSON line, ORT's output). Skips without libdnnl."""
    model = tmp_path / "conv.onnx"
    x = _conv_model(model)
    np.save(tmp_path / "x.npy", x)
    drop = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "PYCANN_OMP_BIND", "OMP_NUM_THREADS",
            "PYCANN_NUM_THREADS", "PYCANN_PROVIDERS")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-c", _TEAM_MASKS + script, str(model), str(tmp_path / "x.npy"), arg],
                         capture_output=True, text=True, env={**base, **env}, check=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    return got, ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _probe(tmp_path: Path, load: float = 0.0, **env: str) -> dict:
    """Run the probe in a fresh process with ``env``; other processes take ``load`` CPUs (scripted) until
    the probe sets it to 1 for its last run."""
    got, want = _run(tmp_path, _PROBE, str(load), **env)
    for k in ("y0", "y1", "y_other", "y_busy"):  # pinned or not, the values are the model's
        np.testing.assert_allclose(np.array(got[k], np.float32), want, rtol=1e-4, atol=1e-4)
    return got


@needs_two_cpus
def test_quiet_machine_pins_workers_and_the_caller_only_during_runs(tmp_path: Path) -> None:
    got = _probe(tmp_path)
    assert got["pinned"] == _CPUS
    assert got["during"] and all(m == [_CPUS[0]] for m in got["during"])  # the caller on the first CPU
    assert got["after"] == _CPUS  # and given its own mask back
    assert got["team"] == {str(i): [c] for i, c in enumerate(_CPUS) if i > 0} | {"0": _CPUS}
    assert got["other_mask"] == _CPUS  # a thread started later, running the model itself, is never pinned
    # a busy neighbour: the workers are let go (pinned threads could not move away from it)
    assert all(m == _CPUS for m in got["team_busy"].values())


@needs_two_cpus
def test_busy_neighbour_never_pins(tmp_path: Path) -> None:
    got = _probe(tmp_path, load=0.4)  # above QUIET (0.25 CPU), below SLACK: the full team runs, unpinned
    assert got["pinned"] == _CPUS  # eligible, but not pinned while others are busy
    assert all(m == _CPUS for m in got["during"]) and got["after"] == _CPUS
    assert all(m == _CPUS for m in got["team"].values())


@needs_two_cpus
@pytest.mark.parametrize("env", [{"PYCANN_OMP_BIND": "off"}, {"OMP_PROC_BIND": "false"},
                                 {"PYCANN_NUM_THREADS": "1"}],
                         ids=["knob-off", "user-binding-wins", "team-smaller-than-cpus"])
def test_no_pinning_when_off_or_not_ours(tmp_path: Path, env: dict[str, str]) -> None:
    got = _probe(tmp_path, **env)
    assert got["pinned"] is None
    assert all(m == _CPUS for m in got["during"]) and got["after"] == _CPUS
    assert all(m == _CPUS for m in got["team"].values())


def test_knob_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (("", "auto"), ("auto", "auto"), ("on", "auto"), ("off", "off"), ("0", "off")):
        monkeypatch.setenv("PYCANN_OMP_BIND", raw)
        assert omp_bind() == want
    monkeypatch.setenv("PYCANN_OMP_BIND", "cores")
    with pytest.raises(ConfigError, match="PYCANN_OMP_BIND='cores'"):
        omp_bind()


_CASES = r"""
import ctypes, json, os, sys, threading
import numpy as np
from pycann.kernels.providers import onednn_capi
try:
    onednn_capi.load()
except OSError:
    print(json.dumps("NOLIB")); raise SystemExit
from pycann.ge.run.model import LoadedModel
from pycann.ge.run import contention
from pycann.kernels.providers import openmp

class Quiet:  # scripted CPU samples: no other process busy
    wall = 0.0
    def __call__(self):
        self.wall += 1.0
        return contention.CpuSample(self.wall, self.wall, self.wall)
cpus = sorted(os.sched_getaffinity(0))
contention._governor = contention.ThreadGovernor(Quiet(), len(cpus), window=0.0)
m = LoadedModel.from_file(sys.argv[1])
x = np.load(sys.argv[2])

out = {"y": [], "teams": [], "idents": [], "masks": []}
def job():
    out["y"].append([m.run([x])[0] for _ in range(3)][-1].tolist())
    out["teams"].append(team_masks())
    out["idents"].append(threading.get_ident())
    out["masks"].append(sorted(os.sched_getaffinity(0)))
if sys.argv[3] == "threads":  # each call on a new thread: glibc reuses a finished thread's ident
    for _ in range(6):
        t = threading.Thread(target=job); t.start(); t.join()
else:  # "narrowed": pinned runs, then the user narrows the caller to the last CPU
    job()
    os.sched_setaffinity(0, {cpus[-1]})
    job()
print(json.dumps(out))
"""


def _cases(tmp_path: Path, case: str) -> dict:
    got, want = _run(tmp_path, _CASES, case)
    for y in got["y"]:
        np.testing.assert_allclose(np.array(y, np.float32), want, rtol=1e-4, atol=1e-4)
    return got


@needs_two_cpus
def test_each_new_thread_pins_its_own_team_once_the_owner_exited(tmp_path: Path) -> None:
    # The owner was known by its ident: a later thread given the same ident (glibc reuses them) passed
    # as the owner, found the workers "pinned" already, and started its own team's workers inside its
    # pinned run, where they inherited the caller's one CPU (worker 1 on cpus[0] beside the caller).
    got = _cases(tmp_path, "threads")
    pinned = {str(i): [c] for i, c in enumerate(_CPUS) if i > 0} | {"0": _CPUS}
    assert all(t == pinned for t in got["teams"]), got["teams"]  # each taking the team over, none on cpus[0]
    assert all(m == _CPUS for m in got["masks"])


@needs_two_cpus
def test_a_caller_the_user_narrowed_lets_the_workers_go(tmp_path: Path) -> None:
    # The caller narrowed to the last CPU ran as is, but worker len-1 stayed pinned to that same CPU
    got = _cases(tmp_path, "narrowed")
    assert got["teams"][0] == {str(i): [c] for i, c in enumerate(_CPUS) if i > 0} | {"0": _CPUS}
    assert got["masks"][1] == [_CPUS[-1]]
    assert all(m == _CPUS for i, m in got["teams"][1].items() if i != "0")


def test_bad_knob_is_reported_when_the_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.ge.run.model import LoadedModel

    model = tmp_path / "conv.onnx"
    _conv_model(model)
    monkeypatch.setenv("PYCANN_OMP_BIND", "cores")
    with pytest.raises(ConfigError, match="PYCANN_OMP_BIND='cores'"):
        LoadedModel.from_file(model)
