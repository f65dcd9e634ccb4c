"""msprof op-simulator-style output of a ``Profile``: Chrome/Perfetto trace, op_summary row, pipeline PNG.

Layouts follow shared/reference/cann-interfaces.md 4.3-4.4 and ascendc-davinci.md 4.1: the trace
has one process per core (``core<i>.cubecore0`` / ``core<i>.veccore0``) and one thread per pipe lane
(VECTOR, SCALAR, CUBE, MTE1, MTE2, MTE3, FIXP; "MTE2 #1"... for transfers in flight together, so that
no two slices of one thread partly overlap), ``ph: X`` events with ``ts``/``dur`` in µs; the
op_summary row carries the PipeUtilization columns (``aic_mac_ratio``/``aic_cube_ratio``,
``aiv_vec_ratio``, ``ai*_mte2_ratio``...).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from pycann.ascendc.enums import Pipe
from pycann.costmodel.profile import Profile
from pycann.costmodel.simulate import CoreTimeline, SimEvent

LANES = {Pipe.PIPE_V: "VECTOR", Pipe.PIPE_S: "SCALAR", Pipe.PIPE_M: "CUBE", Pipe.PIPE_MTE1: "MTE1",
         Pipe.PIPE_MTE2: "MTE2", Pipe.PIPE_MTE3: "MTE3", Pipe.PIPE_FIX: "FIXP", Pipe.PIPE_ALL: "FLOWCTRL"}
# op_summary PipeUtilization columns by pipe (older mac_* name first, as the issue asks)
_COLS = {Pipe.PIPE_M: ["mac", "cube"], Pipe.PIPE_V: ["vec"], Pipe.PIPE_S: ["scalar"], Pipe.PIPE_MTE1: ["mte1"],
         Pipe.PIPE_MTE2: ["mte2"], Pipe.PIPE_MTE3: ["mte3"], Pipe.PIPE_FIX: ["fixpipe"]}


def chrome_trace(prof: Profile) -> dict[str, Any]:
    """Chrome Trace Event JSON (dict) of the per-core, per-pipe instruction timeline."""
    us = 1e6 / prof.soc.clock_hz
    sub = "cubecore0" if prof.core_kind == "AIC" else "veccore0"
    ev: list[dict[str, Any]] = []
    wave_start: dict[int, int] = {}
    acc = 0
    for w in sorted({c.wave for c in prof.cores}):
        wave_start[w] = acc
        acc += max(c.cycles for c in prof.cores if c.wave == w)
    for c in prof.cores:
        ev.append({"ph": "M", "name": "process_name", "pid": c.core, "args": {"name": f"core{c.core}.{sub}"}})
        subs = sub_lanes(c.events)
        named = {(e.pipe, k) for e, k in zip(c.events, subs, strict=True)} | {(p, 0) for p in LANES}
        for p, k in sorted(named, key=lambda pk: (int(pk[0]), pk[1])):
            ev.append({"ph": "M", "name": "thread_name", "pid": c.core, "tid": _tid(p, k),
                       "args": {"name": LANES[p] + (f" #{k}" if k else "")}})
        base = wave_start[c.wave]
        for e, k in zip(c.events, subs, strict=True):
            ts = round((base + e.start) * us, 4)  # (dur from the rounded end: back-to-back slices stay apart)
            ev.append({"ph": "X", "name": e.api, "cat": LANES[e.pipe], "pid": c.core, "tid": _tid(e.pipe, k),
                       "ts": ts, "dur": round(round((base + e.end) * us, 4) - ts, 4),
                       "args": {"where": e.where, "cycles": e.end - e.start, "bytes": e.nbytes,
                                "l2_share": round(e.l2_share, 4), "gm_reads": e.gm_reads}})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"soc_version": prof.soc.name, "block_dim": prof.block_dim, "source": "pycann.costmodel"}}


def sub_lanes(events: list[SimEvent]) -> list[int]:
    """A sub-lane per event so that no two events of one pipe overlap on one lane: a pipe issues its
    next transfer while the previous one's GM latency is still in flight (``costs.pipelined_latency``),
    and Chrome/Perfetto draw one thread's slices nested or apart, never partly overlapping. Greedy:
    the lowest sub-lane of the pipe that is free at the event's start (0 when nothing is in flight)."""
    ends: dict[Pipe, list[int]] = {}
    out = []
    for e in events:
        lanes = ends.setdefault(e.pipe, [])
        k = next((i for i, t in enumerate(lanes) if t <= e.start), len(lanes))
        if k == len(lanes):
            lanes.append(e.end)
        else:
            lanes[k] = max(lanes[k], e.end)
        out.append(k)
    return out


def _tid(p: Pipe, k: int) -> int:
    return int(p) if k == 0 else 100 * (k + 1) + int(p)  # sub-lane 0 keeps the pipe's own id


