"""Profiler: msprof-layout CSVs (cann-interfaces.md §4.3), timeline JSON (§4.4), summary, acl.json."""

from __future__ import annotations

import csv
import glob
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pycann.profiler as prof
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.profiler import hooks, peak
from pycann.profiler.analysis import verdict
from pycann.profiler.peak import Peaks
from pycann.profiler.writers import OP_STATISTIC_COLUMNS, OP_SUMMARY_COLUMNS
from tests.profiler.conftest import matmul_chain

MSPROF_COLUMNS = ["Device_id", "Model Name", "Model ID", "Task ID", "Stream ID", "Infer ID", "Op Name", "OP Type",
                  "OP State", "Task Type", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)",
                  "Block Dim", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                  "Output Data Types", "Output Formats"]


def _read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _out(p: prof.Profiler, kind: str) -> str:
    return p.paths[kind]


def test_off_by_default_and_after_exit(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path) -> None:
    lm = LoadedModel.from_compiled(compile_model(tiny_model))
    assert hooks.OBSERVERS == ()
    with prof.profile(tmp_path) as p:
        assert hooks.OBSERVERS == (p.collector,)
        lm.run([x_tiny])
    assert hooks.OBSERVERS == ()
    n = len(p.collector.nodes)
    lm.run([x_tiny])
    assert len(p.collector.nodes) == n  # nothing recorded once stopped


