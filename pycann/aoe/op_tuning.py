"""Operator tuning (``aoe --job_type=2``, CANN's OPAT): search one op's choices, store the best.

Two kinds of op, two ways to price a candidate:

* ``tune_tiling``: the tiling of the fp16 MatMul kernel (``aoe.tiling``) on the Da Vinci cost
  model of a ``soc_version``: guided search, at most 10% of the legal tilings simulated;
* ``tune_kernel``: the kernel provider algorithm of one Conv/ConvTranspose/MatMul/Gemm spec on the
  CPU device, by measurement: every candidate is run on the same random inputs, its output
  checked against the general numpy algorithm, then timed (best of several runs). This is what
  ``KernelSelection``'s ``measure`` mode does per process; the bank keeps it across processes.

Both look in the knowledge bank first: a stored choice is returned with zero trials.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.aoe.bank import BankKey, BankRecord, KnowledgeBank, canonical, kit_version
from pycann.aoe.ops_file import OpsFilter
from pycann.aoe.search import Progress, SearchResult, budget_for, guided
from pycann.aoe.space import Config, Space, describe
from pycann.aoe.tiling import MatmulProblem, default_tiling, estimated_us, matmul_space, simulated_us

if TYPE_CHECKING:  # the kernel side loads GE and the op table (~1 s): tiling alone does not need them
    from pycann.ge.ir import Graph
    from pycann.kernels.providers import OpSpec

TILING_KERNEL = "pycann.costmodel.matmul_sample"


@dataclass
class OpOutcome:
    """One tuned op: what, the choice, its cost and the default's (us), trials, whether from the bank."""

    kind: str  # "tiling" | "kernel"
    op_type: str
    workload: str  # e.g. "MatMul 1024x512x2048 fp16 on Ascend910B2"
    choice: dict[str, Any]
    cost_us: float
    baseline_us: float
    trials: int
    space_points: int
    from_bank: bool
    seconds: float
    nodes: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.cost_us if self.cost_us > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "op_type": self.op_type, "workload": self.workload, "choice": self.choice,
                "cost_us": round(self.cost_us, 3), "baseline_us": round(self.baseline_us, 3),
                "speedup": round(self.speedup, 4), "trials": self.trials, "space_points": self.space_points,
                "from_bank": self.from_bank, "seconds": round(self.seconds, 3), "nodes": self.nodes, "note": self.note}


def _from_record(kind: str, op: str, workload: str, rec: BankRecord, t0: float) -> OpOutcome:
    return OpOutcome(kind, op, workload, rec.choice, rec.cost_us, rec.baseline_us, 0,
                     int(rec.detail.get("space_points", 0)), True, time.perf_counter() - t0,
                     note=f"from the knowledge bank ({rec.trials} trials when tuned)")


def tiling_key(p: MatmulProblem) -> BankKey:
    """Bank key of a MatMul tiling: shapes, fp16, ND, the kernel it tiles, soc, kit version."""
    return BankKey("tiling", "MatMul", ((p.m, p.k), (p.k, p.n)), ("float16", "float16"), ("ND", "ND"),
                   canonical({"kernel": TILING_KERNEL, "out": "float16"}), p.soc_version, kit_version())


def tune_tiling(p: MatmulProblem, bank: KnowledgeBank, fraction: float = 0.1,
                progress: Progress | None = None) -> OpOutcome:
    """Search the tiling of ``p`` on the cost model (budget: ``fraction`` of the legal tilings),
    store the best. ``ValueError`` for a shape the kernel cannot tile."""
    t0 = time.perf_counter()
    workload = f"MatMul {p.m}x{p.k} x {p.k}x{p.n} fp16 on {p.soc_version} (cost model)"
    key = tiling_key(p)
    rec = bank.get(key)
    if rec is not None:
        return _from_record("tiling", "MatMul", workload, rec, t0)
    space = matmul_space(p)
    cache: dict[Config, float] = {}

    def objective(cfg: Config) -> float:
        if cfg not in cache:
            cache[cfg] = simulated_us(p, cfg)
        return cache[cfg]

    legal = len(space.legal())
    res, base_cfg = search_tiling(p, space, objective, fraction, progress)
    base = objective(base_cfg)
    choice = dict(res.best)
    detail = {"space_points": legal, "default": dict(base_cfg),
              "trials": [[describe(t.config), None if math.isinf(t.cost) else round(t.cost, 4)] for t in res.trials]}
    bank.put(BankRecord(key, choice, res.best_cost, base, len(cache), detail))
    return OpOutcome("tiling", "MatMul", workload, choice, res.best_cost, base, len(cache), legal, False,
                     time.perf_counter() - t0, note=f"default {describe(base_cfg)}")


def search_tiling(p: MatmulProblem, space: Space, objective: Callable[[Config], float], fraction: float = 0.1,
                  progress: Progress | None = None) -> tuple[SearchResult, Config]:
    """The guided search of ``tune_tiling`` and the default tiling (the baseline). The default's
    simulation counts against the budget: at most ``floor(fraction * legal points)`` distinct
    tilings are simulated in all (the issue's "at most 10% of its trials")."""
    base_cfg = default_tiling(p, space)
    objective(base_cfg)
    budget = max(1, budget_for(len(space.legal()), fraction) - 1)
    return guided(space, objective, budget, prior=lambda c: estimated_us(p, c), progress=progress), base_cfg


