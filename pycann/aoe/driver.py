"""The two AOE jobs end to end, as ``pycann/tools/aoe.py`` runs them: compile, tune, report.

``op_job`` (job_type=2): every distinct kernel spec of the model (``--tune_ops_file`` may narrow
them) is measured on this machine, every MatMul whose dims the fp16 kernel can tile (and every
``MatMul MxKxN`` line of the ops file) is tiled on the cost model of the soc; ``subgraph_job``
(job_type=1): ``subgraph_tuning.tune_subgraph``. Both return the report and the model compiled
with the bank's choices (None without a model).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pycann.aoe import model_index
from pycann.aoe.bank import BankKey, KnowledgeBank
from pycann.aoe.op_tuning import model_ops, tiling_key, tune_kernel, tune_tiling
from pycann.aoe.ops_file import OpsFilter
from pycann.aoe.plan import mark_entries, overrides, overrides_note
from pycann.aoe.report import ProgressLine, TuneReport, peak_rss_mib
from pycann.aoe.search import Progress
from pycann.aoe.tiling import MatmulProblem
from pycann.costmodel.socs import COST_SOCS

if TYPE_CHECKING:  # GE loads only when a model is tuned
    from pycann.ge.compile.compiler import CompiledModel
    from pycann.ge.compile.options import CompileOptions


def op_job(load: Callable[[], Any] | None, opts: CompileOptions | None, bank: KnowledgeBank, model: str | None,
           wanted: OpsFilter, soc_version: str, progress: Progress | None = None, *,
           files: Sequence[str] = (), om_path: Path | None = None) -> tuple[TuneReport, CompiledModel | None]:
    """Operator tuning; see the module docstring. ``files``: the model's files (for the model index,
    ``aoe.model_index``); ``om_path``: where the tuned .om goes (written here). When the bank holds
    every choice of this model (an index of an earlier run that still matches), nothing is compiled,
    measured or imported beyond the bank: the entries come from the bank, the .om is copied.
    Raises what compiling the model raises."""
    report = TuneReport("opat", model or "", soc_version, str(bank.path))
    index = model_index.index_key(files, opts, wanted, soc_version) if files and opts is not None else None
    if index is not None:
        hit = model_index.reuse(bank, index, om_path)
        if hit is not None:
            report.entries, report.notes = hit
            if om_path is not None:
                report.notes.append(f"tuned model: {om_path}")
            if progress:
                progress(len(report.entries), len(report.entries), "from the knowledge bank")
            report.peak_rss_mib = peak_rss_mib()
            return report, None
    specs: list[Any] = []
    cm: CompiledModel | None = None
    problems: list[tuple[MatmulProblem, list[str]]] = []
    keys: list[BankKey] = []
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.tuned import kernel_key

    if load is not None and opts is not None:
        # the graph atc would compile now (a subgraph-tuning record applied): its specs are the ones to tune,
        # and when the bank already holds all of them it is the tuned model as it is
        cm = compile_model(load(), opts)
        specs, problems, notes = model_ops(cm.graph, wanted, soc_version)
        report.notes += notes
        if not specs:
            report.notes.append(_nothing_note(cm.graph, wanted, soc_version))
    for mkn in wanted.matmuls:
        if soc_version not in COST_SOCS:
            report.notes.append(f"MatMul {'x'.join(map(str, mkn))}: no cost table for {soc_version}; "
                                f"use one of {', '.join(sorted(COST_SOCS))}")
            break
        problems.append((MatmulProblem(*mkn, soc_version=soc_version), []))
    total = len(specs) + len(problems)
    for i, (spec, approx, weight, nodes) in enumerate(specs, 1):
        out = tune_kernel(spec, approx, weight, bank)
        out.nodes = nodes
        report.entries.append(out.to_json())
        keys.append(kernel_key(spec, approx))
        if progress:
            progress(i, total, out.op_type)
    for j, (prob, nodes) in enumerate(problems, len(specs) + 1):
        out = tune_tiling(prob, bank, progress=_inner(progress, j, total))
        out.nodes = nodes
        report.entries.append(out.to_json())
        keys.append(tiling_key(prob))
    report.peak_rss_mib = peak_rss_mib()
    report.tuning_seconds = sum(float(e.get("seconds", 0.0)) for e in report.entries)
    if cm is not None and opts is not None and load is not None and not all(e["from_bank"] for e in report.entries):
        cm = compile_model(load(), opts)  # again, now with the new records
    if cm is not None:  # the gains claimed must be true of the .om: say which banked choices the compile overrode
        found = overrides(cm.graph, switched_off=True)
        if mark_entries(report.entries, found):
            report.notes.append(f"{len(found)} node(s) do not run their banked kernel in the tuned .om: "
                                f"{overrides_note(found)}; their entries' gains are measured alone, not in this model")
    notes = list(report.notes)  # (what the index replays: the model's notes, not this run's file name)
    written = None
    if cm is not None and om_path is not None:
        om_path.parent.mkdir(parents=True, exist_ok=True)
        cm.save(om_path)
        report.notes.append(f"tuned model: {om_path}")
        written = om_path
    if index is not None and (written is not None or om_path is None):
        model_index.remember(bank, index, keys, cm.tune_key if cm is not None else None, report.entries, written,
                              notes)
    return report, cm


def _nothing_note(graph: Any, wanted: OpsFilter, soc_version: str) -> str:
    """Why operator tuning found nothing: the ops file's entries matched none of the model's tunable
    ops (naming both), or the model has none with static shapes."""
    every, _, _ = model_ops(graph, OpsFilter(), soc_version)
    if wanted.entries and every:
        names = sorted({n for _, _, _, nodes in every for n in nodes})
        types = sorted({spec.op_type for spec, _, _, _ in every})
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        return (f"the --tune_ops_file entries ({', '.join(sorted(wanted.entries))}) match none of the model's "
                f"tunable ops: op types {', '.join(types)}; nodes {shown}")
    return "no Conv/ConvTranspose/MatMul/Gemm node with static shapes to tune"


def _inner(progress: Progress | None, j: int, total: int) -> Progress | None:
    """The tiling search's trials shown inside the op count."""
    if progress is None:
        return None
    return lambda done, budget, note: progress(j, total, f"MatMul tiling {done}/{budget} {note}")


