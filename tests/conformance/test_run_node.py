"""``pycann.backend.run_node`` (onnx.backend.base.Backend's single-node entry) on onnx's own node
test cases: the node, its input arrays and expected outputs come from
``onnx.backend.test.case.node``; the node runs alone (no model file), its opset taken from the
case. Every third single-node case in name order (excluding the ledger's), compared with the
case's own tolerances."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx.backend.test.case.node import collect_testcases

import pycann.backend as backend
from tests.conformance.ledger import read_ledger

warnings.filterwarnings("ignore", category=RuntimeWarning)


def _cases() -> list[Any]:
    skip = set(read_ledger())
    out = []
    for c in sorted(collect_testcases(), key=lambda c: c.name):
        g = c.model.graph
        if c.name in skip or len(g.node) != 1 or g.node[0].domain not in ("", "ai.onnx") or not c.data_sets:
            continue
        ins, outs = c.data_sets[0]
        if not all(isinstance(x, np.ndarray) for x in list(ins) + list(outs)):
            continue  # sequences / optionals / maps / raw TensorProtos: run_node takes plain arrays
        out.append(c)
    return out[::3]


CASES = _cases()


def test_sample_is_a_good_sample() -> None:
    assert len(CASES) > 250, len(CASES)
    assert len({c.model.graph.node[0].op_type for c in CASES}) > 120


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_run_node(case: Any) -> None:
    node = case.model.graph.node[0]
    opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    inputs, expected = case.data_sets[0]
    got = backend.run_node(node, list(inputs), opset_version=opset)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == np.asarray(e).shape, (node.op_type, g.shape, np.asarray(e).shape)
        if np.asarray(e).dtype.kind in "OU":
            assert g.tolist() == np.asarray(e).tolist()
        else:
            # 16-bit floats: one unit in the last place of bfloat16 is 2**-8 relative
            rtol = max(case.rtol, 1e-2) if g.dtype.itemsize == 2 and g.dtype.kind in "fV" else case.rtol
            np.testing.assert_allclose(g.astype(np.float64) if g.dtype.kind == "V" else g,
                                       np.asarray(e).astype(np.float64) if g.dtype.kind == "V" else e,
                                       rtol=rtol, atol=case.atol)
