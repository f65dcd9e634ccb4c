"""How long the fuzzers run: a fixed, derandomized handful of examples in the default test run
(the same inputs every time, a few seconds), or ``PYCANN_FUZZ_SECONDS=N`` seconds of fresh random
examples per fuzzer, with hypothesis's example database in ``tests/fuzz/.hypothesis`` so that
a failure found once is tried first on the next run. A failure prints hypothesis's falsifying
example; keep it as a regression case in ``tests/fuzz/corpus/`` (see tests/fuzz/README.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.strategies import SearchStrategy

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def seconds() -> float:
    """``PYCANN_FUZZ_SECONDS`` (0: the default, bounded run)."""
    try:
        return max(0.0, float(os.environ.get("PYCANN_FUZZ_SECONDS", "0")))
    except ValueError:
        return 0.0


def fuzz(strategy: SearchStrategy[Any], prop: Callable[[Any], None], examples: int) -> None:
    """Check ``prop`` on ``examples`` derandomized inputs, or for ``seconds()`` of random ones."""
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    budget = seconds()
    if budget <= 0:
        run = settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                       suppress_health_check=quiet)(given(strategy)(prop))
        run()
        return
    db = DirectoryBasedExampleDatabase(str(HERE / ".hypothesis"))
    end = time.monotonic() + budget
    while time.monotonic() < end:
        run = settings(max_examples=max(examples, 200), database=db, deadline=None,
                       suppress_health_check=quiet)(given(strategy)(prop))
        run()
