"""ai.onnx.ml ops against ONNX Runtime. Ops with TENSOR attributes (TreeEnsemble, LabelEncoder-4)
go through a one-node model run by pycann's backend, so the importer's attribute decoding is
covered too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import pycann.backend as backend
from pycann.dtypes import from_numpy
from tests.ops.oracle import check_op, run_ort

ML = "ai.onnx.ml"
RNG = np.random.default_rng(1)
X = RNG.standard_normal((5, 4)).astype(np.float32)


def S(*items):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a


def _both(op, inputs, attrs, ml_opset, out_dtype, rtol=1e-5, atol=1e-6, expected=None, out_rank=2):
    """One-node model: pycann's backend vs ONNX Runtime (or ``expected``); inputs are graph inputs."""
    names = [f"x{i}" for i in range(len(inputs))]
    vis = [helper.make_tensor_value_info(n, int(from_numpy(x.dtype)), x.shape) for n, x in zip(names, inputs)]
    node = helper.make_node(op, names, ["y"], domain=ML, **attrs)
    out = helper.make_tensor_value_info("y", int(from_numpy(np.dtype(out_dtype))), [None] * out_rank)
    g = helper.make_graph([node], "t", vis, [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ML, ml_opset)])
    m.ir_version = 9
    want = expected if expected is not None else run_ort(m, dict(zip(names, inputs)))
    got = backend.prepare(m).run(list(inputs))
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype and g_.shape == w.shape, (g_.dtype, g_.shape, w.dtype, w.shape)
        if g_.dtype.kind in "fc":
            np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g_, w)
    return got


def T(arr, name="t"):
    return numpy_helper.from_array(np.asarray(arr), name)


# ------------------------------------------------------------------------------- simple ops
@pytest.mark.parametrize("x", [X, X.astype(np.float64), (X * 10).astype(np.int64), X[0]])
def test_array_feature_extractor(x):
    check_op("ArrayFeatureExtractor", [x, np.array([3, 0, 0], np.int64)], domain=ML, opset=1)
    check_op("ArrayFeatureExtractor", [x, np.array([[1]], np.int64)], domain=ML, opset=1)


def test_binarizer():
    check_op("Binarizer", [X], {"threshold": 0.5}, domain=ML, opset=1)
    check_op("Binarizer", [X], {}, domain=ML, opset=1)
    # ONNX Runtime implements float only
    for x in (X.astype(np.float64), (X * 3).astype(np.int64), (X * 3).astype(np.int32)):
        check_op("Binarizer", [x], {"threshold": 0.5}, domain=ML, opset=1, expected=[(x > 0.5).astype(x.dtype)])


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("x", [X, X.astype(np.float64), (X * 5).astype(np.int64), X[1], np.zeros((2, 3), np.float32)])
def test_normalizer(norm, x):
    check_op("Normalizer", [x], {"norm": norm}, domain=ML, opset=1)


@pytest.mark.parametrize("x", [X, X.astype(np.float64), (X * 5).astype(np.int64)])
def test_scaler(x):
    check_op("Scaler", [x], {"offset": [0.5, -1.0, 0.0, 2.0], "scale": [2.0, 0.5, 1.0, -1.0]}, domain=ML, opset=1)
    check_op("Scaler", [x], {"offset": [0.5], "scale": [3.0]}, domain=ML, opset=1)


def test_one_hot_encoder():
    check_op("OneHotEncoder", [np.array([[1, 5], [3, 1]], np.int64)], {"cats_int64s": [1, 3, 5]}, domain=ML, opset=1)
    check_op("OneHotEncoder", [np.array([1.0, 7.0, 3.0])], {"cats_int64s": [1, 3], "zeros": 1}, domain=ML, opset=1)
    check_op("OneHotEncoder", [S("a", "c", "b")], {"cats_strings": ["b", "a"]}, domain=ML, opset=1)


def test_imputer():
    x = X.copy()
    x[1, 2] = np.nan
    x[3, 0] = np.nan
    check_op("Imputer", [x], {"imputed_value_floats": [1.0, 2.0, 3.0, 4.0], "replaced_value_float": float("nan")},
             domain=ML, opset=1)
    check_op("Imputer", [np.array([[1, -1], [-1, 5]], np.int64)],
             {"imputed_value_int64s": [9], "replaced_value_int64": -1}, domain=ML, opset=1)


