"""pycann compare: node-by-node agreement with ONNX Runtime; finding an injected fault."""

from __future__ import annotations

import csv
import dataclasses
import glob
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import table as kernel_table
from pycann.ops import registry
from pycann.tools.compare import CSV_COLUMNS, compare, main

pytest.importorskip("onnxruntime")


def _patch(monkeypatch: pytest.MonkeyPatch, domain: str, op_type: str, kernel: Callable) -> None:
    """Replace the kernel of ``op_type`` (and drop its arena kernel and its provider kernels in the
    kernel table, so the replacement runs)."""
    defs = registry.complete()[(domain, op_type)]
    monkeypatch.setitem(registry.REGISTRY, (domain, op_type),
                        [dataclasses.replace(d, kernel=kernel, out_kernel=None) for d in defs])
    monkeypatch.delitem(kernel_table.KERNELS, (domain, op_type), raising=False)  # type: ignore[arg-type]


def _om(model: onnx.ModelProto, tmp_path: Path) -> tuple[Path, Path]:
    onnx_path, om_path = tmp_path / "m.onnx", tmp_path / "m.om"
    onnx.save(model, onnx_path)
    compile_model(model).save(om_path)
    return onnx_path, om_path


def test_clean_model_agrees(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    res = compare(tiny_model, LoadedModel.from_compiled(compile_model(tiny_model)), {"x": x_tiny})
    assert res.first_bad is None and len(res.compared) == 6
    fused = next(r for r in res.rows if r.op_type == "FusedConv")
    assert fused.onnx_node == "relu" and fused.origin == ["conv", "relu"]  # the LAST original node's value
    assert {r.onnx_node: r.status for r in res.others} == {"conv": "fused into conv_fused", "mm": "fused into mm_fused",
                                                           "add": "fused into mm_fused"}
    onnx_path, om_path = _om(tiny_model, tmp_path)
    np.save(tmp_path / "x.npy", x_tiny)
    rc = main(["--model", str(onnx_path), "--om", str(om_path), "--input", str(tmp_path / "x.npy"),
               "--output", str(tmp_path / "out")])
    assert rc == 0
    assert "all compared nodes agree" in capsys.readouterr().out
    (csv_path,) = glob.glob(str(tmp_path / "out" / "compare_result_*.csv"))
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == CSV_COLUMNS and len(rows) == 1 + 6 + 3


def test_wrong_relu_kernel_is_found(tiny_model: onnx.ModelProto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _patch(monkeypatch, "", "Relu", lambda ins, attrs: [np.maximum(ins[0], 0) + np.float32(1e-2)])
    onnx_path, om_path = _om(tiny_model, tmp_path)
    rc = main(["--model", str(onnx_path), "--om", str(om_path), "--output", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "first disagreement: pycann node relu2 (Relu)" in out and "ONNX node relu2" in out


def test_wrong_fused_kernel_maps_to_last_original_node(tiny_model: onnx.ModelProto, x_tiny: np.ndarray,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    op = registry.complete()[("pycann", "FusedMatMul")][-1]
    _patch(monkeypatch, "pycann", "FusedMatMul", lambda ins, attrs: [op.kernel(ins, attrs)[0] * np.float32(1.01)])
    res = compare(tiny_model, LoadedModel.from_compiled(compile_model(tiny_model)), {"x": x_tiny})
    bad = res.first_bad
    assert bad is not None and bad.node == "mm_fused" and bad.onnx_node == "sig"
    assert bad.origin == ["mm", "add", "sig"]


def _overflow_model(scale: float) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 16)) * scale).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
             helper.make_node("Mul", ["h", "h"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["y"], name="total", keepdims=0)]
    g = helper.make_graph(nodes, "energy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("scale", [100.0, 1.0], ids=["fp16-overflow", "fp16-rounding"])
def test_fp16_precision_loss_is_found(scale: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """One node computes through float16 (as a precision mode would): compare names it first."""
    model = _overflow_model(scale)
    x = np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)
    lm = LoadedModel.from_compiled(compile_model(model))
    assert compare(model, lm, {"x": x}).first_bad is None
    _patch(monkeypatch, "", "Mul",
           lambda ins, attrs: [(ins[0].astype(np.float16) * ins[1].astype(np.float16)).astype(np.float32)])
    lm = LoadedModel.from_compiled(compile_model(model))
    assert [n.op_type for n in lm.graph.nodes if n.name == "square"] == ["Mul"]
    with np.errstate(over="ignore"):
        res = compare(model, lm, {"x": x})
    bad = res.first_bad
    assert bad is not None and bad.node == "square" and bad.status == "MISMATCH"
    if scale > 1:
        assert np.isnan(bad.cosine) and bad.max_abs == np.inf
    else:
        assert bad.rel_l2 > 1e-4 and bad.cosine > 0.999


def test_reduced_precision_om_gets_an_rtol_note(tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A force_fp16 .om compared at float32's default tolerance: its first fp16 node "disagrees" by
    float16 rounding alone; the output says so and which options to use (it said nothing)."""
    from pycann.ge.compile.options import CompileOptions

    onnx_path, om_path = tmp_path / "m.onnx", tmp_path / "m.om"
    onnx.save(tiny_model, onnx_path)
    compile_model(tiny_model, CompileOptions(precision_mode="force_fp16")).save(om_path)
    np.save(tmp_path / "x.npy", x_tiny)
    base = ["--model", str(onnx_path), "--om", str(om_path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path)]
    assert main(base) == 1
    out = capsys.readouterr().out
    assert "note: the .om was compiled with --precision_mode=force_fp16 (fp16 " in out and "--rtol 1e-2" in out
    main([*base, "--rtol", "1e-2", "--cosine", "0.99"])
    assert "note:" not in capsys.readouterr().out


def test_near_zero_values_within_atol_agree() -> None:
    """A saturated Sigmoid (outputs ~1e-5) differing by 1e-7: relative error is meaningless there."""
    from pycann.tools.compare import metrics

    ref = np.full(100, 1e-5, np.float32)
    got = ref + np.float32(1.35e-7)
    *_, rel_l2, agrees = metrics(got, ref, 1e-6, 1e-4, 0.999)
    assert rel_l2 > 1e-4 and agrees
    *_, agrees_big = metrics(ref + np.float32(2e-6), ref, 1e-6, 1e-4, 0.999)
    assert not agrees_big  # beyond atol and 20% off: a real disagreement


def test_unnamed_onnx_nodes_get_the_importers_names(tiny_model: onnx.ModelProto, x_tiny: np.ndarray) -> None:
    """onnx.helper models often leave node names empty: the report names each ONNX node as pycann's
    importer does (``Node.origin``), so fused nodes are accounted for, not merged under ""."""
    unnamed = onnx.ModelProto()
    unnamed.CopyFrom(tiny_model)
    for n in unnamed.graph.node:
        n.name = ""
    res = compare(unnamed, LoadedModel.from_compiled(compile_model(unnamed)), {"x": x_tiny})
    assert res.first_bad is None and len(res.compared) == 6
    assert all(r.onnx_node for r in res.rows)
    fused = next(r for r in res.rows if r.op_type == "FusedConv")
    assert fused.onnx_node == fused.origin[-1] and fused.onnx_node.startswith("Relu_")
    assert sorted(r.status.split(" into ")[0] for r in res.others) == ["fused"] * 3
    assert {r.onnx_node.split("_")[0] for r in res.others} == {"Conv", "MatMul", "Add"}


def test_an_out_nodes_output_is_not_compared_with_the_onnx_output_of_its_position(
        tiny_model: onnx.ModelProto, x_tiny: np.ndarray, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out_nodes=pool:0 makes the pool's value output 0: it was compared with ONNX's output 0 (y),
    a MISMATCH that is no fault; an --output_type=FP16 .om gets a note on its output Casts."""
    from pycann.ge.compile.options import CompileOptions

    cm = compile_model(tiny_model, CompileOptions(out_nodes=[("pool", 0)]))
    res = compare(tiny_model, LoadedModel.from_compiled(cm), {"x": x_tiny})
    assert res.first_bad is None and not any(r.op_type == "Output" for r in res.rows)
    onnx_path = tmp_path / "m.onnx"
    onnx.save(tiny_model, onnx_path)
    compile_model(tiny_model, CompileOptions(output_type={"": TensorProto.FLOAT16})).save(tmp_path / "h.om")
    np.save(tmp_path / "x.npy", x_tiny)
    assert main(["--model", str(onnx_path), "--om", str(tmp_path / "h.om"), "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path)]) == 1
    assert "casts outputs to float16/bfloat16 (--output_type)" in capsys.readouterr().out


def _if_model() -> onnx.ModelProto:
    """x -> Relu -> If(flag == 1: MatMul, Softmax, ReduceMax; else MatMul, ReduceMin) -> Transpose."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32), "W")
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t1"]), helper.make_node("Softmax", ["t1"], ["t2"], axis=-1),
         helper.make_node("ReduceMax", ["t2"], ["tout"], axes=[1], keepdims=1)],
        "then", [], [helper.make_tensor_value_info("tout", TensorProto.FLOAT, [2, 1])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["e1"]), helper.make_node("ReduceMin", ["e1"], ["eout"], axes=[1],
                                                                           keepdims=1)],
        "else", [], [helper.make_tensor_value_info("eout", TensorProto.FLOAT, [2, 1])])
    g = helper.make_graph(
        [helper.make_node("Relu", ["xin"], ["x"], name="relu"),
         helper.make_node("Equal", ["flag", "one"], ["cond"], name="eq"),
         helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Transpose", ["y"], ["out"], name="tr", perm=[1, 0])],
        "g", [helper.make_tensor_value_info("xin", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("flag", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(np.array(1, np.int64), "one"), w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("flag", [1, 0])
def test_nodes_of_an_inlined_if_branch_are_not_compared_with_the_if(flag: int) -> None:
    """A run-time-inlined If branch (the flag becomes a constant) has nodes ONNX Runtime has no value
    for: they were compared with the If's output ("shape" rows, exit 1, on a model that agrees)."""
    model = _if_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    res = compare(model, LoadedModel.from_compiled(compile_model(model)), {"xin": x, "flag": np.array(flag, np.int64)})
    assert res.first_bad is None, [(r.node, r.status) for r in res.rows]
    inner = [r for r in res.rows if "/inl" in r.node and r.status != "ok"]
    assert inner and all(r.status == "inside if" for r in inner)
    assert {r.onnx_node for r in res.compared} >= {"relu", "if", "tr"}  # the branch's result is the If's value


@pytest.mark.parametrize("option, value", [("--rtol", "-1"), ("--atol", "nan"), ("--atol", "-1e-6"),
                                           ("--rtol", "inf"), ("--cosine", "1.5"), ("--cosine", "nan"),
                                           ("--rtol", "x"), ("--max_rows", "-1"), ("--max_rows", "2.5")])
def test_a_tolerance_out_of_range_is_refused_before_any_work(option: str, value: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`pycann compare --rtol -1` (or a NaN --atol, a cosine past 1) would make the verdicts meaningless:
    refused by the option parser with exit 2 and a line naming the option, before the model is read."""
    with pytest.raises(SystemExit) as e:
        main(["--model", str(tmp_path / "not_read.onnx"), f"{option}={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert option in err and value in err


def _batch_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["y"])],
        "gearnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_gear_model_is_compared_on_its_first_gear_without_input_files(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`pycann compare` on a --dynamic_batch_size .om without --input refused ("dynamic dims: give real
    data"), though the gears fix every shape; it now feeds random data of the first gear and says so.
    A range model (no gears) is still refused."""
    from pycann.ge.compile.options import CompileOptions

    model = _batch_model()
    onnx_path = tmp_path / "m.onnx"
    onnx.save(model, onnx_path)
    gear_om, range_om = tmp_path / "gear.om", tmp_path / "range.om"
    compile_model(model, CompileOptions(input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[2, 3])).save(gear_om)
    compile_model(model, CompileOptions(input_shape={"x": [(1, 4), 3, 8, 8]})).save(range_om)
    rc = main(["--model", str(onnx_path), "--om", str(gear_om), "--output", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "first --dynamic_batch_size gear: x:[2, 3, 8, 8]" in out and "all compared nodes agree" in out
    assert main(["--model", str(onnx_path), "--om", str(range_om), "--output", str(tmp_path / "out")]) == 2
    assert "give real data with --input" in capsys.readouterr().err


def test_bin_inputs_of_the_wrong_size_or_a_dynamic_input_are_named(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from pycann.ge.compile.options import CompileOptions

    model = _batch_model()
    onnx_path = tmp_path / "m.onnx"
    onnx.save(model, onnx_path)
    static_om, range_om = tmp_path / "s.om", tmp_path / "r.om"
    compile_model(model, CompileOptions(input_shape={"x": [2, 3, 8, 8]})).save(static_om)
    compile_model(model, CompileOptions(input_shape={"x": [(1, 4), 3, 8, 8]})).save(range_om)
    short, good = tmp_path / "short.bin", tmp_path / "good.bin"
    np.ones(7, np.float32).tofile(short)
    np.random.default_rng(0).standard_normal(2 * 3 * 8 * 8).astype(np.float32).tofile(good)
    assert main(["--model", str(onnx_path), "--om", str(static_om), "--input", str(short)]) == 2
    assert "short.bin: 28 bytes, but input 'x' float32[2, 3, 8, 8] takes 1536 bytes" in capsys.readouterr().err
    assert main(["--model", str(onnx_path), "--om", str(range_om), "--input", str(good)]) == 2
    assert "has dynamic dims [-1, 3, 8, 8], which a .bin does not carry" in capsys.readouterr().err
    assert main(["--model", str(onnx_path), "--om", str(static_om), "--input", str(good),
                 "--output", str(tmp_path / "out")]) == 0
    assert "all compared nodes agree" in capsys.readouterr().out
