"""The excluded-cases ledger: one line per excluded ONNX backend test, with the reason.

Format of ``excluded.txt``: ``test_name  # reason`` (test names without the ``_cpu`` suffix).
Nothing is excluded silently: the conformance summary prints the ledger's size and it is
asserted that each excluded name exists in the suite.
"""

from __future__ import annotations

from pathlib import Path

LEDGER = Path(__file__).with_name("excluded.txt")


def read_ledger(path: Path = LEDGER) -> dict[str, str]:
    """``{test_name: reason}``; raises ``ValueError`` for a line without a reason."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, reason = line.partition("#")
        if not sep or not reason.strip():
            raise ValueError(f"{path.name}:{lineno}: every excluded test needs a reason after '#'")
        out[name.strip()] = reason.strip()
    return out
