"""A second ``aoe --job_type=2`` process on the same model reuses the bank without compiling it
(pycann/aoe/model_index.py), and a banked torch kernel does not import torch at compile time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pycann.aoe.bank import BankRecord, KnowledgeBank
from tests.aoe.models import conv_model, save_conv_model

ROOT = Path(__file__).resolve().parents[2]
# runs aoe's main in a fresh interpreter, then prints which heavy modules that process imported
_PROBE = ("import sys; from pycann.tools import aoe; rc = aoe.main(sys.argv[1:]); "
          "print('MODULES', sorted(m for m in ('pycann.ge.compile.compiler', 'torch') if m in sys.modules)); sys.exit(rc)")


def _aoe(args: list[str], out: Path) -> tuple[dict, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _PROBE, *args, f"--output={out}"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    mods = next(ln for ln in r.stdout.splitlines() if ln.startswith("MODULES"))
    (report,) = out.glob("aoe_result_opat_*.json")
    return json.loads(report.read_text()), eval(mods.split(" ", 1)[1])  # noqa: S307 (our own print of a list)


def test_second_process_neither_compiles_nor_measures(tmp_path: Path) -> None:
    model = save_conv_model(tmp_path)
    bank = tmp_path / "bank"
    args = ["--framework=5", f"--model={model}", "--job_type=2", f"--op_bank_path={bank}", "--input_shape=x:1,8,16,16"]
    first, mods1 = _aoe(args, tmp_path / "one")
    second, mods2 = _aoe(args, tmp_path / "two")
    assert "pycann.ge.compile.compiler" in mods1 and first["trials"] > 0
    assert mods2 == [], mods2  # neither GE's compiler nor torch loaded: the bank answered everything
    assert second["trials"] == 0 and all(e["from_bank"] for e in second["entries"])
    assert [e["choice"] for e in second["entries"]] == [e["choice"] for e in first["entries"]]
    assert [e["workload"] for e in second["entries"]] == [e["workload"] for e in first["entries"]]
    assert any("nothing compiled or measured" in n for n in second["notes"])
    om1, om2 = tmp_path / "one" / "conv_tuned.om", tmp_path / "two" / "conv_tuned.om"
    assert om2.read_bytes() == om1.read_bytes()
    assert KnowledgeBank(bank).count("model") == 1

    # a record replaced since (re-tuned by another run): the index no longer holds, the model is compiled again,
    # still without measuring anything
    kb = KnowledgeBank(bank)
    from pycann.aoe.model_index import _key_from_columns

    idx = next(iter(_index_records(kb)))
    rec = kb.get(_key_from_columns(idx[0]))
    assert rec is not None
    time.sleep(0.01)
    kb.put(BankRecord(rec.key, rec.choice, rec.cost_us, rec.baseline_us, rec.trials, rec.detail))
    kb.close()
    third, mods3 = _aoe(args, tmp_path / "three")
    assert "pycann.ge.compile.compiler" in mods3 and third["trials"] == 0
    assert not any("nothing compiled" in n for n in third["notes"])
    # a changed model file: another key, a full run
    save_conv_model(tmp_path, c=4)
    fourth, _ = _aoe(args[:-1] + ["--input_shape=x:1,4,16,16"], tmp_path / "four")
    assert fourth["trials"] > 0


def _index_records(kb: KnowledgeBank) -> list[list]:
    import sqlite3

    with sqlite3.connect(kb.path) as conn:
        (choice,) = conn.execute("SELECT choice FROM records WHERE kind='model'").fetchone()
    return json.loads(choice)["records"]  # type: ignore[no-any-return]


def test_index_is_refused_when_its_om_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later run from another folder finds the .om by its absolute path; once deleted, the run
    compiles it again (and writes a new index)."""
    from pycann.aoe import driver
    from pycann.aoe.ops_file import OpsFilter
    from pycann.ge.compile.options import CompileOptions

    model = save_conv_model(tmp_path)
    bank = KnowledgeBank(tmp_path / "bank")
    opts = CompileOptions(op_bank_path=str(bank.folder))
    kw = {"files": [str(model)]}
    monkeypatch.chdir(tmp_path)
    r1, _ = driver.op_job(lambda: str(model), opts, bank, str(model), OpsFilter(), "CPU", om_path=Path("a.om"), **kw)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    r2, cm2 = driver.op_job(lambda: str(model), opts, bank, str(model), OpsFilter(), "CPU", om_path=tmp_path / "b.om", **kw)
    assert cm2 is None and r2.trials == 0 and (tmp_path / "b.om").is_file()
    (tmp_path / "a.om").unlink()
    (tmp_path / "b.om").unlink()
    r3, cm3 = driver.op_job(lambda: str(model), opts, bank, str(model), OpsFilter(), "CPU", om_path=tmp_path / "c.om", **kw)
    assert cm3 is not None and r3.trials == 0 and (tmp_path / "c.om").is_file()
    assert [e["choice"] for e in r3.entries] == [e["choice"] for e in r1.entries]


_LAZY = """
import sys
import numpy as np
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ge.compile.options import CompileOptions
from tests.aoe.models import conv_model
cm = compile_model(conv_model(), CompileOptions(op_bank_path=sys.argv[1]))
algos = sorted({str(n.attrs.get("_algo", "")) for n in cm.graph.nodes if "_algo" in n.attrs})
print("COMPILED", "torch" in sys.modules, algos)
x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
np.save(sys.argv[2], LoadedModel.from_compiled(cm).run([x])[0])
print("RAN", "torch" in sys.modules)
"""


def test_banked_torch_kernel_is_imported_when_it_runs(tmp_path: Path) -> None:
    """A bank choosing torch kernels: compiling does not import torch (seconds), running does, and the
    output matches the static kernels'."""
    pytest.importorskip("torch")
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.compile.passes.select_kernels import node_specs
    from pycann.ge.compile.tuned import kernel_key
    from pycann.ge.run.model import LoadedModel
    from pycann.kernels.providers import declared, torch_onednn

    if not torch_onednn.packing_supported():
        pytest.skip("this torch has no oneDNN weight prepacking (torch:conv2d_nhwc)")
    static = compile_model(conv_model(), CompileOptions(tune_bank="off"))
    kb = KnowledgeBank(tmp_path / "bank")
    # the NHWC conv's applicability test asks torch itself: a banked choice of it must not load torch either
    names = {"conv1": "torch:conv2d_nhwc", "conv2": "torch:conv2d"}
    for ns in node_specs(static.graph):
        name = names[ns.node.name.removesuffix("_fused")]
        algo = declared(name)
        assert algo is not None and algo.supports(ns.spec)
        kb.put(BankRecord(kernel_key(ns.spec, ns.approx), {"algorithm": name}, 1.0, 2.0, 3))
    kb.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _LAZY, str(tmp_path / "bank"), str(tmp_path / "y.npy")], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if ln.startswith(("COMPILED", "RAN")))
    assert lines["COMPILED"] == "False ['torch:conv2d', 'torch:conv2d_nhwc']", r.stdout
    assert lines["RAN"] == "True", r.stdout
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = LoadedModel.from_compiled(static).run([x])[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-4, atol=1e-4)
