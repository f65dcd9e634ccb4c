"""Eager ResNet-50 (torchvision, random weights, batch 1, eval, ``no_grad``) on torch's CPU and on the
npu, with a contiguous and with a ``channels_last`` model and input, in interleaved rounds
(docs/torch.md, "Eager: memory formats"). Prints, per configuration, the minimum over the rounds of
each round's fastest call and the median of those, in ms. Run it once per checkout, alternating, to
compare two checkouts on a shared machine:

    PYTHONPATH=<checkout> nice -n 19 python bench/eager_memory_format.py [--rounds 8] [--iters 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

from pycann.config import apply_omp_wait_policy

apply_omp_wait_policy()  # before torch loads its libgomp (it reads the policy once), as torch_bench.py

import torch  # noqa: E402

import pycann.torch  # noqa: E402,F401  (the npu device)


def main() -> None:
    """Measure and print one line: ``config=min/median`` for the four configurations."""
    import torchvision

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cl = torch.channels_last
    m = torchvision.models.resnet50().eval()
    x = torch.randn(1, 3, 224, 224)
    cfg = {"cpu-contig": (m, x), "cpu-cl": (copy.deepcopy(m).to(memory_format=cl), x.contiguous(memory_format=cl)),
           "npu-contig": (copy.deepcopy(m).npu(), x.npu()),
           "npu-cl": (copy.deepcopy(m).to(memory_format=cl).npu(), x.contiguous(memory_format=cl).npu())}
    res: dict[str, list[float]] = {k: [] for k in cfg}
    with torch.no_grad():
        for mod, inp in cfg.values():
            for _ in range(3):
                mod(inp)
        for _ in range(a.rounds):
            for k, (mod, inp) in cfg.items():
                ts = []
                for _ in range(a.iters):
                    t0 = time.perf_counter()
                    mod(inp)
                    ts.append(time.perf_counter() - t0)
                res[k].append(min(ts) * 1e3)
    print(" ".join(f"{k}={min(v):.1f}/{statistics.median(v):.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
