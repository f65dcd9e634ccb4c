"""Profiling and dump: hooks the executor reports into, collectors, msprof-style outputs.

Importing this package is cheap (only ``hooks``); the rest loads on first use.

* ``profile(output_dir)`` — context manager / ``Profiler`` (session.py)
* ``configure_from_acl_json(cfg)`` — acl.json ``"profiler"`` block (cann-interfaces.md §1.9)
* ``finalize()`` — write acl.json / environment profiles (``acl.finalize``; also at exit)
* ``record_api(name, start_ns, end_ns, track="api")`` — host API calls and memory copies
* ``dump.configure_from_acl_json(cfg)`` — acl.json ``"dump"`` block (dump.py)

See docs/profiling.md.
"""

from __future__ import annotations

from typing import Any

from pycann.profiler.hooks import active, record_api

__all__ = ["profile", "Profiler", "configure_from_acl_json", "finalize", "record_api", "active", "dump"]


def configure_from_acl_json(cfg: Any) -> Any:
    """Start profiling as acl.json's ``"profiler"`` block asks (``{"switch": "on", "output": dir}``).

    ``cfg``: the parsed acl.json object or just its ``"profiler"`` block. Returns the started
    ``Profiler`` or None. (The ``"dump"`` block goes to ``dump.configure_from_acl_json``.)"""
    from pycann.profiler import session

    return session.configure_from_acl_json(cfg)


def finalize() -> list[str]:
    """Write the results of profilers and dumpers started from acl.json or the environment."""
    from pycann.profiler import dump, session

    return session.finalize() + dump.finalize()


def __getattr__(name: str) -> Any:
    if name in ("profile", "Profiler"):
        from pycann.profiler import session

        return getattr(session, name)
    if name == "dump":
        import importlib

        return importlib.import_module("pycann.profiler.dump")
    raise AttributeError(f"module 'pycann.profiler' has no attribute {name!r}")
