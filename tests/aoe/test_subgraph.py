"""Subgraph tuning (job_type=1) end to end on a small model: a record, applied, then reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pycann.aoe.bank import KnowledgeBank
from pycann.aoe.driver import subgraph_job
from pycann.ge.model import LoadedModel
from pycann.ge.options import CompileOptions
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
    from pycann.ge.compiler import compile_model

    ref = LoadedModel.from_compiled(compile_model(conv_model(), CompileOptions(tune_bank="off"))).run([x])[0]
    assert cm is not None
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run([x])[0], ref, rtol=1e-4, atol=1e-4)
    again, _ = subgraph_job(conv_model, opts, bank, "conv.onnx", budget_s=0.05)
    (e2,) = again.entries
    assert e2["from_bank"] and e2["trials"] == 0 and e2["choice"] == entry["choice"]
    text = report.text()
    assert "end to end" in text and " -> " in text and "load average" in text
