#!/usr/bin/env bash
# Make the TensorFlow Python the importer tests use to generate frozen graphs and TensorFlow's
# goldens (scripts/make_tf_models.py, run as a subprocess; tests/importers/conftest.py).
# TensorFlow stays out of the project venv: it would pull its own protobuf/numpy expectations next
# to onnx/torch. Cost here: ~1.7 GB on disk, ~4-5 min with a warm pip cache; generating the
# models then takes ~40 s (cached in ~/.cache/pycann/tf_models, ~150 MB).
# Usage: bash scripts/make_tf_venv.sh [VENV_DIR]   (default ~/.cache/pycann/tf-venv; tests read $PYCANN_TF_PYTHON)
set -euo pipefail
VENV="${1:-$HOME/.cache/pycann/tf-venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q "tensorflow-cpu>=2.16"
fi
"$VENV/bin/python" -c "import tensorflow as tf; print('TensorFlow', tf.__version__, 'in', '$VENV')"
