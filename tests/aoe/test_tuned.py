"""atc / compile_model and the executor read the knowledge bank (pycann/ge/compile/tuned.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pycann.aoe.bank import BankRecord, KnowledgeBank
from pycann.aoe.op_tuning import tune_kernel
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes.select_kernels import node_specs
from pycann.ge.compile.tuned import GraphChoice, kernel_key
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.aoe.models import conv_model


def _algos(cm) -> dict[str, str]:  # noqa: ANN001
    return {n.name: str(n.attrs.get("_algo", "")) for n in cm.graph.nodes if "_algo" in n.attrs}


def test_banked_kernel_choice_wins_over_the_static_table(tmp_path: Path) -> None:
    opts = CompileOptions(op_bank_path=str(tmp_path), tune_bank="off")
    cm = compile_model(conv_model(), opts)
    static = _algos(cm)
    ns = next(s for s in node_specs(cm.graph) if s.node.name == next(iter(static)))
    # store a choice the static table does not make (any other exact candidate)
    other = next(a for a in providers.candidates(ns.spec, approx=ns.approx) if a.key != static[ns.node.name])
    KnowledgeBank(tmp_path).put(BankRecord(kernel_key(ns.spec, ns.approx), {"algorithm": other.key}, 1.0, 2.0, 3))
    tuned = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)))
    assert _algos(tuned)[ns.node.name] == other.key
    assert tuned.graph.context.op_bank_path == str(tmp_path)  # run-time specialisation reads the same bank
    assert _algos(compile_model(conv_model(), opts)) == static  # tune_bank="off": the static table again
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(LoadedModel.from_compiled(tuned).run([x])[0],
                               LoadedModel.from_compiled(cm).run([x])[0], rtol=1e-4, atol=1e-4)


def test_unusable_banked_name_falls_back(tmp_path: Path) -> None:
    cm = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    for ns in node_specs(cm.graph):
        KnowledgeBank(tmp_path).put(BankRecord(kernel_key(ns.spec, ns.approx), {"algorithm": "nosuch:algo"}, 1, 1, 1))
    again = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)))
    assert _algos(again) == _algos(cm)


def test_broken_bank_never_breaks_a_compile(tmp_path: Path) -> None:
    (tmp_path / "bank.sqlite").write_bytes(b"garbage" * 64)
    cm = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)))
    assert _algos(cm)


def test_graph_record_switches_passes_off(tmp_path: Path) -> None:
    base = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path), tune_bank="kernels"))
    assert "FusedConv" in [n.op_type for n in base.graph.nodes]
    choice = GraphChoice(disabled_passes=("ConvActivationFusion",), kernel_bank=False)
    KnowledgeBank(tmp_path).put(BankRecord(base.tune_key, choice.to_json(), 1.0, 2.0, 4))
    lines: list[str] = []
    cm = compile_model(conv_model(), CompileOptions(op_bank_path=str(tmp_path)), log=lines.append)
    assert "Relu" in [n.op_type for n in cm.graph.nodes], [n.op_type for n in cm.graph.nodes]
    assert cm.graph.context.disabled_passes == ("ConvActivationFusion",)
    assert not cm.graph.context.kernel_bank
    assert any(line.startswith("[KnowledgeBank] subgraph tuning record applied") for line in lines)
    # another model (other input shape) has another key: nothing applied
    other = compile_model(conv_model(hw=32), CompileOptions(op_bank_path=str(tmp_path)))
    assert other.tune_key != base.tune_key and "Relu" not in [n.op_type for n in other.graph.nodes]


def test_tune_kernel_measures_then_reuses(tmp_path: Path) -> None:
    bank = KnowledgeBank(tmp_path)
    cm = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    ns = node_specs(cm.graph)[0]
    first = tune_kernel(ns.spec, ns.approx, ns.weight, bank, budget_s=0.01)
    assert not first.from_bank and first.trials == len(providers.candidates(ns.spec, approx=ns.approx)) >= 1
    assert first.cost_us <= first.baseline_us and first.choice["algorithm"] in [
        a.key for a in providers.candidates(ns.spec, approx=ns.approx)]
    second = tune_kernel(ns.spec, ns.approx, ns.weight, bank)
    assert second.from_bank and second.trials == 0 and second.choice == first.choice


def test_bad_tune_bank_option() -> None:
    with pytest.raises(Exception, match="tune_bank='maybe' is invalid"):
        compile_model(conv_model(), CompileOptions(tune_bank="maybe"))


def test_executor_reads_the_bank_when_it_specialises(tmp_path: Path) -> None:
    """A model whose shapes are only known at run time: the executor's KernelSelection (run-time
    specialisation) takes the banked choice for the shape it meets, from the bank named at compile."""
    m = conv_model()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
    m.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "h"
    m.graph.output[0].type.tensor_type.shape.dim[3].dim_param = "w"
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype(np.float32)
    static = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    ns = next(s for s in node_specs(static.graph) if s.node.name in _algos(static))
    other = next(a for a in providers.candidates(ns.spec, approx=ns.approx) if a.key != _algos(static)[ns.node.name])
    KnowledgeBank(tmp_path).put(BankRecord(kernel_key(ns.spec, ns.approx), {"algorithm": other.key}, 1.0, 2.0, 3))
    lm = LoadedModel.from_compiled(compile_model(m, CompileOptions(op_bank_path=str(tmp_path))))
    plan, _ = lm.executor.plan_for([x])
    assert {n.name: str(n.attrs.get("_algo")) for n in plan.nodes}[ns.node.name] == other.key
    np.testing.assert_allclose(lm.run([x])[0], LoadedModel.from_compiled(static).run([x])[0], rtol=1e-4, atol=1e-4)
