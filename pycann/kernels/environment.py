"""The environment a graph's kernel choices were made in (``atc`` records it in the .om manifest as
``"kernel_env"``).

KernelSelection and LayoutSelection (ge/compile/passes) pick a provider algorithm and a layout per
node from what is true of the machine and the install: the CPU (its ISA decides what oneDNN and
torch support), the kernel libraries present (oneDNN v3 and v2, torch), the version of pycann and
numpy, the knobs ``PYCANN_PROVIDERS`` and ``PYCANN_KERNEL_SELECTION``, and the AOE knowledge bank.
When a static model is loaded where all of that is unchanged, the compiled graph is what run-time
specialisation would make again, so the loader plans it as it is (``ge/run/specializer.py``): no pass
pipeline at load and the compile side is not even imported (bench/RESULTS.md, first run).

Every part is cheap to read (no library is loaded, no package metadata read): the loader asks on
every load. Anything not captured here (a library that is present but fails its self-check) is
still safe: a recorded algorithm that is not available falls back to the static choice when the
kernel is bound (``providers.resolve``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

import pycann
from pycann import config
from pycann.host import cpu_identity


def _first_file(paths: list[str]) -> str:
    return next((p for p in paths if os.path.isfile(p)), "")


def _libraries() -> str:
    """The kernel libraries a provider would load: oneDNN v3's and v2's paths, and whether torch is
    installed (``find_spec``: nothing is imported)."""
    # (the candidate lists live with the loaders; importing them loads no library)
    from pycann.kernels.providers import onednn2_capi, onednn_capi

    torch = "torch" if importlib.util.find_spec("torch") is not None else ""
    return "|".join((_first_file(onednn_capi.library_candidates()), _first_file(onednn2_capi.library_candidates()),
                     torch))


def _bank(op_bank_path: str, kernel_bank: bool) -> str:
    """The knowledge bank's file stamp (size and mtime of ``bank.sqlite`` and its journal), or why none
    is read: a bank written after the compile may hold a better kernel for a node."""
    if not kernel_bank:
        return "off"
    try:
        folder = config.tune_bank_dir(op_bank_path)
    except config.ConfigError:
        return "unreadable"
    stamps = []
    for name in ("bank.sqlite", "bank.sqlite-wal"):
        try:
            st = (Path(folder) / name).stat()
            stamps.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            pass
    return ",".join(stamps) or "none"


def choice_environment(op_bank_path: str = "", kernel_bank: bool = True) -> dict[str, str]:
    """What the kernel and layout choices of a graph compiled now depend on, as JSON-ready strings.

    ``op_bank_path`` / ``kernel_bank``: the graph's ``CompileContext`` fields (which knowledge bank
    its KernelSelection reads, and whether). Two calls return equal dicts exactly when a compile
    would make the same choices (up to a library that is present but broken, see the module doc)."""
    return {
        "pycann": pycann.__version__,
        "numpy": np.__version__,
        "machine": cpu_identity(),
        "libraries": _libraries(),
        "providers": ",".join(sorted(config.providers_allowed() or ())) or "all",
        "kernel_selection": config.kernel_selection() or "static",
        "bank": _bank(op_bank_path, kernel_bank),
    }
