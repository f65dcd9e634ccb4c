"""A/B of one module-level kernel knob inside one process: two plans of the same .om, interleaved.

Alternating processes drift with the machine (on the 2-vCPU VM one model read 2.1 and 6.5 ms half an
hour apart); plans in one process, run in turns, see the same machine. The .om is loaded four times:
twice with the knob as it is ("cur"), twice with ``--other`` ("other"), in ABBA order; then the four run
in a new random order every round and the ratio of the two sides' medians is printed. Run it with each
``--first`` (build order still moves a ratio by a percent or so)::

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
    # two loads of each side, in ABBA order (where a model's buffers land moves its time by a few percent:
    # an A/A run with one load a side read 1.038 and 0.960 with the two build orders), run in a new
    # random order every round (the run before a model's run leaves the OpenMP team warm or asleep)
    first, second = args.first, "other" if args.first == "cur" else "cur"
    order = [first, second, second, first]
    models = []
    for which in order:
        setattr(mod, attr, cur if which == "cur" else other)
        models.append(LoadedModel.from_file(str(args.om)))
    setattr(mod, attr, cur)
    feeds = [np.random.default_rng(0).random([int(d) for d in i.shape], dtype=np.float32)
             for i in models[0].inputs]
    for m in models:
        for _ in range(5):
            m.run(feeds)
    times: dict[str, list[float]] = {"cur": [], "other": []}
    rng = np.random.default_rng(1)
    for _ in range(args.runs):
        for k in rng.permutation(len(models)):
            t = time.perf_counter()
            models[k].run(feeds)
            times[order[k]].append(time.perf_counter() - t)
    cur_ms, other_ms = (1e3 * float(np.median(times[k])) for k in ("cur", "other"))
    print(f"{args.om.name} {args.knob}: cur {cur_ms:.3f} ms, other ({args.other}) {other_ms:.3f} ms, "
          f"cur/other {cur_ms / other_ms:.3f} ({2 * args.runs} runs each over two loads, {args.first} built first)")


if __name__ == "__main__":
    main()
