"""Per-op-type time breakdown of pycann's executor on one model (benchmark inputs, precompiled .om).

Run from the repository root::

    python bench/profile_ops.py --model resnet50 [--batch 1] [--runs 10] [--top 12] [--limits]

It loads the same cached ``.om`` as ``bench_one.py`` (compiling it first if needed), takes the specialised
``Plan`` the executor runs for the benchmark inputs, and wraps the kernel of every step in ``Plan.steps``
(recursively into If/Loop/Scan sub-plans) with a timer. Control-flow ops are charged only their own (exclusive)
time; their bodies' ops are counted under their own types. For Conv, ConvTranspose, MatMul, Gemm and GE's
FusedConv / FusedMatMul / FusedAttention it also counts FLOPs (2 x MACs, from the run-time shapes) and prints the
GFLOP/s each op type achieves.

Times are per-node medians over the instrumented runs (robust against runs disturbed by other processes).
It relies on the executor's internals: ``Plan.steps[i].run`` is the kernel of ``Plan.nodes[i]``, sub-plans are in
``Plan.subplans``, and a plan that compiled its steps into straight-line code (``Plan._fast``) is regenerated.
Set ``PYCANN_BENCH_SRC`` to a snapshot made by ``run_bench.py`` to profile the version a run measured.

"executor overhead" is the median un-instrumented run minus the sum of those kernel medians: the Python step loop,
input checks and output copies (negative values mean noise).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bench_one import DEFAULT_CACHE, MODELS, benchmark_feeds, blas_info, ensure_om  # noqa: E402


@dataclass
class NodeStat:
    """Accumulated exclusive time of one node (one step of one plan)."""

    op_type: str
    name: str
    seconds: float = 0.0
    calls: int = 0
    flops: float = 0.0  # per call, 0 when not counted
    nbytes: float = 0.0  # per call: every input array read plus every output written (weights included)
    out_shape: str = ""
    samples: list[float] = field(default_factory=list)  # exclusive seconds per run
    _mark: float = 0.0

    def close_run(self) -> None:
        """Record this run's exclusive time as one sample."""
        self.samples.append(self.seconds - self._mark)
        self._mark = self.seconds

    @property
    def median_ms(self) -> float:
        """Median exclusive ms per run (robust against runs disturbed by other processes)."""
        return float(np.median(self.samples)) * 1e3 if self.samples else 0.0


@dataclass
class Profiler:
    """Wraps step kernels; keeps a stack of child-time accumulators for exclusive timing."""

    stats: list[NodeStat] = field(default_factory=list)
    stack: list[float] = field(default_factory=lambda: [0.0])

    def instrument(self, plan: Any) -> None:
        """Replace each step's kernel in ``plan`` (and its sub-plans) with a timed wrapper."""
        steps = list(plan.steps)
        for i, step in enumerate(steps):
            node = plan.nodes[i]
            stat = NodeStat(node.op_type, node.name)
            self.stats.append(stat)
            steps[i] = dataclasses.replace(step, run=self._wrap(step.run, stat))
        plan.steps = steps
        self._regenerate(plan)
        for subs in getattr(plan, "subplans", {}).values():
            for sub in subs.values():
                self.instrument(sub)

    @staticmethod
    def _regenerate(plan: Any) -> None:
        """Plans that compiled their steps into straight-line code (``Plan._fast``) must see the wrapped kernels."""
        if getattr(plan, "_fast", None) is None:
            return
        try:
            consts = {i for i, v in enumerate(plan.template) if v is not None}
            plan._fast = plan._generate(consts)
        except Exception:  # internals changed: fall back to the step loop, which reads plan.steps
            plan._fast = None

    def _wrap(self, fn: Callable[..., Any], stat: NodeStat) -> Callable[..., Any]:
        stack = self.stack

        def timed(*a: Any) -> Any:
            stack.append(0.0)
            t0 = time.perf_counter()
            try:
                res = fn(*a)
            finally:
                dt = time.perf_counter() - t0
                child = stack.pop()
                stat.seconds += dt - child
                stat.calls += 1
                stack[-1] += dt
            if not stat.out_shape:
                outs = res if res is not None else (a[2] if len(a) > 2 and isinstance(a[2], (list, tuple)) else ())
                _describe(stat, a[0], outs, a[1])
            return res

        return timed

    def reset(self) -> None:
        """Zero the counters (after warm-up)."""
        for s in self.stats:
            s.seconds, s.calls, s._mark, s.samples = 0.0, 0, 0.0, []
        self.stack[:] = [0.0]


