#!/usr/bin/env bash
# Set up .venv (pycann + test extras: ONNX Runtime as the golden, PyTorch to export models),
# check style and types (ruff, mypy) and run the test suite. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not models"`.
set -euo pipefail
. "$(dirname "$0")/_venv.sh" test,models,dev,kernels
# TensorFlow lives in its own venv (~5 min and 1.7 GB the first time, then cached in ~/.cache/pycann):
# the importer tests compare with TensorFlow itself through it. PYCANN_SKIP_TF=1 skips it (those
# tests then skip).
if [ "${PYCANN_SKIP_TF:-0}" != "1" ]; then
  bash scripts/make_tf_venv.sh >/dev/null || echo "TensorFlow venv could not be made: the TensorFlow comparison tests will skip" >&2
fi
ruff check pycann tests
mypy pycann
python -m pytest "$@"
