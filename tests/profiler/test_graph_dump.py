"""DUMP_GE_GRAPH pass-by-pass dumps and the ONNX export of the optimised graph (atc --export_onnx)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.export import to_onnx
from pycann.tools.atc import main as atc_main


def _files(path: Path, pattern: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(str(path / pattern)))


@pytest.mark.parametrize("mode", ["1", "2", "3"])
def test_dump_ge_graph_modes(mode: str, tiny_model: onnx.ModelProto, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUMP_GE_GRAPH", mode)
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    compile_model(tiny_model)
    ext = "txt" if mode == "3" else "onnx"
    names = _files(tmp_path, f"ge_onnx_*.{ext}")
    assert any(n.endswith(f"_Before_InferShapes.{ext}") for n in names)
    assert any(n.endswith(f"_After_ConvActivationFusion.{ext}") for n in names)
    if mode == "3":
        text = (tmp_path / names[-1]).read_text(encoding="utf-8")
        assert "conv_fused (pycann::FusedConv)" in text and "[origin: conv, relu]" in text
        return
    for n in names:
        m = onnx.load(str(tmp_path / n))
        onnx.checker.check_model(m)
        assert (len(m.graph.initializer) > 0) == (mode == "1")


def test_dump_graph_level_final_only(tiny_model: onnx.ModelProto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "3")
    monkeypatch.chdir(tmp_path)
    compile_model(tiny_model)
    names = _files(tmp_path, "ge_onnx_*")
    assert len(names) == 1 and names[0].endswith("_Final.onnx")


def test_no_dump_without_env(tiny_model: onnx.ModelProto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DUMP_GE_GRAPH", raising=False)
    monkeypatch.chdir(tmp_path)
    compile_model(tiny_model)
    assert _files(tmp_path, "*") == []


def test_export_fused_graph(tiny_model: onnx.ModelProto) -> None:
    m = to_onnx(compile_model(tiny_model).graph)
    onnx.checker.check_model(m, full_check=True)
    fused = {n.name: n for n in m.graph.node if n.domain == "pycann"}
    assert set(fused) == {"conv_fused", "mm_fused"}
    origin = {a.name: a for a in fused["mm_fused"].attribute}["origin"]
    assert json.loads(origin.s.decode()) == ["mm", "add", "sig"]
    assert {o.domain: o.version for o in m.opset_import}["pycann"] == 1


def test_export_chain_and_subgraph() -> None:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then_b", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else_b", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="exp"), helper.make_node("Sqrt", ["a"], ["b"], name="sqrt"),
             helper.make_node("Add", ["b", "x"], ["c"], name="add"),
             helper.make_node("ReduceSum", ["c"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])],
                          [onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")])
    cm = compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    m = to_onnx(cm.graph)
    onnx.checker.check_model(m)
    types = [n.op_type for n in m.graph.node]
    if "ElementwiseChain" in types:
        chain = next(n for n in m.graph.node if n.op_type == "ElementwiseChain")
        steps = {a.name: a for a in chain.attribute}["steps"]
        assert isinstance(json.loads(steps.s.decode()), list)
    assert "If" in types


def test_atc_export_onnx(tiny_model: onnx.ModelProto, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(tiny_model, tmp_path / "t.onnx")
    rc = atc_main([f"--model={tmp_path / 't.onnx'}", "--framework=5", f"--output={tmp_path / 't'}",
                   "--soc_version=Ascend310P3", f"--export_onnx={tmp_path / 'opt.onnx'}"])
    assert rc == 0, capsys.readouterr().out
    onnx.checker.check_model(onnx.load(str(tmp_path / "opt.onnx")))
    rc = atc_main(["--mode=1", f"--om={tmp_path / 't.om'}", f"--export_onnx={tmp_path / 'from_om.onnx'}"])
    assert rc == 0, capsys.readouterr().out
    m = onnx.load(str(tmp_path / "from_om.onnx"))
    assert any(n.domain == "pycann" for n in m.graph.node)
