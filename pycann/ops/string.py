"""String ops (ONNX spec, Operators.md): StringNormalizer, StringSplit, StringConcat,
RegexFullMatch, TfIdfVectorizer.

STRING tensors are numpy ``object`` arrays of Python ``str`` (``np.str_`` arrays are accepted
too). String work is per element by nature; the loops below run in C where numpy offers it
(``np.frompyfunc``, object ``np.add``) and TfIdfVectorizer's n-gram matching is vectorised over
integer token codes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import broadcast_shapes

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]
_STR = int(DType.STRING)


def _objects(x: Any) -> np.ndarray:
    """A STRING tensor as an object array of ``str``."""
    x = np.asarray(x)
    return x if x.dtype == object else x.astype(object)


def _check_string(ctx: InferContext, i: int, what: str) -> TensorDesc | None:
    d = ctx.input(i)
    if d is not None and d.dtype and d.dtype != _STR:
        raise ctx.fail(f"input '{what}' must be a STRING tensor, got {d}")
    return d


# ---------------------------------------------------------------------- StringNormalizer
def _k_string_normalizer(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """StringNormalizer (opset 10): drop ``stopwords`` then change case.

    Input is [C] or [1, C]; when every string is removed the output is a single "" ([1] or
    [1, 1]), as the spec requires.
    """
    x = _objects(inputs[0])
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"StringNormalizer: input must have shape [C] or [1, C], got {list(x.shape)}")
    flat = x.reshape(-1).tolist()
    stop = attrs["stopwords"] or []
    if stop:
        if attrs["is_case_sensitive"]:
            stopset = set(stop)
            flat = [s for s in flat if s not in stopset]
        else:
            stopset = {w.lower() for w in stop}
            flat = [s for s in flat if s.lower() not in stopset]
    action = (attrs["case_change_action"] or "NONE").upper()
    if action == "LOWER":
        flat = [s.lower() for s in flat]
    elif action == "UPPER":
        flat = [s.upper() for s in flat]
    elif action != "NONE":
        raise ValueError(f"StringNormalizer: case_change_action must be LOWER, UPPER or NONE, got {action!r}")
    if not flat:
        flat = [""]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return [out if x.ndim == 1 else out.reshape(1, -1)]


def _infer_string_normalizer(ctx: InferContext) -> list[TensorDesc]:
    d = _check_string(ctx, 0, "X")
    action = str(ctx.attrs["case_change_action"] or "NONE").upper()
    if action not in ("LOWER", "UPPER", "NONE"):
        raise ctx.fail(f"attribute 'case_change_action' must be LOWER, UPPER or NONE, got {action!r}")
    if d is None or d.shape is None:
        return [TensorDesc(_STR, None)]
    if len(d.shape) not in (1, 2) or (len(d.shape) == 2 and isinstance(d.shape[0], int) and d.shape[0] != 1):
        raise ctx.fail(f"input 'X' must have shape [C] or [1, C], got {d}")
    n: Dim = d.shape[-1] if not ctx.attrs["stopwords"] else None
    return [TensorDesc(_STR, (n,) if len(d.shape) == 1 else (1, n))]


# ---------------------------------------------------------------------------- StringSplit
_SPACES = re.compile(" +")


def _split_spaces(s: str, limit: int) -> list[str]:
    """Split at runs of spaces, ignoring leading/trailing ones (ONNX Runtime splits on ' ' only)."""
    s = s.strip(" ")
    if not s:
        return []
    if limit == 0:
        return [s]
    return _SPACES.split(s, maxsplit=max(limit, 0))


def _k_string_split(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """StringSplit (opset 20): split each string at ``delimiter`` (whitespace runs when empty).

    Y has one more axis, as long as the most pieces of any string, padded with ""; Z holds the
    piece counts (int64). ``maxsplit`` bounds the splits per string. As in ONNX Runtime, an
    empty string gives no pieces and the default separator is runs of spaces (not tabs/newlines).
    """
    x = _objects(inputs[0])
    delim = attrs["delimiter"] or None  # "" and absent both mean: split on runs of spaces
    maxsplit = attrs["maxsplit"]
    limit = -1 if maxsplit is None else int(maxsplit)
    flat = x.reshape(-1).tolist()
    if delim is not None:
        # an empty string has no pieces (ONNX Runtime; Python's split would give [""])
        parts = [s.split(delim, limit) if s else [] for s in flat]
    else:
        parts = [_split_spaces(s, limit) for s in flat]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = int(counts.max()) if counts.size else 0
    y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, : len(p)] = p
    return [y.reshape(x.shape + (width,)), counts]


def _infer_string_split(ctx: InferContext) -> list[TensorDesc]:
    d = _check_string(ctx, 0, "X")
    if d is None or d.shape is None:
        return [TensorDesc(_STR, None), TensorDesc(int(DType.INT64), None)]
    return [TensorDesc(_STR, tuple(d.shape) + (None,)), TensorDesc(int(DType.INT64), d.shape)]


# --------------------------------------------------------------------------- StringConcat
def _k_string_concat(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """StringConcat (opset 20): element-wise X + Y with multidirectional broadcasting."""
    out = np.add(_objects(inputs[0]), _objects(inputs[1]))
    return [np.asarray(out, dtype=object)]


def _infer_string_concat(ctx: InferContext) -> list[TensorDesc]:
    a, b = _check_string(ctx, 0, "X"), _check_string(ctx, 1, "Y")
    try:
        shape = broadcast_shapes(a.shape if a else None, b.shape if b else None)
    except ValueError as e:
        raise ctx.fail(f"inputs X {a} and Y {b} do not broadcast: {e}") from None
    return [TensorDesc(_STR, shape)]


# ------------------------------------------------------------------------- RegexFullMatch
@lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _k_regex_full_match(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """RegexFullMatch (opset 20): true where the whole string matches ``pattern``.

    The spec names RE2 syntax; Python's ``re`` accepts the RE2 subset models use.
    """
    rx = _compile(attrs["pattern"])
    x = _objects(inputs[0])
    match = np.frompyfunc(lambda s: rx.fullmatch(s) is not None, 1, 1)
    return [np.asarray(match(x), dtype=np.bool_).reshape(x.shape)]


def _infer_regex_full_match(ctx: InferContext) -> list[TensorDesc]:
    d = _check_string(ctx, 0, "X")
    pattern = ctx.attrs["pattern"]
    if not isinstance(pattern, str):
        raise ctx.fail("attribute 'pattern' must be a UTF-8 string")
    try:
        _compile(pattern)
    except re.error as e:
        raise ctx.fail(f"attribute 'pattern' {pattern!r} is not a valid regular expression: {e}") from None
    return [TensorDesc(int(DType.BOOL), d.shape if d is not None else None)]


# ------------------------------------------------------------------------ TfIdfVectorizer
def _pool_ngrams(attrs: Attrs) -> list[tuple[int, list[Any], int]]:
    """(n, pool n-gram tokens, output index) for every pool n-gram with min <= n <= max."""
    pool = list(attrs["pool_int64s"] or attrs["pool_strings"] or [])
    counts = list(attrs["ngram_counts"])
    indexes = list(attrs["ngram_indexes"])
    out: list[tuple[int, list[Any], int]] = []
    j = 0  # global n-gram number: position in ngram_indexes
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        for k in range((end - start) // n):
            if attrs["min_gram_length"] <= n <= attrs["max_gram_length"]:
                out.append((n, pool[start + k * n : start + (k + 1) * n], int(indexes[j])))
            j += 1
    return out


def _k_tfidf(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """TfIdfVectorizer (opset 9): n-gram counts of the pool's n-grams, per row, weighted by ``mode``.

    An n-gram of length n with skip distance d reads tokens i, i+d, ..., i+(n-1)d; d runs over
    1..max_skip_count+1 (unigrams are counted once). TF gives counts, IDF 1 (or the weight)
    where the count is positive, TFIDF count * weight; ``weights`` are per pool n-gram.
    """
    x = np.asarray(inputs[0])
    if x.ndim not in (1, 2):
        raise ValueError(f"TfIdfVectorizer: input must be [C] or [N, C], got {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    size = max(attrs["ngram_indexes"]) + 1
    counts = np.zeros((rows.shape[0], size), dtype=np.int64)
    grams = _pool_ngrams(attrs)
    if grams and rows.size:
        is_str = bool(attrs["pool_strings"]) and not attrs["pool_int64s"]
        vocab = np.unique(np.array(sorted({t for _, g, _ in grams for t in g}), dtype=object if is_str else np.int64))
        vals = rows.astype(object) if is_str else rows.astype(np.int64)
        pos = np.clip(np.searchsorted(vocab, vals), 0, len(vocab) - 1)
        ids = np.where(vocab[pos] == vals, pos + 1, 0).astype(np.int64)  # 0: not a pool token
        base = len(vocab) + 1
        lookup: dict[int, dict[int, int]] = {n: {} for n in {g[0] for g in grams}}
        for n, g, out_idx in grams:
            code = 0
            for t in g:
                code = code * base + int(np.searchsorted(vocab, t)) + 1
            lookup[n][code] = out_idx
        if base ** max(lookup) >= 2**62:
            raise ValueError("TfIdfVectorizer: pool vocabulary too large for n-gram codes")
        row_idx = np.arange(rows.shape[0])[:, None]
        for n, table in lookup.items():
            codes = np.array(sorted(table), dtype=np.int64)
            targets = np.array([table[c] for c in sorted(table)], dtype=np.int64)
            for d in range(1, (attrs["max_skip_count"] + 1 if n > 1 else 1) + 1):
                width = rows.shape[1] - (n - 1) * d
                if width <= 0:
                    break
                window = np.zeros((rows.shape[0], width), dtype=np.int64)
                for k in range(n):
                    window = window * base + ids[:, k * d : k * d + width]
                at = np.clip(np.searchsorted(codes, window), 0, len(codes) - 1)
                hit = codes[at] == window
                np.add.at(counts, (np.broadcast_to(row_idx, hit.shape)[hit], targets[at[hit]]), 1)
    mode = attrs["mode"]
    w = None
    if attrs["weights"]:
        # weights[j] belongs to the j-th pool n-gram (spec; ONNX Runtime), which counts into ngram_indexes[j]
        w = np.zeros(size, dtype=np.float32)
        w[np.asarray(attrs["ngram_indexes"], np.int64)] = np.asarray(attrs["weights"], dtype=np.float32)
    if mode == "TF":
        y = counts.astype(np.float32)
    elif mode == "IDF":
        y = (counts > 0).astype(np.float32) * (w if w is not None else 1)
    elif mode == "TFIDF":
        y = counts.astype(np.float32) * (w if w is not None else 1)
    else:
        raise ValueError(f"TfIdfVectorizer: mode must be TF, IDF or TFIDF, got {mode!r}")
    y = np.asarray(y, dtype=np.float32)
    return [y.reshape(size) if x.ndim == 1 else y]


def _infer_tfidf(ctx: InferContext) -> list[TensorDesc]:
    a = ctx.attrs
    if a["mode"] not in ("TF", "IDF", "TFIDF"):
        raise ctx.fail(f"attribute 'mode' must be TF, IDF or TFIDF, got {a['mode']!r}")
    if not a["ngram_indexes"]:
        raise ctx.fail("attribute 'ngram_indexes' must not be empty")
    if not 1 <= a["min_gram_length"] <= a["max_gram_length"]:
        raise ctx.fail(f"need 1 <= min_gram_length ({a['min_gram_length']}) <= max_gram_length ({a['max_gram_length']})")
    if a["weights"] and len(a["weights"]) != len(a["ngram_indexes"]):
        raise ctx.fail(f"attribute 'weights' has {len(a['weights'])} values for {len(a['ngram_indexes'])} n-grams")
    size = max(a["ngram_indexes"]) + 1
    d = ctx.input(0)
    if d is None or d.shape is None:
        return [TensorDesc(int(DType.FLOAT), None)]
    if len(d.shape) not in (1, 2):
        raise ctx.fail(f"input 'X' must be [C] or [N, C], got {d}")
    return [TensorDesc(int(DType.FLOAT), (size,) if len(d.shape) == 1 else (d.shape[0], size))]


OPS: list[OpDef] = [
    OpDef("StringNormalizer", _infer_string_normalizer, _k_string_normalizer, since=10,
          attrs={"case_change_action": "NONE", "is_case_sensitive": 0, "locale": "", "stopwords": None}),
    OpDef("StringSplit", _infer_string_split, _k_string_split, since=20,
          attrs={"delimiter": "", "maxsplit": None}),
    OpDef("StringConcat", _infer_string_concat, _k_string_concat, since=20),
    OpDef("RegexFullMatch", _infer_regex_full_match, _k_regex_full_match, since=20, attrs={"pattern": REQUIRED}),
    OpDef("TfIdfVectorizer", _infer_tfidf, _k_tfidf, since=9,
          attrs={"max_gram_length": REQUIRED, "min_gram_length": REQUIRED, "max_skip_count": REQUIRED,
                 "mode": REQUIRED, "ngram_counts": REQUIRED, "ngram_indexes": REQUIRED,
                 "pool_int64s": None, "pool_strings": None, "weights": None}),
]
