"""A fully static model builds its plan at load (LoadedModel.precompile_static); dynamic or value-steered
models keep building on their first run. Results stay those of ONNX Runtime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from pycann.ge.compile.compiler import CompileOptions, compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const, float_model
from tests.ops.oracle import run_ort


def _conv_relu(batch: int | str) -> object:
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return float_model(nodes, [("x", [batch, 3, 16, 16])], "y", [const("w", w)])


def test_static_model_plan_is_built_at_load() -> None:
    m = _conv_relu(2)
    lm = LoadedModel.from_compiled(compile_model(m))
    st = lm.executor.stats()
    assert (st.built, st.hits, st.misses) == (1, 0, 0)  # before any run: built, and no call counted
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = lm.run_dict({"x": x})
    st = lm.executor.stats()
    assert (st.built, st.hits, st.misses) == (1, 1, 0)  # the first run found it
    np.testing.assert_allclose(got[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_static_input_shape_option_counts_as_static() -> None:
    m = _conv_relu("N")
    lm = LoadedModel.from_compiled(compile_model(m, CompileOptions(input_shape={"x": [1, 3, 16, 16]})))
    assert lm.executor.stats().built == 1


def test_dynamic_model_builds_on_first_run() -> None:
    m = _conv_relu("N")
    lm = LoadedModel.from_compiled(compile_model(m))
    assert lm.executor.stats().built == 0
    x = np.random.default_rng(2).standard_normal((3, 3, 16, 16)).astype(np.float32)
    got = lm.run_dict({"x": x})
    lm.executor.wait_builds()  # a new shape of a conv graph runs the generic plan; its own plan is built after
    assert lm.executor.stats().built == 1
    np.testing.assert_allclose(got[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_precompile_off_keeps_lazy_build() -> None:
    cm = compile_model(_conv_relu(2))
    lm = LoadedModel(cm.graph, cm.manifest, precompile=False)
    assert lm.executor.stats().built == 0


def test_scalar_control_input_is_not_precompiled() -> None:
    """An integer scalar input may steer shapes or control flow by its value: its plan waits for a real feed."""
    from onnx import TensorProto

    nodes = [helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "kf"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                       helper.make_tensor_value_info("k", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(compile_model(m))
    assert lm.executor.stats().built == 0
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4), "k": np.array(3, dtype=np.int64)}
    np.testing.assert_allclose(lm.run_dict(feeds)[0], run_ort(m, feeds)[0])


def test_load_pauses_the_garbage_collector_and_restores_its_state(tmp_path: object) -> None:
    """Loading runs with the cyclic collector off (its collections walked every new object of the
    graph and plan) and leaves it as it found it: on stays on, off stays off."""
    import gc
    from pathlib import Path

    from pycann.ge.run import model as model_mod

    path = Path(str(tmp_path)) / "m.om"
    compile_model(_conv_relu(1)).save(path)
    seen: list[bool] = []
    real = LoadedModel.precompile_static

    def spy(self: LoadedModel) -> bool:
        seen.append(gc.isenabled() and gc.get_threshold()[0] != 0)  # automatic collections on?
        return real(self)

    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            LoadedModel.precompile_static = spy  # type: ignore[method-assign]
            lm = model_mod.LoadedModel.from_file(path)
            assert gc.isenabled() is state and seen[-1] is False and gc.get_threshold()[0] != 0
            x = np.ones((1, 3, 16, 16), np.float32)
            np.testing.assert_allclose(lm.run_dict({"x": x})[0], run_ort(_conv_relu(1), {"x": x})[0], rtol=1e-4, atol=1e-5)
    finally:
        LoadedModel.precompile_static = real  # type: ignore[method-assign]
        (gc.enable if was else gc.disable)()
