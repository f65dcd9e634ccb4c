"""The official ONNX backend test suite (onnx.backend.test.BackendTest) over pycann.backend:
node cases (generated in memory by onnx >= 1.20), and the simple, pytorch-converted and
pytorch-operator model suites. Excluded cases are listed, with reasons, in excluded.txt; the
summary (total / passed / failed / excluded / per-op failures) is printed by conftest.py."""

from __future__ import annotations

import warnings

import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from pycann.backend import PycannBackend
from tests.conformance.ledger import read_ledger

warnings.filterwarnings("ignore", category=RuntimeWarning)

backend_test = onnx.backend.test.BackendTest(PycannBackend, __name__)
# The "real" suite downloads models from the internet at run time; this machine has no access.
for tc in load_model_tests(kind="real"):
    backend_test.exclude(f"^{tc.name}_cpu$")
for name in read_ledger():
    backend_test.exclude(f"^{name}_cpu$")

globals().update(backend_test.test_cases)
