"""Dynamic gears (--dynamic_batch_size / --dynamic_image_size / --dynamic_dims): each gear matches
the static model, gear selection and errors at run time, plans precompiled at load, CANN's
compile-time error codes, and the --input_shape range check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import InputError, OptionError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.gears import parse_dynamic_batch_size, parse_dynamic_dims, parse_dynamic_image_size
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort


def conv_model() -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten; input x [N, 3, H, W]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def nd_model() -> onnx.ModelProto:
    """y = ReduceSum(a, axis 1) @ ... : a [B, S] float, m [S] float -> a * m summed over S."""
    nodes = [helper.make_node("Mul", ["a", "m"], ["t"]),
             helper.make_node("ReduceSum", ["t", "ax"], ["y"], keepdims=0)]
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["B", "S"]),
                                       helper.make_tensor_value_info("m", TensorProto.FLOAT, ["S"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B"])], [ax])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def load(model: onnx.ModelProto, **opts: Any) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(model, CompileOptions(**opts)))


def test_each_batch_gear_matches_static_model() -> None:
    m = conv_model()
    lm = load(m, input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2, 4])
    assert lm.dynamic_gears()["profiles"] == [[1], [2], [4]]
    assert len(lm.executor._cache) == 3  # every gear's plan was built at load
    rng = np.random.default_rng(1)
    for n in (1, 2, 4):
        x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
        static = load(m, input_shape={"x": [n, 3, 8, 8]})
        np.testing.assert_allclose(lm.run([x])[0], static.run([x])[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert len(lm.executor._cache) == 3  # no plan built on the first call of a gear


def test_gear_selection_and_errors() -> None:
    lm = load(conv_model(), input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2, 4])
    with pytest.raises(InputError, match=r"input shapes x:\[3, 3, 8, 8\] match no gear of this model "
                       r"\(--dynamic_batch_size\); the gears are: batch 1 \(x:\[1,3,8,8\]\); batch 2"):
        lm.run([np.zeros((3, 3, 8, 8), np.float32)])
    with pytest.raises(InputError, match=r"batch 3 is not a gear of this model.*batch 4 \(x:\[4,3,8,8\]\)"):
        lm.set_dynamic_batch_size(3)
    lm.set_dynamic_batch_size(2)
    assert lm.dynamic_gears()["selected"] == 1
    assert lm.run([np.zeros((2, 3, 8, 8), np.float32)])[0].shape == (2, 4)
    with pytest.raises(InputError, match=r"selected gear batch 2 .*received \(x:\[4, 3, 8, 8\]\)"):
        lm.run([np.zeros((4, 3, 8, 8), np.float32)])
    with pytest.raises(InputError, match="compiled with --dynamic_batch_size; use set_dynamic_batch_size"):
        lm.set_dynamic_hw_size(8, 8)
    with pytest.raises(InputError, match="expected shape \\[-1,3,8,8\\], received \\[2, 3, 8, 9\\]"):
        lm.run([np.zeros((2, 3, 8, 9), np.float32)])
    with pytest.raises(InputError, match="no dynamic gears"):
        load(conv_model(), input_shape={"x": [1, 3, 8, 8]}).set_dynamic_batch_size(1)


def test_image_size_gears_match_static_and_om_round_trip(tmp_path: Path) -> None:
    m = conv_model()
    cm = compile_model(m, CompileOptions(input_shape={"x": [1, 3, -1, -1]}, dynamic_image_size=[[8, 8], [6, 10]]))
    cm.save(tmp_path / "g.om")
    lm = LoadedModel.from_file(tmp_path / "g.om")
    assert lm.dynamic_gears()["shapes"] == [{"x": [1, 3, 8, 8]}, {"x": [1, 3, 6, 10]}]
    assert len(lm.executor._cache) == 2
    rng = np.random.default_rng(2)
    for h, w in ((8, 8), (6, 10)):
        lm.set_dynamic_hw_size(h, w)
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], load(m, input_shape={"x": [1, 3, h, w]}).run([x])[0], rtol=1e-6)
    with pytest.raises(InputError, match=r"hw 7x7 is not a gear.*hw 8x8 \(x:\[1,3,8,8\]\); hw 6x10"):
        lm.set_dynamic_hw_size(7, 7)


def test_dynamic_dims_gears() -> None:
    m = nd_model()
    lm = load(m, input_shape={"a": [-1, -1], "m": [-1]}, input_format="ND", dynamic_dims=[[1, 4, 4], [2, 8, 8]])
    assert lm.dynamic_gears()["shapes"] == [{"a": [1, 4], "m": [4]}, {"a": [2, 8], "m": [8]}]
    rng = np.random.default_rng(3)
    for b, s in ((1, 4), (2, 8)):
        lm.set_input_dynamic_dims([b, s, s])
        a, mm = rng.standard_normal((b, s)).astype(np.float32), rng.standard_normal(s).astype(np.float32)
        np.testing.assert_allclose(lm.run([a, mm])[0], run_ort(m, {"a": a, "m": mm})[0], rtol=1e-5)
    with pytest.raises(OptionError, match="dim 'S' two values"):
        load(m, input_shape={"a": [-1, -1], "m": [-1]}, input_format="ND", dynamic_dims=[[1, 4, 5], [2, 8, 8]])


def test_dynamic_batch_with_static_aipp(tmp_path: Path) -> None:
    cfg = tmp_path / "a.cfg"
    cfg.write_text("aipp_op { aipp_mode: static input_format: RGB888_U8 var_reci_chn_0: 0.5 }")
    lm = load(conv_model(), input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2], insert_op_conf=str(cfg))
    assert lm.dynamic_gears()["shapes"] == [{"x": [1, 8, 8, 3]}, {"x": [2, 8, 8, 3]}]
    assert lm.run([np.zeros((2, 8, 8, 3), np.uint8)])[0].shape == (2, 4)


GEAR_ERRORS = [
    (dict(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2], dynamic_image_size=[[8, 8], [4, 4]]), "E10009"),
    (dict(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1]), "E10035"),
    (dict(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=list(range(1, 102))), "E10036"),
    (dict(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2, 2]), "E10039"),
    (dict(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[0, 2]), "E10038"),
    (dict(input_shape={"x": [-1, 3, -1, 8]}, dynamic_batch_size=[1, 2]), "E10018"),
    (dict(input_shape={"x": [1, 3, 8, 8]}, dynamic_batch_size=[1, 2]), "E10031"),
    (dict(input_shape={"x": [(1, 4), 3, 8, 8]}, dynamic_batch_size=[1, 2]), "E10040"),
    (dict(input_shape={"x": [-1, 3, -1, -1]}, dynamic_image_size=[[8, 8], [4, 4]]), "E10019"),
    (dict(input_shape={"x": [1, 3, -1, -1]}, dynamic_image_size=[[8, 8], [4]]), "E10037"),
    (dict(input_shape={"x": [1, 3, -1, -1]}, dynamic_dims=[[8, 8], [4, 4]]), "E10001"),  # needs ND
    (dict(input_shape={"x": [1, 3, -1, -1]}, input_format="ND", dynamic_dims=[[8], [4]]), "E10045"),
    (dict(input_shape={"x": [1, 3, -1, -1]}, input_format="ND", dynamic_dims=[[8, 8], [4, 4]],
          insert_op_conf="a.cfg"), "E10047"),
]


@pytest.mark.parametrize("opts,code", GEAR_ERRORS)
def test_gear_option_errors(opts: dict[str, Any], code: str) -> None:
    with pytest.raises(OptionError, match=f"^{code}: ") as e:
        compile_model(conv_model(), CompileOptions(**opts))
    assert e.value.code == code


def test_gear_option_parsers() -> None:
    assert parse_dynamic_batch_size("1,2,4,8") == [1, 2, 4, 8]
    assert parse_dynamic_image_size("224,224;448,448") == [[224, 224], [448, 448]]
    assert parse_dynamic_dims("1,16;2,32;") == [[1, 16], [2, 32]]
    with pytest.raises(OptionError, match="E10020"):
        parse_dynamic_image_size("224;448,448")
    with pytest.raises(OptionError, match=r"E10001.*\[x\] is not an integer"):
        parse_dynamic_batch_size("1,x")
    with pytest.raises(OptionError, match="E10038"):
        parse_dynamic_dims("1,-2;3,4")


def test_gear_that_cannot_compile_fails_at_compile_time() -> None:
    # Reshape to a fixed [2, 12] only works for batch 1
    shape = numpy_helper.from_array(np.array([2, 12], np.int64), "s")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])], [shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="--dynamic_batch_size gear 2 does not compile"):
        compile_model(m, CompileOptions(input_shape={"x": [-1, 2, 12]}, dynamic_batch_size=[1, 2]))


# ------------------------------------------------------------------- shape ranges (no gears)
def test_input_shape_range_check_and_message() -> None:
    lm = load(conv_model(), input_shape={"x": [(1, 4), 3, (6, 10), -1]})
    assert lm.manifest["input_ranges"]["x"] == [[1, 4], 3, [6, 10], -1]
    assert lm.run([np.zeros((4, 3, 10, 5), np.float32)])[0].shape == (4, 4)
    with pytest.raises(InputError, match=r"input 'x': expected shape \[1~4,3,6~10,-1\], received \[5, 3, 8, 8\] "
                       r"\(dim 0 is 5, not in the range 1~4 set by --input_shape\)"):
        lm.run([np.zeros((5, 3, 8, 8), np.float32)])
    with pytest.raises(InputError, match=r"received \[2, 3, 5, 8\] \(dim 2 is 5, not in the range 6~10"):
        lm.run([np.zeros((2, 3, 5, 8), np.float32)])
    with pytest.raises(InputError, match=r"received \[2, 4, 8, 8\] \(dim 1 is 4, expected 3\)"):
        lm.run([np.zeros((2, 4, 8, 8), np.float32)])
    with pytest.raises(InputError, match=r"received \[2, 3, 8\] \(rank 3, expected 4\)"):
        lm.run([np.zeros((2, 3, 8), np.float32)])