def test_op_summary_columns_and_durations_add_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from pycann.ge.run import plan

    lm = LoadedModel.from_compiled(compile_model(matmul_chain()))
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    lm.run([x])
    # the plan's clock (and the test's) ticks 1 us a reading, so the durations are exact whatever the load
    ticks: list[int] = []

    def clock() -> int:
        ticks.append(ticks[-1] + 1000 if ticks else time.perf_counter_ns())
        return ticks[-1]

    monkeypatch.setattr(plan, "time", SimpleNamespace(perf_counter_ns=clock))
    walls = []
    with prof.profile(tmp_path, chart=False) as p:
        for _ in range(3):
            t0 = clock()
            lm.run([x])
            walls.append(clock() - t0)
    rows = _read_csv(_out(p, "op_summary"))
    with open(_out(p, "op_summary"), encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header == OP_SUMMARY_COLUMNS and header[: len(MSPROF_COLUMNS)] == MSPROF_COLUMNS
    for col in ("FLOPs", "Bytes", "GFLOP/s", "GB/s", "Bound"):
        assert col in header
    n_nodes = len(lm.graph.nodes)
    assert len(rows) == 3 * n_nodes
    assert {r["Infer ID"] for r in rows} == {"0", "1", "2"} and {r["Model Name"] for r in rows} == {"chain"}
    mm = next(r for r in rows if r["OP Type"] in ("MatMul", "FusedMatMul"))
    assert int(mm["FLOPs"]) >= 2 * 256**3
    assert mm["Input Shapes"] == "256,256;256,256" and mm["Input Data Types"] == "DT_FLOAT;DT_FLOAT"
    assert int(mm["Bytes"]) == 3 * 256 * 256 * 4
    events = json.load(open(_out(p, "timeline"), encoding="utf-8"))["traceEvents"]
    runs = sorted((e for e in events if e["name"] == "ModelExecute"), key=lambda e: e["ts"])
    assert len(runs) == 3
    for i, (run, wall) in enumerate(zip(runs, walls)):
        mine = [r for r in rows if r["Infer ID"] == str(i)]
        # each node is timed by the two readings around its kernel (1 us) and waited 1 us since the run's
        # start or the previous node's end; the run spans two readings a node and one more, the caller's
        # wall that run and its own two readings
        assert [float(r["Task Duration(us)"]) for r in mine] == [1.0] * n_nodes
        assert [float(r["Task Wait Time(us)"]) for r in mine] == [1.0] * n_nodes
        assert run["dur"] == pytest.approx(2 * n_nodes + 1) and wall == (2 * n_nodes + 3) * 1000
    stats = _read_csv(_out(p, "op_statistic"))
    with open(_out(p, "op_statistic"), encoding="utf-8") as f:
        assert next(csv.reader(f)) == OP_STATISTIC_COLUMNS
    assert sum(int(s["Count"]) for s in stats) == len(rows)
    assert abs(sum(float(s["Ratio(%)"]) for s in stats) - 100) < 0.1
    for s in stats:
        assert float(s["Min Time(us)"]) == float(s["Avg Time(us)"]) == float(s["Max Time(us)"]) == 1.0


def test_timeline_is_valid_chrome_trace(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path) -> None:
    lm = LoadedModel.from_compiled(compile_model(tiny_model))
    with prof.profile(tmp_path, chart=False) as p:
        lm.run([x_tiny])
        t = time.perf_counter_ns()
        prof.record_api("aclrtMemcpy", t, t + 5000, track="memcpy", args={"kind": 1})
        prof.record_api("aclmdlExecute", t, t + 9000)
    doc = json.load(open(_out(p, "timeline"), encoding="utf-8"))
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and "name" in e
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["dur"] >= 0 and isinstance(e["ts"], float | int)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(procs) == 2
    ops = [e for e in events if e["ph"] == "X" and e["cat"] == "AI_CPU"]
    assert sorted(e["name"] for e in ops) == sorted(n.name for n in lm.graph.nodes)
    for e in ops:
        assert names[(e["pid"], e["tid"])] == "Stream 0"
        assert e["args"]["OP Type"]
    fused = next(e for e in ops if e["args"]["OP Type"] == "FusedConv")
    assert fused["args"]["Origin Ops"] == ["conv", "relu"]
    memcpy = next(e for e in events if e["name"] == "aclrtMemcpy")
    api = next(e for e in events if e["name"] == "aclmdlExecute")
    assert names[(memcpy["pid"], memcpy["tid"])] == "Memcpy" and names[(api["pid"], api["tid"])] == "AscendCL API"
    assert memcpy["dur"] == 5.0
    stats = _read_csv(_out(p, "api_statistic"))
    assert {s["API Name"] for s in stats} == {"aclrtMemcpy", "aclmdlExecute"}


def test_nested_subgraph_nodes(tmp_path: Path) -> None:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then_b", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else_b", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "cond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")])
    lm = LoadedModel.from_compiled(compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    with prof.profile(tmp_path, chart=False) as p:
        lm.run([np.ones(4, np.float32)])
    rep = p.report
    assert rep is not None and len(rep.runs) == 1
    inner = [r for r in rep.ops if r.name == "then_relu"]
    if not inner:
        pytest.skip("the If was inlined at run time")
    assert inner[0].depth == 1 and inner[0].model == "cond"
    outer = next(r for r in rep.ops if r.name == "branch")
    assert outer.start_ns <= inner[0].start_ns and inner[0].start_ns + inner[0].dur_ns <= outer.start_ns + outer.dur_ns
    assert rep.device_ns <= rep.run_ns


def test_verdicts() -> None:
    peaks = Peaks(1e12, 1e11, "test")
    assert verdict(2_000_000_000, 1_000_000, 10_000_000, peaks)[0] == "compute-bound"
    assert verdict(0, 1_000_000_000, 20_000_000, peaks)[0] == "memory-bound"
    assert verdict(1000, 1000, 50_000, peaks)[0] == "overhead-bound"


def test_summary_and_chart(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lm = LoadedModel.from_compiled(compile_model(tiny_model))
    with prof.profile(tmp_path / "a", print_summary=True) as p:
        lm.run([x_tiny])
    text = capsys.readouterr().out
    assert "Top ops by time" in text and "conv_fused" in text and "env: PYCANN_PEAK_GFLOPS" in text
    assert "100.0 GFLOP/s, 20.0 GB/s" in text
    assert any(v in text for v in ("compute-bound", "memory-bound", "overhead-bound"))
    assert open(p.paths["summary"], encoding="utf-8").read() == p.summary_text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "PNG chart skipped" in text
    else:
        assert os.path.getsize(p.paths["chart"]) > 1000
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with prof.profile(tmp_path / "b") as q:
        lm.run([x_tiny])
    assert "chart" not in q.paths and "PNG chart skipped" in q.summary_text


def test_acl_json_profiler(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path) -> None:
    assert prof.configure_from_acl_json({"profiler": {"switch": "off"}}) is None
    assert prof.configure_from_acl_json({"dump": {}}) is None
    p = prof.configure_from_acl_json({"profiler": {"switch": "on", "output": str(tmp_path)}})
    assert p is not None
    try:
        lm = LoadedModel.from_compiled(compile_model(tiny_model))
        lm.run([x_tiny])
    finally:
        written = prof.finalize()
    assert hooks.OBSERVERS == ()
    assert len(written) == 1 and written[0].startswith(str(tmp_path))
    assert glob.glob(os.path.join(written[0], "mindstudio_profiler_output", "op_summary_*.csv"))


def test_peaks_probe_and_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    p = peak.measure(gemm_n=64, copy_mib=1, repeat=1)
    assert p.flops > 0 and p.bandwidth > 0 and p.source.startswith("measured")
    monkeypatch.delenv("PYCANN_PEAK_GFLOPS")
    monkeypatch.delenv("PYCANN_PEAK_GBPS")
    monkeypatch.setattr(peak, "measure", lambda: Peaks(1.0, 2.0, "measured: stub"))
    first = peak.machine_peaks()
    assert first is peak.machine_peaks() and first.source == "measured: stub"


def _save_two_main_graphs(tmp_path: Path) -> None:
    """first.om (Relu) and second.om (Sigmoid) in ``tmp_path``, both graphs named "main_graph" as
    PyTorch's exporter names every graph."""
    for stem, op in (("first", "Relu"), ("second", "Sigmoid")):
        g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "main_graph",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
        compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).save(tmp_path / f"{stem}.om")


def test_models_whose_graphs_share_a_name_are_reported_apart(tmp_path: Path) -> None:
    """Exporters name every graph alike (PyTorch's "main_graph"): a run of the first of two loaded
    models was reported under the second's name (the name was looked up by graph name)."""
    _save_two_main_graphs(tmp_path)
    a = LoadedModel.from_file(tmp_path / "first.om")
    b = LoadedModel.from_file(tmp_path / "second.om")
    x = np.ones((2, 3), np.float32)
    with prof.profile(tmp_path / "prof", chart=False) as p:
        a.run([x])
        b.run([x])
        b.run([x])
    rows = _read_csv(_out(p, "op_summary"))
    assert sorted((r["Model Name"], r["OP Type"], r["Infer ID"]) for r in rows) == [
        ("first", "Relu", "0"), ("second", "Sigmoid", "0"), ("second", "Sigmoid", "1")]
    a2 = LoadedModel.from_file(tmp_path / "first.om")  # the same model again keeps its model name,
    assert hooks.model_name_of(a2.graph.name) == "first"  # but is another load: its own graph name
    assert a2.graph.name != a.graph.name


def test_the_same_om_loaded_twice_is_two_models_in_profiles(tmp_path: Path) -> None:
    """One .om loaded twice (two InferSessions): CANN gives each load its own Model ID; here both
    shared one (the model was found by graph name, which the second load kept), with Infer IDs
    counted across both."""
    _save_two_main_graphs(tmp_path)
    a = LoadedModel.from_file(tmp_path / "first.om")
    b = LoadedModel.from_file(tmp_path / "first.om")
    x = np.ones((2, 3), np.float32)
    with prof.profile(tmp_path / "prof", chart=False) as p:
        a.run([x])
        b.run([x])
        a.run([x])
    rows = _read_csv(_out(p, "op_summary"))
    assert sorted((r["Model Name"], r["Model ID"], r["Infer ID"]) for r in rows) == [
        ("first", "0", "0"), ("first", "0", "1"), ("first", "1", "0")]
    assert [r.model_id for r in p.report.runs] == [0, 1, 0] and p.report.models == ["first"]


def test_models_of_two_files_with_one_stem_are_reported_apart(tmp_path: Path) -> None:
    """``small.om`` and ``sub/small.om`` (other models, one stem, both graphs "main_graph"): they were
    one model in profiles (Model ID 0, Infer IDs 0 and 1) and in dumps; now "first" and "first#2"
    with their own Model IDs. The same file loaded again keeps its model name."""
    _save_two_main_graphs(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "second.om").rename(tmp_path / "sub" / "first.om")
    a = LoadedModel.from_file(tmp_path / "first.om")
    b = LoadedModel.from_file(tmp_path / "sub" / "first.om")
    assert a.graph.name != b.graph.name
    x = np.ones((2, 3), np.float32)
    with prof.profile(tmp_path / "prof", chart=False) as p:
        a.run([x])
        b.run([x])
    rows = _read_csv(_out(p, "op_summary"))
    assert sorted((r["Model Name"], r["OP Type"], r["Model ID"], r["Infer ID"]) for r in rows) == [
        ("first", "Relu", "0", "0"), ("first#2", "Sigmoid", "1", "0")]
    a2 = LoadedModel.from_file(tmp_path / "first.om")
    assert hooks.model_name_of(a2.graph.name) == "first" and a2.graph.name not in (a.graph.name, b.graph.name)


def test_models_of_one_graph_name_loaded_at_once_are_reported_apart(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads loading two .om files whose graphs share a name: each claimed the name before
    either load registered its model (the plans are built in between), so both kept "main_graph"
    and one model's ops were reported under the other's name."""
    import threading

    _save_two_main_graphs(tmp_path)
    both_claimed = threading.Barrier(2, timeout=30)
    precompile = LoadedModel.precompile_static

    def slow_precompile(self: LoadedModel) -> bool:
        both_claimed.wait()  # (each load has claimed its graph name; neither has registered its model)
        return precompile(self)

    monkeypatch.setattr(LoadedModel, "precompile_static", slow_precompile)
    models: dict[str, LoadedModel] = {}

    def load(stem: str) -> None:
        models[stem] = LoadedModel.from_file(tmp_path / f"{stem}.om")

    threads = [threading.Thread(target=load, args=(s,)) for s in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = models["first"], models["second"]
    assert a.graph.name != b.graph.name
    assert {hooks.model_name_of(a.graph.name), hooks.model_name_of(b.graph.name)} == {"first", "second"}


def test_a_compiled_model_is_reported_apart_from_a_file_model_of_its_graph_name(tmp_path: Path) -> None:
    """A model made ``from_compiled`` kept its graph's name ("main_graph") while a model loaded from
    ``first.om`` held it: both were one model in profiles, and the file model's name ("first") was
    replaced by the graph's. One ``CompiledModel`` loaded twice was one model too (one graph object).
    Each is its own Model ID now; the ``CompiledModel``'s graph keeps its name."""
    _save_two_main_graphs(tmp_path)
    a = LoadedModel.from_file(tmp_path / "first.om")
    g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "main_graph",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    cm = compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    b = LoadedModel.from_compiled(cm)
    c = LoadedModel.from_compiled(cm)
    assert len({a.graph.name, b.graph.name, c.graph.name}) == 3 and cm.graph.name == "main_graph"
    assert hooks.model_name_of(a.graph.name) == "first"
    x = np.ones((2, 3), np.float32)
    with prof.profile(tmp_path / "prof", chart=False) as p:
        a.run([x])
        b.run([x])
        c.run([x])
        b.run([x])
    rows = _read_csv(_out(p, "op_summary"))
    assert sorted((r["Model Name"], r["OP Type"], r["Model ID"], r["Infer ID"]) for r in rows) == [
        ("first", "Relu", "0", "0"), ("main_graph", "Sigmoid", "1", "0"), ("main_graph", "Sigmoid", "1", "1"),
        ("main_graph", "Sigmoid", "2", "0")]
    np.testing.assert_allclose(c.run([x])[0], 1 / (1 + np.exp(-x)), rtol=1e-6)