def time_round_robin(fns: dict[str, Callable[[], Any]], budget_s: float, min_rounds: int = 3,
                     max_rounds: int = 20) -> dict[str, float]:
    """Best time of each function (microseconds), measured in interleaved rounds (A B C A B C ...)
    after one warm-up each, so that a burst of load from other processes hits every candidate alike;
    at least ``min_rounds`` rounds, more while the ``budget_s`` (per function) lasts."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, math.inf)
    end = time.perf_counter() + budget_s * len(fns)
    rounds = 0
    while rounds < min_rounds or (time.perf_counter() < end and rounds < max_rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
        rounds += 1
    return {k: v * 1e6 for k, v in best.items()}


def _max_rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref))) / scale


def spec_text(spec: OpSpec) -> str:
    """``Conv x(1,64,56,56) w(64,64,3,3) float32`` / ``MatMul a(...) b(...)``."""
    from pycann.kernels.providers import ConvSpec

    if isinstance(spec, ConvSpec):
        return f"{spec.op_type} x{spec.x_shape} w{spec.w_shape} group {spec.group} {spec.dtype}"
    return f"{spec.op_type} a{spec.a_shape} b{spec.b_shape} {spec.dtype}"


def tune_kernel(spec: OpSpec, approx: bool, weight: np.ndarray | None, bank: KnowledgeBank,
                budget_s: float = 0.1, tol: float = 1e-3) -> OpOutcome:
    """Measure every available algorithm for ``spec`` on this machine, store the fastest whose
    output agrees with the general numpy algorithm (max error / max |reference| <= ``tol``)."""
    t0 = time.perf_counter()
    from pycann.ge.compile.tuned import kernel_key
    from pycann.kernels import providers
    from pycann.kernels.providers import FALLBACK, measured

    key = kernel_key(spec, approx)
    workload = f"{spec_text(spec)} on {key.soc_version.split(':', 2)[-1]}"
    rec = bank.get(key)
    if rec is not None:
        return _from_record("kernel", spec.op_type, workload, rec, t0)
    cands = providers.candidates(spec, approx=approx)
    static = providers.select(spec, "static", weight, approx)
    args = measured._random_inputs(spec, weight)
    ref_algo = providers.algorithm(FALLBACK[spec.op_type])
    assert ref_algo is not None  # numpy is always there
    ref = np.asarray(ref_algo.fn(*args), np.float64)
    errors: dict[str, float] = {}
    ok: dict[str, Callable[[], Any]] = {}
    for a in cands:
        try:
            errors[a.key] = _max_rel_err(a.fn(*args), ref)
        except Exception:  # a provider bug must not stop tuning: the candidate is out
            errors[a.key] = math.inf
        if errors[a.key] <= tol:
            ok[a.key] = lambda a=a: a.fn(*args)  # type: ignore[misc]
    times = time_round_robin(ok, budget_s) if ok else {}
    if not times:
        raise RuntimeError(f"{workload}: no candidate reproduced the numpy reference")
    best = min(times, key=lambda n: times[n])
    base = times.get(static.key, times[best])
    detail = {"space_points": len(cands), "times_us": {k: round(v, 2) for k, v in times.items()},
              "max_rel_err": {k: (None if math.isinf(v) else float(f"{v:.3g}")) for k, v in errors.items()},
              "static": static.key}
    bank.put(BankRecord(key, {"algorithm": best}, times[best], base, len(cands), detail))
    return OpOutcome("kernel", spec.op_type, workload, {"algorithm": best}, times[best], base, len(cands),
                     len(cands), False, time.perf_counter() - t0, note=f"static choice {static.key}")


def model_ops(graph: Graph, wanted: OpsFilter, soc_version: str) -> tuple[list[tuple[OpSpec, bool, Any, list[str]]],
                                                                          list[tuple[MatmulProblem, list[str]]], list[str]]:
    """The distinct kernel specs (spec, approx, weight, node names) of a compiled graph that ``wanted``
    selects, the MatMul tiling problems among them (dims multiples of 16, an Ascend ``soc_version``
    with a cost table), and notes on the nodes left out."""
    from pycann.costmodel.socs import COST_SOCS
    from pycann.ge.compile.passes.select_kernels import node_specs
    from pycann.kernels.providers import GemmSpec

    skipped: Counter[str] = Counter()
    specs: dict[tuple[OpSpec, bool], tuple[OpSpec, bool, Any, list[str]]] = {}
    problems: dict[MatmulProblem, list[str]] = {}
    notes: list[str] = []
    for ns in node_specs(graph, skipped):
        if not wanted.selects(ns.node.op_type, ns.node.name, ns.spec.op_type, *(ns.node.origin or ())):
            continue
        entry = specs.setdefault((ns.spec, ns.approx), (ns.spec, ns.approx, ns.weight, []))
        entry[3].append(ns.node.name)
        if isinstance(ns.spec, GemmSpec) and soc_version in COST_SOCS:
            _, m, k, n = ns.spec.mkn
            try:
                problems.setdefault(MatmulProblem(m, k, n, soc_version), []).append(ns.node.name)
            except ValueError as e:
                notes.append(f"{ns.node.name}: no cost-model tiling ({e})")
    if skipped:
        notes.append("shapes unknown at compile time (give --input_shape with a fixed size for every dim, "
                     "no -1 or range: op tuning measures kernels of concrete shapes): "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items())))
    return list(specs.values()), list(problems.items()), notes
