"""bench/dynamic.py refuses counts it cannot tabulate before running any cell (``--rounds 1`` ran
every engine, then failed in the table: no later calls to compare with ORT's)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tools.scripts import load_script


def _dynamic() -> Any:
    return load_script("bench/dynamic.py", "bench_dynamic")


@pytest.mark.parametrize("argv, says", [
    (["--part", "ocr", "--rounds", "1"], "--rounds must be at least 2, got 1"),
    (["--part", "ocr", "--rec-widths", "-1"], "--rec-widths must be at least 0"),
    (["--part", "ocr", "--rec-widths", "0", "--det-sizes", "0"], "no OCR shape"),
    (["--part", "decode", "--steps", "0"], "--steps must be at least 1"),
    (["--part", "decode", "--batches", "0"], "--batches must be at least 1"),
])
def test_bad_counts_are_refused_before_any_cell(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], says: str) -> None:
    mod = _dynamic()
    ran: list[object] = []
    monkeypatch.setattr(mod, "_child", lambda args: ran.append(args) or {"error": "not run"})
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    assert e.value.code == 2 and not ran
    assert says in capsys.readouterr().err


def test_ocr_table_with_two_rounds() -> None:
    """The table's ratios: first calls and later calls over ORT's later calls of the same shape."""
    mod = _dynamic()
    ort = {"engine": "ort", "shapes": 2, "calls": 4, "first_ms": {"a": 20.0, "b": 10.0},
           "later_ms": {"a": 10.0, "b": 5.0}, "rss_mb": [100.0, 101.0], "peak_rss_mb": 110.0}
    pyc = {"engine": "pycann", "shapes": 2, "calls": 4, "first_ms": {"a": 30.0, "b": 5.0},
           "later_ms": {"a": 5.0, "b": 5.0}, "rss_mb": [120.0, 121.0], "peak_rss_mb": 130.0,
           "rec_plans_built": 0, "det_plans_built": 1, "rec_evictions": 0, "det_evictions": 0}
    rows = mod.ocr_table([ort, pyc]).splitlines()
    assert rows[2].startswith("| ort | 2 | 4 | 2.00x, 2.00x | 1.00x, 1.00x | 100 -> 101 | 110 | -+- | - |")
    assert rows[3] == "| pycann | 2 | 4 | 2.00x, 3.00x | 0.75x, 1.00x | 120 -> 121 | 130 | 0+1 | 0+0 |"
