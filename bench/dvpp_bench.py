"""1080p JPEG -> decode -> 224x224 RGB: pycann's DVPP against PIL and OpenCV on the same files.

    python bench/dvpp_bench.py [--images 24] [--seconds 4] [--threads 1 2]

Each pipeline turns JPEG bytes into a (224, 224, 3) uint8 array; files are decoded from memory
(no disk I/O in the timing). ``--threads N`` maps the files over a pool of N threads (the decoders
release the GIL). Pipelines:

* ``pycann dvpp.fast``: ``pycann.dvpp.fast.decode_resize`` (libjpeg-turbo DCT scaling + VPC bilinear);
* ``pycann acl.media``: JPEGD to NV12 at full size + VPC resize NV12 -> RGB through the pyACL
  facade (device buffers, a stream per thread), what an unmodified CANN app does;
* ``PIL draft``: ``Image.draft`` (the same DCT scaling) + ``resize(BILINEAR)``; ``PIL``: full decode + resize;
* ``OpenCV reduced``: ``imdecode(IMREAD_REDUCED_COLOR_4)`` + ``resize``; ``OpenCV``: full decode + resize.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

W = H = 224


def make_jpegs(n: int) -> list[bytes]:
    """n different 1920x1080 4:2:0 quality-90 JPEGs (smooth colour fields with texture)."""
    from PIL import Image

    out = []
    yy, xx = np.mgrid[0:1080, 0:1920].astype(np.float32)
    for i in range(n):
        rng = np.random.default_rng(i)
        base = np.stack([128 + 100 * np.sin(xx / (30 + i) + i), 128 + 90 * np.cos(yy / (20 + i)),
                         (xx * 0.1 + yy * 0.2 + 20 * i) % 256], -1)
        img = np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)
        bio = io.BytesIO()
        Image.fromarray(img).save(bio, "JPEG", quality=90)
        out.append(bio.getvalue())
    return out


def pipelines() -> dict[str, Callable[[bytes], np.ndarray]]:
    import cv2
    from PIL import Image

    from pycann.dvpp.fast import decode_resize

    def pil_draft(b: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(b)) as im:
            im.draft("RGB", (W, H))
            return np.asarray(im.convert("RGB").resize((W, H), Image.BILINEAR))

    def pil_full(b: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(b)) as im:
            return np.asarray(im.convert("RGB").resize((W, H), Image.BILINEAR))

    def cv_reduced(b: bytes) -> np.ndarray:
        img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_REDUCED_COLOR_4)
        return cv2.cvtColor(cv2.resize(img, (W, H), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)

    def cv_full(b: bytes) -> np.ndarray:
        img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        return cv2.cvtColor(cv2.resize(img, (W, H), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)

    return {"pycann dvpp.fast": lambda b: decode_resize(b, W, H), "pycann acl.media": AclMedia(), "PIL draft": pil_draft,
            "PIL": pil_full, "OpenCV reduced": cv_reduced, "OpenCV": cv_full}


class AclMedia:
    """The acl.media flow; buffers and a stream per thread, reused across images."""

    def __init__(self) -> None:
        import threading

        self.tls = threading.local()

    def _setup(self) -> object:
        import pycann.acl as acl
        from pycann.acl import _state

        M = acl.media
        if not _state.initialized:
            acl.init()
            acl.rt.set_device(0)
        ctx, _ = acl.rt.create_context(0)
        t = self.tls
        t.acl, t.M, t.ctx = acl, M, ctx
        t.stream, _ = acl.rt.create_stream()
        t.ch = M.dvpp_create_channel_desc()
        M.dvpp_create_channel(t.ch)
        t.src, _ = M.dvpp_malloc(1 << 21)
        ws, hs = 1920, 1088
        t.dec_n = ws * hs * 3 // 2
        t.dec_ptr, _ = M.dvpp_malloc(t.dec_n)
        t.dec = M.dvpp_create_pic_desc()
        for k, v in (("data", t.dec_ptr), ("size", t.dec_n), ("format", 1), ("width", 1920), ("height", 1080),
                     ("width_stride", ws), ("height_stride", hs)):
            getattr(M, f"dvpp_set_pic_desc_{k}")(t.dec, v)
        t.out_n = W * 3 * H
        t.out_ptr, _ = M.dvpp_malloc(t.out_n)
        t.out = M.dvpp_create_pic_desc()
        for k, v in (("data", t.out_ptr), ("size", t.out_n), ("format", 12), ("width", W), ("height", H),
                     ("width_stride", W * 3), ("height_stride", H)):
            getattr(M, f"dvpp_set_pic_desc_{k}")(t.out, v)
        t.cfg = M.dvpp_create_resize_config()
        M.dvpp_set_resize_config_interpolation(t.cfg, 1)
        t.host = np.empty((H, W, 3), np.uint8)
        t.host_ptr = acl.util.numpy_to_ptr(t.host)
        t.ready = True
        return t

    def __call__(self, b: bytes) -> np.ndarray:
        t = self.tls if getattr(self.tls, "ready", False) else self._setup()
        acl, M = t.acl, t.M
        acl.rt.set_context(t.ctx)
        acl.rt.memcpy(t.src, 1 << 21, acl.util.bytes_to_ptr(b), len(b), 1)
        assert M.dvpp_jpeg_decode_async(t.ch, t.src, len(b), t.dec, t.stream) == 0
        assert M.dvpp_vpc_resize_async(t.ch, t.dec, t.out, t.cfg, t.stream) == 0
        assert acl.rt.synchronize_stream(t.stream) == 0, acl.get_recent_err_msg()
        acl.rt.memcpy(t.host_ptr, t.out_n, t.out_ptr, t.out_n, 2)
        return t.host.copy()


def measure(fn: Callable[[bytes], np.ndarray], files: list[bytes], threads: int, seconds: float) -> float:
    """Images per second over at least ``seconds`` (after one warm-up pass)."""
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, files))
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            list(pool.map(fn, files))
            n += len(files)
        return n / (time.perf_counter() - t0)


def cpu_ms(fn: Callable[[bytes], np.ndarray], files: list[bytes], rounds: int = 3) -> float:
    """Process CPU milliseconds per image on one thread (less sensitive to other load than wall time;
    1000 / it bounds one idle core's images/s). acl.media's work runs on its stream thread, which
    process time includes."""
    fn(files[0])
    t0 = time.process_time()
    for _ in range(rounds):
        for f in files:
            fn(f)
    return (time.process_time() - t0) * 1e3 / (rounds * len(files))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    files = make_jpegs(args.images)
    pipes = pipelines()
    ref = pipes["OpenCV"](files[0]).astype(int)
    print(f"{args.images} JPEGs 1920x1080 4:2:0 q90 ({np.mean([len(f) for f in files]) / 1e3:.0f} kB avg), "
          f"{os.cpu_count()} CPUs, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}\n")
    cols = " | ".join(f"{t} thread{'s' if t > 1 else ''} img/s" for t in args.threads)
    print(f"| pipeline | {cols} | CPU ms/image | mean abs diff to OpenCV full |")
    print("|---|" + "---:|" * (len(args.threads) + 2))
    for name, fn in pipes.items():
        rates = [measure(fn, files, t, args.seconds) for t in args.threads]
        diff = np.abs(fn(files[0]).astype(int) - ref).mean()
        cpu = cpu_ms(fn, files)
        print(f"| {name} | " + " | ".join(f"{r:.0f}" for r in rates) + f" | {cpu:.1f} | {diff:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
