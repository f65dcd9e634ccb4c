"""The eager npu fast path (``pycann.torch._fastpath``) on and off, interleaved in one process.

Two parts, each alternating the two settings round by round so that load on the machine hits both:

* ``ops``: the warm per-call time of single eager ops on small npu tensors (1x64x4x4, where the
  kernel is a few microseconds and the rest is the adaptor's Python): a 3x3 conv, an inference
  batch norm, ``relu_`` and ``add_``; microseconds a call, min and median over rounds.
* ``model``: eager ResNet-50 (``scripts/torch_models.build_resnet50``) on torch's CPU device and on
  the npu with the fast path on and off; ms a pass and the ratio to torch CPU (the issue's bar:
  npu <= 1.1x torch CPU).

"Off" replaces ``_fastpath.run`` and ``_fastpath.record`` with no-ops, which is the general path
alone (what ran before the fast path existed).

    python bench/eager_fastpath_ab.py [--part ops|model] [--threads 1] [--rounds 7]

Wrap in ``flock /tmp/pycann-bench.lock`` and record ``cat /proc/loadavg`` (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from pycann.config import apply_omp_wait_policy  # noqa: E402

apply_omp_wait_policy()  # before torch loads its libgomp

import torch  # noqa: E402
import torch_bench  # noqa: E402  (bench/, this script's folder)

import pycann.torch  # noqa: E402, F401  (the npu device)
from pycann.torch import _fastpath  # noqa: E402

_RUN, _RECORD = _fastpath.run, _fastpath.record


def fast(on: bool) -> None:
    """Switch the fast path on (the default) or off (the general path alone)."""
    _fastpath.run = _RUN if on else (lambda *a, **k: None)  # type: ignore[assignment]
    _fastpath.record = _RECORD if on else (lambda *a, **k: None)  # type: ignore[assignment]


def _per_call_us(fn: Callable[[], Any], n: int) -> float:
    for _ in range(n // 10):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def ops(rounds: int) -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).eval().npu()
    bn = torch.nn.BatchNorm2d(64).eval().npu()
    relu = torch.nn.ReLU(inplace=True)
    x = torch.randn(1, 64, 4, 4).npu().contiguous(memory_format=torch.channels_last)
    res: dict[tuple[str, bool], list[float]] = {}
    with torch.no_grad():
        y = conv(x)
        fns = {"conv 3x3": lambda: conv(x), "batch norm": lambda: bn(y), "relu_": lambda: relu(y),
               "add_": lambda: y.add_(y)}
        for _ in range(rounds):
            for on in (True, False):
                fast(on)
                for name, fn in fns.items():
                    res.setdefault((name, on), []).append(_per_call_us(fn, 2000))
    fast(True)
    print("| op (1x64x4x4, warm) | fast path on: us a call, min / median | off: min / median |\n|---|---:|---:|")
    for name in fns:
        a, b = res[(name, True)], res[(name, False)]
        print(f"| {name} | {min(a):.1f} / {statistics.median(a):.1f} | {min(b):.1f} / {statistics.median(b):.1f} |")


def model(rounds: int) -> None:
    cpu, npu, x, xn = torch_bench.resnet50_pair()
    with torch.no_grad():
        diff = float((npu(xn).cpu() - cpu(x)).abs().max())
        m = torch_bench._rounds({"torch CPU": (None, lambda: cpu(x)),
                                 "npu, fast path on": (lambda: fast(True), lambda: npu(xn)),
                                 "npu, fast path off": (lambda: fast(False), lambda: npu(xn))}, rounds, 5)
    fast(True)
    c = m["torch CPU"][0]
    print(f"| ResNet-50 eager, {torch.get_num_threads()} threads | median ms | best ms | / torch CPU |\n|---|---:|---:|---:|")
    for name, (med, best) in m.items():
        print(f"| {name} | {med:.2f} | {best:.2f} | {med / c:.3f}x |")
    print(f"max abs diff npu vs CPU: {diff:.1e}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["ops", "model"], nargs="+", default=["ops", "model"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if "ops" in args.part:
        ops(args.rounds)
    if "model" in args.part:
        model(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
