"""acl.json dump (cann-interfaces.md §1.9): .npy per layer + index, round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.profiler import dump, hooks
from pycann.profiler.dump import TensorCapture, TensorDump, load_index


def _run_dumped(lm: LoadedModel, x: np.ndarray, cfg: dict, runs: int = 2) -> tuple[TensorDump, TensorCapture]:
    d = dump.configure_from_acl_json(cfg)
    assert d is not None
    cap = TensorCapture()
    try:
        with hooks.observe(cap):
            for i in range(runs):
                lm.run([x * (i + 1)])
    finally:
        assert dump.finalize() == [d.root]
    assert hooks.OBSERVERS == ()
    return d, cap


def test_dump_all_round_trip(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path) -> None:
    cm = compile_model(tiny_model)
    cm.save(tmp_path / "mynet.om")
    lm = LoadedModel.from_file(tmp_path / "mynet.om")
    d, cap = _run_dumped(lm, x_tiny, {"dump": {"dump_path": str(tmp_path / "dump"), "dump_list": [],
                                               "dump_mode": "all"}})
    rows = load_index(d.root)
    assert {r["model_name"] for r in rows} == {"mynet"} and {r["iteration"] for r in rows} == {"0", "1"}
    n_nodes = len(lm.graph.nodes)
    outs = [r for r in rows if r["io"] == "output"]
    assert len(outs) == 2 * n_nodes and any(r["io"] == "input" for r in rows)
    for r in outs:
        arr = np.load(r["path"])
        assert r["dtype"] == arr.dtype.name and r["shape"] == ",".join(map(str, arr.shape))
        assert "/mynet/0/" + r["iteration"] + "/" in r["path"].replace("\\", "/")
        if r["iteration"] == "1":  # the capture holds the last run's values
            np.testing.assert_array_equal(arr, cap.values[r["value_name"]])
    x_in = next(r for r in rows if r["io"] == "input" and r["value_name"] == "x" and r["iteration"] == "0")
    np.testing.assert_array_equal(np.load(x_in["path"]), x_tiny)
    fused = next(r for r in outs if r["op_type"] == "FusedConv")
    assert fused["origin"] == "conv;relu" and Path(fused["path"]).name == "FusedConv.conv_fused.output.0.npy"


def test_dump_list_layers_and_steps(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path) -> None:
    lm = LoadedModel.from_compiled(compile_model(tiny_model))
    cfg = {"dump_path": str(tmp_path), "dump_mode": "output", "dump_step": "1",
           "dump_list": [{"model_name": "tiny", "layer": ["relu", "relu2"]}, {"model_name": "other"}]}
    d, cap = _run_dumped(lm, x_tiny, cfg, runs=3)
    rows = load_index(d.root)
    # "relu" was fused into conv_fused: the layer selects the fused node
    assert sorted(r["op_name"] for r in rows) == ["conv_fused", "relu2"]
    assert {r["iteration"] for r in rows} == {"1"} and {r["io"] for r in rows} == {"output"}


def test_dump_config_checks(tmp_path: Path) -> None:
    assert dump.configure_from_acl_json({"dump": {"dump_path": str(tmp_path)}}) is None  # no dump_list
    assert dump.configure_from_acl_json({}) is None
    with pytest.raises(ValueError, match="dump_mode"):
        TensorDump(tmp_path, None, "weights")
    assert dump.parse_steps("0|3|5-9") == [(0, 0), (3, 3), (5, 9)]


def test_a_model_loaded_from_memory_is_named_by_its_atc_output(tiny_model: onnx.ModelProto, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """acl.mdl.load_from_mem has no file: the dump / profile model name is atc's --output stem (it
    was "<memory>", so an acl.json dump_list naming the model dumped nothing)."""
    from pycann.ge.om import loads_om
    from pycann.tools import atc

    onnx.save(tiny_model, tmp_path / "m.onnx")
    assert atc.main([f"--model={tmp_path / 'm.onnx'}", "--framework=5", f"--output={tmp_path / 'netname'}",
                     "--soc_version=Ascend310P3"]) == 0
    capsys.readouterr()
    om = loads_om((tmp_path / "netname.om").read_bytes())
    m = LoadedModel(om.graph, om.manifest, "<memory>")
    assert hooks.model_name_of(m.graph.name) == "netname"


def test_the_same_om_loaded_twice_dumps_into_two_model_id_folders(tiny_model: onnx.ModelProto, x_tiny: np.ndarray,
                                                                   tmp_path: Path) -> None:
    """Two loads of one .om: ``<model>/<model_id>/`` per load, as CANN gives each load its own id
    (both went into ``mynet/0/`` with their iterations interleaved)."""
    compile_model(tiny_model).save(tmp_path / "mynet.om")
    a = LoadedModel.from_file(tmp_path / "mynet.om")
    b = LoadedModel.from_file(tmp_path / "mynet.om")
    rows = _dump_runs(tmp_path, [a, b], x_tiny)
    assert {(r["model_name"], r["model_id"], r["iteration"]) for r in rows} == {("mynet", "0", "0"), ("mynet", "1", "0")}


def test_a_load_after_another_ends_dumps_into_its_own_model_id_folder(tiny_model: onnx.ModelProto,
                                                                       x_tiny: np.ndarray, tmp_path: Path) -> None:
    """A load of an .om made after an earlier load of it was freed took the freed load's graph name
    back: a dump running across both put the new model's runs in the old one's ``<model_id>`` folder,
    iterations counted on from the old one's. Each load is its own model id, as in CANN."""
    import gc

    compile_model(tiny_model).save(tmp_path / "mynet.om")
    d = dump.configure_from_acl_json({"dump": {"dump_path": str(tmp_path / "dump"), "dump_list": [],
                                               "dump_mode": "output"}})
    assert d is not None
    try:
        a = LoadedModel.from_file(tmp_path / "mynet.om")
        first = a.graph.name
        a.run([x_tiny])
        del a
        gc.collect()
        b = LoadedModel.from_file(tmp_path / "mynet.om")
        assert b.graph.name != first and hooks.model_name_of(b.graph.name) == "mynet"
        b.run([x_tiny])
    finally:
        dump.finalize()
    rows = load_index(d.root)
    assert {(r["model_name"], r["model_id"], r["iteration"]) for r in rows} == {("mynet", "0", "0"), ("mynet", "1", "0")}


