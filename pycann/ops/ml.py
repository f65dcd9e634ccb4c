"""Traditional-ML ops of the ``ai.onnx.ml`` domain (ONNX spec, Operators-ml.md):
ArrayFeatureExtractor, Binarizer, LabelEncoder, Normalizer, Scaler, OneHotEncoder, Imputer,
LinearRegressor, FeatureVectorizer, CategoryMapper. Tree ensembles live in ``ml_tree``.

Where the spec leaves a detail open, pycann follows ONNX Runtime (e.g. ArrayFeatureExtractor on
a 1-D input gives a [1, k] matrix; Scaler and Normalizer always output float32).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc, from_numpy
from pycann.ops.ml_tree import OPS as TREE_OPS
from pycann.ops.opdef import InferContext, OpDef

ML = "ai.onnx.ml"
Inputs = Sequence[Any]
Attrs = Mapping[str, Any]
_F32 = int(DType.FLOAT)


def _shape(ctx: InferContext, i: int = 0) -> tuple[Dim, ...] | None:
    d = ctx.input(i)
    return None if d is None else d.shape


def _rows(x: np.ndarray) -> np.ndarray:
    """[C] -> [1, C]; [N, C] unchanged (the ml ops work on a batch of feature rows)."""
    return x.reshape(1, -1) if x.ndim == 1 else x


# ------------------------------------------------------------------ ArrayFeatureExtractor
def _k_array_feature_extractor(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ArrayFeatureExtractor (ml opset 1): X[..., indices] along the last axis; a 1-D X gives [1, k]."""
    x, idx = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1).astype(np.int64)
    last = x.shape[-1] if x.ndim else 1
    if idx.size and (idx.min() < 0 or idx.max() >= last):
        raise IndexError(f"ArrayFeatureExtractor: indices {idx.tolist()} out of range [0, {last})")
    out = np.take(x, idx, axis=-1)
    return [out.reshape(1, -1) if x.ndim == 1 else out]


def _infer_array_feature_extractor(ctx: InferContext) -> list[TensorDesc]:
    x, y = ctx.input(0), ctx.input(1)
    if y is not None and y.dtype and y.dtype != int(DType.INT64):
        raise ctx.fail(f"input 'Y' (indices) must be INT64, got {y}")
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x else 0, None)]
    k: Dim = y.numel() if y is not None else None  # None unless Y's shape is static
    shape = (1, k) if len(x.shape) == 1 else tuple(x.shape[:-1]) + (k,)
    return [TensorDesc(x.dtype, shape)]


