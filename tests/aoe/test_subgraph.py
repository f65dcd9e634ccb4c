"""Subgraph tuning (job_type=1) end to end on a small model: a record, applied, then reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pycann.aoe.bank import KnowledgeBank
from pycann.aoe.driver import subgraph_job
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.aoe.models import conv_model


def test_subgraph_tuning_records_and_reuses(tmp_path: Path) -> None:
    bank = KnowledgeBank(tmp_path)
    opts = CompileOptions(op_bank_path=str(tmp_path))
    seen: list[tuple[int, int]] = []
    report, cm = subgraph_job(conv_model, opts, bank, "conv.onnx", progress=lambda d, t, n: seen.append((d, t)),
                              budget_s=0.05)
    (entry,) = report.entries
    configs = [c["config"] for c in entry["configs"]]
    # the default, the measured kernels, NCHW everywhere, and each fusion that changed this graph
    assert configs[:3] == ["default (static kernels)", "kernels", "LayoutSelection off"]
    assert "ConvActivationFusion off" in configs
    tried = [c for c in configs if not c.startswith("final")]
    assert seen[-1][0] == seen[-1][1] == len(tried)
    assert entry["trials"] >= len(tried) and not entry["from_bank"]
    for c in entry["configs"][1:]:  # every choice searched says why it was kept or not, from its own numbers
        if c.get("no_change"):  # (not measured: its compiled plan was the current best's)
            assert c["why"] == f"no change: {c['no_change']}" and f"{c['config']}: {c['why']}" in report.text()
            continue
        ratio = c["ms"] / c["current_ms"]
        assert c["why"].startswith("kept" if c.get("kept") else "not kept"), c
        small = not c.get("kept") and not c.get("rejected") and ratio < 1
        if c.get("rejected"):  # a rejection quotes the speed-up it would have brought (below 1 when slower)
            expect = f"x{1 / ratio:.3f}"
        else:
            expect = f"{1 - ratio:.2%}" if small else f"x{max(ratio, 1 / ratio):.3f}"
        assert expect in c["why"], c
        assert f"{c['config']}: {c['ms']} ms vs {c['current_ms']} ms; {c['why']}" in report.text()
    kept = [c for c in entry["configs"] if c.get("kept")]
    for c in kept:  # a kept choice was faster than the configuration it replaced, side by side
        assert c["ms"] < c["current_ms"]
    if not kept:
        assert entry["choice"] == {"disabled_passes": [], "kernel_bank": False, "layout": True}
        assert "nothing left to gain" in entry["note"]
    assert "load average" in report.notes[-1]
    assert bank.count("graph") == 1 and bank.count("kernel") == 2  # the two convs' measured kernels
    # the tuned model computes what the untuned one does
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)
    from pycann.ge.compile.compiler import compile_model

    ref = LoadedModel.from_compiled(compile_model(conv_model(), CompileOptions(tune_bank="off"))).run([x])[0]
    assert cm is not None
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run([x])[0], ref, rtol=1e-4, atol=1e-4)
    again, _ = subgraph_job(conv_model, opts, bank, "conv.onnx", budget_s=0.05)
    (e2,) = again.entries
    assert e2["from_bank"] and e2["trials"] == 0 and e2["choice"] == entry["choice"]
    text = report.text()
    assert "end to end" in text and " -> " in text and "load average" in text


def test_reasons_per_choice() -> None:
    """The report's reasons, on hand-made measurements: slower, a gain under the bar, kept, rejected."""
    from pycann.aoe.subgraph_tuning import no_gain_note, why

    slower = {"config": "kernels", "ms": 103.0, "current_ms": 100.0}
    small = {"config": "LayoutSelection off", "ms": 99.0, "current_ms": 100.0}
    assert why(slower, 0.03) == "not kept: x1.030 slower than the current best"
    assert why(small, 0.03) == "not kept: 1.00% faster, under the 3% bar (within the noise of the A/B)"
    assert why({**small, "ms": 80.0, "kept": True}, 0.03) == "kept: x1.250 faster than the current best"
    bad = {**small, "ms": 80.0, "rejected": "outputs differ from the default's by 1.00e-02 of their range"}
    assert why(bad, 0.03).startswith("not kept: outputs differ")
    final = {"config": "final: tuned vs default", "ms": 104.0, "current_ms": 100.0, "rejected": "x"}
    assert "(x0.962)" in why(final, 0.03)
    note = no_gain_note([{"config": "default", "ms": 100.0}, slower, {**slower, "config": "A off", "ms": 110.0}], 0.03)
    assert note.endswith("2 choices: GE's default won or tied every A/B (a win needs > 3%); the closest, kernels, "
                         "was x1.030 slower"), note
    assert "the closest, LayoutSelection off, was 1.00% faster, under the 3% bar" in no_gain_note([small, slower], 0.03)