def test_a_compiled_model_does_not_take_a_loaded_file_models_name(tiny_model: onnx.ModelProto, x_tiny: np.ndarray,
                                                                   tmp_path: Path) -> None:
    """``from_compiled`` kept its graph's name when a model loaded from a file held it: the dump found
    both models' runs under one name (one model id folder, the file model's name replaced by the graph's)."""
    cm = compile_model(tiny_model)
    cm.save(tmp_path / "mynet.om")
    a = LoadedModel.from_file(tmp_path / "mynet.om")
    b = LoadedModel.from_compiled(compile_model(tiny_model))
    assert a.graph.name != b.graph.name and hooks.model_name_of(a.graph.name) == "mynet"
    rows = _dump_runs(tmp_path, [a, b], x_tiny)
    assert {(r["model_name"], r["model_id"], r["iteration"]) for r in rows} == {
        ("mynet", "0", "0"), (cm.graph.name, "1", "0")}


def _dump_runs(tmp_path: Path, models: list[LoadedModel], x: np.ndarray) -> list[dict[str, Any]]:
    """Run each model once under an output dump into ``tmp_path / "dump"``; the dump's index rows."""
    d = dump.configure_from_acl_json({"dump": {"dump_path": str(tmp_path / "dump"), "dump_list": [],
                                               "dump_mode": "output"}})
    assert d is not None
    try:
        for m in models:
            m.run([x])
    finally:
        dump.finalize()
    return load_index(d.root)