def _describe(stat: NodeStat, args: Sequence[Any], outs: Sequence[Any], attrs: Any) -> None:
    """Record the first output's shape and, for GEMM-like ops (plain or fused by GE), the FLOPs of one call."""
    arrays = [o for o in outs if isinstance(o, np.ndarray)]
    if not arrays:
        stat.out_shape = "-"
        return
    y = arrays[0]
    stat.out_shape = "x".join(map(str, y.shape))
    stat.nbytes = float(sum(a.nbytes for a in args if isinstance(a, np.ndarray)) + sum(o.nbytes for o in arrays))
    op = stat.op_type
    try:
        if op in ("Conv", "FusedConv"):
            w = args[1]
            stat.flops = 2.0 * y.size * float(np.prod(w.shape[1:]))
        elif op in ("ConvTranspose", "FusedConvTranspose"):
            x, w = args[0], args[1]
            stat.flops = 2.0 * x.size * float(np.prod(w.shape[1:]))
        elif op in ("MatMul", "FusedMatMul"):
            stat.flops = 2.0 * y.size * args[0].shape[-1]
        elif op == "FusedAttention":  # softmax(Q @ Kt) @ V
            q, kt, v = args[0], args[1], args[2]
            rows = float(np.prod(q.shape[:-1]))
            stat.flops = 2.0 * rows * kt.shape[-1] * (q.shape[-1] + v.shape[-1])
        elif op == "Gemm":
            a = args[0]
            k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
            stat.flops = 2.0 * y.size * k
    except (AttributeError, IndexError, TypeError):
        stat.flops = 0.0


def profile(model: str, batch: int, runs: int, cache_dir: pathlib.Path) -> dict[str, Any]:
    """Time ``runs`` plain runs, then ``runs`` instrumented runs; return the breakdown."""
    from pycann.acl.session import InferSession

    feeds = benchmark_feeds(model, batch)
    comp = ensure_om(model, batch, cache_dir)
    sess = InferSession(0, comp["om"])
    for _ in range(3):
        sess.infer(feeds)
    plain = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.infer(feeds)
        plain.append(time.perf_counter() - t0)
    lm = sess.model
    plan, _ = lm.executor.plan_for(lm.check_feeds([feeds[i.name] for i in lm.inputs]))
    prof = Profiler()
    prof.instrument(plan)
    sess.infer(feeds)  # fills shapes and FLOPs
    prof.reset()
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.infer(feeds)
        walls.append(time.perf_counter() - t0)
        for s in prof.stats:
            s.close_run()
    by_type: dict[str, dict[str, float]] = {}
    for s in prof.stats:
        d = by_type.setdefault(s.op_type, {"ms": 0.0, "nodes": 0, "calls": 0, "gflop": 0.0, "gbytes": 0.0})
        d["ms"] += s.median_ms
        d["nodes"] += 1
        d["calls"] += s.calls / runs
        d["gflop"] += s.flops * s.calls / runs / 1e9
        d["gbytes"] += s.nbytes * s.calls / runs / 1e9
    plain_ms = float(np.median(plain)) * 1e3
    kernel_ms = sum(s.median_ms for s in prof.stats)
    top = sorted(prof.stats, key=lambda s: -s.median_ms)
    return {
        "model": model, "batch": batch, "runs": runs, "blas": blas_info(),
        "compile_mode": comp.get("compile_mode", "static"),
        "plain_median_ms": round(plain_ms, 3), "instrumented_median_ms": round(float(np.median(walls)) * 1e3, 3),
        "kernel_median_ms": round(kernel_ms, 3), "overhead_ms": round(plain_ms - kernel_ms, 3),
        "steps": len(prof.stats),
        "by_type": dict(sorted(by_type.items(), key=lambda kv: -kv[1]["ms"])),
        "top_nodes": [
            {"op_type": s.op_type, "name": s.name, "out": s.out_shape, "ms": round(s.median_ms, 3),
             "gflops": round(s.flops * s.calls / runs / s.median_ms / 1e6, 1) if s.flops and s.median_ms else None}
            for s in top[:40]
        ],
        "nodes": [  # every step in plan order, to line up with another engine's per-node profile
            {"op_type": s.op_type, "name": s.name, "out": s.out_shape, "ms": round(s.median_ms, 4),
             "gflop": s.flops * s.calls / runs / 1e9, "gbytes": s.nbytes * s.calls / runs / 1e9}
            for s in prof.stats
        ],
    }  # fmt: skip


