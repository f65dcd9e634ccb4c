"""Make ``import torchvision`` work beside a CPU-only torch whose torchvision wheel was built for CUDA.

The torchvision wheel on PyPI for torch 2.13 links ``libtorch_cuda.so``; beside the ``+cpu`` torch
its C++ ops (``torchvision/_C.so``) cannot load. torchvision tolerates that for every op except
two: ``_meta_registrations.py`` calls ``torch.library.register_fake("torchvision::nms")`` (and
``qnms``) unguarded, so the import fails with "operator torchvision::nms does not exist".
``ensure_torchvision_importable()`` defines just those two schemas (no kernels) when the C++
ops cannot load; torchvision's models, transforms and datasets then work, and its C++ ops
(``torchvision.ops.nms``, ``roi_align``, ...) raise torchvision's own "Couldn't load custom C++
ops" error as they would without the wheel's library.

``pycann.torch`` calls it on import. For a plain ``import torchvision`` the set-up
(``scripts/_venv.sh`` with the ``models`` extra) runs ``python -m pycann.torch_vision_hook
--install``, which writes ``pycann_torchvision.pth`` into site-packages: at start-up it only adds
a finder to ``sys.meta_path`` (no torch import) that runs the check when torchvision is first
imported (the pattern setuptools' ``distutils-precedence.pth`` uses).
"""

from __future__ import annotations

import os
import sys

# Only ``os`` and ``sys`` at import: the .pth file imports this module at every interpreter start,
# and ``importlib.abc`` (+ importlib.resources, tempfile, shutil, random) and ``sysconfig`` cost
# ~14 ms there (``python -X importtime -c pass``). A meta path finder needs only ``find_spec``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Sequence
    from typing import Any

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library: Any = None  # (a string annotation: never evaluated)
PTH_NAME = "pycann_torchvision.pth"


def ensure_torchvision_importable() -> bool:
    """Define torchvision's ``nms``/``qnms`` schemas if torchvision is installed and its C++ ops
    cannot load. Returns True when it defined them. Never imports torchvision itself."""
    global _library
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or _library is not None:
        return False
    import torch

    if _op_exists("torchvision::nms"):
        return False  # defined already (the wheel's library, or an earlier call)
    lib_path = os.path.join(list(spec.submodule_search_locations)[0], "_C.so")
    if os.path.exists(lib_path):
        try:
            torch.ops.load_library(lib_path)
            return False  # the wheel's C++ ops load: nothing to do
        except (OSError, RuntimeError):
            pass
    lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - torchvision's own schemas
    for schema in _SCHEMAS:
        lib.define(schema)
    _library = lib
    return True


def _op_exists(qualname: str) -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
        return True
    except RuntimeError:
        return False


class _Finder:
    """Runs ``ensure_torchvision_importable`` once, just before torchvision is first imported (a
    ``sys.meta_path`` entry: the import system calls ``find_spec`` only)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torchvision":
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
            try:
                ensure_torchvision_importable()
            except Exception:  # noqa: BLE001 - never break an import from a start-up hook
                pass
        return None  # the normal finders import the module


def install_finder() -> None:
    """Add the finder (what the .pth file runs at start-up)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install_pth(site_dir: str | None = None) -> str:
    """Write ``pycann_torchvision.pth`` into ``site_dir`` (default: this interpreter's
    site-packages); returns its path."""
    import sysconfig

    d = site_dir or sysconfig.get_paths()["purelib"]
    path = os.path.join(d, PTH_NAME)
    with open(path, "w", encoding="utf-8") as f:
        # one line, never raising: a .pth line that fails prints an error at every start-up
        f.write("import sys; exec('try:\\n import pycann.torch_vision_hook as h\\n h.install_finder()\\n"
                "except Exception:\\n pass')\n")
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["--install"]:
        print(install_pth())
    else:
        print("usage: python -m pycann.torch_vision_hook --install", file=sys.stderr)
        sys.exit(2)
