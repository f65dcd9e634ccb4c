"""Which TF Placeholders stay model inputs: those the outputs need, those ``--input_shape`` names
(even when no output needs them: GE keeps a declared Data node) and, when the outputs need none,
all of them; an .om without inputs never silently ignores what the user feeds. Goldens: numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import pycann
from pycann.ge.compile.importers.tensorflow import import_graph_def
from pycann.tools.atc import main as atc
from tests.importers.test_tensorflow_graphdef import F32, G

I32 = 3  # types_pb2.DT_INT32


def _shape_only() -> G:
    """o = float(shape(x))**2; y is declared but nothing reads it."""
    g = G()
    g.placeholder("x", (2, 3))
    g.placeholder("y", (2, 3))
    g.node("Shape", "s", ["x"], T=("type", F32), out_type=("type", I32))
    g.node("Cast", "c", ["s"], SrcT=("type", I32), DstT=("type", F32))
    g.node("Mul", "o", ["c", "c"], T=("type", F32))
    return g


def _atc_inputs(tmp_path: Path, g: G, *extra: str) -> tuple[list[tuple[str, list[int]]], list[np.ndarray]]:
    pb = tmp_path / "m.pb"
    pb.write_bytes(g.gd.SerializeToString())
    assert atc([f"--model={pb}", "--framework=3", f"--output={tmp_path / 'm'}", "--soc_version=Ascend310P3",
                *extra]) == 0
    s = pycann.InferSession(0, str(tmp_path / "m.om"))
    ins = [(i.name, list(i.shape)) for i in s.get_inputs()]
    feeds = [np.full([2 if d == -1 else d for d in shape], k + 1, np.float32) for k, (_, shape) in enumerate(ins)]
    return ins, s.infer(feeds)


def test_declared_placeholder_stays_an_input(tmp_path: Path) -> None:
    g = _shape_only()
    assert import_graph_def(g.gd).inputs == ["x"]  # undeclared and unread: pruned as before
    assert import_graph_def(g.gd, (), ["y"]).inputs == ["x", "y"]
    ins, outs = _atc_inputs(tmp_path, g, "--input_shape=y:-1,3")
    assert ins == [("x", [2, 3]), ("y", [-1, 3])]
    np.testing.assert_array_equal(outs[0], np.float32([4, 9]))
    # a placeholder feeding only shape ops (folded to a constant) stays the input it was
    ins, outs = _atc_inputs(tmp_path, g, "--input_shape=x:2,3")
    assert ins == [("x", [2, 3])]
    np.testing.assert_array_equal(outs[0], np.float32([4, 9]))


def test_constant_only_outputs_keep_the_placeholders(tmp_path: Path) -> None:
    g = G()
    g.placeholder("x", (2, 3))
    g.node("Mul", "m", ["x", g.const("k", np.float32(2))], T=("type", F32))
    g.node("Add", "o", [g.const("a", np.float32([1, 2, 3])), g.const("b", np.float32([1, 1, 1]))],
           T=("type", F32))
    assert import_graph_def(g.gd, ["o:0"]).inputs == ["x"]
    ins, outs = _atc_inputs(tmp_path, g, "--out_nodes=o:0")
    assert ins == [("x", [2, 3])]
    np.testing.assert_array_equal(outs[0], np.float32([2, 3, 4]))
    # with an output that reads x, the pruned-branch rule is unchanged
    ins, outs = _atc_inputs(tmp_path, g, "--out_nodes=m:0")
    assert ins == [("x", [2, 3])]
    np.testing.assert_array_equal(outs[0], np.full((2, 3), 2, np.float32))
