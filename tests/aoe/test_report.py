"""The ops file, the progress line and the report files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pycann.aoe.ops_file import OpsFilter, read_ops_file
from pycann.aoe.report import ProgressLine, TuneReport
from pycann.errors import OptionError


def test_ops_file_entries_comments_and_shapes(tmp_path: Path) -> None:
    f = tmp_path / "ops.txt"
    f.write_text("# ops to tune\nConv, Gemm  # two types\nconv_12\n\nmatmul 1024 x 512 x 2048\n")
    ops = read_ops_file(str(f))
    assert ops.entries == frozenset({"Conv", "Gemm", "conv_12"}) and ops.matmuls == ((1024, 512, 2048),)
    assert ops.selects("Conv", "x") and ops.selects("Relu", "conv_12") and not ops.selects("MatMul", "mm")
    assert OpsFilter().selects("anything", "at all")
    with pytest.raises(OptionError, match=r"cannot|No such file"):
        read_ops_file(str(tmp_path / "missing.txt"))


def test_progress_line_in_a_log_is_throttled_and_ends_at_the_total() -> None:
    buf = io.StringIO()
    p = ProgressLine("aoe opat", stream=buf)
    p._bar = None  # the plain line, whether or not tqdm is installed
    for i in range(1, 51):
        p(i, 50, "ranked")
    p.close()
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("aoe opat [########################] 50/50 ranked")
    assert 1 <= len(lines) < 50  # not one line per trial
    quiet = io.StringIO()
    ProgressLine("x", stream=quiet, enabled=False)(1, 2)
    assert quiet.getvalue() == ""


def test_report_files(tmp_path: Path) -> None:
    r = TuneReport("opat", "m.onnx", "Ascend910B2", "/tmp/bank.sqlite")
    r.entries.append({"kind": "tiling", "op_type": "MatMul", "workload": "MatMul 64x64 x 64x64", "choice": {"bm": 64},
                      "cost_us": 1.5, "baseline_us": 3.0, "speedup": 2.0, "trials": 4, "space_points": 40,
                      "from_bank": False})
    path = r.write(tmp_path)
    assert path.name.startswith("aoe_result_opat_") and path.suffix == ".json"
    doc = json.loads(path.read_text())
    assert doc["job_type"] == 2 and doc["trials"] == 4 and doc["entries"][0]["choice"] == {"bm": 64}
    text = (tmp_path / "aoe_report.txt").read_text()
    assert "MatMul 64x64 x 64x64: 3.00 us -> 1.50 us (x2.000; 4 trials of 40 points) bm=64" in text


def test_ops_file_selects_fused_nodes_by_kernel_type_and_original_name() -> None:
    """GE fuses Conv + Relu into FusedConv "conv1_fused": an ops file naming the model's op type
    (Conv) or its ONNX node (conv1) still selects it (both matched nothing before)."""
    from pycann.aoe.op_tuning import model_ops
    from pycann.ge.compile.compiler import compile_model
    from tests.aoe.models import conv_model

    graph = compile_model(conv_model()).graph
    every, _, _ = model_ops(graph, OpsFilter(), "CPU")
    fused = [n for _, _, _, nodes in every for n in nodes if n.endswith("_fused")]
    assert fused, every
    for entry in ("Conv", "conv1"):
        specs, _, _ = model_ops(graph, OpsFilter(frozenset({entry})), "CPU")
        assert specs, entry
    one, _, _ = model_ops(graph, OpsFilter(frozenset({"conv1"})), "CPU")
    assert [n for _, _, _, nodes in one for n in nodes] == [n for n in fused if n.startswith("conv1")]
    none, _, _ = model_ops(graph, OpsFilter(frozenset({"MatMul"})), "CPU")
    assert none == []


def test_unknown_shapes_note_asks_for_fixed_dims() -> None:
    """A model compiled with a dynamic dim (``--input_shape=x:-1,...`` keeps it unknown) has no kernel
    spec to tune: the note says that every dim must be fixed, not merely that a shape be given."""
    from pycann.aoe.op_tuning import model_ops
    from pycann.ge.compile.compiler import compile_model
    from tests.aoe.models import conv_model

    m = conv_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    specs, _, notes = model_ops(compile_model(m).graph, OpsFilter(), "CPU")
    assert specs == []
    assert any("fixed size for every dim" in n and "FusedConv" in n for n in notes), notes
