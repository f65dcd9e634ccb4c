"""The ``aoe`` command line: errors in one line, and the bank reused across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pycann.tools import aoe
from tests.aoe.models import save_conv_model

ROOT = Path(__file__).resolve().parents[2]


def _fail(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert aoe.main(argv) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == aoe.START and out[-2] == aoe.FAILED, out
    return out[-1]


@pytest.mark.parametrize("argv,expect", [
    (["--job_type=3", "--framework=5", "--model=m.onnx"], r"^E10001: Value \[3\] for parameter \[--job_type\] is invalid: "
     r"use 1 \(subgraph tuning\) or 2 \(operator tuning\)\.$"),
    (["--framework=5", "--model=m.onnx"], r"^E10007: \[--job_type\] is required"),
    (["--job_type=1", "--framework=5"], r"^E10054: The required parameter \[--model\] for AOE is empty\.$"),
    (["--job_type=2"], r"^E10054: .*\[--model\].*or give 'MatMul MxKxN' lines in --tune_ops_file"),
    (["--job_type=1", "--framework=5", "--model=/nonexistent/m.onnx"],
     r"^E10001: Value \[/nonexistent/m.onnx\] for parameter \[--model\] is invalid\. Reason: the file does not exist\.$"),
    (["--job_type=1", "--model=x.onnx"], r"^E10007: \[--framework\] is required"),
    (["--job_type=1", "--framework=1", "--model=x.onnx"], r"^E10001: Value \[1\] for parameter \[--framework\]"),
    (["--job_type=2", "--soc_version=Ascend999", "--tune_ops_file=x"], r"^E10001: Value \[Ascend999\] for parameter \[--soc_version\]"),
    (["--job_type=2", "--bogus=1"], r"^E10001: Unknown option\(s\) --bogus=1"),
    (["--job_type=2", "--tune_ops_file=x", "--output=/proc/pycann-no/"],
     r"^E10001: Value \[/proc/pycann-no/\] for parameter \[--output\] is invalid\. Reason: cannot write into"),
    (["--job_type=2", "--tune_ops_file=x", f"--output={__file__}/sub"],
     r"^E10001: .*\[--output\] is invalid\. Reason: '.*test_cli\.py' is a file, not a folder\.$"),
])
def test_errors_are_one_clear_line(capsys: pytest.CaptureFixture[str], argv: list[str], expect: str) -> None:
    import re

    assert re.search(expect, _fail(capsys, argv))


def test_bad_ops_file_names_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ops = tmp_path / "ops.txt"
    ops.write_text("Conv\nMatMul 12 by 34\n")
    line = _fail(capsys, ["--job_type=2", f"--tune_ops_file={ops}", f"--op_bank_path={tmp_path}"])
    assert "line 2 'MatMul 12 by 34'" in line and "MatMul 1024x512x2048" in line
    assert "--tune_ops_file" in _fail(capsys, ["--job_type=2", f"--tune_ops_file={tmp_path}/none.txt"])


def test_shape_the_kernel_cannot_tile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ops = tmp_path / "ops.txt"
    ops.write_text("MatMul 100x64x64\n")
    assert "multiple of 16" in _fail(capsys, ["--job_type=2", f"--tune_ops_file={ops}", f"--op_bank_path={tmp_path}"])


def _run_aoe(args: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pycann.tools.aoe", *args, f"--output={out}"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == aoe.FINISHED
    (report,) = out.glob("aoe_result_opat_*.json")
    return json.loads(report.read_text())


def test_second_process_reuses_the_bank(tmp_path: Path) -> None:
    """Operator tuning of a model's convs (measured) and a MatMul tiling (cost model) in one process;
    a second process finds all of it in the bank: the same choices, zero trials. atc then compiles
    the model with the banked kernels."""
    model = save_conv_model(tmp_path)
    ops = tmp_path / "ops.txt"
    ops.write_text("Conv, FusedConv  # both convs\nMatMul 64x64x64\n")
    bank = tmp_path / "bank"
    args = ["--framework=5", f"--model={model}", "--job_type=2", f"--tune_ops_file={ops}", f"--op_bank_path={bank}"]
    first = _run_aoe(args, tmp_path / "one")
    second = _run_aoe(args, tmp_path / "two")
    kinds = sorted(e["kind"] for e in first["entries"])
    assert kinds == ["kernel", "kernel", "tiling"], first
    assert first["trials"] > 0 and not any(e["from_bank"] for e in first["entries"])
    assert second["trials"] == 0 and all(e["from_bank"] for e in second["entries"])
    assert [e["choice"] for e in second["entries"]] == [e["choice"] for e in first["entries"]]
    tiling = next(e for e in first["entries"] if e["kind"] == "tiling")
    assert tiling["trials"] <= max(1, tiling["space_points"] // 10) + 1  # the search plus the default's price
    assert (tmp_path / "one" / "conv_tuned.om").is_file() and (tmp_path / "one" / "aoe_report.txt").is_file()

    from pycann.ge.om import load_om
    from pycann.tools import atc

    assert atc.main(["--framework=5", f"--model={model}", f"--output={tmp_path / 'atc'}", "--soc_version=Ascend910B2",
                     f"--op_bank_path={bank}"]) == 0
    algos = {n.name: str(n.attrs["_algo"]) for n in load_om(tmp_path / "atc.om").graph.nodes if "_algo" in n.attrs}
    banked = {name: e["choice"]["algorithm"] for e in first["entries"] if e["kind"] == "kernel" for name in e["nodes"]}
    # the one-pool rule may move a node to the model's majority provider; that provider's nodes keep theirs
    assert any(algo == banked[name] for name, algo in algos.items()), (algos, banked)
    for name, algo in algos.items():
        assert algo == banked[name] or algo.split(":")[0] != banked[name].split(":")[0], (algos, banked)


def test_caffe_model_through_atcs_importer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--framework=0 (and 3) go through atc's importers: a Caffe net's convs are tuned and banked."""
    pytest.importorskip("google.protobuf")
    from tests.importers.caffe_nets import RESBLOCK, write_net

    proto, weights = write_net(RESBLOCK, tmp_path)
    bank = tmp_path / "bank"
    argv = ["--framework=0", f"--model={proto}", f"--weight={weights}", "--job_type=2", f"--op_bank_path={bank}",
            f"--output={tmp_path / 'out'}"]
    assert aoe.main(argv) == 0, capsys.readouterr().out
    (report,) = (tmp_path / "out").glob("aoe_result_opat_*.json")
    doc = json.loads(report.read_text())
    assert doc["entries"] and all(e["kind"] == "kernel" and e["trials"] >= 1 for e in doc["entries"])
    assert (tmp_path / "out" / f"{proto.stem}_tuned.om").is_file()
    assert "--weight" in _fail(capsys, ["--framework=0", f"--model={proto}", "--job_type=2"])


