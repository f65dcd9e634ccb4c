"""``torch.jit.script`` with more than one npu device (every rank under torchrun): pycann wraps
``torch.tensor`` / ``as_tensor`` / ``asarray`` then (``_current_device``), and TorchScript did not know
the wrappers as builtins: scripting code that calls them raised "module, class, method, function ...
was expected, got builtin_function_or_method", and so did ``import torch.distributed.optim``
(ZeroRedundancyOptimizer). A child process: the wrappers are process-wide."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = """
import pycann.torch, torch
import torch.distributed.optim  # scripts functional optimizers at import
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

@torch.jit.script
def f(x: torch.Tensor) -> torch.Tensor:
    return x + torch.tensor([1.0, 2.0]) + torch.as_tensor([3.0, 4.0])

assert torch.equal(f(torch.zeros(2)), torch.tensor([4.0, 6.0])), f(torch.zeros(2))
torch.npu.set_device(1)
assert torch.tensor([1.0], device="npu").device == torch.device("npu", 1)  # the wrapper still resolves
print("ok")
"""


def test_script_and_distributed_optim_with_two_devices(tmp_path: Path) -> None:
    script = tmp_path / "jit_two_devices.py"  # TorchScript needs the source in a file
    script.write_text(SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYCANN_DEVICE_COUNT="2", PYCANN_TORCH_REPORT="0",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])
