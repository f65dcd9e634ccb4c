"""Each oneDNN implementation offered for the first (3-channel) convolutions of common models, timed.

oneDNN ranks its implementations by a fixed order, not by measurement; on some CPUs its first choice
for a conv on 3 input channels is not its fastest (bench/RESULTS.md, "First convolutions on 3
channels"). For each stem geometry, every implementation in ``IMPLS`` that oneDNN offers is made
with the C API (channels-last float32, the layout pycann's convs use, on 64-byte aligned buffers)
and timed back to back (median of 40 calls after 5 warm-ups, us); "-" where oneDNN does not offer
it. pycann measures the same choice per model at plan time (kernels/providers/onednn_impl_search.py).

Usage (from the repository root, on a quiet machine)::

    python bench/conv_impls.py
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from pycann.kernels.providers import aligned  # noqa: E402
from pycann.kernels.providers import onednn_capi as c  # noqa: E402
from pycann.kernels.providers import onednn_capi_ops as capi_ops  # noqa: E402
from pycann.kernels.providers.onednn_conv_plan import _cl_strides  # noqa: E402

IMPLS = ("jit:avx512_core", "jit:avx2", "x64:gemm:jit", "brgconv")
# name -> (input NCHW, weight OIHW, stride, pad)
STEMS = {
    "resnet50 7x7/2 p3 -> 64 @224": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "mobilenet_v2 3x3/2 p1 -> 32 @224": ((1, 3, 224, 224), (32, 3, 3, 3), 2, 1),
    "mobilenet_v3 3x3/2 p1 -> 16 @224": ((1, 3, 224, 224), (16, 3, 3, 3), 2, 1),
    "shufflenet 3x3/2 p1 -> 24 @224": ((1, 3, 224, 224), (24, 3, 3, 3), 2, 1),
    "squeezenet 3x3/2 p0 -> 64 @224": ((1, 3, 224, 224), (64, 3, 3, 3), 2, 0),
    "inception 3x3/2 p0 -> 32 @299": ((1, 3, 299, 299), (32, 3, 3, 3), 2, 0),
    "convnext 4x4/4 -> 96 @224": ((1, 3, 224, 224), (96, 3, 4, 4), 4, 0),
    "vit 16x16/16 -> 768 @224": ((1, 3, 224, 224), (768, 3, 16, 16), 16, 0),
    "ppocr det 3x3/2 p1 -> 16 @640": ((1, 3, 640, 640), (16, 3, 3, 3), 2, 1),
    "ppocr rec 3x3/2 p1 -> 16 @48x320": ((1, 3, 48, 320), (16, 3, 3, 3), 2, 1),
}


def runner(xs: tuple[int, ...], ws: tuple[int, ...], s: int, p: int, want: str):  # type: ignore[no-untyped-def]
    """A call of the conv on implementation ``want`` (None when oneDNN does not offer it)."""
    n, _, h, w = xs
    co, _, kh, kw = ws
    ys = (n, co, (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1)
    src = c.MemoryDesc.strided(xs, [q // 4 for q in _cl_strides(xs)])
    dst = c.MemoryDesc.strided(ys, [q // 4 for q in _cl_strides(ys)])
    bias = c.MemoryDesc.strided((co,), (1,))
    pd = capi_ops.convolution_pd(src, c.MemoryDesc.any(ws), bias, dst, [s] * 2, [0, 0], [p] * 2, [p] * 2, capi_ops.Attr([]))
    while not pd.impl_info().startswith(want):
        if not pd.next_impl():
            return None
    wmd = pd.query_md(c.QUERY_WEIGHTS_MD)
    # on cache lines, as pycann's arenas (kernels/providers/aligned.py): numpy's 16-byte alignment
    # slowed the AVX-512 kernels' stores up to 1.5x and skewed the comparison
    x = aligned.empty(int(np.prod(xs)))
    x[:] = np.random.rand(x.size)
    wt = aligned.empty(wmd.size() // 4 + 16)
    wt.fill(0.1)
    b = np.zeros(co, np.float32)
    y = aligned.empty(int(np.prod(ys)))
    prim = c.Primitive(pd, [(c.ARG_SRC, c.Memory(src, x.ctypes.data)), (c.ARG_WEIGHTS, c.Memory(wmd, wt.ctypes.data)),
                            (c.ARG_BIAS, c.Memory(bias, b.ctypes.data)), (c.ARG_DST, c.Memory(dst, y.ctypes.data))])
    return prim, (x, wt, b, y)


def median_us(prim) -> float:  # type: ignore[no-untyped-def]
    for _ in range(5):
        prim.execute()
    times = []
    for _ in range(40):
        t0 = time.perf_counter()
        prim.execute()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def main() -> int:
    print("| stem | " + " | ".join(IMPLS) + " |")
    print("|---|" + "---:|" * len(IMPLS))
    for name, (xs, ws, s, p) in STEMS.items():
        cells = []
        for impl in IMPLS:
            made = runner(xs, ws, s, p, impl)
            cells.append("-" if made is None else f"{median_us(made[0]):.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