def lane_rows(core: CoreTimeline) -> dict[tuple[Pipe, int], list[tuple[int, int]]]:
    """The pipeline chart's rows of one core: (pipe, sub-lane) -> its instructions as (start, length)
    in cycles, each drawn as its own bar (``sub_lanes``: overlapping ones on separate rows)."""
    rows: dict[tuple[Pipe, int], list[tuple[int, int]]] = {}
    for e, k in zip(core.events, sub_lanes(core.events), strict=True):
        if e.pipe != Pipe.PIPE_ALL and e.end > e.start:
            rows.setdefault((e.pipe, k), []).append((e.start, e.end - e.start))
    return rows


def op_summary_row(prof: Profile, op_name: str = "kernel", op_type: str = "Custom") -> dict[str, Any]:
    """One op_summary row: base columns plus PipeUtilization columns for the core kind used."""
    ai = "aic" if prof.core_kind in ("AIC", "AICore") else "aiv"
    us = 1e6 / prof.soc.clock_hz
    row: dict[str, Any] = {
        "Op Name": op_name, "OP Type": op_type,
        "Task Type": "AI_CORE" if ai == "aic" else "AI_VECTOR_CORE",
        "Task Duration(us)": round(prof.time_us, 3), "Block Dim": prof.block_dim,
        f"{ai}_time(us)": round(prof.kernel_us, 3), f"{ai}_total_cycles": prof.total_cycles,
    }
    for p, names in _COLS.items():
        busy = sum(c.busy[p] for c in prof.cores) / max(1, len(prof.cores))
        for n in names:
            row[f"{ai}_{n}_time(us)"] = round(busy * us, 3)
            row[f"{ai}_{n}_ratio"] = round(prof.ratio(p), 4)
    row["memory_bound"] = round(prof.memory_bound, 4) if prof.memory_bound != float("inf") else "inf"
    row["bound"] = prof.bound.value
    row["cube_utilization(%)"] = round(100 * prof.cube_efficiency, 2)
    return row


PER_CORE_PNGS = 8  # per-core charts written (a 48-core launch would otherwise write 48 files)


def write_outputs(prof: Profile, out_dir: str | Path, op_name: str = "kernel") -> dict[str, Path]:
    """Write trace.json, op_summary.csv and, when matplotlib is installed, pipeline.png (the first
    cores together) and pipeline_core<N>.png (one chart per core, the first ``PER_CORE_PNGS`` cores)
    into ``out_dir``. Returns the paths by kind ("trace", "op_summary", "png", "png_core<N>")."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"trace": d / "trace.json", "op_summary": d / "op_summary.csv"}
    paths["trace"].write_text(json.dumps(chrome_trace(prof)), encoding="utf-8")
    row = op_summary_row(prof, op_name)
    with paths["op_summary"].open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    png = pipeline_png(prof, d / "pipeline.png")
    if png is not None:
        paths["png"] = png
        for i in range(min(PER_CORE_PNGS, len(prof.cores))):
            one = pipeline_png(prof, d / f"pipeline_core{prof.cores[i].core}.png", only=[i])
            if one is not None:
                paths[f"png_core{prof.cores[i].core}"] = one
    return paths


def pipeline_png(prof: Profile, path: str | Path, max_cores: int = 4, only: list[int] | None = None) -> Path | None:
    """A Gantt chart of each core's pipes (the ``only`` indices into ``prof.cores``, else the first ``max_cores``);
    None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cores = [prof.cores[i] for i in only] if only is not None else prof.cores[:max_cores]
    from matplotlib.colors import to_rgb

    rows_of = [lane_rows(c) for c in cores]
    n_rows = max(len({*r, *((p, 0) for p in LANES if p != Pipe.PIPE_ALL)}) for r in rows_of)
    fig, axes = plt.subplots(len(cores), 1, figsize=(12, 0.9 + 0.3 * n_rows * len(cores)), squeeze=False)
    order: dict[Pipe, int] = {p: i for i, p in enumerate(p for p in LANES if p != Pipe.PIPE_ALL)}
    for ax, c, rows in zip(axes[:, 0], cores, rows_of, strict=True):
        keys = sorted({*rows, *((p, 0) for p in order)}, key=lambda pk: (order[pk[0]], pk[1]))
        for y, (p, k) in enumerate(keys):
            base = np.array(list(to_rgb(f"C{order[p]}")), dtype=np.float64)
            # every instruction its own bar, shades alternating, a white edge between: transfers and their
            # overlap with compute (double buffering) show as separate blocks, not one solid bar
            shades = [tuple(base), tuple(base + (1 - base) * 0.45)]
            bars = rows.get((p, k), [])
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=[shades[j % 2] for j in range(len(bars))],
                           edgecolor="white", linewidth=0.3)
        ax.set_yticks(range(len(keys)), [LANES[p] + (f" #{k}" if k else "") for p, k in keys], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"core{c.core}: {c.cycles} cycles", fontsize=9)
    axes[-1, 0].set_xlabel(f"cycles @ {prof.soc.clock_mhz:.0f} MHz")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return Path(path)
