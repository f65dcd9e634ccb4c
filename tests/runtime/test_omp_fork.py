"""A model run in a process, then in a child of ``os.fork`` (multiprocessing's default start method on
Linux): libgomp's pool of the forking thread is the parent's in the child, and the first parallel
region hung there; the child now runs plans on a fresh thread (pycann/kernels/providers/omp_fork.py).
Each case runs in its own process, with an alarm so that a hang fails instead of stalling the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forking import fork_while_held, run_script
from tests.runtime.test_omp_affinity import _conv_model

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")

_CHILD = r"""
import multiprocessing, os, signal, sys
import numpy as np
from pycann.kernels.providers import onednn_capi, omp_fork
try:
    onednn_capi.load()
except OSError:
    print("NOLIB"); raise SystemExit
from pycann.ge.run.model import LoadedModel

from pycann.ge.run import contention
from pycann.kernels.providers import omp_affinity

class Quiet:  # scripted CPU samples of a quiet machine, so the parent pins its team before the fork
    def __init__(self):
        self.t = 0.0
    def __call__(self):
        self.t += 1.0
        return contention.CpuSample(self.t, self.t, self.t)
contention._governor = contention.ThreadGovernor(Quiet(), len(os.sched_getaffinity(0)), window=0.0)
m = LoadedModel.from_file(sys.argv[1])
x = np.load(sys.argv[2])
want = [m.run([x])[0] for _ in range(4)][0]
p = omp_affinity.pinning()
assert len(os.sched_getaffinity(0)) < 2 or (p is not None and p.workers_pinned), p  # pinned in the parent

def child_run(_):
    return float(np.abs(m.run([x])[0] - want).max())

pid = os.fork()
if pid == 0:
    signal.alarm(60)
    y = m.run([x])[0]
    os._exit(0 if omp_fork.stale() and np.array_equal(y, want) else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"fork child: status {status}"
assert not omp_fork.stale()  # the parent's own thread keeps running plans itself
signal.alarm(120)
with multiprocessing.get_context("fork").Pool(2) as pool:
    diffs = pool.map(child_run, range(4))
assert max(diffs) == 0.0, diffs
print("OK")
"""


def test_forked_children_run_models_the_parent_ran(tmp_path: Path) -> None:
    model = tmp_path / "conv.onnx"
    import numpy as np

    np.save(tmp_path / "x.npy", _conv_model(model))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(tmp_path / "x.npy")], capture_output=True,
                         text=True, timeout=300)
    if out.stdout.strip() == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-2000:]


_FORK_SAFE = fork_while_held("""
from pycann.kernels.providers import omp_fork
held, free, plain = omp_fork.fork_safe(threading.Lock()), omp_fork.fork_safe(threading.Lock()), threading.Lock()
""", "held, plain", """
# the holder is not in the child: a registered lock is released, an unregistered one stays taken
ok = held.acquire(timeout=5) and free.acquire(timeout=5) and not plain.acquire(timeout=0.2)
os._exit(0 if ok else 3)
""") + 'print("parent still holds nothing:", not held.locked())\n'


def test_fork_safe_lock_held_by_another_thread_is_released_in_the_child(tmp_path: Path) -> None:
    out = run_script(tmp_path, _FORK_SAFE)
    assert "child 0" in out.stdout and "parent still holds nothing: True" in out.stdout, (out.stdout, out.stderr[-2000:])


_TORCH_IN_CHILD = r"""
import os, sys
import numpy as np
from pycann.kernels.providers import onednn_capi, openmp, torch_onednn
onednn_capi.load()
if openmp.library() is None:
    print("NOGOMP"); raise SystemExit
pid = os.fork()
if pid == 0:
    # pycann's own torch fallbacks stay off here (torch imported beside the parent's libgomp state aborted)
    os._exit(0 if not torch_onednn.available() and "torch" not in sys.modules else 3)
print("child", os.waitpid(pid, 0)[1])
import torch  # an application that imports torch itself before forking keeps it in its children
pid = os.fork()
if pid == 0:
    os._exit(0 if torch_onednn.available() else 3)
print("child with torch", os.waitpid(pid, 0)[1])
"""


def test_pycann_does_not_import_torch_in_a_forked_child(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = run_script(tmp_path, _TORCH_IN_CHILD)
    if "NOGOMP" in out.stdout:
        pytest.skip("no libgomp loaded with libdnnl")
    assert "child 0" in out.stdout and "child with torch 0" in out.stdout, (out.stdout, out.stderr[-2000:])


_TORCH_KERNELS_IN_CHILD = r"""
import os, signal, sys
order = sys.argv[3]
if order == "app_first":
    import torch  # the application's own import, before pycann ran anything
import numpy as np
from pycann.ge.run.model import LoadedModel
m = LoadedModel.from_file(sys.argv[1])
x = np.load(sys.argv[2])
want = m.run([x])[0]
assert "torch" in sys.modules  # PYCANN_PROVIDERS=torch: the conv ran on torch's kernel
if order == "app_after":
    import torch  # imported by the application after pycann ran (and imported it)
pid = os.fork()
if pid == 0:
    signal.alarm(60)
    y = m.run([x])[0]
    os._exit(0 if np.array_equal(y, want) else 3)
print("child", os.waitpid(pid, 0)[1])
"""


@pytest.mark.parametrize("order", ["app_first", "app_after", "pycann"])
def test_forked_children_run_torch_kernels_when_torch_was_imported_before_the_fork(tmp_path: Path,
                                                                                    order: str) -> None:
    """A torch imported before the fork (by the application, before or after pycann ran, or by pycann's own
    torch provider) serves pycann's torch kernels in the child: same values, no hang or abort."""
    pytest.importorskip("torch")
    import numpy as np

    model = tmp_path / "conv.onnx"
    np.save(tmp_path / "x.npy", _conv_model(model))
    env = {k: v for k, v in os.environ.items() if k != "PYCANN_PROVIDERS"}
    env["PYCANN_PROVIDERS"] = "torch"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), *sys.path])
    out = subprocess.run([sys.executable, "-c", _TORCH_KERNELS_IN_CHILD, str(model), str(tmp_path / "x.npy"), order],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])
