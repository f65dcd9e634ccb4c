"""msprof's output files (cann-interfaces.md §4.2-§4.4), written from a ``Report``.

Layout under the output directory::

    PROF_<pid>_<YYYYmmddHHMMSSmmm>_<8 letters>/
      mindstudio_profiler_output/
        msprof_<ts>.json        Chrome trace (§4.4): open in https://ui.perfetto.dev or chrome://tracing
        op_summary_<ts>.csv     one row per executed op (§4.3 columns + pycann cost columns)
        op_statistic_<ts>.csv   per op type: Count, Total/Avg/Min/Max Time(us), Ratio(%)
        api_statistic_<ts>.csv  host API calls and memory copies (``record_api``)
        summary_<ts>.txt        the terminal summary (``summary.render``)
        op_chart_<ts>.png       the summary as a chart (needs matplotlib: ``pip install pycann[profile]``)
        README.txt
"""

from __future__ import annotations

import csv
import json
import os
import random
import string
import time
from collections.abc import Iterable
from typing import Any

from pycann.profiler.analysis import OpRow, Report, fmt_dtypes, fmt_formats, fmt_shapes

OP_SUMMARY_COLUMNS = [
    "Device_id", "Model Name", "Model ID", "Task ID", "Stream ID", "Infer ID", "Op Name", "OP Type", "OP State",
    "Task Type", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
    "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
    # pycann's columns (no PMU on a CPU): cost model, achieved rates, roofline verdict
    "Origin Ops", "Subgraph Depth", "FLOPs", "Bytes", "GFLOP/s", "GB/s", "Arithmetic Intensity(FLOP/B)",
    "Roof(%)", "Bound",
]
OP_STATISTIC_COLUMNS = ["Model Name", "OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)",
                        "Min Time(us)", "Max Time(us)", "Ratio(%)", "FLOPs", "GFLOP/s", "GB/s"]
API_STATISTIC_COLUMNS = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)",
                         "Variance"]
TASK_TYPE = "AI_CPU"  # pycann's kernels run on the host CPU
DEVICE_PID, HOST_PID = 2, 1
TRACK_NAMES = {"api": "AscendCL API", "memcpy": "Memcpy"}


def _us(ns: int) -> str:
    """Nanoseconds as microseconds with 3 decimals, exactly (no float rounding)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def prof_dir_name(now: float | None = None) -> str:
    """``PROF_<pid>_<YYYYmmddHHMMSSmmm>_<8 uppercase letters>`` as msprof names its result folders."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}"
    tag = "".join(random.choices(string.ascii_uppercase, k=8))
    return f"PROF_{os.getpid():06d}_{stamp}_{tag}"


def op_summary_rows(report: Report) -> Iterable[list[Any]]:
    for r in report.ops:
        yield [
            0, r.model, r.model_id, r.task_id, r.stream, r.infer_id, r.name, r.op_type, "static", TASK_TYPE,
            _us(report.epoch0_ns + r.start_ns), _us(r.dur_ns), _us(r.wait_ns), 1,
            fmt_shapes(r.inputs), fmt_dtypes(r.inputs), fmt_formats(r.op_type, r.inputs),
            fmt_shapes(r.outputs), fmt_dtypes(r.outputs), fmt_formats(r.op_type, r.outputs),
            ";".join(r.origin), r.depth, r.flops, r.nbytes, f"{r.gflops:.3f}", f"{r.gbps:.3f}",
            f"{r.intensity:.3f}", f"{100 * r.roof:.1f}", r.bound,
        ]