# Issue 23 item 3's bars: memory-bound ops at >= 60 % of the measured memory traffic, convolutions and
# matmuls at >= 70 % of the measured float32 FMA rate (bench/machine_limits.py)
BANDWIDTH_BAR, FMA_BAR = 0.60, 0.70


def rate(node: dict[str, Any], limits: dict[str, float]) -> tuple[str, float] | None:
    """(the limit that binds, share of it) of one node (``profile``'s ``nodes`` entry), by the roofline:
    an op with counted FLOPs is held to ``min(fma_gflops, FLOPs per byte x copy_gbs)`` ("FMA" when the
    FMA rate is the lower one, else "memory": a depthwise conv or a one-row matmul moves more bytes
    than its FMAs take), any other op to ``copy_gbs`` ("memory"); None when it took no time."""
    ms = node["ms"]
    if not ms:
        return None
    traffic = node["gbytes"] / ms * 1e3 / limits["copy_gbs"]
    if not node["gflop"]:
        return "memory", traffic
    attainable = min(limits["fma_gflops"], node["gflop"] / max(node["gbytes"], 1e-12) * limits["copy_gbs"])
    kind = "FMA" if attainable >= limits["fma_gflops"] else "memory"
    return kind, node["gflop"] / ms * 1e3 / attainable


def against_limits(res: dict[str, Any], limits: dict[str, float]) -> str:
    """Markdown: per op type, its rate as a share of the machine's limit and the time spent in nodes
    below the item's bar; then the totals."""
    lines = [f"Against this machine's limits (`bench/machine_limits.py`, measured in this process: "
             f"{limits.get('source', '?')}): memory traffic {limits['copy_gbs']:.1f} GB/s (read + write), float32 "
             f"FMA {limits['fma_gflops']:.0f} GFLOP/s. Bars (issue 23 item 3): memory-bound ops >= {BANDWIDTH_BAR:.0%} "
             f"of the traffic, convs and matmuls >= {FMA_BAR:.0%} of the FMA rate; each node is held to the lower "
             f"of the two for its FLOPs per byte (roofline). \"bound by\" names the limit that binds: FMA, memory, "
             f"or both when some nodes of the type are held to one and some to the other.", "",
             "| op type | ms / run | bound by | share of limit (time-weighted) | ms below the bar |",
             "|---|---:|---|---:|---:|"]
    by: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    below_total = total = 0.0
    for n in res["nodes"]:
        r = rate(n, limits)
        if r is None:
            continue
        kind, share = r
        bar = FMA_BAR if kind == "FMA" else BANDWIDTH_BAR
        d = by.setdefault(n["op_type"], [0.0, 0.0, 0.0])
        d[0] += n["ms"]
        d[1] += share * n["ms"]
        below = n["ms"] if share < bar else 0.0
        d[2] += below
        kinds[n["op_type"]] = kind if kinds.get(n["op_type"], kind) == kind else "both"
        below_total += below
        total += n["ms"]
    for op, (ms, weighted, below) in sorted(by.items(), key=lambda kv: -kv[1][2]):
        lines.append(f"| {op} | {ms:.2f} | {kinds[op]} | {weighted / ms:.0%} | {below:.2f} |")
    lines += ["", f"Nodes below their bar: {below_total:.2f} of {total:.2f} ms of kernel time "
              f"({below_total / (total or 1):.0%})."]
    return "\n".join(lines)