@pytest.mark.parametrize("pt", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_regressor(pt):
    attrs = {"coefficients": [0.5, -1.0, 2.0, 0.1, 1.0, 1.0, -0.5, 0.3], "intercepts": [0.2, -0.1], "targets": 2,
             "post_transform": pt}
    check_op("LinearRegressor", [X], attrs, domain=ML, opset=1)
    check_op("LinearRegressor", [X[0]], {"coefficients": [1.0, 2.0, 3.0, 4.0]}, domain=ML, opset=1)


def test_feature_vectorizer():
    check_op("FeatureVectorizer", [X[:, :3], X[:, :1], X * 4], {"inputdimensions": [3, 1, 2]}, domain=ML, opset=1)
    xi = (X * 4).astype(np.int64)
    check_op("FeatureVectorizer", [xi[:, :2], xi[:, 2:]], {"inputdimensions": [3, 1]}, domain=ML, opset=1)


def test_category_mapper():
    attrs = {"cats_strings": ["cat", "dog", "eel"], "cats_int64s": [7, 1, 3]}
    check_op("CategoryMapper", [S("dog", "x", "eel")], {**attrs, "default_int64": 42}, domain=ML, opset=1)
    check_op("CategoryMapper", [np.array([[3, 7], [0, 1]], np.int64)], {**attrs, "default_string": "?"},
             domain=ML, opset=1)


# ----------------------------------------------------------------------------- LabelEncoder
def test_label_encoder_v2_lists():
    check_op("LabelEncoder", [S("a", "b", "zz", "c")], {"keys_strings": ["a", "b", "c"], "values_int64s": [5, 6, 7]},
             domain=ML, opset=2)
    check_op("LabelEncoder", [np.array([3, 1, 9, 2], np.int64)],
             {"keys_int64s": [1, 2, 3], "values_strings": ["x", "y", "z"], "default_string": "-"}, domain=ML, opset=2)
    check_op("LabelEncoder", [np.array([[0.5, 1.5], [np.nan, 2.0]], np.float32)],
             {"keys_floats": [0.5, 2.0], "values_floats": [10.0, 20.0]}, domain=ML, opset=2)
    check_op("LabelEncoder", [np.array([0.5, 3.0], np.float32)],
             {"keys_floats": [0.5], "values_int64s": [4], "default_int64": -9}, domain=ML, opset=2)


def test_label_encoder_v4_tensors():
    # ONNX Runtime lacks most LabelEncoder-4 type pairs: numpy goldens
    _both("LabelEncoder", [np.array([1, 5, 3, 2], np.int64)],
          {"keys_tensor": T(np.array([1, 2, 3], np.int64)), "values_tensor": T(np.array([10, 20, 30], np.int16)),
           "default_tensor": T(np.array([-7], np.int16))}, 4, np.int16, out_rank=1,
          expected=[np.array([10, -7, 30, 20], np.int16)])
    _both("LabelEncoder", [S("b", "q")],
          {"keys_tensor": T(S("a", "b")), "values_tensor": T(np.array([1.5, 2.5], np.float64))}, 4, np.float64, out_rank=1,
          expected=[np.array([2.5, -0.0])])
    _both("LabelEncoder", [np.array([1.0, np.nan, 4.0], np.float64)],
          {"keys_tensor": T(np.array([np.nan, 1.0])), "values_tensor": T(S("nan", "one"))}, 4, object, out_rank=1,
          expected=[S("one", "nan", "_Unused")])


def test_label_encoder_v1():
    check_op("LabelEncoder", [S("b", "a", "q")], {"classes_strings": ["a", "b"], "default_int64": 9}, domain=ML,
             opset=1)
    check_op("LabelEncoder", [np.array([1, 0, 5], np.int64)], {"classes_strings": ["a", "b"]}, domain=ML, opset=1)


# ------------------------------------------------------------------------------ TreeEnsemble
def _forest_attrs(dtype):
    # two trees on 3 features; tree 0: nodes 0-2, tree 1: nodes 3-4; leaves 0-3 (tree 0), 4-6 (tree 1)
    return {
        "nodes_featureids": [0, 1, 2, 2, 0],
        "nodes_modes": T(np.array([0, 3, 4, 1, 5], np.uint8)),
        "nodes_splits": T(np.array([0.1, -0.3, 0.25, 0.0, 1.0], dtype)),
        "nodes_truenodeids": [1, 0, 2, 4, 5],
        "nodes_trueleafs": [0, 1, 1, 0, 1],
        "nodes_falsenodeids": [2, 1, 3, 6, 4],
        "nodes_falseleafs": [0, 1, 1, 1, 1],
        "leaf_targetids": [0, 1, 0, 1, 0, 1, 1],
        "leaf_weights": T(np.array([1.5, -2.0, 0.25, 3.0, 0.5, 1.0, -1.0], dtype)),
        "tree_roots": [0, 3],
        "n_targets": 2,
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2, 3, 4])
def test_tree_ensemble_v5(dtype, agg, post):
    x = RNG.standard_normal((16, 3)).astype(dtype)
    x[0] = [0.1, -0.3, 0.25]  # exact split values: ties take the comparison's side
    attrs = {**_forest_attrs(dtype), "aggregate_function": agg, "post_transform": post}
    if post == 4:  # PROBIT needs values in (0, 1)
        attrs["leaf_weights"] = T(np.array([0.1, 0.2, 0.3, 0.25, 0.15, 0.05, 0.2], dtype))
    expected = None
    if post in (1, 2):
        # ONNX Runtime reads 1 as LOGISTIC and 2 as SOFTMAX, the spec (and pycann) the other way round:
        # golden = the spec's transform of ONNX Runtime's untransformed scores
        raw = _both("TreeEnsemble", [x], {**attrs, "post_transform": 0}, 5, dtype)[0].astype(np.float64)
        e = np.exp(raw - raw.max(axis=1, keepdims=True))
        expected = [(e / e.sum(axis=1, keepdims=True) if post == 1 else 1 / (1 + np.exp(-raw))).astype(dtype)]
    _both("TreeEnsemble", [x], attrs, 5, dtype, rtol=1e-4, atol=1e-5, expected=expected)