def test_ops_file_matching_nothing_names_entries_and_tunable_ops(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    model = save_conv_model(tmp_path)
    ops = tmp_path / "t.txt"
    ops.write_text("NoSuchOp\n")
    assert aoe.main(["--framework=5", f"--model={model}", "--job_type=2", f"--tune_ops_file={ops}",
                     f"--op_bank_path={tmp_path / 'bank'}", f"--output={tmp_path / 'o'}"]) == 0
    out = capsys.readouterr().out
    assert "no Conv/ConvTranspose/MatMul/Gemm node with static shapes" not in out
    assert "entries (NoSuchOp) match none of the model's tunable ops: op types Conv" in out, out
    assert "conv1" in out and "conv2" in out


def test_relative_bank_path_is_stored_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from tests.aoe.models import conv_model

    monkeypatch.chdir(tmp_path)
    cm = compile_model(conv_model(), CompileOptions(op_bank_path="bankRO"))
    assert cm.graph.context.op_bank_path == str(tmp_path / "bankRO")


def test_corrupt_bank_is_one_clear_error(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                                         tmp_path: Path) -> None:
    """aoe checks the bank before compiling: one E10001 line naming the file and the fix, no compile
    warning "(tuned choices ignored)" before it (which read as if tuning went on)."""
    model = save_conv_model(tmp_path)
    bank = tmp_path / "bad"
    bank.mkdir()
    (bank / "bank.sqlite").write_bytes(b"garbage" * 64)
    assert aoe.main(["--framework=5", f"--model={model}", "--job_type=2", f"--op_bank_path={bank}",
                     f"--output={tmp_path / 'o'}"]) == 1
    captured = capsys.readouterr()
    assert "tuned choices ignored" not in captured.out + captured.err + caplog.text
    out = captured.out.strip().splitlines()
    assert out[-2] == aoe.FAILED and out[-1].startswith(f"E10001: knowledge bank {bank / 'bank.sqlite'} cannot be used")
    assert "delete it or point TUNE_BANK_PATH / --op_bank_path at another folder" in out[-1]
