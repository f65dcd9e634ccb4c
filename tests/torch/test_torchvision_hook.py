"""The torchvision import hook: a .pth file in a site dir makes ``import torchvision`` work beside
the +cpu torch (the wheel's C++ ops, built for CUDA torch, cannot load there)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pycann import torch_vision_hook

ROOT = Path(__file__).resolve().parents[2]


def test_pth_line_never_raises(tmp_path: Path) -> None:
    path = torch_vision_hook.install_pth(str(tmp_path))
    line = Path(path).read_text(encoding="utf-8")
    assert line.startswith("import ") and line.count("\n") == 1
    # with pycann not importable the line must still run silently (site runs it at every start-up)
    r = subprocess.run([sys.executable, "-S", "-c", f"exec({line!r})"], capture_output=True, text=True,
                       env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    assert r.returncode == 0 and not r.stderr


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="torchvision not installed")
def test_import_torchvision_through_the_hook(tmp_path: Path) -> None:
    torch_vision_hook.install_pth(str(tmp_path))
    code = (f"import site; site.addsitedir({str(tmp_path)!r})\n"
            "import torchvision, torch\n"
            "m = torchvision.models.resnet18().eval()\n"
            "assert m(torch.zeros(1, 3, 32, 32)).shape == (1, 1000)\n"
            "print('OK', torchvision.__version__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]
