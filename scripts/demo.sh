#!/usr/bin/env bash
# The main job: fetch a real model (PP-OCRv4 text detector from the rapidocr-onnxruntime wheel),
# compile it with atc into an .om, run it on the CPU device and print a result and the latency.
set -euo pipefail
. "$(dirname "$0")/_venv.sh" test,kernels
MODEL_DIR="${PYCANN_MODEL_DIR:-$HOME/.cache/pycann/models}"
python scripts/fetch_models.py rapidocr_ppocrv4_det
mkdir -p out
atc --model="$MODEL_DIR/rapidocr_ppocrv4_det.onnx" --framework=5 --output=out/ppocrv4_det \
    --soc_version=Ascend310P3 --input_shape="x:1,3,640,640"
python scripts/demo_run.py out/ppocrv4_det.om "$MODEL_DIR/rapidocr_ppocrv4_det.onnx"
