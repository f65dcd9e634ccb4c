"""The progress line and the before/after report of one ``aoe`` run (text and JSON).

Progress: tqdm when it is installed, else one line on stderr rewritten in place (a new line per
step when stderr is not a terminal, so logs stay readable). The JSON follows CANN's result file
name, ``aoe_result_<opat|sgat>_<timestamp>_<pid>.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


class ProgressLine:
    """``progress(done, total, note)`` for the searches; ``close()`` ends the line."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: Any = None
        self._open = False
        self._last = 0.0
        if enabled:
            try:
                from tqdm import tqdm  # optional
                self._bar = tqdm(total=0, desc=label, file=self.stream, leave=True)
            except ImportError:
                self._bar = None

    def __call__(self, done: int, total: int, note: str = "") -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.total = total
            self._bar.n = done
            self._bar.set_postfix_str(note)
            return
        width = 24
        filled = width * done // max(total, 1)
        line = f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
            self._open = True
        elif done >= total or time.monotonic() - self._last >= 2.0:  # a log: one line per 2 s at most
            self._last = time.monotonic()
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._open:
            self.stream.write("\n")
            self.stream.flush()
        self._open = False


@dataclass
class TuneReport:
    """What one ``aoe`` run did: per op or model entry, before/after, trials, time."""

    job: str  # "opat" | "sgat"
    model: str
    soc_version: str
    bank: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tuning_seconds: float = 0.0  # searching and measuring, without compiling and loading
    peak_rss_mib: float = 0.0
    started: float = field(default_factory=time.time)

    @property
    def trials(self) -> int:
        return sum(int(e.get("trials", 0)) for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {"job_type": 1 if self.job == "sgat" else 2, "job": self.job, "model": self.model,
                "soc_version": self.soc_version, "knowledge_bank": self.bank, "seconds": round(self.seconds, 3),
                "tuning_seconds": round(self.tuning_seconds, 3), "peak_rss_mib": round(self.peak_rss_mib, 1),
                "trials": self.trials, "entries": self.entries,
                "notes": self.notes}

    def text(self) -> str:
        """The console report: one line per entry, before -> after and how it was found."""
        kind = "subgraph tuning (job_type=1)" if self.job == "sgat" else "operator tuning (job_type=2)"
        lines = [f"AOE {kind}: {self.model or '(ops file)'} on {self.soc_version}; bank {self.bank}"]
        for e in self.entries:
            src = "bank" if e.get("from_bank") else f"{e.get('trials', 0)} trials of {e.get('space_points', 0)} points"
            lines.append(f"  {e['workload']}: {_t(e['baseline_us'])} -> {_t(e['cost_us'])} "
                         f"(x{e['speedup']:.3f}; {src}) {_choice(e['choice'])}")
            if e.get("note"):
                lines.append(f"      {e['note']}")
            if e.get("override"):
                lines.append(f"      not in the .om (the x{e['speedup']:.3f} is measured alone): {e['override']}")
            for c in e.get("configs", []):  # subgraph tuning: every configuration measured, and why it was kept or not
                if "ms" not in c:  # not measured: its compiled plan was the current best's
                    lines.append(f"      {c['config']}: {c['why']}")
                    continue
                vs = f" vs {c['current_ms']} ms" if "current_ms" in c else ""
                lines.append(f"      {c['config']}: {c['ms']} ms{vs}" + (f"; {c['why']}" if c.get("why") else ""))
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"  {len(self.entries)} entries, {self.trials} trials, {self.seconds:.1f} s "
                     f"({self.tuning_seconds:.2f} s searching and measuring), "
                     f"peak RSS {self.peak_rss_mib:.0f} MiB")
        return "\n".join(lines)

    def write(self, folder: str | Path) -> Path:
        """Write ``aoe_result_<job>_<timestamp>_<pid>.json`` and ``aoe_report.txt`` into ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(self.started))
        path = out / f"aoe_result_{self.job}_{stamp}_{os.getpid()}.json"
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        (out / "aoe_report.txt").write_text(self.text() + "\n", encoding="utf-8")
        return path


def _t(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1e4 else f"{us:.2f} us"


def _choice(c: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in c.items())


def peak_rss_mib() -> float:
    """This process's peak resident set size, MiB (``resource``; 0 where it is missing)."""
    try:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return kib / 1024 if sys.platform != "darwin" else kib / 2**20
    except ImportError:
        return 0.0
