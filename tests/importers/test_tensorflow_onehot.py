"""TF OneHot: indices outside [0, depth) are rows of off_value (ONNX OneHot would wrap them), for
every index dtype (the GraphDef helpers of test_tensorflow_graphdef)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.importers.test_tensorflow_graphdef import F32, G, _run, types_pb2


def _one_hot(idx: np.ndarray, ti: int, depth: int, axes: tuple[int, ...]) -> list[np.ndarray]:
    """OneHot(idx, depth, on=2, off=-1) along each of ``axes``, imported and run."""
    g = G()
    g.placeholder("i", idx.shape, ti)
    g.const("depth", np.int32(depth))
    g.const("on", np.float32(2))
    g.const("off", np.float32(-1))
    outs: list[Any] = []
    for k, axis in enumerate(axes):
        g.node("OneHot", f"oh{k}", ["i", "depth", "on", "off"], T=("type", F32), TI=("type", ti), axis=axis)
        outs.append((f"oh{k}", 0))
    return _run(g.gd, [idx], outs)


def test_one_hot_negative_and_past_depth_indices_are_off_rows() -> None:
    """TF's OneHot: an index outside [0, depth) (-1 included) gives a row of off_value; ONNX would
    wrap -1 to depth - 1."""
    idx = np.array([0, 3, -1, 4, 2, -4], np.int32)
    got, got0 = _one_hot(idx, types_pb2.DT_INT32, 4, (-1, 0))
    ref = np.where(idx[:, None] == np.arange(4)[None, :], 2.0, -1.0).astype(np.float32)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got0, ref.T)


def test_one_hot_int8_negative_indices_with_a_depth_past_int8() -> None:
    """int8 indices, depth 200: TF gives -1 and -128 a row of off_value. The importer moved negative
    indices to depth cast to int8 (200 -> -56), which ONNX OneHot wraps to 144: an 'on' at column 144."""
    idx = np.array([0, 3, -1, 100, 127, -128], np.int8)
    (got,) = _one_hot(idx, types_pb2.DT_INT8, 200, (-1,))
    ref = np.where(idx.astype(np.int64)[:, None] == np.arange(200)[None, :], 2.0, -1.0).astype(np.float32)
    np.testing.assert_array_equal(got, ref)
