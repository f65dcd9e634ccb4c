"""``pycann ocr IMAGE``: print the text lines (and boxes) PP-OCR finds in a JPEG or PNG.

Models: ``rapidocr_ppocrv4_det``, ``rapidocr_ppocr_mobile_v2_cls``, ``rapidocr_ppocrv4_rec`` in
``$PYCANN_MODEL_DIR`` (default ``~/.cache/pycann/models``; ``python scripts/fetch_models.py --group
ocr`` puts them there) or given with ``--det/--cls/--rec``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pycann import config

MODELS = {"det": "rapidocr_ppocrv4_det", "cls": "rapidocr_ppocr_mobile_v2_cls", "rec": "rapidocr_ppocrv4_rec"}


def model_dir() -> Path:
    return config.model_dir()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns 0, or 2 for a missing model / unreadable image (with the reason)."""
    ap = argparse.ArgumentParser(prog="pycann ocr", description="PP-OCR text recognition on pycann (DVPP decode)")
    ap.add_argument("image", help="a JPEG or PNG file")
    for k in MODELS:
        ap.add_argument(f"--{k}", help=f"{k} ONNX model (default: {MODELS[k]}.onnx in the model cache)")
    ap.add_argument("--json", action="store_true", help="print [{text, score, box}] as JSON")
    args = ap.parse_args(argv)
    paths = {k: Path(getattr(args, k) or model_dir() / f"{v}.onnx") for k, v in MODELS.items()}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        print(f"pycann ocr: model file(s) not found: {', '.join(missing)}\n"
              "fetch them with: python scripts/fetch_models.py --group ocr", file=sys.stderr)
        return 2
    try:
        data = Path(args.image).read_bytes()
    except OSError as e:
        print(f"pycann ocr: cannot read {args.image}: {e}", file=sys.stderr)
        return 2
    from pycann.dvpp.formats import DvppError
    from pycann.ocr.pipeline import OcrPipeline

    pipe = OcrPipeline.with_infersession(paths["det"], paths["cls"], paths["rec"])
    try:
        lines = pipe.read(data)
    except DvppError as e:
        print(f"pycann ocr: {args.image}: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"text": x.text, "score": round(x.score, 4), "box": x.box.astype(int).tolist()}
                          for x in lines], ensure_ascii=False, indent=1))
    else:
        for x in lines:
            print(f"{x.text}\t{x.score:.3f}\t{x.box.astype(int).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
