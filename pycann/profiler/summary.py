"""The profiler's terminal summary and its PNG chart.

The summary lists the ops that took the most time (aggregated over runs, by op name), each
one's share of the device time, achieved GFLOP/s and GB/s, how close it came to the nearer roof
of the roofline and the verdict (``analysis.verdict``: compute- / memory- / overhead-bound),
then the same per op type (the op_statistic view, cann-interfaces.md §4.3). The machine peaks
and where they came from (measured probe or env override, ``peak.py``) head the table.

The chart needs matplotlib (``pip install pycann[profile]``); without it ``write_chart`` returns
False and the summary says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pycann.profiler.analysis import Report, verdict

NO_MATPLOTLIB = "PNG chart skipped: matplotlib is not installed (pip install pycann[profile])"


@dataclass
class Agg:
    """An op (or op type) aggregated over runs."""

    key: str
    op_type: str
    count: int = 0
    dur_ns: int = 0
    flops: int = 0
    nbytes: int = 0
    origin: list[str] = field(default_factory=list)

    @property
    def gflops(self) -> float:
        return self.flops / self.dur_ns if self.dur_ns else 0.0

    @property
    def gbps(self) -> float:
        return self.nbytes / self.dur_ns if self.dur_ns else 0.0


def aggregate(report: Report, by: str = "name") -> list[Agg]:
    """Top-level ops grouped by ``name`` or ``op_type``, longest total first."""
    groups: dict[str, Agg] = {}
    for r in report.top_level():
        key = r.name if by == "name" else r.op_type
        a = groups.setdefault(key, Agg(key, r.op_type, origin=r.origin))
        a.count += 1
        a.dur_ns += r.dur_ns
        a.flops += r.flops
        a.nbytes += r.nbytes
    return sorted(groups.values(), key=lambda a: -a.dur_ns)


def _table(report: Report, aggs: list[Agg], title: str, top: int) -> list[str]:
    total = report.device_ns or 1
    lines = [title, f"  {'#':>2} {'Name':<32} {'OP Type':<18} {'Count':>5} {'Total(us)':>11} {'Share':>6} "
                    f"{'GFLOP/s':>8} {'GB/s':>7} {'Roof':>6}  Verdict"]
    for i, a in enumerate(aggs[:top], 1):
        bound, roof = verdict(a.flops, a.nbytes, a.dur_ns, report.peaks)
        name = a.key if len(a.key) <= 32 else a.key[:29] + "..."
        lines.append(f"  {i:>2} {name:<32} {a.op_type[:18]:<18} {a.count:>5} {a.dur_ns / 1000:>11.1f} "
                     f"{100 * a.dur_ns / total:>5.1f}% {a.gflops:>8.2f} {a.gbps:>7.2f} {100 * roof:>5.1f}%  {bound}")
    if len(aggs) > top:
        rest = sum(a.dur_ns for a in aggs[top:])
        lines.append(f"     ... {len(aggs) - top} more, {rest / 1000:.1f} us ({100 * rest / total:.1f}%)")
    return lines


def render(report: Report, top: int = 15) -> str:
    """The summary as text (also written as summary_*.txt)."""
    p = report.peaks
    runs = len(report.runs)
    models = ", ".join(report.models) or "-"
    lines = [
        f"pycann profile: {runs} model run(s) of {models}; {len(report.ops)} op executions; "
        f"device time {report.device_ns / 1e6:.3f} ms, run time {report.run_ns / 1e6:.3f} ms",
        f"machine peaks: {p.flops / 1e9:.1f} GFLOP/s, {p.bandwidth / 1e9:.1f} GB/s "
        f"(balance {p.balance:.1f} FLOP/B; {p.source})",
    ]
    if report.runs:
        durs = [f"{r.dur_ns / 1e6:.3f}" for r in report.runs[:10]]
        more = f" ... ({len(report.runs) - 10} more)" if len(report.runs) > 10 else ""
        lines.append(f"run times (ms): {', '.join(durs)}{more}"
                     + ("  (first runs include warm-up)" if len(report.runs) > 1 else ""))
    if not report.ops:
        lines.append("no op executions were recorded (was a model run while profiling?)")
        return "\n".join(lines) + "\n"
    lines += _table(report, aggregate(report, "name"), "Top ops by time:", top)
    lines += _table(report, aggregate(report, "op_type"), "By op type:", min(top, 10))
    counts: dict[str, int] = {}
    for r in report.top_level():
        counts[r.bound] = counts.get(r.bound, 0) + r.dur_ns
    share = ", ".join(f"{k} {100 * v / (report.device_ns or 1):.0f}%" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    lines.append(f"time by verdict: {share}")
    if report.apis:
        lines.append(f"host API calls / copies: {len(report.apis)} ({sum(a.dur_ns for a in report.apis) / 1e6:.3f} ms)")
    return "\n".join(lines) + "\n"


def write_chart(report: Report, path: str, top: int = 15) -> bool:
    """Top ops as horizontal bars (coloured by verdict) next to a roofline scatter. False without matplotlib."""
    try:
        from matplotlib.figure import Figure  # no pyplot: leaves the application's backend alone
    except ImportError:
        return False
    aggs = aggregate(report, "name")[:top]
    colors = {"compute-bound": "#d62728", "memory-bound": "#1f77b4", "overhead-bound": "#7f7f7f"}
    fig = Figure(figsize=(14, max(4.0, 0.35 * len(aggs) + 1.5)))
    ax1, ax2 = fig.subplots(1, 2)
    total = report.device_ns or 1
    names = [a.key[:40] for a in aggs][::-1]
    durs = [a.dur_ns / 1000 for a in aggs][::-1]
    cols = [colors[verdict(a.flops, a.nbytes, a.dur_ns, report.peaks)[0]] for a in aggs][::-1]
    ax1.barh(names, durs, color=cols)
    for y, (d, a) in enumerate(zip(durs, aggs[::-1])):
        ax1.text(d, y, f" {100 * a.dur_ns / total:.1f}%", va="center", fontsize=8)
    ax1.set_xlabel("total time (us)")
    ax1.set_title("Top ops by time (red compute-, blue memory-, grey overhead-bound)")
    p = report.peaks
    pts = [(a.flops / a.nbytes, a.gflops) for a in aggregate(report, "name") if a.flops and a.nbytes and a.dur_ns]
    lo = min([x for x, _ in pts] + [p.balance / 100, 0.01])
    hi = max([x for x, _ in pts] + [p.balance * 100])
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    ax2.plot(xs, [min(p.flops, x * p.bandwidth) / 1e9 for x in xs], color="black", label="roofline (peaks)")
    if pts:
        ax2.scatter([x for x, _ in pts], [y for _, y in pts], s=12, alpha=0.7, label="ops")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax2.set_ylabel("achieved GFLOP/s")
    ax2.set_title(f"Roofline: {p.flops / 1e9:.0f} GFLOP/s, {p.bandwidth / 1e9:.0f} GB/s")
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True