def test_final_line_prints_tuned_then_default() -> None:
    """The final line reads 'tuned vs default' in the order its numbers are printed (ms = tuned)."""
    from pycann.aoe.report import TuneReport

    final = {"config": "final: tuned vs default", "ms": 40.241, "current_ms": 38.845, "rejected": "x"}
    entry = {"workload": "m end to end", "baseline_us": 38845.0, "cost_us": 38845.0, "speedup": 1.0,
             "choice": {}, "configs": [final]}
    text = TuneReport("sgat", "m", "Ascend910B2", "b", [entry]).text()
    assert "final: tuned vs default: 40.241 ms vs 38.845 ms" in text


def _scripted(finals: list[list[float]]):  # noqa: ANN202
    """A ``measure_ms`` stand-in: the default alone 100 ms, the first candidate wins its A/B by x1.25,
    later candidates lose, and the final tuned-vs-default blocks return ``finals`` in turn."""
    state: dict = {"w0": None, "kept": False}
    blocks = iter(finals)

    def fake(models, feeds, budget_s=2.0):  # noqa: ANN001, ANN202
        if len(models) == 1:
            state["w0"] = models[0]
            return [100.0]
        if not state["kept"]:
            state["kept"] = True
            return [100.0, 80.0]
        if models[0] is not state["w0"]:
            return [80.0, 90.0]
        return next(blocks)

    return fake


def test_a_kept_choice_must_win_the_final_blocks(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A choice that won its one A/B is stored only if the final tuned-vs-default check, in separate
    blocks, clears the bar in its median block (scripted measurements: one lucky block of three)."""
    from pycann.aoe import subgraph_tuning as sg

    # the lucky block first
    monkeypatch.setattr(sg, "measure_ms", _scripted([[100.0, 80.0], [100.0, 99.0], [100.0, 99.5]]))
    opts = CompileOptions(op_bank_path=str(tmp_path))
    report, _ = subgraph_job(conv_model, opts, KnowledgeBank(tmp_path), "conv.onnx", budget_s=0.01)
    (entry,) = report.entries
    final = entry["configs"][-1]
    assert final["config"] == "final: tuned vs default" and final["round_ratios"] == [0.8, 0.99, 0.995]
    assert final.get("rejected") and not final.get("kept")
    assert entry["choice"] == {"disabled_passes": [], "kernel_bank": False, "layout": True}
    assert "were not faster than the default in the final side-by-side run" in entry["note"]


def test_final_line_quotes_the_median_block(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A kept final quotes the median block's two latencies, the pair that decided: the minima over
    the blocks (tuned 90 from one block, default 80 from another) would read 'kept: x0.889 faster'."""
    from pycann.aoe import subgraph_tuning as sg

    monkeypatch.setattr(sg, "measure_ms", _scripted([[100.0, 90.0], [80.0, 95.0], [100.0, 88.0]]))
    opts = CompileOptions(op_bank_path=str(tmp_path))
    report, _ = subgraph_job(conv_model, opts, KnowledgeBank(tmp_path), "conv.onnx", budget_s=0.01)
    (entry,) = report.entries
    final = entry["configs"][-1]
    assert final["round_ratios"] == [0.88, 0.9, 1.1875] and final.get("kept")
    assert (final["ms"], final["current_ms"]) == (90.0, 100.0)
    assert final["why"] == "kept: x1.111 faster than the default"
    assert "final: tuned vs default: 90.0 ms vs 100.0 ms; kept: x1.111 faster than the default" in report.text()
