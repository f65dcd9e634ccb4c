"""The OCR application against RapidOCR's own pipeline (tests/data/ocr/rapidocr_golden.json, made by
scripts/ocr_golden.py with rapidocr-onnxruntime 1.4.4), and its numpy parts against OpenCV."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pycann.ocr import ctc
from pycann.ocr.db import min_area_rect, order_box

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ocr"
MODELS = Path(os.environ.get("PYCANN_MODEL_DIR", Path.home() / ".cache" / "pycann" / "models"))
NAMES = ("rapidocr_ppocrv4_det", "rapidocr_ppocr_mobile_v2_cls", "rapidocr_ppocrv4_rec")


def test_min_area_rect_matches_opencv() -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    for _ in range(30):
        c, ang = rng.uniform(20, 80, 2), rng.uniform(0, np.pi)
        pts = rng.normal(0, 1, (60, 2)) * [rng.uniform(3, 30), rng.uniform(1, 8)]
        pts = np.rint(pts @ [[np.cos(ang), np.sin(ang)], [-np.sin(ang), np.cos(ang)]] + c).astype(np.int32)
        ours, side = min_area_rect(pts)
        rect = cv2.minAreaRect(pts)
        assert side == pytest.approx(min(rect[1]), abs=1e-3)
        ref = order_box(cv2.boxPoints(rect))
        assert np.abs(order_box(ours) - ref).max() < 1e-2 or abs(rect[1][0] - rect[1][1]) < 1e-3


def test_ctc_decode() -> None:
    chars = ["blank", "a", "b", " "]
    p = np.full((1, 7, 4), 0.1, np.float32)
    for t, c in enumerate([1, 1, 0, 1, 2, 2, 3]):
        p[0, t, c] = 0.7
    assert ctc.ctc_decode(p, chars) == [("aab ", pytest.approx(0.7))]
    with pytest.raises(ValueError, match="4-class"):
        ctc.ctc_decode(np.zeros((1, 2, 5), np.float32), chars)


SKIMAGE = "scikit-image==0.26.0"  # its wheel ships skimage/data/page.png (a scanned page) and text.png


def _skimage_image(name: str) -> Path:
    """``skimage/data/<name>`` from the scikit-image wheel (pip download, never installed), cached
    as ``~/.cache/pycann/images/skimage_<name>``; skips when it cannot be fetched."""
    import zipfile

    cache = Path.home() / ".cache" / "pycann"
    out = cache / "images" / f"skimage_{name}"
    if out.is_file():
        return out
    wheels = cache / "wheels"
    found = sorted(wheels.glob("scikit_image-0.26.0-*.whl"))
    if not found:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", SKIMAGE, "-d", str(wheels)],
                           capture_output=True, text=True, timeout=600)
        found = sorted(wheels.glob("scikit_image-0.26.0-*.whl"))
        if r.returncode or not found:
            pytest.skip(f"cannot fetch {SKIMAGE}: {r.stderr[-300:]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as z:
        tmp = out.with_suffix(".part")
        tmp.write_bytes(z.read(f"skimage/data/{name}"))
        tmp.replace(out)
    return out


def _models() -> list[Path]:
    """The three models, fetched from the rapidocr-onnxruntime wheel when not cached yet."""
    paths = [MODELS / f"{n}.onnx" for n in NAMES]
    if all(p.is_file() for p in paths):
        return paths
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from scripts.fetch_models import ensure_model

    try:
        return [Path(ensure_model(n)) for n in NAMES]
    except Exception as e:  # noqa: BLE001 - offline machine
        pytest.skip(f"OCR models not available ({e}): python scripts/fetch_models.py --group ocr")


@pytest.fixture(scope="module")
def pipeline():  # type: ignore[no-untyped-def]
    pytest.importorskip("simplejpeg")
    pytest.importorskip("pyclipper")
    pytest.importorskip("scipy")
    from pycann.ocr.pipeline import OcrPipeline

    return OcrPipeline.with_infersession(*_models())


@pytest.mark.models
@pytest.mark.parametrize("image", ["page.jpg", "rotated.png", "line.png", "skimage_page.png", "skimage_text.png"])
def test_ocr_matches_rapidocr(pipeline, image: str) -> None:  # type: ignore[no-untyped-def]
    """Same text lines in the same order as RapidOCR, every box corner within 3 px: three rendered
    images (tests/data/ocr; line.png is letterboxed) and two real ones from scikit-image's wheel."""
    golden = json.loads((DATA / "rapidocr_golden.json").read_text(encoding="utf-8"))[image]
    path = _skimage_image(image.removeprefix("skimage_")) if image.startswith("skimage_") else DATA / image
    lines = pipeline.read(path.read_bytes())
    assert [x.text for x in lines] == [g["text"] for g in golden]
    for x, g in zip(lines, golden):
        assert np.abs(x.box - np.array(g["box"])).max() <= 3, (x.text, x.box.tolist(), g["box"])
        # weak lines (skimage text.png's 18x13 px "2") feel OpenCV's 1/32-px sample positions
        assert x.score == pytest.approx(g["score"], abs=0.005 if g["score"] > 0.8 else 0.05)


