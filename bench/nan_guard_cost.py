"""What the NaN guard (pycann/kernels/providers/nan_guard.py) costs per inference on a real model.

Runs the model's benchmark input through InferSession (ONNX compiled in memory) with every read
the guard makes (``nan_guard._norm2``: convs whose input a guarded producer already proved bounded
make none) timed in thread CPU time, and prints the reads per inference, the values they read,
their time, and the inference's wall and process CPU time. Thread time of the checks
is robust to a loaded machine (they are single-threaded BLAS dots); compare it with a clean
inference time from bench/run_bench.py.

    python bench/nan_guard_cost.py rapidocr_ppocrv4_det rapidocr_ppocr_mobile_v2_cls
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pycann.acl.session import InferSession  # noqa: E402
from pycann.kernels.providers import nan_guard  # noqa: E402
from scripts.model_zoo import MODELS  # noqa: E402


def main(names: list[str], runs: int = 10) -> None:
    orig = nan_guard._norm2
    stats = {"t": 0.0, "n": 0, "values": 0}

    def timed(a):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        v = orig(a)
        stats["t"] += time.thread_time() - t
        stats["n"] += 1
        stats["values"] += a.size
        return v

    nan_guard._norm2 = timed  # type: ignore[assignment]
    for name in names:
        spec = MODELS[name]
        sess = InferSession(0, str(spec.ensure()))
        feeds = spec.inputs(0, 1)
        sess.infer(dict(feeds))
        stats.update(t=0.0, n=0, values=0)
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(runs):
            sess.infer(dict(feeds))
        cpu, wall = (time.process_time() - c0) / runs, (time.perf_counter() - w0) / runs
        print(f"{name}: {stats['n'] / runs:.0f} reads, {stats['values'] / runs / 1e6:.2f} M values, "
              f"{stats['t'] / runs * 1e3:.2f} ms thread time per inference (inference: wall {wall * 1e3:.1f} ms, "
              f"process CPU {cpu * 1e3:.1f} ms)")


if __name__ == "__main__":
    main(sys.argv[1:] or ["rapidocr_ppocrv4_det"])
