"""Ascend C CPU twin speed: a 1M-element fp16 vector kernel (z = x + y) on 8 simulated cores.

Side by side in one process: the twin with all checks on (the way ICPU_RUN_KF runs), the same
launch with the instruction trace hook on, and numpy's own ``x + y`` (the floor: the twin issues
one numpy call per instruction per tile). Prints one JSON line per cell and a markdown row.

    python bench/ascendc_twin.py [--tile 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from pycann import ascendc as AscendC

TOTAL, CORES = 1 << 20, 8


def make_kernel(tile: int):
    block = TOTAL // CORES

    @AscendC.kernel
    def add_1m(x, y, z):
        pipe = AscendC.TPipe()
        qx, qy = AscendC.TQue(AscendC.TPosition.VECIN, 1), AscendC.TQue(AscendC.TPosition.VECIN, 1)
        qz = AscendC.TQue(AscendC.TPosition.VECOUT, 1)
        gx, gy, gz = (AscendC.GlobalTensor(AscendC.half) for _ in range(3))
        off = block * AscendC.GetBlockIdx()
        for g, a in ((gx, x), (gy, y), (gz, z)):
            g.SetGlobalBuffer(a.As(AscendC.half) + off, block)
        for q in (qx, qy, qz):
            pipe.InitBuffer(q, 2, tile * 2)
        for i in range(block // tile):
            a, b = qx.AllocTensor(AscendC.half), qy.AllocTensor(AscendC.half)
            AscendC.DataCopy(a, gx[i * tile], tile)
            AscendC.DataCopy(b, gy[i * tile], tile)
            qx.EnQue(a)
            qy.EnQue(b)
            a, b = qx.DeQue(AscendC.half), qy.DeQue(AscendC.half)
            c = qz.AllocTensor(AscendC.half)
            AscendC.Add(c, a, b, tile)
            qz.EnQue(c)
            qx.FreeTensor(a)
            qy.FreeTensor(b)
            c = qz.DeQue(AscendC.half)
            AscendC.DataCopy(gz[i * tile], c, tile)
            qz.FreeTensor(c)

    return add_1m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tile", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    xs, ys = rng.uniform(1, 100, TOTAL).astype(np.float16), rng.uniform(1, 100, TOTAL).astype(np.float16)
    bufs = [AscendC.GmAlloc(TOTAL * 2) for _ in range(3)]
    bufs[0].numpy(np.float16)[:] = xs
    bufs[1].numpy(np.float16)[:] = ys
    kern = make_kernel(args.tile)
    records: list[AscendC.InstrRecord] = []

    def twin() -> None:
        AscendC.ICPU_RUN_KF(kern, CORES, *bufs)

    def twin_trace() -> None:
        records.clear()
        AscendC.ICPU_RUN_KF(kern, CORES, *bufs, trace=records.append)

    def numpy_add() -> None:
        np.add(xs, ys)

    rows = {}
    for name, fn in (("twin", twin), ("twin+trace", twin_trace), ("numpy x+y", numpy_add)):
        fn()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        rows[name] = statistics.median(times)
        print(json.dumps({"cell": name, "elements": TOTAL, "cores": CORES, "tile": args.tile,
                          "median_s": round(rows[name], 4), "min_s": round(min(times), 4),
                          "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}))
    assert np.array_equal(bufs[2].numpy(np.float16), xs + ys)
    print(f"| {TOTAL} fp16, {CORES} cores, tile {args.tile} | {rows['twin']:.3f} s | {rows['twin+trace']:.3f} s "
          f"({len(records)} records) | {rows['numpy x+y'] * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
