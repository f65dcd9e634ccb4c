"""Caffe layers whose parameters Caffe itself refuses (slice points out of order or past the axis,
negative input dims): a clear error naming the layer, where ONNX's clamping gave empty or
overlapping tops in silence. Valid slices against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pycann.errors import ModelError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.importers.caffe import load_caffe
from pycann.ge.run.model import LoadedModel
from tests.importers.caffe_nets import CaffeNet, write_net

pytest.importorskip("grpc_tools")
INPUT = 'input: "data"\ninput_shape { dim: 1 dim: 10 dim: 2 }\n'


def _slice(tmp_path: Path, points: list[int], header: str = INPUT) -> CaffeNet:
    tops = "".join(f' top: "t{i}"' for i in range(len(points) + 1))
    params = " ".join(f"slice_point: {p}" for p in points)
    return CaffeNet("sl", header + f'layer {{ name: "sl" type: "Slice" bottom: "data"{tops} '
                    f"slice_param {{ axis: 1 {params} }} }}\n", {}, (1, 10, 2))


def test_valid_slice_matches_numpy(tmp_path: Path) -> None:
    proto, weights = write_net(_slice(tmp_path, [3, 7]), tmp_path)
    x = np.arange(20, dtype=np.float32).reshape(1, 10, 2)
    outs = LoadedModel.from_compiled(compile_model(load_caffe(proto, weights))).run([x])
    for got, want in zip(outs, np.split(x, [3, 7], axis=1)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("points", "match"), [
    ([6, 3], r"layer sl \(Slice\): slice_point \[6, 3\] must increase strictly from above 0"),
    ([0, 4], r"slice_point \[0, 4\] must increase strictly"),
    ([4, 10], r"slice_point 10 is not inside axis 1 of bottom 'data' \(size 10\)"),
    ([20], r"slice_point 20 is not inside axis 1"),
])
def test_bad_slice_points_name_the_layer(tmp_path: Path, points: list[int], match: str) -> None:
    """[6, 3] gave tops of 6, 0 and 7 rows (13 from 10); [20] a full top and an empty one."""
    proto, weights = write_net(_slice(tmp_path, points), tmp_path)
    with pytest.raises(ModelError, match=match):
        load_caffe(proto, weights)


def test_negative_input_dim_is_refused(tmp_path: Path) -> None:
    """dim: -3 became a dynamic dim in silence; -1 stays dynamic, --input_shape still overrides."""
    header = 'input: "data"\ninput_shape { dim: 1 dim: 10 dim: -3 }\n'
    proto, weights = write_net(_slice(tmp_path, [3], header), tmp_path)
    with pytest.raises(ModelError, match=r"input \[data\]: the prototxt declares dims \[1, 10, -3\]; -3 is no size"):
        load_caffe(proto, weights)
    g = load_caffe(proto, weights, input_shape={"data": [1, 10, 2]})
    assert g.descs["data"].shape == (1, 10, 2)
