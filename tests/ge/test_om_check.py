"""The .om loader's semantic checks (pycann.ge.om.check): a manifest with a valid checksum that
does not describe a runnable model is refused with one line naming what is wrong, and pyACL
returns the documented file error codes (never 500000)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pycann
from pycann.errors import OmFormatError, OmInvalidModelError
from pycann.ge import om
from pycann.ge.om import dumps_om, load_om, loads_om
from tests.ge.test_om import rewrite

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def chain_model() -> onnx.ModelProto:
    """x [2,4] -> MatMul -> Relu -> y, and y * 2 -> z."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu"),
             helper.make_node("Mul", ["y", "two"], ["z"], name="mul")]
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def good() -> bytes:
    cm = pycann.compile_model(chain_model())
    return dumps_om(cm.graph, cm.manifest)


def manifest_of(data: bytes) -> dict[str, Any]:
    f = om._HEAD.unpack_from(data)
    out: dict[str, Any] = json.loads(data[f[6]:f[6] + f[7]])
    return out


def mutated(data: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    man = copy.deepcopy(manifest_of(data))
    change(man)
    return rewrite(data, manifest=man)


def node(man: dict[str, Any], op: str) -> dict[str, Any]:
    return next(n for n in man["graph"]["nodes"] if n["op_type"] == op)


def test_good_file_loads_and_runs(good: bytes) -> None:
    m = loads_om(good)
    sess = pycann.ge.run.model.LoadedModel(m.graph, m.manifest)
    x = np.ones((2, 4), np.float32)
    y, z = sess.run([x])
    np.testing.assert_allclose(y, np.maximum(x @ W, 0), rtol=1e-6)
    np.testing.assert_allclose(z, 2 * y, rtol=1e-6)


def _reverse(m: dict[str, Any]) -> None:
    m["graph"]["nodes"].reverse()


def _drop_first(m: dict[str, Any]) -> None:
    del m["graph"]["nodes"][0]


def _unproduced(m: dict[str, Any]) -> None:
    m["graph"]["outputs"].append("nowhere")
    m["graph"]["descs"]["nowhere"] = m["graph"]["descs"]["y"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        *head, last = path.split(".")
        d = m
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return change


def _node_set(op: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: node(m, op).__setitem__(key, value)


def _attr(op: str, name: str, tagged: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: node(m, op)["attrs"].__setitem__(name, tagged)


CASES = [
    ("reversed nodes", _reverse, r"node .* input '.*' is used before it is defined"),
    ("missing node", _drop_first, r"is used before it is defined"),
    ("unproduced output", _unproduced, r"output 'nowhere' is never produced"),
    ("unknown op", _node_set("Mul", "op_type", "Mulx"), r"no parser is registered for op Mulx"),
    ("op before its opset", _node_set("Mul", "opset", 0), None),  # opset 0 -> the graph's: still valid
    ("inputs not a list", _node_set("Mul", "inputs", "y"), r"'inputs' is str, expected list"),
    ("op_type not a string", _node_set("Mul", "op_type", 7), r"'op_type' is int, expected str"),
    ("node not an object", lambda m: m["graph"]["nodes"].__setitem__(0, ["Relu"]), r"node 0 is list"),
    ("options a list", _set("options", [1, 2]), r"manifest 'options' is list"),
    ("options.input_format an int", _set("options.input_format", 3), r"options.input_format"),
    ("aipp a dict", _set("aipp", {"input": "x"}), r"manifest 'aipp' is dict"),
    ("aipp entry a string", _set("aipp", ["x"]), r"manifest 'aipp\[0\]' is str"),
    ("aipp entry without mode", _set("aipp", [{"input": "x"}]), r"aipp\[0\]'.mode"),
    ("gears a string", _set("gears", "batch"), r"manifest 'gears' is str"),
    ("gears kind", _set("gears", {"kind": "bogus", "profiles": [[1]], "shapes": [{}]}), r"gears.kind"),
    ("gears shapes short", _set("gears", {"kind": "batch", "profiles": [[1], [2]], "shapes": [{}]}),
     r"gears.shapes' is not a list of 2"),
    ("gears shape names a non-input", _set("gears", {"kind": "batch", "profiles": [[1]], "shapes": [{"q": [1]}]}),
     r"names 'q'"),
    ("input_ranges mistyped", _set("input_ranges", {"x": "1~8"}), r"input_ranges.x"),
    ("memory_plan.peak_bytes a string", _set("memory_plan.peak_bytes", "big"), r"peak_bytes"),
    ("input without desc", lambda m: m["graph"]["descs"].pop("x"), r"'x' has no tensor description"),
]


@pytest.mark.parametrize("what, change, pattern", CASES, ids=[c[0] for c in CASES])
def test_refusals_name_the_defect(good: bytes, what: str, change: Callable[[dict[str, Any]], None],
                                  pattern: str | None) -> None:
    data = mutated(good, change)
    if pattern is None:
        loads_om(data)
        return
    with pytest.raises(OmFormatError, match=pattern) as e:
        loads_om(data)
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith("rebuild it with this pycann's atc"), msg


def test_attribute_kinds(good: bytes) -> None:
    cm = pycann.compile_model(_conv_model())
    data = dumps_om(cm.graph, cm.manifest)
    loads_om(data)
    conv = next(n for n in manifest_of(data)["graph"]["nodes"] if "strides" in n["attrs"])
    op = conv["op_type"]
    with pytest.raises(OmInvalidModelError, match=rf"\({op}\): attribute 'strides' is str 'wide', expected list"):
        loads_om(mutated(data, _attr(op, "strides", {"t": "str", "v": "wide"})))
    with pytest.raises(OmInvalidModelError, match=r"attribute 'group' is float .*expected int"):
        loads_om(mutated(data, _attr(op, "group", {"t": "float", "v": 1.5})))
    with pytest.raises(OmFormatError, match=r"unknown attribute kind"):
        loads_om(mutated(data, _attr(op, "group", {"t": "complex", "v": 1})))


def _conv_model() -> onnx.ModelProto:
    w = np.ones((2, 1, 3, 3), np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1], group=1)], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_file_loader_and_session_refuse(tmp_path: Path, good: bytes) -> None:
    p = tmp_path / "bad.om"
    p.write_bytes(mutated(good, _reverse))
    with pytest.raises(OmInvalidModelError, match="not a valid model"):
        load_om(p)
    with pytest.raises(OmInvalidModelError):
        pycann.InferSession(0, str(p))
    assert load_om(p, validate=False).graph.nodes  # the container itself is intact