def test_tree_ensemble_v5_missing_and_membership():
    x = np.array([[np.nan, 1.0], [2.0, np.nan], [3.0, 4.0], [5.0, 7.0], [0.0, 0.0]], np.float32)
    attrs = {
        "nodes_featureids": [0, 1], "nodes_modes": T(np.array([6, 0], np.uint8)),
        "nodes_splits": T(np.array([0.0, 4.0], np.float32)),
        "nodes_truenodeids": [0, 1], "nodes_trueleafs": [1, 1],
        "nodes_falsenodeids": [1, 2], "nodes_falseleafs": [0, 1],
        "nodes_missing_value_tracks_true": [1, 0],
        "membership_values": T(np.array([2.0, 3.0, np.nan], np.float32)),
        "leaf_targetids": [0, 0, 0], "leaf_weights": T(np.array([1.0, 2.0, 3.0], np.float32)),
        "tree_roots": [0], "n_targets": 1,
    }
    _both("TreeEnsemble", [x], attrs, 5, np.float32)


# --------------------------------------------------------------------- TreeEnsembleRegressor
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_ensemble_regressor(agg, post):
    attrs = {
        "nodes_treeids": [0, 0, 0, 0, 0, 1, 1, 1],
        "nodes_nodeids": [0, 1, 2, 3, 4, 0, 1, 2],
        "nodes_featureids": [0, 1, 0, 0, 0, 2, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_LT", "LEAF", "LEAF"],
        "nodes_values": [0.0, 0.5, 0, 0, 0, -0.2, 0, 0],
        "nodes_truenodeids": [1, 2, 0, 0, 0, 1, 0, 0],
        "nodes_falsenodeids": [4, 3, 0, 0, 0, 2, 0, 0],
        "target_treeids": [0, 0, 0, 0, 1, 1],
        "target_nodeids": [2, 3, 4, 4, 1, 2],
        "target_ids": [0, 1, 0, 1, 0, 1],
        "target_weights": [1.0, 2.0, -1.0, 0.5, 3.0, 4.0],
        "n_targets": 2, "aggregate_function": agg, "post_transform": post, "base_values": [0.1, -0.2],
    }
    x = RNG.standard_normal((12, 3)).astype(np.float32)
    _both("TreeEnsembleRegressor", [x], attrs, 3, np.float32)
    _both("TreeEnsembleRegressor", [x.astype(np.float64)], attrs, 3, np.float32)
