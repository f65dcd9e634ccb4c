"""RapidOCR's own results (rapidocr-onnxruntime, its models and OpenCV) for the OCR test images.

Run with a Python that has ``rapidocr-onnxruntime`` (it pulls opencv-python, so it lives in its
own venv, e.g. ``/work/venvs/dvpp``)::

    /work/venvs/dvpp/bin/python scripts/ocr_golden.py tests/data/ocr/*.jpg tests/data/ocr/*.png \
        > tests/data/ocr/rapidocr_golden.json

Prints ``{image file name: [{"text", "score", "box"}]}`` as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(paths: list[str]) -> int:
    import rapidocr_onnxruntime
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    out: dict[str, object] = {"_rapidocr_version": getattr(rapidocr_onnxruntime, "__version__", "1.4.4")}
    for p in paths:
        result, _ = engine(p)
        out[Path(p).name] = [{"text": t, "score": round(float(s), 4), "box": [[round(float(v), 1) for v in pt] for pt in box]}
                             for box, t, s in (result or [])]
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
