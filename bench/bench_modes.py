"""The extra modes of ``run_bench.py``: the first-run table and the contention (busy neighbour) runs.

* ``--first-run``: every cell is one fresh process that imports the engine, loads the model (pycann: the
  ``.om`` compiled beforehand, ATC style; ORT: ``InferenceSession`` on the ``.onnx``) and runs it once. The
  table adds up ``import_s + load_s + first_run_ms`` as a new user would wait for them.
* ``--contention N``: every cell runs twice, as is and with ``N`` busy-loop processes (``while True: pass``)
  started just before the child and killed just after it (by their process id). The table compares how much
  each engine slows down with a busy neighbour on the machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from scripts.model_zoo import ZOO

#: bench_one options for one untimed-warm-up, one-run cell (``--first-run``).
FIRST_RUN_ARGS = ("--warmup", "0", "--min-runs", "1", "--min-time", "0", "--max-runs", "1", "--floor-runs", "1")

Best = dict[tuple[str, int, str], dict[str, Any]]


def installed_engines(engines: Sequence[str]) -> list[str]:
    """``engines`` without the OpenVINO ones when ``openvino`` cannot be imported here (a note says so)."""
    if importlib.util.find_spec("openvino") is not None:
        return list(engines)
    dropped = [e for e in engines if e.startswith("openvino")]
    if dropped:
        print(f"openvino is not installed: leaving out {', '.join(dropped)}", file=sys.stderr)
    return [e for e in engines if not e.startswith("openvino")]


def zoo_models(names: Sequence[str] | None, batches: Sequence[int]) -> list[tuple[str, int]]:
    """The zoo (or the zoo models in ``names``) at every batch in ``batches``, batch-major."""
    chosen = [n for n in ZOO if not names or n in names]
    unknown = [n for n in names or [] if n not in ZOO]
    if unknown:
        raise SystemExit(f"not zoo models: {', '.join(unknown)}; known: {', '.join(ZOO)}")
    return [(n, b) for b in batches for n in chosen]


@contextlib.contextmanager
def busy_neighbours(n: int) -> Iterator[None]:
    """Keep ``n`` pure-Python busy-loop processes running for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        if procs:
            time.sleep(0.3)  # let them reach their loop (interpreter start-up is ~20 ms of CPU)
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _ms(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _total_ms(rec: dict[str, Any] | None) -> float | None:
    if rec is None or rec.get("status") != "ok" or rec.get("first_run_ms") is None:
        return None
    return 1e3 * (rec.get("import_s") or 0.0) + 1e3 * (rec.get("load_s") or 0.0) + rec["first_run_ms"]


def _geo(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    k = len(ys) // 2
    return ys[k] if len(ys) % 2 else (ys[k - 1] + ys[k]) / 2


def first_run_cells(records: Sequence[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """(model, batch, engine) -> medians over the repeats (``--repeat``: one fresh process each) of
    ``import_s``, ``load_s``, ``first_run_ms`` and of their sum (``total_ms``), with ``n`` repeats: a
    single process reads 10-30 % off on this kind of machine, so one repeat decides nothing."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in records:
        if "label" in r and _total_ms(r) is not None:
            groups.setdefault((r["model"], r["batch"], r["label"]), []).append(r)
    out: dict[tuple[str, int, str], dict[str, Any]] = {}
    for key, recs in groups.items():
        out[key] = {"import_s": _median([r.get("import_s") or 0.0 for r in recs]),
                    "load_s": _median([r.get("load_s") or 0.0 for r in recs]),
                    "first_run_ms": _median([r["first_run_ms"] for r in recs]),
                    "total_ms": _median([t for r in recs if (t := _total_ms(r)) is not None]), "n": len(recs)}
    return out


def first_run_table(records: Sequence[dict[str, Any]], rows: Sequence[tuple[str, int]]) -> list[str]:
    """Markdown: import / load / first run / total (ms) of ORT and pycann, medians over the repeats
    (the total is the median of the per-process totals), and pycann's total over ORT's."""
    cells_by = first_run_cells(records)
    lines = ["| model | batch | ORT import | ORT session | ORT first | **ORT total** | pycann import | pycann load "
             "| pycann first | **pycann total** | pycann/ORT | repeats |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    ratios: list[float] = []
    for m, b in rows:
        o, p = cells_by.get((m, b, "ort")), cells_by.get((m, b, "pycann"))
        cells = [m, str(b)]
        for rec in (o, p):
            if rec is None:
                cells += ["–", "–", "–", "FAIL"]
                continue
            cells += [_ms(1e3 * rec["import_s"]), _ms(1e3 * rec["load_s"]), _ms(rec["first_run_ms"]),
                      f"**{_ms(rec['total_ms'])}**"]  # fmt: skip
        to, tp = (o or {}).get("total_ms"), (p or {}).get("total_ms")
        if to and tp:
            ratios.append(tp / to)
        cells.append(f"{tp / to:.2f}×" if to and tp else "–")
        cells.append(str(min((o or {}).get("n", 0), (p or {}).get("n", 0))))
        lines.append("| " + " | ".join(cells) + " |")
    if ratios:
        lines += ["", f"* pycann / ORT first-run total over {len(ratios)} models: geometric mean "
                      f"**{_geo(ratios):.2f}×**, worst {max(ratios):.2f}×, best {min(ratios):.2f}×."]  # fmt: skip
    return lines


def contention_table(best: Best, rows: Sequence[tuple[str, int]], n_busy: int) -> list[str]:
    """Markdown: median latency quiet vs with ``n_busy`` busy neighbours and the slowdown, per engine, then
    pycann over each ORT variant quiet and busy."""
    busy = f"+busy{n_busy}"
    names = {"ort": "ORT", "ort_nospin": "ORT no-spin", "pycann": "pycann"}
    engines = [e for e in names if any(lab == e for (_, _, lab) in best)]
    refs = [e for e in engines if e != "pycann"] if "pycann" in engines else []
    head = ["model", "batch"]
    for e in engines:
        head += [f"{names[e]} quiet", f"{names[e]} {busy}", f"{names[e]} slowdown"]
    for r in refs:
        head += [f"pycann/{names[r]} quiet", f"pycann/{names[r]} busy"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    slow: dict[str, list[float]] = {e: [] for e in engines}
    for m, b in rows:
        cells = [m, str(b)]
        med: dict[str, float | None] = {}
        for eng in engines:
            q, c = best.get((m, b, eng)), best.get((m, b, eng + busy))
            mq = q["median_ms"] if q and q.get("status") == "ok" else None
            mc = c["median_ms"] if c and c.get("status") == "ok" else None
            med[eng], med[eng + busy] = mq, mc
            cells += [_ms(mq) if mq else "–", _ms(mc) if mc else "–", f"{mc / mq:.2f}×" if mq and mc else "–"]
            if mq and mc:
                slow[eng].append(mc / mq)
        for r in refs:
            for key in ("", busy):
                o, p = med.get(r + key), med.get("pycann" + key)
                cells.append(f"{p / o:.2f}×" if o and p else "–")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for eng, xs in slow.items():
        if xs:
            lines.append(f"* {names[eng]} slowdown with {n_busy} busy process(es): geometric mean "
                         f"**{_geo(xs):.2f}×**, worst {max(xs):.2f}×.")  # fmt: skip
    return lines
