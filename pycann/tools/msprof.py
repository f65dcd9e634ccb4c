"""``msprof``: CANN's profiling command line (cann-interfaces.md §4.1) for pycann applications.

Forms: ``msprof [options] <app> [app args]`` or ``msprof [options] --application="<app> args"``.
The app runs in a subprocess with ``PYCANN_PROFILE_DIR=<output>``: pycann starts a profiler on
the first model load and writes the result folder (§4.2 layout: ``PROF_*/mindstudio_profiler_output/``
with ``op_summary_*.csv``, ``op_statistic_*.csv``, ``msprof_*.json``, ...) when the app exits.
msprof then prints the summary (top ops, share of time, roofline verdicts).

Options: ``--output=DIR`` (default: current directory), ``--ascendcl=on|off`` (host API and
memory-copy tracks), ``--type=text``. CANN's collection switches (``--task-time``, ``--ai-core``,
``--aic-metrics``, ``--aicpu``, ...) are accepted and have no effect on pycann's CPU device.
The exit status is the app's. Also ``python -m pycann.tools.msprof``. See docs/profiling.md.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence

from pycann import config

NO_EFFECT = frozenset({
    "task-time", "ai-core", "aic-mode", "aic-freq", "aic-metrics", "aicpu", "runtime-api", "hccl",
    "model-execution", "msproftx", "sys-hardware-mem", "sys-hardware-mem-freq", "l2", "llc-profiling",
    "sys-cpu-profiling", "sys-profiling", "sys-pid-profiling", "sys-io-profiling", "sys-interconnection-profiling",
    "dvpp-profiling", "host-sys", "host-sys-usage", "ge-api", "task-memory", "storage-limit", "python-path",
})
USAGE = ('usage: msprof [--output=DIR] [--ascendcl=on|off] [--type=text] <app> [args]\n'
         '       msprof [options] --application="<app> args"')


class UsageError(Exception):
    """A bad command line (printed with the usage, exit status 2)."""


def parse_args(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Split ``argv`` into msprof options (``--name=value`` / ``--name value``) and the app command."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name, eq, value = argv[i][2:].partition("=")
        if name in ("help", "h"):
            opts["help"] = "1"
            i += 1
            continue
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"option --{name} needs a value")
            value = argv[i + 1]
            i += 1
        opts[name] = value
        i += 1
    app = list(argv[i:])
    if "application" in opts:
        if app:
            raise UsageError("give the app either with --application or after the options, not both")
        app = shlex.split(opts.pop("application"))
    return opts, app


def _command(app: list[str]) -> list[str]:
    """A Python script path runs with this interpreter."""
    return [sys.executable, *app] if app and app[0].endswith(".py") else app


def _child_env(output: str, opts: dict[str, str], shim: str) -> dict[str, str]:
    import pycann

    env = config.environment()
    env["PYCANN_PROFILE_DIR"] = output
    env["PYCANN_PROFILE_QUIET"] = "1"
    env["PYCANN_PROFILE_ASCENDCL"] = opts.get("ascendcl", "on")
    # the app sees the same pycann as msprof, and `import acl` resolves to pycann.acl, as it
    # does under pycann-run (``shim``: run.make_shim_dir()): msprof profiles CANN applications, which import acl
    root = os.path.dirname(os.path.dirname(os.path.abspath(pycann.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, root, env.get("PYTHONPATH", "")) if p)
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``msprof`` console script; returns the app's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, app = parse_args(argv)
        if opts.get("help"):
            print(USAGE)
            return 0
        if not app:
            raise UsageError("no application given")
        if opts.get("type", "text") != "text":
            raise UsageError(f"--type={opts['type']}: pycann writes the text (csv/json) results only")
        for k in ("ascendcl",):
            if opts.get(k, "on") not in ("on", "off"):
                raise UsageError(f"--{k} takes on or off, not {opts[k]!r}")
        unknown = [k for k in opts if k not in NO_EFFECT | {"output", "ascendcl", "type"}]
        if unknown:
            raise UsageError("unknown option(s): " + ", ".join(f"--{k}" for k in unknown))
    except UsageError as e:
        print(f"[ERROR] msprof: {e}\n{USAGE}", file=sys.stderr)
        return 2
    for k in sorted(set(opts) & NO_EFFECT):
        print(f"[WARNING] msprof: --{k} is accepted for compatibility and has no effect on pycann's CPU device")
    output = os.path.abspath(opts.get("output") or os.getcwd())
    from pycann.paths import folder_problem

    why = folder_problem(output)
    if why:
        print(f"[ERROR] msprof: --output={opts.get('output') or output} is invalid: {why}", file=sys.stderr)
        return 2
    before = set(glob.glob(os.path.join(output, "PROF_*")))
    cmd = _command(app)
    print(f"[INFO] msprof: profiling {' '.join(shlex.quote(a) for a in cmd)}; results under {output}", flush=True)
    from pycann.tools.run import make_shim_dir

    shim = make_shim_dir()
    try:
        rc = subprocess.call(cmd, env=_child_env(output, opts, shim))
    except OSError as e:
        print(f"[ERROR] msprof: cannot start the application: {e}", file=sys.stderr)
        return 127
    finally:  # pycann-run deletes its shims after the run; so does msprof (one /tmp folder a run was left)
        shutil.rmtree(shim, ignore_errors=True)
    new = sorted(set(glob.glob(os.path.join(output, "PROF_*"))) - before)
    if not new:
        print("[WARNING] msprof: no profiling data: the application loaded no pycann model", flush=True)
        return rc
    for prof in new:
        for path in sorted(glob.glob(os.path.join(prof, "mindstudio_profiler_output", "summary_*.txt"))):
            with open(path, encoding="utf-8") as f:
                print(f.read(), end="")
        print(f"[INFO] msprof: results in {prof}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
