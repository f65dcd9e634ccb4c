"""A test script template: a thread of the parent holds some locks while the process forks, and the
child runs a check (the forked-children tests of the kernels' ``omp_fork.fork_safe`` locks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])


def fork_while_held(setup: str, locks: str, child: str) -> str:
    """A script: ``setup`` (imports, objects), then a thread enters ``with <locks>:`` and waits while
    the process forks; the child runs ``child`` (which must end in ``os._exit(code)``; an alarm
    kills a hang after 10 s); the parent prints ``child <exit status>``."""
    body = "\n".join("    " + line for line in child.strip().splitlines())
    return f"""import os, signal, threading
{setup.strip()}
taken, go = threading.Event(), threading.Event()
def hold():
    with {locks}:
        taken.set()
        go.wait()
t = threading.Thread(target=hold)
t.start()
taken.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)
{body}
code = os.waitpid(pid, 0)[1]
go.set()
t.join()
print("child", code)
"""


def run_script(tmp_path: Path, text: str, timeout: int = 120) -> Any:
    """Run ``text`` as a script in a fresh interpreter (this checkout and the test's path first)."""
    script = tmp_path / "fork_script.py"
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *sys.path]))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env)
