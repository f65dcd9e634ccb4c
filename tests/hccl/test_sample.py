"""The user sample /work/shared/samples/hccl/allreduce.py, unmodified, under
``pycann-run -m torch.distributed.run --nproc_per_node=N`` (npu tensors over hccl)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.hccl.spawn import ROOT, free_port
from tests.shared_paths import shared

SAMPLE = shared("samples/hccl/allreduce.py")


@pytest.mark.parametrize("n", [2, 4])
def test_allreduce_sample(n: int) -> None:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE} is not on this machine")
    if importlib.util.find_spec("pycann.torch") is None:
        pytest.skip("the npu device and the torch_npu shim (pycann.torch, the torch helper's branch) are not in "
                    "this tree yet")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "pycann.tools.run", "-m", "torch.distributed.run",
                        f"--nproc_per_node={n}", f"--master_port={free_port()}", SAMPLE.name],
                       cwd=SAMPLE.parent, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "allreduce: ok" in r.stdout
