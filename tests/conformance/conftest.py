"""Conformance summary: printed at the end of any run that included the backend suite."""

from __future__ import annotations

import collections
import re
from typing import Any

import pytest

_results: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "test_onnx_backend" not in report.nodeid:
        return
    name = report.nodeid.rsplit("::", 1)[-1]
    if not name.endswith("_cpu"):
        return  # BackendTest also generates CUDA variants, always skipped here
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _results[name] = report.outcome


def _op_of(test_name: str) -> str:
    from onnx.backend.test.loader import load_model_tests

    global _OPS
    if _OPS is None:
        _OPS = {}
        for tc in load_model_tests(kind="node"):
            if tc.model is not None and tc.model.graph.node:
                _OPS[tc.name] = tc.model.graph.node[0].op_type
    base = re.sub(r"_cpu$", "", test_name)
    return _OPS.get(base, "(model suites)")


_OPS: dict[str, str] | None = None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _results:
        return
    from tests.conformance.ledger import read_ledger

    counts = collections.Counter(_results.values())
    ledger = read_ledger()
    tr = terminalreporter
    tr.section("ONNX backend conformance (pycann)")
    tr.write_line(
        f"total {len(_results)}, passed {counts.get('passed', 0)}, failed {counts.get('failed', 0)}, "
        f"excluded {counts.get('skipped', 0)} (ledger tests/conformance/excluded.txt: {len(ledger)} lines)"
    )
    per_op = collections.Counter(_op_of(n) for n, o in _results.items() if o == "failed")
    if per_op:
        tr.write_line("failures per op: " + ", ".join(f"{op} {c}" for op, c in per_op.most_common()))
