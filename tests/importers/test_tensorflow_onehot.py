"""TF OneHot's negative indices with narrow index dtypes (the GraphDef helpers of test_tensorflow_graphdef)."""

from __future__ import annotations

import numpy as np

from tests.importers.test_tensorflow_graphdef import F32, G, _run, types_pb2


def test_one_hot_int8_negative_indices_with_a_depth_past_int8() -> None:
    """int8 indices, depth 200: TF gives -1 and -128 a row of off_value. The importer moved negative
    indices to depth cast to int8 (200 -> -56), which ONNX OneHot wraps to 144: an 'on' at column 144."""
    i8 = types_pb2.DT_INT8
    idx = np.array([0, 3, -1, 100, 127, -128], np.int8)
    g = G()
    g.placeholder("i", idx.shape, i8)
    g.const("depth", np.int32(200))
    g.const("on", np.float32(2))
    g.const("off", np.float32(-1))
    g.node("OneHot", "oh", ["i", "depth", "on", "off"], T=("type", F32), TI=("type", i8), axis=-1)
    (got,) = _run(g.gd, [idx], [("oh", 0)])
    ref = np.where(idx.astype(np.int64)[:, None] == np.arange(200)[None, :], 2.0, -1.0).astype(np.float32)
    np.testing.assert_array_equal(got, ref)
