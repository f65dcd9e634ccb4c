"""Raw events -> msprof-style rows (cann-interfaces.md §4.3) with pycann's cost columns and a
roofline verdict per op.

Nesting: events of one thread are intervals; a run that is not inside a node is a top-level
model execution, nodes directly in it have depth 0, nodes of If/Loop/Scan bodies are nested
(depth >= 1) inside their parent node. Durations of depth-0 nodes add up to (almost) the run.

Verdict (per op): ideal time = max(FLOPs / peak FLOP/s, bytes / peak bandwidth); the op reaches
``roof = ideal / measured`` of the nearer roof. Below ``OVERHEAD_ROOF`` (10 %) the op is
``overhead-bound`` (its time goes to dispatch, temporaries or a poor kernel, not to arithmetic
or memory traffic); otherwise ``compute-bound`` when the FLOP roof is the limiting one, else
``memory-bound``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pycann.profiler import hooks
from pycann.profiler.collector import Collector
from pycann.profiler.flops import Meta, count_bytes, count_flops
from pycann.profiler.peak import Peaks

OVERHEAD_ROOF = 0.10
SPATIAL = frozenset({"Conv", "FusedConv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
                     "GlobalMaxPool", "BatchNormalization", "InstanceNormalization", "Resize", "Aipp",
                     "DepthToSpace", "SpaceToDepth", "Upsample", "QLinearConv", "ConvInteger"})
_CANN_DT = {"float32": "DT_FLOAT", "float16": "DT_FLOAT16", "float64": "DT_DOUBLE", "bfloat16": "DT_BF16",
            "bool": "DT_BOOL", "object": "DT_STRING", "sequence": "DT_SEQUENCE"}


@dataclass
class OpRow:
    """One executed node: an op_summary row (msprof columns + pycann's cost columns)."""

    model: str
    model_id: int
    infer_id: int
    task_id: int
    stream: int
    name: str
    op_type: str
    origin: list[str]
    start_ns: int  # relative to the profile's start
    dur_ns: int
    wait_ns: int
    inputs: tuple[Meta, ...]
    outputs: tuple[Meta, ...]
    flops: int
    nbytes: int
    depth: int
    bound: str = ""
    roof: float = 0.0

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s."""
        return self.flops / self.dur_ns if self.dur_ns > 0 else 0.0

    @property
    def gbps(self) -> float:
        """Achieved GB/s (bytes read + written)."""
        return self.nbytes / self.dur_ns if self.dur_ns > 0 else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.nbytes if self.nbytes else 0.0


@dataclass
class RunRow:
    """One top-level model execution (host track ``Model Execute``)."""

    model: str
    infer_id: int
    stream: int
    start_ns: int
    dur_ns: int
    model_id: int = 0


@dataclass
class ApiRow:
    """One host API call or memory copy (``record_api``)."""

    name: str
    track: str
    start_ns: int
    dur_ns: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Everything the writers and the summary need."""

    ops: list[OpRow]
    runs: list[RunRow]
    apis: list[ApiRow]
    peaks: Peaks
    epoch0_ns: int
    models: list[str]

    def top_level(self) -> list[OpRow]:
        """Depth-0 ops: their durations add up to the runs' time."""
        return [r for r in self.ops if r.depth == 0]

    @property
    def device_ns(self) -> int:
        return sum(r.dur_ns for r in self.top_level())

    @property
    def run_ns(self) -> int:
        return sum(r.dur_ns for r in self.runs)


def verdict(flops: int, nbytes: int, dur_ns: int, peaks: Peaks) -> tuple[str, float]:
    """``(bound, roof)``: see the module docstring."""
    if dur_ns <= 0:
        return "overhead-bound", 0.0
    t_c = flops / peaks.flops if peaks.flops else 0.0
    t_m = nbytes / peaks.bandwidth if peaks.bandwidth else 0.0
    roof = max(t_c, t_m) / (dur_ns * 1e-9)
    if roof < OVERHEAD_ROOF:
        return "overhead-bound", roof
    return ("compute-bound" if t_c >= t_m else "memory-bound"), roof


def _trim(metas: Sequence[Meta]) -> Sequence[Meta]:
    """Without trailing omitted optional inputs."""
    n = len(metas)
    while n and metas[n - 1] is None:
        n -= 1
    return metas[:n]


def fmt_shapes(metas: Sequence[Meta]) -> str:
    """msprof's ``1,3,224,224;64,3,7,7`` (a scalar or omitted input shows empty)."""
    metas = _trim(metas)
    return ";".join(",".join(str(d) for d in m[0]) if m is not None else "" for m in metas)


def fmt_dtypes(metas: Sequence[Meta]) -> str:
    """CANN type names, e.g. ``DT_FLOAT;DT_INT64``."""
    metas = _trim(metas)
    return ";".join(_CANN_DT.get(m[1], "DT_" + m[1].upper()) if m is not None else "" for m in metas)


def fmt_formats(op_type: str, metas: Sequence[Meta]) -> str:
    """``NCHW`` / ``NCDHW`` for 4-D / 5-D tensors of spatial ops, else ``ND``."""
    out = []
    for m in _trim(metas):
        rank = len(m[0]) if m is not None else 0
        out.append("NCHW" if op_type in SPATIAL and rank == 4 else "NCDHW" if op_type in SPATIAL and rank == 5
                   else "ND" if m is not None else "")
    return ";".join(out)


def analyze(c: Collector, peaks: Peaks) -> Report:
    """Nest the events per thread, number runs / tasks / streams, add costs and verdicts."""
    streams: dict[int, int] = {}

    def stream_of(thread: int) -> int:
        return streams.setdefault(thread, len(streams))

    # intervals: (start, -end, kind 0=run 1=node, index)
    per_thread: dict[int, list[tuple[int, int, int, int]]] = {}
    for i, (_, thread, s, e, _) in enumerate(c.runs):
        per_thread.setdefault(thread, []).append((s, -e, 0, i))
    for i, ev in enumerate(c.nodes):
        per_thread.setdefault(ev[2], []).append((ev[3], -ev[4], 1, i))
    infer_count: dict[int, int] = {}
    others: dict[str, int] = {}
    names: dict[str, None] = {}

    def model_id(model: str, gname: str, acl_id: int | None) -> int:
        """The id ``acl.mdl.load_*`` returned (as CANN's op_summary and the dump's folders give it);
        models loaded otherwise are numbered from 0 per load, as the dump numbers them. A load is its
        graph name (``hooks.claim_graph_name`` gives each live load its own, the same file loaded
        twice too), so two loads of one .om have two ids, as in CANN."""
        names[model] = None
        return acl_id if acl_id is not None else others.setdefault(gname, len(others))

    run_rows: list[RunRow] = []
    op_rows: list[OpRow] = []
    for thread in sorted(per_thread, key=lambda t: min(iv[0] for iv in per_thread[t])):
        sid = stream_of(thread)
        stack: list[tuple[int, int, Any]] = []  # (end, kind, row or None)
        task = 0
        prev_end: int | None = None
        for s, neg_e, kind, i in sorted(per_thread[thread]):
            e = -neg_e
            while stack and stack[-1][0] <= s:
                stack.pop()
            run = stack[0][2] if stack and stack[0][1] == 0 else None
            depth = sum(1 for en in stack if en[1] == 1)
            if kind == 0:
                gname, acl_id = c.runs[i][0], c.runs[i][4]
                if not stack:  # a top-level model execution
                    model = hooks.model_name_of(gname)
                    mid = model_id(model, gname, acl_id)
                    infer = infer_count.get(mid, 0)  # (Infer ID counts the runs of one Model ID)
                    infer_count[mid] = infer + 1
                    row = RunRow(model, infer, sid, s - c.perf0, e - s, mid)
                    run_rows.append(row)
                    stack.append((e, 0, row))
                    task, prev_end = 0, s
                else:
                    stack.append((e, 0, None))
                continue
            node, gname, _, _, _, ins, outs = c.nodes[i]
            model = run.model if run is not None else hooks.model_name_of(gname)
            mid = run.model_id if run is not None else model_id(model, gname, c.acl_ids.get(gname))
            op_type = getattr(node, "op_type", "?")
            attrs = getattr(node, "attrs", {})
            wait = s - prev_end if depth == 0 and prev_end is not None else 0
            row_op = OpRow(
                model=model, model_id=mid, infer_id=run.infer_id if run is not None else 0,
                task_id=task, stream=sid, name=getattr(node, "name", "") or op_type, op_type=op_type,
                origin=list(getattr(node, "origin", []) or []), start_ns=s - c.perf0, dur_ns=e - s,
                wait_ns=max(wait, 0), inputs=ins, outputs=outs, flops=count_flops(op_type, attrs, ins, outs),
                nbytes=count_bytes(ins, outs), depth=depth,
            )
            row_op.bound, row_op.roof = verdict(row_op.flops, row_op.nbytes, row_op.dur_ns, peaks)
            op_rows.append(row_op)
            task += 1
            if depth == 0:
                prev_end = e
            stack.append((e, 1, None))
    op_rows.sort(key=lambda r: (r.start_ns, r.depth))
    run_rows.sort(key=lambda r: r.start_ns)
    apis = [ApiRow(name, track, s - c.perf0, e - s, args) for name, track, _, s, e, args in c.apis]
    apis.sort(key=lambda a: a.start_ns)
    return Report(op_rows, run_rows, apis, peaks, c.epoch0, list(names))