@pytest.mark.models
def test_acl_sample_and_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """samples/ocr/ocr_acl.py (a subprocess, as a user runs it) and ``pycann ocr IMAGE`` print
    RapidOCR's lines for the rendered page."""
    _models()
    pytest.importorskip("simplejpeg")
    from pycann.tools import cli

    img = str(DATA / "page.jpg")
    golden = [g["text"] for g in json.loads((DATA / "rapidocr_golden.json").read_text(encoding="utf-8"))["page.jpg"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    app = subprocess.run([sys.executable, str(ROOT / "samples" / "ocr" / "ocr_acl.py"), img], capture_output=True,
                         text=True, env=env, timeout=600)
    assert app.returncode == 0, app.stderr
    assert [line.split("\t")[0] for line in app.stdout.splitlines()] == golden
    assert cli.main(["ocr", img]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == golden


def test_cli_reports_missing_image(tmp_path: Path) -> None:
    from pycann.tools import ocr

    os.environ.setdefault("PYCANN_MODEL_DIR", str(MODELS))
    code = ocr.main([str(tmp_path / "nope.jpg"), "--det", __file__, "--cls", __file__, "--rec", __file__])
    assert code == 2


def test_crop_quad_close_to_opencv_warp() -> None:
    """The perspective crop against cv2.warpPerspective(INTER_CUBIC, BORDER_REPLICATE) as RapidOCR
    calls it (OpenCV quantises the sample position to 1/32 px, hence not exact)."""
    cv2 = pytest.importorskip("cv2")
    from pycann.ocr.pipeline import crop_quad

    yy, xx = np.mgrid[0:120, 0:200]
    img = np.stack([xx, yy, (xx + 2 * yy) % 256], -1).astype(np.uint8)
    box = np.array([[20.0, 30], [150, 20], [155, 70], [25, 80]], np.float32)
    ours = crop_quad(img, box)
    h, w = ours.shape[:2]
    m = cv2.getPerspectiveTransform(box, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32))
    ref = cv2.warpPerspective(img, m, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    d = np.abs(ours.astype(int) - ref)
    assert d.mean() < 0.1 and (d > 1).mean() < 0.005  # the few > 1: the 255 -> 0 wrap of channel 2


@pytest.mark.parametrize("shape", [(20, 300), (40, 4500)])
def test_png_outside_pngds_range_decodes_like_a_jpeg(shape: tuple[int, int]) -> None:
    """The OCR app scales small (< 30 px) and large pictures itself; a PNG of 20x300 or 40x4500 was
    refused with PNGD's device range (32..4096) while the same picture as a JPEG decoded."""
    pil = pytest.importorskip("PIL.Image")
    import io

    from pycann.ocr.pipeline import decode_image

    rgb = np.random.default_rng(0).integers(0, 256, (*shape, 3)).astype(np.uint8)
    bio = io.BytesIO()
    pil.fromarray(rgb).save(bio, "PNG")
    np.testing.assert_array_equal(decode_image(bio.getvalue()), rgb[..., ::-1])


def test_an_image_that_is_neither_jpeg_nor_png_is_named_so() -> None:
    """A BMP (or any other file) was reported as PNGD's "not a PNG stream"."""
    from pycann.dvpp.formats import DvppError
    from pycann.ocr.pipeline import decode_image

    with pytest.raises(DvppError, match=r"neither a JPEG nor a PNG image \(it starts with b'BM"):
        decode_image(b"BM" + bytes(60))
