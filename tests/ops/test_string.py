"""String ops against ONNX Runtime: StringNormalizer, StringSplit, StringConcat, RegexFullMatch,
TfIdfVectorizer."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op


def S(*items, shape=None):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a.reshape(shape) if shape is not None else a


WORDS = S("Monday", "tuesday", "MONDAY", "wednesday", "monday")
# ONNX Runtime's default locale en_US.UTF-8 may not be installed; the tests use ASCII words
LOC = {"locale": "C.UTF-8"}


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
def test_string_normalizer(action, sensitive):
    check_op("StringNormalizer", [WORDS], {"case_change_action": action, "is_case_sensitive": sensitive,
                                          "stopwords": ["monday"], **LOC}, opset=10)


def test_string_normalizer_2d_and_all_removed():
    check_op("StringNormalizer", [WORDS.reshape(1, -1)], {"case_change_action": "UPPER", "stopwords": ["tuesday"], **LOC},
             opset=10)
    check_op("StringNormalizer", [S("a", "a")], {"is_case_sensitive": 1, "stopwords": ["a"], **LOC}, opset=10)
    check_op("StringNormalizer", [S("a", "a", shape=(1, 2))], {"is_case_sensitive": 1, "stopwords": ["a"], **LOC}, opset=10)
    check_op("StringNormalizer", [S("x", "Y")], LOC, opset=10)


def test_string_normalizer_rejects_batches():
    with pytest.raises(ValueError, match=r"\[C\] or \[1, C\]"):
        lookup("StringNormalizer", "", 10).kernel([S("a", "b", shape=(2, 1))],
                                                  {"case_change_action": "NONE", "is_case_sensitive": 0,
                                                   "stopwords": None})


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "-"}, {"delimiter": "-", "maxsplit": 1}, {"maxsplit": 0},
                                   {"delimiter": "ab"}])
def test_string_split(attrs):
    x = S("a-b--c", " x  y z ", "", "abab-ab", "-", shape=(5,))
    check_op("StringSplit", [S(" x  y z ", "  a\tb\n c  ", "a  ", "   ")], attrs, n_outputs=2, opset=20)
    check_op("StringSplit", [x], attrs, n_outputs=2, opset=20)
    check_op("StringSplit", [x[:4].reshape(2, 2)], attrs, n_outputs=2, opset=20)


def test_string_split_empty():
    check_op("StringSplit", [np.empty((0, 2), dtype=object)], {"delimiter": ","}, n_outputs=2, opset=20)


@pytest.mark.parametrize("a,b", [
    (S("ab", "c"), S("x", "")),
    (S("ab", "c", "d", "e", shape=(2, 2)), S("!")),
    (S("ab"), S("1", "2", "3", shape=(3, 1))),
    (np.array("z", dtype=object), S("q", "r")),
    (np.empty((0, 2), dtype=object), S("a", "b")),
])
def test_string_concat(a, b):
    check_op("StringConcat", [a, b], opset=20)


def test_string_concat_infer_rejects_bad_broadcast():
    d = lookup("StringConcat", "", 20)
    ctx = InferContext("n", "StringConcat", {}, [TensorDesc(8, (2,)), TensorDesc(8, (3,))], [None, None], 20)
    with pytest.raises(ShapeError, match="broadcast"):
        d.infer(ctx)


@pytest.mark.parametrize("pattern", [r"a+b*", r"[a-z]+@\w+\.com", r"(\d{2,3})-x", r".*"])
def test_regex_full_match(pattern):
    x = S("aab", "ab c", "joe@site.com", "12-x", "1234-x", "", shape=(2, 3))
    check_op("RegexFullMatch", [x], {"pattern": pattern}, opset=20)


def test_regex_bad_pattern_fails_infer():
    d = lookup("RegexFullMatch", "", 20)
    ctx = InferContext("n", "RegexFullMatch", d.with_defaults({"pattern": "(a"}), [TensorDesc(8, (2,))], [None], 20)
    with pytest.raises(ShapeError, match="pattern"):
        d.infer(ctx)


TFIDF = {"ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
         "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]}
TOKENS = np.array([[1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 2]], np.int32)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams", [(1, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("skip", [0, 1, 5])
def test_tfidf_int(mode, grams, skip):
    attrs = {**TFIDF, "mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1], "max_skip_count": skip}
    check_op("TfIdfVectorizer", [TOKENS], attrs, opset=9)
    check_op("TfIdfVectorizer", [TOKENS[0].astype(np.int64)], attrs, opset=9)


def test_tfidf_weights_and_strings():
    pool = ["a", "b", "c", "d", "b", "c", "c", "a"]
    x = S("a", "b", "c", "a", "b", "c", "d", "x", shape=(2, 4))
    attrs = {"ngram_counts": [0, 4], "ngram_indexes": [3, 2, 1, 0, 4, 5], "pool_strings": pool,
             "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1}
    for mode in ("TF", "IDF", "TFIDF"):
        check_op("TfIdfVectorizer", [x], {**attrs, "mode": mode, "weights": [0.5, 1.5, 2.0, 3.0, 0.25, 4.0]}, opset=9)


def test_tfidf_short_rows_and_trigrams():
    attrs = {"ngram_counts": [0, 2, 4], "ngram_indexes": [0, 1, 2, 3], "pool_int64s": [1, 2, 1, 2, 1, 2, 3],
             "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 2, "mode": "TF"}
    check_op("TfIdfVectorizer", [np.array([[1, 2, 3], [3, 3, 1]], np.int64)], attrs, opset=9)
    check_op("TfIdfVectorizer", [np.array([1], np.int64)], attrs, opset=9)
