"""Output-path checks shared by the command-line tools (atc, pycann compare, msprof, aoe, pycann-bench)
and the profiler ``PYCANN_PROFILE_DIR`` starts (a leaf: it imports nothing of pycann's).

A tool checks where it will write *before* doing any work, so that ``--output=/proc/x`` or a
file used as a folder fails in one line instead of a traceback after a long compile.
"""

from __future__ import annotations

import os
import tempfile


def folder_problem(folder: str, create: bool = True) -> str | None:
    """Why files cannot be written into ``folder`` (created if missing), or ``None`` if they can.

    The check is a real one: the folder is created and a temporary file is made in it and
    removed (permission bits alone do not tell, e.g. for root or in /proc). With ``create=False``
    a missing folder is not made: the probe goes into its first existing ancestor instead (for a
    check that must leave nothing behind when a later check fails)."""
    folder = folder or "."
    probe = folder
    while probe and not os.path.exists(probe):  # the first existing ancestor must be a folder
        parent = os.path.dirname(probe.rstrip(os.sep))
        if parent == probe:
            break
        probe = parent
    if probe and os.path.exists(probe) and not os.path.isdir(probe):
        return f"'{probe}' is a file, not a folder"
    target = folder if create or os.path.isdir(folder) else (probe or ".")
    try:
        if create:
            os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".pycann-probe-"):
            pass
    except OSError as e:
        return f"cannot write into '{folder}': {e.strerror or e}"
    return None


def file_problem(path: str) -> str | None:
    """Why the file ``path`` cannot be written (its folder is created), or ``None``."""
    if os.path.isdir(path):
        return f"'{path}' is a folder, not a file"
    return folder_problem(os.path.dirname(path))
