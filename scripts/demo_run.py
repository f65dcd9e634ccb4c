"""Run a compiled PP-OCR text detector (.om) on a synthetic document image; print what it found
and the latency (median of 20 runs), and compare with ONNX Runtime when it is installed.

Usage: python scripts/demo_run.py out/ppocrv4_det.om [original.onnx]
"""

from __future__ import annotations

import sys
import time

import numpy as np

import pycann

LINES = ["pycann runs PP-OCR", "on the host CPU", "compiled with atc", "like an Ascend NPU", "2 cores, no NPU"]


def synthetic_page(h: int = 640, w: int = 640) -> np.ndarray:
    """A white page with a few lines of real text (drawn with Pillow's scalable default font when
    Pillow is installed, else glyph-like blocks), normalised as PP-OCR expects:
    (x/255 - mean) / std per channel, NCHW float32."""
    img = np.full((h, w, 3), 255, np.uint8)
    try:
        from PIL import Image, ImageDraw, ImageFont

        page = Image.fromarray(img)
        draw = ImageDraw.Draw(page)
        font = ImageFont.load_default(size=44)
        for i, text in enumerate(LINES):
            draw.text((40, 60 + i * 105), text, fill=(0, 0, 0), font=font)
        img = np.asarray(page)
    except (ImportError, TypeError, OSError):  # no Pillow, or one without scalable fonts
        rng = np.random.default_rng(0)
        for row in range(60, h - 60, 105):
            x = 40
            while x < w - 80:
                gw = int(rng.integers(10, 22))
                img[row:row + 28, x:x + gw] = 20
                x += gw + int(rng.integers(4, 9)) + (20 if rng.random() < 0.15 else 0)
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    x = (img.astype(np.float32) / 255.0 - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def main() -> int:
    om = sys.argv[1]
    sess = pycann.InferSession(0, om)
    x = synthetic_page()
    prob = sess.infer([x])[0]
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        sess.infer([x])
        times.append((time.perf_counter() - t0) * 1e3)
    mask = prob[0, 0] > 0.3
    rows = np.flatnonzero(mask.any(axis=1))
    lines = int(np.sum(np.diff(rows) > 1) + 1) if rows.size else 0
    print(f"model: {om}  input {list(x.shape)}  output {list(prob.shape)}")
    print(f"page with {len(LINES)} lines of text; detector finds {lines} text lines "
          f"({int(mask.sum())} pixels with text probability > 0.3)")
    print(f"latency: median {np.median(times):.1f} ms, min {np.min(times):.1f} ms over {len(times)} runs")
    if len(sys.argv) > 2:
        try:
            import onnxruntime as ort
        except ImportError:
            return 0
        ref = ort.InferenceSession(sys.argv[2], providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        print(f"max |pycann - onnxruntime| = {float(np.max(np.abs(prob - ref))):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
