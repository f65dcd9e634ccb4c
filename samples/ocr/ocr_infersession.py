"""PP-OCR with pycann's InferSession (ais_bench's API): DVPP decode, det, DB boxes, cls, rec, CTC.

    python samples/ocr/ocr_infersession.py IMAGE [MODEL_DIR]

The steps are pycann.ocr.pipeline's (read it for the pre- and post-processing); the three models
are loaded with ``InferSession(0, path)`` and run with ``session.run(None, {"x": batch})``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pycann.ocr.pipeline import OcrPipeline


def main(image: str, model_dir: Path) -> int:
    ocr = OcrPipeline.with_infersession(model_dir / "rapidocr_ppocrv4_det.onnx",
                                        model_dir / "rapidocr_ppocr_mobile_v2_cls.onnx",
                                        model_dir / "rapidocr_ppocrv4_rec.onnx")
    for line in ocr.read(Path(image).read_bytes()):
        print(f"{line.text}\t{line.score:.3f}\t{line.box.astype(int).tolist()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    default = Path(os.environ.get("PYCANN_MODEL_DIR", Path.home() / ".cache" / "pycann" / "models"))
    sys.exit(main(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else default))
