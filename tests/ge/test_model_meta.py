"""LoadedModel's I/O metadata for the acl facade: input_ranges, input_format, TensorInfo.format,
max_input_bytes / max_output_bytes (largest gear or range bound)."""

from __future__ import annotations

from typing import Any

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.ge.test_gears import conv_model, nd_model


def load(model: Any, **opts: Any) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(model, CompileOptions(**opts)))


def test_gears_give_largest_sizes_and_formats() -> None:
    lm = load(conv_model(), input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 4, 2])
    assert lm.input_format == "NCHW" and lm.inputs[0].format == "NCHW" and lm.outputs[0].format == "ND"
    assert lm.input_ranges == {"x": [-1, 3, 8, 8]}
    assert lm.max_input_bytes(0) == 4 * 3 * 8 * 8 * 4
    assert lm.max_output_bytes(0) == 4 * 4 * 4
    nd = load(nd_model(), input_shape={"a": [-1, -1], "m": [-1]}, dynamic_dims=[[1, 4, 4], [2, 8, 8]],
              input_format="ND")
    assert [i.format for i in nd.inputs] == ["ND", "ND"] and nd.input_format == "ND"
    assert (nd.max_input_bytes(0), nd.max_input_bytes(1), nd.max_output_bytes(0)) == (64, 32, 8)


def test_ranges_bound_the_size() -> None:
    lm = load(conv_model(), input_shape={"x": [(1, 3), 3, 8, (4, 8)]})
    assert lm.input_ranges == {"x": [[1, 3], 3, 8, [4, 8]]}
    assert lm.max_input_bytes(0) == 3 * 3 * 8 * 8 * 4
    assert lm.max_output_bytes(0) == 0  # dynamic output without gears: unknown
    assert load(conv_model(), input_shape={"x": [-1, 3, 8, 8]}).max_input_bytes(0) == 0  # unbounded
    assert load(conv_model(), input_shape={"x": [2, 3, 8, 8]}, input_format="NHWC").inputs[0].format == "NHWC"
