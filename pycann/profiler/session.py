"""Profiling sessions: the ``Profiler`` object and the three ways to start one.

1. ``with pycann.profiler.profile("out") as p: ...`` (Python API);
2. acl.json's ``"profiler"`` block (``{"switch": "on", "output": "dir"}``, cann-interfaces.md
   §1.9), passed by ``acl.init`` to ``configure_from_acl_json``; results are written by
   ``finalize()`` (``acl.finalize``) or at interpreter exit;
3. ``msprof --output=DIR --application="python app.py"`` (§4.1), which runs the app with
   ``PYCANN_PROFILE_DIR=DIR``: the first model load starts a profiler (``start_from_env``, called
   from ``hooks.on_model_load``) and its results are written at interpreter exit.

While no profiler runs, the executor takes its plain loop (``hooks.OBSERVERS`` is empty).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import Any

from pycann import config
from pycann.profiler import hooks
from pycann.profiler.analysis import Report, analyze
from pycann.profiler.collector import Collector
from pycann.profiler.peak import Peaks, machine_peaks
from pycann.profiler.summary import NO_MATPLOTLIB, render


class Profiler:
    """Collects node / run / API events between ``start()`` and ``stop()``.

    ``output_dir``: where the msprof-layout result folder is written (``None``: nothing is
    written; ``report`` and ``summary_text`` still are available). ``chart``: also write the
    PNG (needs matplotlib). ``api``: record host API calls / memory copies. ``print_summary``:
    print the summary on ``stop()`` (to ``sys.stdout``).
    """

    def __init__(self, output_dir: str | os.PathLike[str] | None = None, *, chart: bool = True, api: bool = True,
                 print_summary: bool = False, top: int = 15, peaks: Peaks | None = None) -> None:
        self.output_dir = os.fspath(output_dir) if output_dir is not None else None
        self.chart = chart
        self.print_summary = print_summary
        self.top = top
        self.peaks = peaks
        self.collector = Collector(api=api)
        self.report: Report | None = None
        self.paths: dict[str, str] = {}
        self.summary_text = ""
        self.running = False
        self._lock = threading.Lock()

    def start(self) -> Profiler:
        """Begin receiving events (idempotent)."""
        with self._lock:
            if not self.running:
                self.running = True
                hooks.add_observer(self.collector)
        return self

    def stop(self) -> Report:
        """Stop, analyse and (with ``output_dir``) write the result folder; returns the report.
        A second call returns the same report."""
        with self._lock:
            if self.report is not None:
                return self.report
            hooks.remove_observer(self.collector)
            self.running = False
            report = analyze(self.collector, self.peaks or machine_peaks())
            self.report = report
        self.summary_text = render(report, self.top) + hooks.plan_cache_lines()
        if self.output_dir is not None:
            from pycann.profiler.writers import write_all

            chart = self.chart and _have_matplotlib()
            if self.chart and not chart:
                self.summary_text += NO_MATPLOTLIB + "\n"
            self.paths = write_all(report, self.output_dir, self.summary_text, chart=chart)
        if self.print_summary:
            print(self.summary_text, end="", flush=True)
        return report

    @property
    def output_path(self) -> str | None:
        """The ``PROF_*`` folder written by ``stop()`` (None before, or without ``output_dir``)."""
        return self.paths.get("dir")

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _have_matplotlib() -> bool:
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return False
    return True


def profile(output_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> Profiler:
    """``with profile("out") as p: session.infer(...)`` — profile the block; see ``Profiler``."""
    return Profiler(output_dir, **kwargs)


# ----------------------------------------------------------------- managed (acl.json / env) sessions
_MANAGED: list[Profiler] = []
_atexit_registered = False


def _manage(p: Profiler) -> Profiler:
    global _atexit_registered
    _MANAGED.append(p.start())
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(finalize)
    return p


def finalize() -> list[str]:
    """Stop the profilers started by acl.json or the environment and write their results
    (``acl.finalize`` calls this; it also runs at interpreter exit). Returns the PROF folders."""
    out = []
    while _MANAGED:
        p = _MANAGED.pop(0)
        try:
            p.stop()
        except Exception as e:  # never fail the application's exit
            print(f"pycann profiler: could not write results: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if p.output_path:
            out.append(p.output_path)
            if not config.profile_env().quiet:
                print(f"pycann profiler: results in {p.output_path}", file=sys.stderr, flush=True)
    return out


def configure_from_acl_json(cfg: Mapping[str, Any] | None) -> Profiler | None:
    """Start profiling as acl.json asks (§1.9): ``cfg`` is the whole acl.json object or just its
    ``"profiler"`` block. With ``"switch": "on"`` a profiler starts, writing under ``"output"``
    (default: the current directory); ``"acl_api": "off"`` leaves out host API events. Returns the
    profiler, or None when the block is absent or switched off."""
    if not cfg:
        return None
    block = cfg["profiler"] if "profiler" in cfg else cfg
    if not isinstance(block, Mapping) or str(block.get("switch", "off")).lower() != "on":
        return None
    from pycann.profiler import dump

    if dump.active_dumpers():
        warnings.warn("acl.json enables dump and profiling together: dumping skews the timings (CANN advises "
                      "against it)", UserWarning, stacklevel=2)
    out = str(block.get("output") or os.getcwd())
    api = str(block.get("acl_api", "on")).lower() != "off"
    return _manage(Profiler(out, api=api))


def start_from_env() -> Profiler | None:
    """Start the profiler ``PYCANN_PROFILE_DIR`` asks for (set by ``msprof``). Options:
    ``PYCANN_PROFILE_ASCENDCL=off`` (no API events), ``PYCANN_PROFILE_CHART=off``,
    ``PYCANN_PROFILE_QUIET=1`` (no summary / note on stderr at exit; msprof prints it itself)."""
    env = config.profile_env()
    if not env.out:
        return None
    from pycann.paths import folder_problem

    problem = folder_problem(env.out)
    if problem is not None:
        # said now, at the first model load, not at the program's exit after the whole run
        print(f"pycann profiler: PYCANN_PROFILE_DIR={env.out!r}: {problem}; not profiling (set it to a "
              "writable folder)", file=sys.stderr)
        return None
    p = Profiler(env.out, api=env.api, chart=env.chart)
    if not env.quiet:
        p.print_summary = True
    return _manage(p)