# ------------------------------------------------------------------------------ Binarizer
def _k_binarizer(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Binarizer (ml opset 1): 1 where X > threshold else 0, in X's dtype."""
    x = np.asarray(inputs[0])
    return [(x > attrs["threshold"]).astype(x.dtype)]


def _infer_same(ctx: InferContext) -> list[TensorDesc]:
    d = ctx.input(0)
    return [TensorDesc(d.dtype if d else 0, d.shape if d else None)]


# ---------------------------------------------------------------------------- LabelEncoder
def _k_label_encoder_v1(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """LabelEncoder (ml opset 1): string -> index in ``classes_strings``, or int64 index -> string."""
    x = np.asarray(inputs[0])
    classes = list(attrs["classes_strings"] or [])
    if x.dtype.kind in "OU":
        table = {c: i for i, c in enumerate(classes)}
        flat = [table.get(s, attrs["default_int64"]) for s in x.reshape(-1).tolist()]
        return [np.array(flat, dtype=np.int64).reshape(x.shape)]
    n = len(classes)
    out = np.empty(x.size, dtype=object)
    out[:] = [classes[i] if 0 <= i < n else attrs["default_string"] for i in x.reshape(-1).tolist()]
    return [out.reshape(x.shape)]


def _infer_label_encoder_v1(ctx: InferContext) -> list[TensorDesc]:
    d = ctx.input(0)
    if d is None or not d.dtype:
        return [TensorDesc(0, _shape(ctx))]
    return [TensorDesc(int(DType.INT64) if d.dtype == DType.STRING else int(DType.STRING), d.shape)]


def _label_table(attrs: Attrs) -> tuple[np.ndarray, np.ndarray, Any]:
    """(keys, values, default) with values typed as the output and default a 0-d array of that type."""
    keys: Any = None
    for k in ("keys_tensor", "keys_strings", "keys_int64s", "keys_floats"):
        if attrs.get(k) is not None:
            keys = attrs[k]
            break
    vals: Any = None
    kind = ""
    for k in ("values_tensor", "values_strings", "values_int64s", "values_floats"):
        if attrs.get(k) is not None:
            vals, kind = attrs[k], k
            break
    if keys is None or vals is None:
        raise ValueError("LabelEncoder: needs one keys_* and one values_* attribute")
    if kind == "values_strings":
        values = np.array(vals, dtype=object)
    elif kind == "values_int64s":
        values = np.array(vals, dtype=np.int64)
    elif kind == "values_floats":
        values = np.array(vals, dtype=np.float32)
    else:
        values = np.asarray(vals).reshape(-1)
    keys = np.asarray(keys, dtype=object if isinstance(keys, list) and keys and isinstance(keys[0], str) else None)
    keys = keys.reshape(-1)
    if keys.size != values.size:
        raise ValueError(f"LabelEncoder: {keys.size} keys but {values.size} values")
    if attrs.get("default_tensor") is not None:
        default = np.asarray(attrs["default_tensor"]).reshape(-1)[0]
    elif values.dtype == object:
        default = attrs["default_string"]
    elif values.dtype.kind == "f":
        default = attrs["default_float"]
    else:
        default = attrs["default_int64"]
    return keys, values, np.asarray(default, dtype=values.dtype)


def _k_label_encoder(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """LabelEncoder (ml opset 2 and 4): map each element through keys -> values, else the default.

    Numeric keys are matched by binary search (NaN keys match NaN inputs); string keys by dict.
    """
    x = np.asarray(inputs[0])
    keys, values, default = _label_table(attrs)
    if x.dtype.kind in "OU" or keys.dtype == object:
        table = dict(zip(keys.tolist(), values.tolist()))
        d = default.item() if values.dtype != object else default.reshape(-1)[0] if default.ndim else default[()]
        out = np.empty(x.size, dtype=values.dtype)
        out[:] = [table.get(s, d) for s in x.reshape(-1).tolist()]
        return [out.reshape(x.shape)]
    keys = keys.astype(x.dtype)
    order = np.argsort(keys, kind="stable")
    sk, sv = keys[order], values[order]
    pos = np.clip(np.searchsorted(sk, x), 0, max(len(sk) - 1, 0))
    if not len(sk):
        return [np.full(x.shape, default, dtype=values.dtype)]
    hit = sk[pos] == x
    out = np.where(hit, sv[pos], default)
    if x.dtype.kind == "f" and np.isnan(sk).any():
        out = np.where(np.isnan(x), sv[np.isnan(sk)][0], out)
    return [np.asarray(out, dtype=values.dtype)]


def _infer_label_encoder(ctx: InferContext) -> list[TensorDesc]:
    a = ctx.attrs
    if a.get("values_tensor") is not None:
        dt = int(from_numpy(np.asarray(a["values_tensor"]).dtype))
    elif a.get("values_strings") is not None:
        dt = int(DType.STRING)
    elif a.get("values_int64s") is not None:
        dt = int(DType.INT64)
    elif a.get("values_floats") is not None:
        dt = _F32
    else:
        raise ctx.fail("needs one of values_strings, values_int64s, values_floats, values_tensor")
    if not any(a.get(k) is not None for k in ("keys_tensor", "keys_strings", "keys_int64s", "keys_floats")):
        raise ctx.fail("needs one of keys_strings, keys_int64s, keys_floats, keys_tensor")
    return [TensorDesc(dt, _shape(ctx))]


# -------------------------------------------------------------------- Normalizer / Scaler
def _k_normalizer(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Normalizer (ml opset 1): each row divided by its maximum (MAX), L1 or L2 norm; float32 out."""
    x = np.asarray(inputs[0])
    rows = _rows(x).astype(np.float32)
    norm = attrs["norm"]
    if norm == "MAX":
        # the row's (signed) maximum, as ONNX Runtime divides by
        div = rows.max(axis=1, keepdims=True) if rows.shape[1] else np.ones((rows.shape[0], 1), np.float32)
    elif norm == "L1":
        div = np.abs(rows).sum(axis=1, keepdims=True)
    elif norm == "L2":
        div = np.sqrt(np.square(rows).sum(axis=1, keepdims=True))
    else:
        raise ValueError(f"Normalizer: norm must be MAX, L1 or L2, got {norm!r}")
    # an all-zero row stays zero (no division by zero), as in ONNX Runtime
    out = rows / np.where(div == 0, np.float32(1), div)
    return [np.asarray(out, dtype=np.float32).reshape(x.shape)]


def _infer_float_same_shape(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(_F32, _shape(ctx))]


def _k_scaler(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Scaler (ml opset 1): (X - offset) * scale per feature (last axis), float32 out."""
    x = np.asarray(inputs[0]).astype(np.float32)
    off = np.asarray(attrs["offset"] or [0.0], dtype=np.float32)
    sc = np.asarray(attrs["scale"] or [1.0], dtype=np.float32)
    return [np.asarray((x - off) * sc, dtype=np.float32)]


# ------------------------------------------------------------------------- OneHotEncoder
def _k_one_hot_encoder(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """OneHotEncoder (ml opset 1): a float32 one-hot axis appended; unknown categories give all
    zeros when ``zeros=1`` and are an error otherwise."""
    x = np.asarray(inputs[0])
    cats = attrs["cats_strings"] if x.dtype.kind in "OU" else attrs["cats_int64s"]
    if not cats:
        raise ValueError("OneHotEncoder: cats_int64s (numeric input) or cats_strings (string input) is required")
    flat = x.reshape(-1).tolist()
    if x.dtype.kind in "fc":
        flat = [int(v) for v in flat]
    table = {c: i for i, c in enumerate(cats)}
    pos = np.array([table.get(v, -1) for v in flat], dtype=np.int64)
    if not attrs["zeros"] and (pos < 0).any():
        raise ValueError(f"OneHotEncoder: value {flat[int(np.argmin(pos))]!r} is not a category and zeros=0")
    out = np.zeros((pos.size, len(cats)), dtype=np.float32)
    ok = pos >= 0
    out[np.nonzero(ok)[0], pos[ok]] = 1
    return [out.reshape(x.shape + (len(cats),))]


def _infer_one_hot_encoder(ctx: InferContext) -> list[TensorDesc]:
    d = ctx.input(0)
    is_str = d is not None and d.dtype == DType.STRING
    cats = ctx.attrs["cats_strings"] if is_str else ctx.attrs["cats_int64s"]
    n: Dim = len(cats) if cats else None
    shape = _shape(ctx)
    return [TensorDesc(_F32, None if shape is None else tuple(shape) + (n,))]


# ------------------------------------------------------------------------------- Imputer
def _k_imputer(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Imputer (ml opset 1): replace ``replaced_value_*`` (NaN by default for floats) per feature."""
    x = np.asarray(inputs[0])
    if x.dtype.kind == "f":
        vals, rep = attrs["imputed_value_floats"], attrs["replaced_value_float"]
    else:
        vals, rep = attrs["imputed_value_int64s"], attrs["replaced_value_int64"]
    if not vals:
        raise ValueError("Imputer: imputed_value_floats (float input) or imputed_value_int64s is required")
    v = np.asarray(vals, dtype=x.dtype)
    feat = x.shape[-1] if x.ndim else 1
    if v.size not in (1, feat):
        raise ValueError(f"Imputer: {v.size} imputed values for {feat} features")
    mask = np.isnan(x) if (x.dtype.kind == "f" and np.isnan(rep)) else x == rep
    return [np.where(mask, np.broadcast_to(v, x.shape) if v.size == feat else v[0], x).astype(x.dtype)]


# ----------------------------------------------------------------------- LinearRegressor
def _k_linear_regressor(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """LinearRegressor (ml opset 1): X @ coefficients^T + intercepts, float32 [N, targets]."""
    x = _rows(np.asarray(inputs[0])).astype(np.float32)
    t = int(attrs["targets"])
    coef = np.asarray(attrs["coefficients"], dtype=np.float32).reshape(t, -1)
    y = x @ coef.T
    if attrs["intercepts"]:
        y = y + np.asarray(attrs["intercepts"], dtype=np.float32)
    pt = attrs["post_transform"]
    if pt == "LOGISTIC":
        y = 1 / (1 + np.exp(-y))
    elif pt == "SOFTMAX":
        e = np.exp(y - y.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True)
    elif pt != "NONE":
        raise ValueError(f"LinearRegressor: post_transform {pt!r} is not supported")
    return [np.asarray(y, dtype=np.float32)]


def _infer_linear_regressor(ctx: InferContext) -> list[TensorDesc]:
    s = _shape(ctx)
    n: Dim = None if s is None else (1 if len(s) == 1 else s[0])
    return [TensorDesc(_F32, (n, int(ctx.attrs["targets"])))]


# --------------------------------------------------------------------- FeatureVectorizer
def _k_feature_vectorizer(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """FeatureVectorizer (ml opset 1): inputs as [N, C_i] cut or zero-padded to ``inputdimensions``,
    concatenated to float32 [N, sum]."""
    parts = []
    for x, dim in zip(inputs, attrs["inputdimensions"]):
        r = _rows(np.asarray(x)).astype(np.float32) if np.ndim(x) else np.asarray(x, np.float32).reshape(1, 1)
        if r.shape[1] >= dim:
            r = r[:, :dim]
        else:
            r = np.pad(r, ((0, 0), (0, dim - r.shape[1])))
        parts.append(r)
    return [np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)]


def _infer_feature_vectorizer(ctx: InferContext) -> list[TensorDesc]:
    dims = ctx.attrs["inputdimensions"] or []
    if len(dims) != len(ctx.inputs):
        raise ctx.fail(f"attribute 'inputdimensions' has {len(dims)} entries for {len(ctx.inputs)} inputs")
    s = _shape(ctx)
    n: Dim = None if s is None or not s else (1 if len(s) == 1 else s[0])
    return [TensorDesc(_F32, (n, int(sum(dims))))]


# ------------------------------------------------------------------------ CategoryMapper
def _k_category_mapper(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """CategoryMapper (ml opset 1): string <-> int64 through the paired cats_* lists."""
    x = np.asarray(inputs[0])
    strs, ints = list(attrs["cats_strings"] or []), list(attrs["cats_int64s"] or [])
    if x.dtype.kind in "OU":
        table = dict(zip(strs, ints))
        d = attrs["default_int64"]
        return [np.array([table.get(s, d) for s in x.reshape(-1).tolist()], dtype=np.int64).reshape(x.shape)]
    rtable = dict(zip(ints, strs))
    out = np.empty(x.size, dtype=object)
    out[:] = [rtable.get(i, attrs["default_string"]) for i in x.reshape(-1).tolist()]
    return [out.reshape(x.shape)]


OPS: list[OpDef] = [
    OpDef("ArrayFeatureExtractor", _infer_array_feature_extractor, _k_array_feature_extractor, domain=ML, since=1),
    OpDef("Binarizer", _infer_same, _k_binarizer, domain=ML, since=1, attrs={"threshold": 0.0}),
    OpDef("LabelEncoder", _infer_label_encoder_v1, _k_label_encoder_v1, domain=ML, since=1,
          attrs={"classes_strings": None, "default_int64": -1, "default_string": "_Unused"}),
    # opset 2 introduced keys_*/values_*; opset 4 added the *_tensor forms — one kernel serves both.
    OpDef("LabelEncoder", _infer_label_encoder, _k_label_encoder, domain=ML, since=2,
          attrs={"default_float": -0.0, "default_int64": -1, "default_string": "_Unused", "default_tensor": None,
                 "keys_floats": None, "keys_int64s": None, "keys_strings": None, "keys_tensor": None,
                 "values_floats": None, "values_int64s": None, "values_strings": None, "values_tensor": None}),
    OpDef("Normalizer", _infer_float_same_shape, _k_normalizer, domain=ML, since=1, attrs={"norm": "MAX"}),
    OpDef("Scaler", _infer_float_same_shape, _k_scaler, domain=ML, since=1, attrs={"offset": None, "scale": None}),
    OpDef("OneHotEncoder", _infer_one_hot_encoder, _k_one_hot_encoder, domain=ML, since=1,
          attrs={"cats_int64s": None, "cats_strings": None, "zeros": 1}),
    OpDef("Imputer", _infer_same, _k_imputer, domain=ML, since=1,
          attrs={"imputed_value_floats": None, "imputed_value_int64s": None,
                 "replaced_value_float": 0.0, "replaced_value_int64": 0}),
    OpDef("LinearRegressor", _infer_linear_regressor, _k_linear_regressor, domain=ML, since=1,
          attrs={"coefficients": None, "intercepts": None, "post_transform": "NONE", "targets": 1}),
    OpDef("FeatureVectorizer", _infer_feature_vectorizer, _k_feature_vectorizer, domain=ML, since=1,
          attrs={"inputdimensions": None}),
    OpDef("CategoryMapper", _infer_label_encoder_v1, _k_category_mapper, domain=ML, since=1,
          attrs={"cats_int64s": None, "cats_strings": None, "default_int64": -1, "default_string": "_Unused"}),
    *TREE_OPS,
]
