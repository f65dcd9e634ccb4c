"""compile_model runs with the cyclic collector's automatic collections paused (``pycann.gc_pause``): a
compile builds thousands of long-lived objects, and collections walking them cost DenseNet-121's compile
~10 ms of ~180. The application's own threshold and on/off switch are as they were afterwards, also when
the compile fails."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper

from pycann.errors import ModelError
from pycann.ge.compile import compiler


def _relu() -> object:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_compile_pauses_automatic_collections_and_restores_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = compiler._run_passes

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compiler, "_run_passes", spy)
    prior, was = gc.get_threshold(), gc.isenabled()
    try:
        gc.set_threshold(555, *prior[1:])
        cm = compiler.compile_model(_relu())
        assert seen == [0] and gc.get_threshold()[0] == 555 and gc.isenabled() is was
        assert np.array_equal(cm.graph.outputs, ["y"])
        with pytest.raises(ModelError):
            compiler.compile_model(b"not a model")
        assert gc.get_threshold()[0] == 555
    finally:
        gc.set_threshold(*prior)