def render(res: dict[str, Any], top: int) -> str:
    """Markdown: totals, the per-op-type table and the slowest nodes."""
    lines = [
        f"### {res['model']} (batch {res['batch']}), BLAS kernel {res['blas'].get('architecture')}, "
        f"{res['steps']} steps, {res['runs']} runs",
        "",
        f"Plain run {res['plain_median_ms']:.2f} ms (median); instrumented {res['instrumented_median_ms']:.2f} ms, "
        f"of which kernels {res['kernel_median_ms']:.2f} ms (sum of per-node medians); executor overhead "
        f"{res['overhead_ms']:.2f} ms ({100 * res['overhead_ms'] / res['plain_median_ms']:.0f}%).",
        "",
    ]
    if res["plain_median_ms"] > 1.15 * res["instrumented_median_ms"]:
        # the instrumented runs cannot be faster than the plain ones: the machine was busy for part of the run
        lines += ["**Noisy measurement:** the plain runs were slower than the instrumented ones, so the overhead "
                  "figure is not meaningful; rerun with more `--runs` on a quiet machine.", ""]
    lines += [
        "| op type | nodes | ms / run | % of kernels | GFLOP | GFLOP/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    total = sum(d["ms"] for d in res["by_type"].values()) or 1.0
    for op, d in res["by_type"].items():
        gf = f"{d['gflop']:.2f}" if d["gflop"] else ""
        rate = f"{d['gflop'] / d['ms'] * 1e3:.0f}" if d["gflop"] and d["ms"] else ""
        lines.append(f"| {op} | {d['nodes']} | {d['ms']:.2f} | {100 * d['ms'] / total:.1f}% | {gf} | {rate} |")
    lines += ["", f"Slowest {top} nodes:", "", "| op type | node | output | ms | GFLOP/s |", "|---|---|---|---:|---:|"]
    for n in res["top_nodes"][:top]:
        lines.append(f"| {n['op_type']} | {n['name'][:60]} | {n['out']} | {n['ms']:.2f} | {n['gflops'] or ''} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Profile one model and print the markdown breakdown (and optionally save JSON)."""
    p = argparse.ArgumentParser(description="Per-op-type time breakdown of pycann's executor.")
    p.add_argument("--model", choices=sorted(MODELS), required=True, help="a model of the bench set (bench_one.py)")
    p.add_argument("--batch", type=int, default=1, help="batch size of the benchmark inputs (default 1)")
    p.add_argument("--runs", type=int, default=10, help="plain runs, then as many instrumented ones (default 10)")
    p.add_argument("--top", type=int, default=12, help="slowest nodes listed (default 12)")
    p.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE,
                   help="where the compiled .om files are cached (default ~/.cache/pycann/bench)")
    p.add_argument("--json", type=pathlib.Path, help="also write the full result here")
    p.add_argument("--limits", action="store_true",
                   help="first measure this machine's memory traffic and float32 FMA rate (bench/machine_limits.py), "
                        "then rate every node against the lower of the two for its FLOPs per byte (a roofline) and "
                        "sum the time of nodes below 60 %% (memory-bound) or 70 %% (compute-bound) of it")
    args = p.parse_args(argv)
    if args.runs < 1 or args.batch < 1 or args.top < 0:
        p.error("--runs and --batch must be at least 1, --top at least 0")
    # one plan for the whole run: on a busy machine the thread governor switches runs to a one-thread
    # plan that the instrumentation never wrapped (every node then read 0 ms); set it to "on" to see that
    os.environ.setdefault("PYCANN_ADAPTIVE_THREADS", "off")
    limits = None
    if args.limits:
        from machine_limits import measure

        limits = dataclasses.asdict(measure())
    res = profile(args.model, args.batch, args.runs, args.cache_dir.expanduser())
    if limits is not None:
        res["limits"] = limits
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(render(res, args.top))
    if limits is not None:
        print()
        print(against_limits(res, limits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
