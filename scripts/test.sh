#!/usr/bin/env bash
# Set up .venv (pycann + test extras: ONNX Runtime as the golden, PyTorch to export models),
# check style and types (ruff, mypy) and run the test suite. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not models"`.
set -euo pipefail
. "$(dirname "$0")/_venv.sh" test,models,dev,kernels
ruff check pycann tests
mypy pycann
python -m pytest "$@"
