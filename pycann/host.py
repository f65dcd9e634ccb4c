"""The host machine's identity, for results that hold only on the machine they were measured on
(the AOE knowledge bank's ``soc`` key, the kernel environment an ``atc`` .om records).

A leaf module (standard library only): the knowledge bank, which GE reads on every compile, may
import it (tests/test_layers.py).
"""

from __future__ import annotations

import functools
import os
import platform

__all__ = ["cpu_identity"]


@functools.lru_cache(maxsize=1)
def cpu_identity() -> str:
    """``<arch>:<cpu model>:<logical CPUs>``, e.g. ``x86_64:AMD EPYC:2``: the CPU model from
    Linux's ``/proc/cpuinfo`` ("model name"); elsewhere, or where it names none, the platform's
    processor string. Read once per process."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    # (platform.processor() runs ``uname -p`` in a subprocess on Linux: only where cpuinfo says nothing)
    return f"{platform.machine()}:{model or platform.processor()}:{os.cpu_count()}"