def subgraph_job(load: Callable[[], Any], opts: CompileOptions, bank: KnowledgeBank, model: str,
                 progress: Progress | None = None, say: Callable[[str], None] = lambda s: None,
                 budget_s: float = 2.0) -> tuple[TuneReport, CompiledModel | None]:
    """Subgraph tuning of one model; the report's one entry is the whole model, before and after.
    ``budget_s``: measuring time per configuration (seconds; at least 5 runs each)."""
    from pycann.aoe.subgraph_tuning import tune_subgraph

    report = TuneReport("sgat", model, opts.soc_version, str(bank.path))
    load_before = _load()
    out = tune_subgraph(load, opts, bank, progress=progress, say=say, budget_s=budget_s)
    report.entries.append({
        "kind": "graph", "op_type": "model", "workload": f"{model} end to end", "choice": out.choice.to_json(),
        "cost_us": round(out.tuned_ms * 1e3, 1), "baseline_us": round(out.baseline_ms * 1e3, 1),
        "speedup": round(out.speedup, 4), "trials": out.trials, "space_points": len(out.configs),
        "from_bank": out.from_bank, "seconds": round(out.seconds, 3), "configs": out.configs,
        "note": "; ".join(out.notes)})
    for k in out.kernel_outcomes:
        if k.choice.get("algorithm") != k.note.removeprefix("static choice "):
            report.notes.append(f"kernel {k.workload}: {k.note} -> {k.choice['algorithm']} (x{k.speedup:.2f} alone)")
    report.tuning_seconds = 0.0 if out.from_bank else out.seconds
    report.notes.append(_load_note(load_before, _load()))
    report.peak_rss_mib = peak_rss_mib()
    return report, out.compiled


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def _load_note(before: float, after: float) -> str:
    """The 1-minute load average around the measurements, with a warning when it exceeds the cores."""
    cores = os.cpu_count() or 1
    note = f"load average {before:.1f} before, {after:.1f} after ({cores} cores)"
    if max(before, after) > cores:
        note += ": other processes shared the CPU, the latencies are noisy; tune again on a quiet machine"
    return note


__all__ = ["ProgressLine", "op_job", "subgraph_job"]