class _MeetAtNode:
    """An observer after the dumper: each run's node waits there until the other thread's run reported
    its node too, so the two runs overlap (both dumped before either run ended)."""

    def __init__(self) -> None:
        import threading

        self.barrier = threading.Barrier(2)

    def on_node(self, node: Any, inputs: Any, outputs: Any, start_ns: int, end_ns: int, graph_name: str) -> None:
        self.barrier.wait(10)

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None:
        pass


def test_runs_of_one_model_on_two_threads_at_once_dump_to_their_own_iterations(tmp_path: Path) -> None:
    """Two threads running one model at once: each run's tensors in a folder of its own. (The iteration
    was the model's run count, bumped as a run ended: overlapping runs both wrote iteration 0, the later
    files over the earlier, and the index listed the lost run's rows for the other's files: 153 folders
    for 160 runs of four threads.)"""
    import threading

    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")], "dmp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [numpy_helper.from_array(np.full(4, 2, np.float32), "two")])
    lm = LoadedModel.from_compiled(compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])))
    d = TensorDump(tmp_path, None, "all")
    meet = _MeetAtNode()
    hooks.add_observer(d)
    hooks.add_observer(meet)
    try:
        ts = [threading.Thread(target=lm.run, args=([np.full(4, i + 1, np.float32)],)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        assert not any(t.is_alive() for t in ts)
    finally:
        hooks.remove_observer(meet)
        d.close()
    rows = load_index(d.root)
    assert sorted(r["iteration"] for r in rows if r["io"] == "output") == ["0", "1"]
    got = {}
    for it in ("0", "1"):
        (x,) = [np.load(r["path"]) for r in rows if r["iteration"] == it and r["value_name"] == "x"]
        (y,) = [np.load(r["path"]) for r in rows if r["iteration"] == it and r["io"] == "output"]
        np.testing.assert_array_equal(y, 2 * x)
        got[it] = float(x[0])
    assert sorted(got.values()) == [1.0, 2.0]
    lm.run([np.full(4, 3, np.float32)])  # (no observer now: the dump is closed)
    assert d.iterations == {lm.graph.name: 2}


_FORKED_DUMP = """import os, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.profiler import hooks
from pycann.profiler.dump import TensorDump, load_index
g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")], "dmp",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                      [numpy_helper.from_array(np.full(4, 2, np.float32), "two")])
lm = LoadedModel.from_compiled(compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])))
d = TensorDump({folder!r}, None, "all")
hooks.add_observer(d)
lm.run([np.full(4, 1, np.float32)])
parent_root = d.root
pid = os.fork()
if pid == 0:
    for v in (100, 101):
        lm.run([np.full(4, v, np.float32)])
    d.close()
    os._exit(0 if d.root == parent_root + "-" + str(os.getpid()) else 3)
code = os.waitpid(pid, 0)[1]
lm.run([np.full(4, 2, np.float32)])
d.close()
def xs(root):
    return sorted((int(r["iteration"]), float(np.load(r["path"])[0])) for r in load_index(root) if r["value_name"] == "x")
print("child", code, xs(d.root), xs(d.root + "-" + str(pid)))
"""


def test_forked_child_dumps_to_a_folder_of_its_own(tmp_path: Path) -> None:
    """A process forked while a dump runs (a server that loads its model, then forks workers): the child
    writes ``<time folder>-<pid>`` with its own index. (It went on in the parent's folder and index with
    the parent's next iteration numbers: the parent's later runs wrote their files over the child's, and
    the index listed the child's rows for the parent's files.)"""
    from tests.forking import run_script

    res = run_script(tmp_path, _FORKED_DUMP.format(folder=str(tmp_path / "dump")))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "child 0 [(0, 1.0), (1, 2.0)] [(1, 100.0), (2, 101.0)]" in res.stdout, res.stdout + res.stderr
