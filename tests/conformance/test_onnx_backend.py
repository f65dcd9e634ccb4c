"""The official ONNX backend test suite (onnx.backend.test.BackendTest) over pycann.backend:
node cases (generated in memory by onnx >= 1.20), and the simple, pytorch-converted and
pytorch-operator model suites. Excluded cases are listed, with reasons, in excluded.txt; the
summary (total / passed / failed / excluded / per-op failures) is printed by conftest.py."""

from __future__ import annotations

import warnings

import onnx.backend.test

from pycann.backend import PycannBackend
from tests.conformance.ledger import read_ledger

warnings.filterwarnings("ignore", category=RuntimeWarning)

backend_test = onnx.backend.test.BackendTest(PycannBackend, __name__)
for name in read_ledger():
    backend_test.exclude(f"^{name}_cpu$")

globals().update(backend_test.test_cases)


def test_ledger_names_exist() -> None:
    """Every ledger line names a real test of the suite (a stale line would hide nothing)."""
    names = {k[: -len("_cpu")] for k in _all_names() if k.endswith("_cpu")}
    missing = [n for n in read_ledger() if n not in names]
    assert not missing, f"ledger names tests that do not exist: {missing}"


def _all_names() -> set[str]:
    out: set[str] = set()
    for case in backend_test.test_cases.values():
        out.update(n for n in dir(case) if n.startswith("test_"))
    return out
