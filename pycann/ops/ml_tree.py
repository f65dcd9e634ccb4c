"""Tree ensembles of the ``ai.onnx.ml`` domain (ONNX spec, Operators-ml.md): TreeEnsemble
(ml opset 5) and the older TreeEnsembleRegressor (ml opset 1/3).

Both forms are converted to one array layout and evaluated by ``_traverse``, which walks every
(sample, tree) pair one level per iteration with numpy (the loop runs tree-depth times, not
node-count times). Leaf contributions are a dense [leaves, targets] weight matrix gathered per
tree. Post-transforms follow ONNX Runtime, including its approximate ``erfinv`` for PROBIT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

ML = "ai.onnx.ml"
Inputs = Sequence[Any]
Attrs = Mapping[str, Any]

# comparison modes, numbered as TreeEnsemble (opset 5) ``nodes_modes``
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
_LEGACY_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
                 "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ}
SUM_, AVERAGE_, MIN_, MAX_ = "SUM", "AVERAGE", "MIN", "MAX"
_AGG_V5 = {0: AVERAGE_, 1: SUM_, 2: MIN_, 3: MAX_}
# the spec's numbering (and the reference's); ONNX Runtime 1.2x swaps 1 and 2 (LOGISTIC=1, SOFTMAX=2)
_POST_V5 = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}


@dataclass
class Forest:
    """Branch nodes as parallel arrays; ``*_leaf`` tells whether a branch target is a leaf id."""

    feature: np.ndarray
    mode: np.ndarray
    split: np.ndarray  # float64
    true_next: np.ndarray
    true_leaf: np.ndarray
    false_next: np.ndarray
    false_leaf: np.ndarray
    missing_true: np.ndarray | None
    members: dict[int, np.ndarray]  # node -> set members (BRANCH_MEMBER nodes)
    roots: np.ndarray  # root node per tree, or a leaf id where root_is_leaf
    root_is_leaf: np.ndarray
    weights: np.ndarray  # [n_leaves, n_targets], NaN where a leaf gives no value to a target


def _traverse(f: Forest, x: np.ndarray) -> np.ndarray:
    """Leaf id reached by every (sample, tree): int64 [N, trees]."""
    n, t = x.shape[0], len(f.roots)
    cur = np.broadcast_to(f.roots, (n, t)).copy()
    leaf = np.where(f.root_is_leaf, cur, -1)
    active = np.broadcast_to(~f.root_is_leaf, (n, t)).copy()
    for _ in range(len(f.feature) + 1):
        r, c = np.nonzero(active)
        if not r.size:
            return leaf
        nd = cur[r, c]
        v = x[r, f.feature[nd]]
        s, m = f.split[nd], f.mode[nd]
        cond = np.select([m == LEQ, m == LT, m == GTE, m == GT, m == EQ, m == NEQ],
                         [v <= s, v < s, v >= s, v > s, v == s, v != s], default=False)
        for node in np.unique(nd[m == MEMBER]).tolist():
            sel = nd == node
            cond[sel] = np.isin(v[sel], f.members[node])
        if f.missing_true is not None:
            cond |= f.missing_true[nd] & np.isnan(v)
        nxt = np.where(cond, f.true_next[nd], f.false_next[nd])
        done = np.where(cond, f.true_leaf[nd], f.false_leaf[nd])
        cur[r, c] = nxt
        leaf[r[done], c[done]] = nxt[done]
        active[r[done], c[done]] = False
    raise ValueError("tree ensemble: a tree does not reach a leaf (cycle in the node links)")


def _aggregate(f: Forest, x: np.ndarray, agg: str, base: np.ndarray | None) -> np.ndarray:
    """Per-target aggregate over trees, plus ``base`` (float64 [N, targets]).

    A target that no reached leaf scores is 0, base value included (ONNX Runtime).
    """
    leaf = _traverse(f, x)
    k = f.weights.shape[1]
    has = np.zeros((x.shape[0], k), dtype=bool)
    if agg in (SUM_, AVERAGE_):
        w = np.nan_to_num(f.weights, nan=0.0)
        scored = ~np.isnan(f.weights)
        out = np.zeros((x.shape[0], k))
        for j in range(leaf.shape[1]):
            out += w[leaf[:, j]]
            has |= scored[leaf[:, j]]
        if agg == AVERAGE_ and leaf.shape[1]:
            out /= leaf.shape[1]
    else:
        pick = np.fmin if agg == MIN_ else np.fmax
        out = np.full((x.shape[0], k), np.nan)
        for j in range(leaf.shape[1]):
            out = pick(out, f.weights[leaf[:, j]])
        has = ~np.isnan(out)
    if base is not None and base.size:
        out = out + base
    return np.where(has, out, 0.0)


def _erfinv(x: np.ndarray) -> np.ndarray:
    # Winitzki's approximation, as ONNX Runtime's ml ops use for PROBIT
    sgn = np.where(x < 0, -1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):  # erfinv(+-1) = +-inf, as in ONNX Runtime
        lg = np.log((1 - x) * (1 + x))
        v = 2 / (3.14159 * 0.147) + 0.5 * lg
        return sgn * np.sqrt(-v + np.sqrt(v * v - lg / 0.147))


def post_transform(y: np.ndarray, how: str) -> np.ndarray:
    """NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT over the last axis (ml ops' post_transform)."""
    if how == "NONE":
        return y
    if how == "LOGISTIC":
        return 1 / (1 + np.exp(-y))
    if how == "SOFTMAX":
        e = np.exp(y - y.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if how == "SOFTMAX_ZERO":
        nz = y != 0
        m = np.where(nz, y, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(nz, np.exp(y - np.where(np.isfinite(m), m, 0)), 0)
        s = e.sum(axis=-1, keepdims=True)
        return e / np.where(s == 0, 1, s)
    if how == "PROBIT":
        return np.sqrt(2.0) * _erfinv(2 * y - 1)
    raise ValueError(f"post_transform {how!r} is not one of NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT")


def _features(x: np.ndarray) -> np.ndarray:
    """[N, F] float64 (a 1-D input is one sample)."""
    x = np.asarray(x)
    return (x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)).astype(np.float64)


# ----------------------------------------------------------------- TreeEnsemble (opset 5)
def _forest_v5(a: Attrs) -> Forest:
    modes = np.asarray(a["nodes_modes"]).reshape(-1).astype(np.int64)
    splits = np.asarray(a["nodes_splits"]).reshape(-1).astype(np.float64)
    members: dict[int, np.ndarray] = {}
    if (modes == MEMBER).any():
        if a["membership_values"] is None:
            raise ValueError("TreeEnsemble: BRANCH_MEMBER nodes need 'membership_values'")
        vals = np.asarray(a["membership_values"]).reshape(-1).astype(np.float64)
        # one NaN-terminated group per BRANCH_MEMBER node, in node order (spec)
        groups = np.split(vals, np.nonzero(np.isnan(vals))[0] + 1)
        for i, node in enumerate(np.nonzero(modes == MEMBER)[0].tolist()):
            g = groups[i] if i < len(groups) else np.empty(0)
            members[node] = g[~np.isnan(g)]
    tn, fn = np.asarray(a["nodes_truenodeids"], np.int64), np.asarray(a["nodes_falsenodeids"], np.int64)
    tl, fl = np.asarray(a["nodes_trueleafs"], bool), np.asarray(a["nodes_falseleafs"], bool)
    roots = np.asarray(a["tree_roots"], np.int64)
    # a tree that is one leaf: both branches of its root name the same leaf
    root_leaf = tl[roots] & fl[roots] & (tn[roots] == fn[roots])
    lw = np.asarray(a["leaf_weights"]).reshape(-1).astype(np.float64)
    lt = np.asarray(a["leaf_targetids"], np.int64)
    n_targets = int(a["n_targets"]) if a["n_targets"] is not None else int(lt.max(initial=-1)) + 1
    weights = np.full((len(lw), n_targets), np.nan)
    weights[np.arange(len(lw)), lt] = lw
    mvt = a["nodes_missing_value_tracks_true"]
    return Forest(
        feature=np.asarray(a["nodes_featureids"], np.int64), mode=modes, split=splits,
        true_next=tn, true_leaf=tl, false_next=fn, false_leaf=fl,
        missing_true=np.asarray(mvt, bool) if mvt else None, members=members,
        roots=np.where(root_leaf, tn[roots], roots), root_is_leaf=root_leaf, weights=weights,
    )


def _k_tree_ensemble(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """TreeEnsemble (ml opset 5): Y[N, n_targets] in X's dtype."""
    x = np.asarray(inputs[0])
    f = _forest_v5(attrs)
    y = _aggregate(f, _features(x), _AGG_V5[int(attrs["aggregate_function"])], None)
    y = post_transform(y, _POST_V5[int(attrs["post_transform"])])
    return [np.asarray(y, dtype=x.dtype)]


def _n_rows(ctx: InferContext) -> Dim:
    d = ctx.input(0)
    if d is None or d.shape is None:
        return None
    return 1 if len(d.shape) == 1 else d.shape[0]


def _infer_tree_ensemble(ctx: InferContext) -> list[TensorDesc]:
    a = ctx.attrs
    n_nodes = len(a["nodes_featureids"])
    for k in ("nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs", "nodes_falseleafs"):
        if len(a[k]) != n_nodes:
            raise ctx.fail(f"attribute '{k}' has {len(a[k])} entries for {n_nodes} nodes")
    if len(a["leaf_targetids"]) != np.asarray(a["leaf_weights"]).size:
        raise ctx.fail("attributes 'leaf_targetids' and 'leaf_weights' differ in length")
    if int(a["aggregate_function"]) not in _AGG_V5 or int(a["post_transform"]) not in _POST_V5:
        raise ctx.fail("attribute 'aggregate_function' must be 0..3 and 'post_transform' 0..4")
    d = ctx.input(0)
    n_targets = int(a["n_targets"]) if a["n_targets"] is not None else max(a["leaf_targetids"], default=-1) + 1
    return [TensorDesc(d.dtype if d else 0, (_n_rows(ctx), n_targets))]


# ------------------------------------------------------------ TreeEnsembleRegressor (1, 3)
def _attr(a: Attrs, name: str) -> Any:
    """``name`` or its ``name_as_tensor`` form (opset 3)."""
    v = a.get(name)
    if v is None:
        v = a.get(name + "_as_tensor")
    return [] if v is None else np.asarray(v).reshape(-1)


def legacy_forest(a: Attrs, prefix: str, n_targets: int) -> Forest:
    """Forest from TreeEnsembleRegressor/-Classifier attributes (``prefix`` 'target' or 'class')."""
    tree_ids = np.asarray(a["nodes_treeids"], np.int64)
    node_ids = np.asarray(a["nodes_nodeids"], np.int64)
    index = {(t, nd): i for i, (t, nd) in enumerate(zip(tree_ids.tolist(), node_ids.tolist()))}
    modes_s = list(a["nodes_modes"])
    is_leaf = np.array([m == "LEAF" for m in modes_s], bool)
    try:
        modes = np.array([-1 if m == "LEAF" else _LEGACY_MODES[m] for m in modes_s], np.int64)
    except KeyError as e:
        raise ValueError(f"unsupported node mode {e.args[0]!r}") from None

    def link(ids: Sequence[int]) -> np.ndarray:
        return np.array([index.get((t, int(c)), 0) if not lf else 0
                         for t, c, lf in zip(tree_ids.tolist(), ids, is_leaf.tolist())], np.int64)

    tn, fn = link(a["nodes_truenodeids"]), link(a["nodes_falsenodeids"])
    # a tree's root is its first node that no branch of the tree points to
    children = {(t, int(c)) for ids in (a["nodes_truenodeids"], a["nodes_falsenodeids"])
                for t, c, lf in zip(tree_ids.tolist(), ids, is_leaf.tolist()) if not lf}
    first: dict[int, int] = {}
    for i, key in enumerate(zip(tree_ids.tolist(), node_ids.tolist())):
        if key not in children:
            first.setdefault(key[0], i)
    roots = np.array(list(first.values()), np.int64)
    weights = np.zeros((len(tree_ids), n_targets))
    seen = np.zeros_like(weights, dtype=bool)
    p_tree = np.asarray(a[f"{prefix}_treeids"], np.int64).tolist()
    p_node = np.asarray(a[f"{prefix}_nodeids"], np.int64).tolist()
    p_id = np.asarray(a[f"{prefix}_ids"], np.int64)
    rows = np.array([index[(t, nd)] for t, nd in zip(p_tree, p_node)], np.int64)
    np.add.at(weights, (rows, p_id), _attr(a, f"{prefix}_weights").astype(np.float64))
    seen[rows, p_id] = True
    weights[~seen] = np.nan
    mvt = a.get("nodes_missing_value_tracks_true")
    return Forest(
        feature=np.asarray(a["nodes_featureids"], np.int64), mode=modes,
        split=_attr(a, "nodes_values").astype(np.float64),
        true_next=tn, true_leaf=is_leaf[tn], false_next=fn, false_leaf=is_leaf[fn],
        missing_true=np.asarray(mvt, bool) if mvt else None, members={},
        roots=roots, root_is_leaf=is_leaf[roots], weights=weights,
    )


def _k_tree_regressor(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """TreeEnsembleRegressor (ml opset 1/3): float32 Y[N, n_targets]."""
    n_targets = _n_targets(attrs)
    f = legacy_forest(attrs, "target", n_targets)
    base = _attr(attrs, "base_values").astype(np.float64)
    y = _aggregate(f, _features(inputs[0]), attrs["aggregate_function"], base)
    return [np.asarray(post_transform(y, attrs["post_transform"]), dtype=np.float32)]


def _n_targets(a: Attrs) -> int:
    if a["n_targets"] is not None:
        return int(a["n_targets"])
    ids = a["target_ids"]
    return int(max(ids)) + 1 if ids else 1


def _infer_tree_regressor(ctx: InferContext) -> list[TensorDesc]:
    if ctx.attrs["aggregate_function"] not in (SUM_, AVERAGE_, MIN_, MAX_):
        raise ctx.fail(f"attribute 'aggregate_function' {ctx.attrs['aggregate_function']!r} is not SUM/AVERAGE/MIN/MAX")
    return [TensorDesc(int(DType.FLOAT), (_n_rows(ctx), _n_targets(ctx.attrs)))]


_LEGACY_ATTRS: dict[str, Any] = {
    "nodes_treeids": REQUIRED, "nodes_nodeids": REQUIRED, "nodes_featureids": REQUIRED,
    "nodes_modes": REQUIRED, "nodes_values": None, "nodes_values_as_tensor": None,
    "nodes_truenodeids": REQUIRED, "nodes_falsenodeids": REQUIRED,
    "nodes_missing_value_tracks_true": None, "nodes_hitrates": None, "nodes_hitrates_as_tensor": None,
    "base_values": None, "base_values_as_tensor": None, "post_transform": "NONE",
}

OPS: list[OpDef] = [
    OpDef("TreeEnsemble", _infer_tree_ensemble, _k_tree_ensemble, domain=ML, since=5,
          attrs={"aggregate_function": 1, "leaf_targetids": REQUIRED, "leaf_weights": REQUIRED,
                 "membership_values": None, "n_targets": None, "nodes_falseleafs": REQUIRED,
                 "nodes_falsenodeids": REQUIRED, "nodes_featureids": REQUIRED, "nodes_hitrates": None,
                 "nodes_missing_value_tracks_true": None, "nodes_modes": REQUIRED, "nodes_splits": REQUIRED,
                 "nodes_trueleafs": REQUIRED, "nodes_truenodeids": REQUIRED, "post_transform": 0,
                 "tree_roots": REQUIRED}),
    OpDef("TreeEnsembleRegressor", _infer_tree_regressor, _k_tree_regressor, domain=ML, since=1,
          attrs={**_LEGACY_ATTRS, "aggregate_function": "SUM", "n_targets": None,
                 "target_treeids": REQUIRED, "target_nodeids": REQUIRED, "target_ids": REQUIRED,
                 "target_weights": None, "target_weights_as_tensor": None}),
]
