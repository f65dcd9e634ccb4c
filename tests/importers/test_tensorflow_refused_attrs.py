"""TF ops with argument values TensorFlow itself refuses: a ModelError naming the node, where the
ONNX op pycann emitted gave another answer in silence (negative Pad cropped, negative OneHot depth
or Resize size gave empty tensors) or the node vanished (Split num_split 0). Valid values still
match numpy (the GraphDef helpers of test_tensorflow_graphdef)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow import import_graph_def
from tests.importers.test_tensorflow_graphdef import F32, G, _run

I32 = 3


def _pad(g: G, p: list[list[int]]) -> None:
    g.placeholder("x", (2, 3))
    g.node("Pad", "out", ["x", g.const("p", np.array(p, np.int32))], T=("type", F32), Tpaddings=("type", I32))


def _one_hot(g: G, depth: int) -> None:
    g.placeholder("i", (3,), I32)
    g.node("OneHot", "out", ["i", g.const("d", np.int32(depth)), g.const("on", np.float32(1)),
                             g.const("off", np.float32(0))], T=("type", F32), TI=("type", I32), axis=-1)


def _resize(g: G, size: list[int]) -> None:
    g.placeholder("x", (1, 2, 2, 1))
    g.node("ResizeNearestNeighbor", "out", ["x", g.const("s", np.array(size, np.int32))], T=("type", F32))


def _split(g: G, num: int) -> None:
    g.placeholder("x", (2, 4))
    g.node("Split", "out", [g.const("a", np.int32(1)), "x"], T=("type", F32), num_split=num)


def _unpack(g: G, num: int) -> None:
    g.placeholder("x", (2, 4))
    g.node("Unpack", "out", ["x"], T=("type", F32), num=num, axis=0)


@pytest.mark.parametrize(("build", "match"), [
    (lambda g: _pad(g, [[0, 0], [-1, 2]]), r"node out \(Pad\): paddings \[\[0, 0\], \[-1, 2\]\] hold a negative"),
    (lambda g: _one_hot(g, -2), r"node out \(OneHot\): depth -2 must be >= 0"),
    (lambda g: _resize(g, [-1, 4]), r"node out \(ResizeNearestNeighbor\): size \[-1, 4\] must be positive"),
    (lambda g: _split(g, 0), r"node out \(Split\): num_split 0 must be >= 1"),
    (lambda g: _unpack(g, 0), r"node out \(Unpack\): num 0 must be >= 1"),
])
def test_refused_like_tensorflow(build: Callable[[G], Any], match: str) -> None:
    g = G()
    build(g)
    with pytest.raises(ModelError, match=match):
        import_graph_def(g.gd, ["out:0"])


def test_valid_values_still_match_numpy() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = G()
    _pad(g, [[0, 1], [2, 0]])
    np.testing.assert_array_equal(_run(g.gd, [x], [("out", 0)])[0], np.pad(x, [[0, 1], [2, 0]]))
    g = G()
    _split(g, 2)
    y = np.arange(8, dtype=np.float32).reshape(2, 4)
    a, b = _run(g.gd, [y], [("out", 0), ("out", 1)])
    np.testing.assert_array_equal(a, y[:, :2])
    np.testing.assert_array_equal(b, y[:, 2:])
    g = G()
    _one_hot(g, 3)
    np.testing.assert_array_equal(_run(g.gd, [np.array([2, 0, 5], np.int32)], [("out", 0)])[0],
                                  np.float32([[0, 0, 1], [1, 0, 0], [0, 0, 0]]))


def _slice(g: G, begin: list[int], size: list[int]) -> None:
    g.placeholder("x", (2, 3))
    g.node("Slice", "out", ["x", g.const("b", np.array(begin, np.int32)), g.const("s", np.array(size, np.int32))],
           T=("type", F32), Index=("type", I32))


@pytest.mark.parametrize(("build", "match"), [
    (lambda g: _split(g, 3), r"node out \(Split\): axis 1 of size 4 does not split into 3 equal parts"),
    (lambda g: _slice(g, [0, 2], [-1, 5]), r"node out \(Slice\): begin 2 \+ size 5 on axis 1 pass its size 3"),
    (lambda g: _slice(g, [3, 0], [-1, -1]), r"begin 3 \+ size -1 on axis 0 pass its size 2"),
    (lambda g: _slice(g, [0, -1], [1, 1]), r"axis 1 has begin -1, size 1 \(TensorFlow needs begin >= 0"),
    (lambda g: _slice(g, [0, 0], [1, -2]), r"axis 1 has begin 0, size -2"),
])
def test_shape_rules_onnx_would_not_enforce(build: Callable[[G], Any], match: str) -> None:
    """A Split of 4 into 3 gave parts of 2, 2 and 0 (ONNX's uneven split); a Slice past the end was
    clamped to what is there. TensorFlow refuses both; the check runs once shapes are inferred."""
    g = G()
    build(g)
    with pytest.raises(ModelError, match=match):
        import_graph_def(g.gd, ["out:0"])


def test_valid_slice_matches_numpy_and_leaves_no_inferred_desc() -> None:
    g = G()
    _slice(g, [1, 1], [-1, 2])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = import_graph_def(g.gd, ["out:0"])
    assert set(graph.descs) == {"x"}  # (the compiler infers again, with atc's --input_shape)
    np.testing.assert_array_equal(_run(g.gd, [x], [("out", 0)])[0], x[1:, 1:3])
