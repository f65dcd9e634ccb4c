"""A/B of one module-level kernel knob inside one process: two plans of the same .om, interleaved.

Alternating processes drift with the machine (on the 2-vCPU VM one model read 2.1 and 6.5 ms half an
hour apart); two plans in one process, run in turns, see the same machine. The .om is loaded twice:
once with the knob as it is ("cur"), once with ``--other`` ("other"); then the two models run
interleaved (ABBA) and the ratio of their medians is printed. Run it with each ``--first`` (build
order matters by a percent or two: an A/A run reads 0.985-1.025 here)::

    python bench/knob_ab.py --om ~/.cache/pycann/bench/tv_googlenet_b1_<hash>.om \\
        --knob pycann.kernels.bind_onednn:POOL_MIN_ELEMENTS_NHWC --other "1 << 16" --runs 150 --first cur

The knob must be read when a plan binds its kernels (thresholds, sizes), not per call. ``--other`` is a
Python expression.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pathlib
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--om", type=pathlib.Path, required=True)
    p.add_argument("--knob", required=True, help="module:attribute, e.g. pycann.kernels.bind_onednn:GAP_MIN_SPATIAL")
    p.add_argument("--other", required=True, help="the other value (a Python literal or arithmetic)")
    p.add_argument("--runs", type=int, default=150)
    p.add_argument("--first", choices=("cur", "other"), default="cur", help="which plan is built first")
    args = p.parse_args()
    from pycann.ge.run.model import LoadedModel

    mod_name, attr = args.knob.split(":")
    mod = importlib.import_module(mod_name)
    cur = getattr(mod, attr)
    other = eval(compile(ast.parse(args.other, mode="eval"), "--other", "eval"), {})  # noqa: S307 - a number
    models = {}
    for which in (args.first, "other" if args.first == "cur" else "cur"):
        setattr(mod, attr, cur if which == "cur" else other)
        models[which] = LoadedModel.from_file(str(args.om))
    setattr(mod, attr, cur)
    feeds = [np.random.default_rng(0).random([int(d) for d in i.shape], dtype=np.float32)
             for i in models["cur"].inputs]
    for m in models.values():
        m.run(feeds)
    times: dict[str, list[float]] = {"cur": [], "other": []}
    for i in range(args.runs):
        for k in ("cur", "other") if i % 2 else ("other", "cur"):
            t = time.perf_counter()
            models[k].run(feeds)
            times[k].append(time.perf_counter() - t)
    cur_ms, other_ms = (1e3 * float(np.median(times[k])) for k in ("cur", "other"))
    print(f"{args.om.name} {args.knob}: cur {cur_ms:.3f} ms, other ({args.other}) {other_ms:.3f} ms, "
          f"cur/other {cur_ms / other_ms:.3f} ({args.first} built first)")


if __name__ == "__main__":
    main()
