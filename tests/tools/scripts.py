"""Loading the repository's scripts (bench/, scripts/) as modules in tests: they are not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str) -> ModuleType:
    """The file ``REPO / relative`` executed as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (a dataclass in the script looks its module up there)
    spec.loader.exec_module(mod)
    return mod