def op_statistic_rows(report: Report) -> list[list[Any]]:
    groups: dict[tuple[str, str], list[OpRow]] = {}
    for r in report.ops:
        groups.setdefault((r.model, r.op_type), []).append(r)
    total = sum(r.dur_ns for r in report.ops) or 1
    rows = []
    for (model, op_type), rs in sorted(groups.items(), key=lambda kv: -sum(r.dur_ns for r in kv[1])):
        durs = [r.dur_ns for r in rs]
        t = sum(durs)
        fl, nb = sum(r.flops for r in rs), sum(r.nbytes for r in rs)
        rows.append([model, op_type, TASK_TYPE, len(rs), _us(t), _us(t // len(rs)), _us(min(durs)), _us(max(durs)),
                     f"{100 * t / total:.2f}", fl, f"{fl / t if t else 0:.3f}", f"{nb / t if t else 0:.3f}"])
    return rows


def api_statistic_rows(report: Report) -> list[list[Any]]:
    groups: dict[tuple[str, str], list[int]] = {}
    for a in report.apis:
        groups.setdefault((a.track, a.name), []).append(a.dur_ns)
    rows = []
    for (track, name), durs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        n, t = len(durs), sum(durs)
        mean = t / n
        var = sum((d / 1000 - mean / 1000) ** 2 for d in durs) / n
        rows.append([0, track, name, _us(t), n, _us(t // n), _us(min(durs)), _us(max(durs)), f"{var:.3f}"])
    return rows


def _write_csv(path: str, header: list[str], rows: Iterable[list[Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _meta_event(name: str, pid: int, tid: int | None, value: Any) -> dict[str, Any]:
    key = "sort_index" if name.endswith("sort_index") else "name"
    ev: dict[str, Any] = {"name": name, "ph": "M", "pid": pid, "args": {key: value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def trace_events(report: Report) -> list[dict[str, Any]]:
    """Chrome trace events (§4.4): device process with one thread per stream, host process with
    ``Model Execute`` and one thread per API track (``AscendCL API``, ``Memcpy``, ...)."""
    evs: list[dict[str, Any]] = [
        _meta_event("process_name", HOST_PID, None, "AscendCL (host)"),
        _meta_event("process_sort_index", HOST_PID, None, 0),
        _meta_event("process_name", DEVICE_PID, None, "Ascend Hardware (pycann CPU device 0)"),
        _meta_event("process_sort_index", DEVICE_PID, None, 1),
        _meta_event("thread_name", HOST_PID, 0, "Model Execute"),
    ]
    for sid in sorted({r.stream for r in report.ops} | {r.stream for r in report.runs}):
        evs.append(_meta_event("thread_name", DEVICE_PID, sid, f"Stream {sid}"))
    tracks: dict[str, int] = {}
    for a in report.apis:
        if a.track not in tracks:
            tracks[a.track] = len(tracks) + 1
            evs.append(_meta_event("thread_name", HOST_PID, tracks[a.track], TRACK_NAMES.get(a.track, a.track)))
    for run in report.runs:
        evs.append({"name": "ModelExecute", "ph": "X", "pid": HOST_PID, "tid": 0, "ts": run.start_ns / 1000,
                    "dur": run.dur_ns / 1000, "cat": "model",
                    "args": {"Model Name": run.model, "Infer ID": run.infer_id, "Stream ID": run.stream}})
    for r in report.ops:
        evs.append({
            "name": r.name, "ph": "X", "pid": DEVICE_PID, "tid": r.stream, "ts": r.start_ns / 1000,
            "dur": r.dur_ns / 1000, "cat": TASK_TYPE,
            "args": {"Model Name": r.model, "OP Type": r.op_type, "Task ID": r.task_id, "Infer ID": r.infer_id,
                     "Origin Ops": r.origin, "Input Shapes": fmt_shapes(r.inputs),
                     "Input Data Types": fmt_dtypes(r.inputs), "Output Shapes": fmt_shapes(r.outputs),
                     "Output Data Types": fmt_dtypes(r.outputs), "FLOPs": r.flops, "Bytes": r.nbytes,
                     "GFLOP/s": round(r.gflops, 3), "GB/s": round(r.gbps, 3), "Bound": r.bound},
        })
    for a in report.apis:
        evs.append({"name": a.name, "ph": "X", "pid": HOST_PID, "tid": tracks[a.track], "ts": a.start_ns / 1000,
                    "dur": a.dur_ns / 1000, "cat": a.track, "args": {k: str(v) for k, v in a.args.items()}})
    return evs


README = """pycann profiling results (msprof layout, see docs/profiling.md)

msprof_*.json        timeline, Chrome trace format: open in https://ui.perfetto.dev or chrome://tracing.
                     "Ascend Hardware" = the CPU device, one thread per stream; "AscendCL (host)" =
                     model executions, host API calls and memory copies.
op_summary_*.csv     one row per executed op. Times in us. Task Type is AI_CPU (host CPU kernels).
                     pycann columns: Origin Ops (original ONNX nodes of a fused op), FLOPs and Bytes
                     (cost model, pycann/profiler/flops.py), achieved GFLOP/s and GB/s, Roof(%) and
                     Bound (roofline verdict against the machine peaks named in summary_*.txt).
op_statistic_*.csv   per op type totals.
api_statistic_*.csv  host API calls / memory copies reported with pycann.profiler.record_api.
summary_*.txt        top ops by time with verdicts; op_chart_*.png the same as a chart.
"""


def write_all(report: Report, output_dir: str, summary_text: str | None = None, chart: bool = True) -> dict[str, str]:
    """Write the result folder under ``output_dir``; returns ``{kind: path}`` (``dir`` = the PROF folder)."""
    prof = os.path.join(output_dir, prof_dir_name())
    out = os.path.join(prof, "mindstudio_profiler_output")
    os.makedirs(out, exist_ok=True)
    ts = time.strftime("%Y%m%d%H%M%S")
    paths = {
        "dir": prof,
        "timeline": os.path.join(out, f"msprof_{ts}.json"),
        "op_summary": os.path.join(out, f"op_summary_{ts}.csv"),
        "op_statistic": os.path.join(out, f"op_statistic_{ts}.csv"),
        "api_statistic": os.path.join(out, f"api_statistic_{ts}.csv"),
        "readme": os.path.join(out, "README.txt"),
    }
    _write_csv(paths["op_summary"], OP_SUMMARY_COLUMNS, op_summary_rows(report))
    _write_csv(paths["op_statistic"], OP_STATISTIC_COLUMNS, op_statistic_rows(report))
    _write_csv(paths["api_statistic"], API_STATISTIC_COLUMNS, api_statistic_rows(report))
    with open(paths["timeline"], "w", encoding="utf-8") as f:
        json.dump({"traceEvents": trace_events(report), "displayTimeUnit": "ms",
                   "otherData": {"producer": "pycann", "start_time_epoch_ns": report.epoch0_ns,
                                 "peaks": report.peaks.source}}, f)
    with open(paths["readme"], "w", encoding="utf-8") as f:
        f.write(README)
    if summary_text is not None:
        paths["summary"] = os.path.join(out, f"summary_{ts}.txt")
        with open(paths["summary"], "w", encoding="utf-8") as f:
            f.write(summary_text)
    if chart:
        from pycann.profiler.summary import write_chart

        png = os.path.join(out, f"op_chart_{ts}.png")
        if write_chart(report, png):
            paths["chart"] = png
    return paths
