"""The tuners judge what the compiled model runs: a banked kernel GE's one-thread-pool rule overrides
is "no change" in subgraph tuning and "not in the .om" in operator tuning (pycann/aoe/plan.py)."""

from __future__ import annotations

from pathlib import Path

from pycann.aoe.bank import BankRecord, KnowledgeBank
from pycann.aoe.driver import op_job, subgraph_job
from pycann.aoe.ops_file import OpsFilter
from pycann.aoe.plan import overrides, plan_signature
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes.select_kernels import node_specs
from pycann.ge.compile.tuned import kernel_key
from tests.aoe.models import conv_model


def _bank_minority_provider(folder: Path) -> tuple[str, str, str]:
    """Bank conv1's static kernel and, for the small conv2, a kernel of another provider (numpy): the
    one-pool rule must move conv2 back to conv1's provider. Returns (conv2's node, banked, static)."""
    cm = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    bank = KnowledgeBank(folder)
    small = min(node_specs(cm.graph), key=lambda s: s.spec.flops)
    for ns in node_specs(cm.graph):
        algo = str(ns.node.attrs["_algo"])
        if ns.node.name == small.node.name:
            assert not algo.startswith("numpy:"), algo  # (the test needs another provider than the static one)
            algo = "numpy:im2col_gemm"
        bank.put(BankRecord(kernel_key(ns.spec, ns.approx), {"algorithm": algo}, 1.0, 2.0, 3))
    return small.node.name, "numpy:im2col_gemm", str(small.node.attrs["_algo"])


def test_overrides_name_the_one_pool_rule(tmp_path: Path) -> None:
    node, banked, static = _bank_minority_provider(tmp_path)
    cm = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)))
    plain = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    assert plan_signature(cm.graph) == plan_signature(plain.graph)  # the bank changed nothing in the plan
    (o,) = overrides(cm.graph)
    assert (o.node, o.banked, o.compiled) == (node, banked, static)
    assert o.reason.startswith(f"GE's one-thread-pool rule moved it to {static.split(':')[0]}")


def test_subgraph_tuning_does_not_keep_a_change_the_compile_undid(tmp_path: Path) -> None:
    _bank_minority_provider(tmp_path)
    opts = CompileOptions(op_bank_path=str(tmp_path))
    report, _ = subgraph_job(conv_model, opts, KnowledgeBank(tmp_path), "conv.onnx", budget_s=0.02)
    (entry,) = report.entries
    kernels = next(c for c in entry["configs"] if c["config"] == "kernels")
    assert "ms" not in kernels and not kernels.get("kept"), kernels
    assert kernels["why"] == "no change: GE's one-thread-pool rule reverted 1 banked kernel to onednn", kernels
    assert "kernels: no change: GE's one-thread-pool rule reverted 1 banked kernel" in report.text()
    assert entry["choice"]["kernel_bank"] is False or any(c.get("kept") for c in entry["configs"])


def test_operator_tuning_says_which_banked_choices_the_om_lacks(tmp_path: Path) -> None:
    node, banked, static = _bank_minority_provider(tmp_path)
    opts = CompileOptions(op_bank_path=str(tmp_path))
    report, cm = op_job(conv_model, opts, KnowledgeBank(tmp_path), "conv.onnx", OpsFilter(), "Ascend910B2")
    assert cm is not None
    by_node = {n: e for e in report.entries for n in e["nodes"]}
    assert by_node[node]["in_om"] is False and static in by_node[node]["override"]
    assert "one-thread-pool rule" in by_node[node]["override"]
    assert all(e["in_om"] for e in report.entries if node not in e["nodes"])
    text = report.text()
    assert "not in the .om (the x" in text and "measured alone" in text
    assert any("do not run their banked kernel in the tuned .om" in n for n in report.notes), report.notes


def test_operator_tuning_names_a_subgraph_record_that_keeps_static_kernels(tmp_path: Path) -> None:
    """A model whose subgraph-tuning record keeps GE's static kernels runs none of its banked kernels:
    operator tuning says so for every entry whose banked kernel differs from the compiled one."""
    from pycann.ge.compile.tuned import GraphChoice

    node, banked, static = _bank_minority_provider(tmp_path)
    base = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path), tune_bank="kernels"))
    KnowledgeBank(tmp_path).put(BankRecord(base.tune_key, GraphChoice(kernel_bank=False).to_json(), 1.0, 1.0, 2))
    report, _ = op_job(conv_model, CompileOptions(op_bank_path=str(tmp_path)), KnowledgeBank(tmp_path), "conv.onnx",
                       OpsFilter(), "Ascend910B2")
    by_node = {n: e for e in report.entries for n in e["nodes"]}
    assert by_node[node]["in_om"] is False and "subgraph-tuning record" in by_node[node]["override"]
    assert any("the model's subgraph-tuning record (static kernels kept) reverted 1 banked kernel" in n
               for n in report.notes), report.notes


def test_atc_log_says_how_many_banked_choices_were_compiled(tmp_path: Path) -> None:
    _bank_minority_provider(tmp_path)
    lines: list[str] = []
    compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)), log=lines.append)
    (ks,) = [ln for ln in lines if ln.startswith("[KernelSelection]")]
    assert "(static; knowledge bank: 1 of 2 banked choices compiled)" in ks, ks
    lines.clear()
    compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path / "empty")), log=lines.append)
    assert "knowledge bank" not in next(ln for ln in lines if ln.startswith("[KernelSelection]"))
