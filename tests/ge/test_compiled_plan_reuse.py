"""A static model compiled in this environment plans on its compiled graph as it is (ge/run/specializer.py):
no pass pipeline at load, the compile side not imported for an .om. Anything that could change the
kernel or layout choices (another provider set, selection mode, a knowledge bank written since, a
different machine) re-specialises as before. Values against ONNX Runtime; counts, no timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile import specialize
from pycann.ge.compile.compiler import CompileOptions, compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.environment import choice_environment
from tests.ge.test_plan_cache import _conv_model, _mlp_model
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(7)


def _residual_model() -> object:
    """Conv -> Relu -> Conv + x (a residual Add) -> Relu -> Gemm head: fusions, NHWC layout, a numpy GEMM."""
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, "w2")
    fc = numpy_helper.from_array(RNG.standard_normal((10, 16)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]), helper.make_node("GlobalAveragePool", ["e"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], [w1, w2, fc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _static_cases() -> list[tuple[object, CompileOptions | None, tuple[int, ...]]]:
    return [(_residual_model(), None, (2, 16, 12, 12)),
            (_conv_model(), CompileOptions(input_shape={"x": [1, 16, 10, 14]}), (1, 16, 10, 14)),
            (_mlp_model(), CompileOptions(input_shape={"x": [3, 5, 64]}), (3, 5, 64))]


@pytest.mark.parametrize("case", range(3))
def test_static_model_runs_its_compiled_graph_with_ort_values(case: int) -> None:
    model, opts, shape = _static_cases()[case]
    lm = LoadedModel.from_compiled(compile_model(model, opts))
    sp = lm.specializer
    assert (sp.compiled_reused, sp.pipeline_runs, sp.specialized) == (1, 0, 0)  # planned at load, no pipeline
    x = RNG.standard_normal(shape).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert lm.plan_cache_stats().built == 1 and lm.executor.plan_for([x])[0].graph.nodes == lm.graph.nodes


@pytest.mark.parametrize("case", range(3))
def test_compiled_graph_is_what_specialisation_makes(case: int) -> None:
    """The premise of the reuse: on the compiled static graph, run-time specialisation changes no node,
    kernel choice (``_algo``) or layout (``_layout``)."""
    model, opts, shape = _static_cases()[case]
    g = compile_model(model, opts).graph
    s = specialize.specialize(g, [shape], None, specialize.SpecializeMemo())

    def key(graph: object) -> list[tuple[object, ...]]:
        return [(n.op_type, n.inputs, n.outputs, str(n.attrs.get("_algo")), n.attrs.get("_layout"))
                for n in graph.nodes]  # type: ignore[attr-defined]

    assert key(s) == key(g) and s.outputs == g.outputs


@pytest.mark.parametrize("change", ["providers", "kernel_selection", "bank", "machine"])
def test_a_changed_environment_specialises_again(change: str, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    model, _, shape = _static_cases()[0]
    monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path))
    cm = compile_model(model)
    if change == "providers":
        monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,onednn")
    elif change == "kernel_selection":
        monkeypatch.setenv("PYCANN_KERNEL_SELECTION", "measure")
    elif change == "bank":  # a bank written after the compile may hold a better kernel for a node
        (tmp_path / "bank.sqlite").write_bytes(b"")
    else:  # an .om compiled on another machine
        cm.manifest["kernel_env"] = {**cm.manifest["kernel_env"], "machine": "x86_64:Other CPU:64"}
    lm = LoadedModel.from_compiled(cm)
    assert (lm.specializer.compiled_reused, lm.specializer.pipeline_runs) == (0, 1)
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_choice_environment_tracks_the_bank_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path))
    empty = choice_environment()
    assert empty["bank"] == "none" and choice_environment(kernel_bank=False)["bank"] == "off"
    (tmp_path / "bank.sqlite").write_bytes(b"x")
    one = choice_environment()
    (tmp_path / "bank.sqlite").write_bytes(b"xy")
    assert len({json.dumps(e, sort_keys=True) for e in (empty, one, choice_environment())}) == 3
    assert choice_environment(str(tmp_path / "other"))["bank"] == "none"  # --op_bank_path wins


def test_dynamic_and_manifestless_models_specialise() -> None:
    model = _conv_model()
    lm = LoadedModel.from_compiled(compile_model(model))  # H, W dynamic
    x = RNG.standard_normal((1, 16, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    lm.executor.wait_builds(timeout=120)
    assert lm.specializer.compiled_reused == 0 and lm.specializer.specialized >= 1
    cm = compile_model(_residual_model())
    lm = LoadedModel(cm.graph, {k: v for k, v in cm.manifest.items() if k != "kernel_env"})  # an older .om
    assert (lm.specializer.compiled_reused, lm.specializer.pipeline_runs) == (0, 1)


def test_static_om_load_does_not_import_the_compile_side(tmp_path: Path) -> None:
    """A static .om runs without the pass pipeline, and without the modules of features it does not
    use (gears, AIPP, int8 kernels, dumps, op families of other ops): each costs a fresh process's
    first run its import time (issue 23 item 5)."""
    om, model = tmp_path / "res.om", _residual_model()
    compile_model(model).save(om)
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (
        "import json, sys, numpy as np\n"
        "from pycann.acl.session import InferSession\n"
        f"s = InferSession(0, {str(om)!r})\n"
        f"y = s.infer([np.load({str(tmp_path / 'x.npy')!r})])[0]\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    mods = json.loads(out.stdout)
    # (the shape check's module only: no pass pipeline, no compiler, no importer)
    assert [m for m in mods if m.startswith("pycann.ge.compile.")] == [
        "pycann.ge.compile.passes", "pycann.ge.compile.passes.base", "pycann.ge.compile.passes.infer_shapes"], mods
    unused = ("pycann.ge.aipp", "pycann.ops.aipp", "pycann.kernels.quant", "pycann.kernels.providers.onednn_int8",
              "pycann.ops.quant_conv", "pycann.profiler.dump", "csv", "pycann.ops.nn.rnn", "pycann.ops.control",
              "pycann.ops.sequence", "pycann.ops.string", "pycann.ops.ml", "pycann.ops.quant", "ml_dtypes",
              "pycann.acl.mdl", "pycann.acl.rt", "pycann.acl.base", "pycann.runtime.device", "pycann.runtime.stream")
    assert not [m for m in mods if m.startswith(unused)], out.stdout
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_shape_error_at_run_names_the_node_and_the_calls_inputs() -> None:
    """A size the graph cannot take fails at the node it reaches (op, shapes), and the message also gives
    the call's input shapes and what the model takes, so the caller sees which of its inputs to fix."""
    from pycann.errors import ShapeError

    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], name="pool")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(compile_model(m))
    x = RNG.standard_normal((1, 2, 7, 9)).astype(np.float32)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0])
    with pytest.raises(ShapeError, match=r"node pool \(MaxPool.*this call's inputs: x \[1, 2, 3, 9\] "
                                         r"\(the model takes x \[1,2,-1,-1\]"):
        lm.run([RNG.standard_normal((1, 2, 3, 9)).astype(np.float32)])
