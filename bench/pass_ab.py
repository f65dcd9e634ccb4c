"""A/B of one GE pass inside one process: the model compiled with the pass and without it, interleaved.

Alternating processes drift with the machine (bench/knob_ab.py says why); each compiled model is loaded twice
(ABBA) and the four run in turns in one process; the ratio of the two sides' medians is printed. Run it with each ``--first``
(build order moves a ratio by a percent or two)::

    python bench/pass_ab.py --model tv_efficientnet_b0 --pass SqueezeExciteFusion --runs 200 --first on

``--model`` is a name from ``scripts.model_zoo`` (its benchmark inputs at batch ``--batch``, compiled
with those static shapes); ``--pass`` any pass name that ``--fusion_switch_file`` accepts (an unknown name is
refused, and so is a pass that changes nothing in the model: both sides would be the same graph). The compiled
.om files are kept in ``--cache-dir`` (default ``~/.cache/pycann/bench/pass_ab``).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent


def same_graph(a: Any, b: Any) -> bool:
    """Whether two compiled graphs are the same: nodes (op, inputs, outputs, attributes) and constants."""
    import numpy as np

    def nodes(g: Any) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...], str]]:
        return [(n.op_type, n.domain, tuple(n.inputs), tuple(n.outputs), repr(sorted(n.attrs.items())))
                for n in g.nodes]

    return nodes(a) == nodes(b) and a.initializers.keys() == b.initializers.keys() and all(
        v.dtype == b.initializers[k].dtype and np.array_equal(v, b.initializers[k]) for k, v in a.initializers.items())


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from scripts.model_zoo import ALL_MODELS as MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--pass", dest="pass_name", required=True, help="a GE pass name, e.g. SqueezeExciteFusion")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=200, help="timed runs of each model (>= 10)")
    p.add_argument("--first", choices=("on", "off"), default="on", help="which model is loaded and run first")
    p.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("~/.cache/pycann/bench/pass_ab"))
    args = p.parse_args(argv)
    if args.runs < 10:
        p.error("--runs must be at least 10")
    if args.batch < 1:
        p.error(f"--batch must be at least 1, got {args.batch}")
    from pycann.ge.compile.switches import switchable_passes

    if args.pass_name not in switchable_passes():
        p.error(f"--pass: no pass named {args.pass_name!r}; passes that can be switched off: "
                f"{', '.join(switchable_passes())}")
    import pycann
    from pycann.acl.session import InferSession

    spec = MODELS[args.model]
    feeds = spec.inputs(0, args.batch)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    cache = args.cache_dir.expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    oms, graphs = {}, {}
    for tag, off in (("on", []), ("off", [args.pass_name])):
        om = cache / f"{args.model}_b{args.batch}_{args.pass_name}_{tag}.om"
        compiled = pycann.compile_model(str(spec.ensure()), pycann.CompileOptions(input_shape=shapes, disabled_passes=off))
        compiled.save(om)
        oms[tag], graphs[tag] = om, compiled.graph
    if same_graph(graphs["on"], graphs["off"]):
        print(f"pass_ab.py: error: {args.pass_name} changes nothing in {args.model} at batch {args.batch}: "
              "both sides are the same graph (atc --log=info says why)", file=sys.stderr)
        return 2
    # two loads of each, in ABBA order (where a model's buffers land moves its time by a few percent,
    # and the first one loaded is not the first one placed in memory: each side gets both places)
    first, second = ("on", "off") if args.first == "on" else ("off", "on")
    order = [first, second, second, first]
    sessions = [InferSession(0, str(oms[t])) for t in order]
    names = [i.name for i in sessions[0].get_inputs()]
    data = [feeds[n] for n in names]
    for s in sessions:
        for _ in range(10):
            s.infer(data)
    times: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(args.runs):
        for k in range(4) if i % 2 == 0 else range(3, -1, -1):
            t0 = time.perf_counter()
            sessions[k].infer(data)
            times[order[k]].append(time.perf_counter() - t0)
    med = {t: statistics.median(v) * 1e3 for t, v in times.items()}
    print(f"{args.model}@{args.batch} {args.pass_name}: on {med['on']:.3f} ms, off {med['off']:.3f} ms, "
          f"on/off {med['on'] / med['off']:.3f} ({2 * args.runs} runs each over two loads, {args.first} first)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
