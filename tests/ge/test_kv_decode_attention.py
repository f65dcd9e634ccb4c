"""KV-cache decoding through FusedAttention (ge/compile/passes/fuse_attention.py, ops/fused.py) on
one attention-over-cache layer (tests/ge/kv_graphs.py): every call's values against ONNX Runtime,
which rewrites fire, and what a decode step must not build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import onednn_softmax
from tests.ge.kv_graphs import attention_layer, decode

ort = pytest.importorskip("onnxruntime")


def _ort(data: bytes) -> Callable[[dict[str, np.ndarray]], list[Any]]:
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def _pycann(data: bytes) -> tuple[LoadedModel, Callable[[dict[str, np.ndarray]], list[Any]]]:
    lm = LoadedModel.from_compiled(compile_model(data))
    return lm, lm.run_dict


def _generic_ops(lm: LoadedModel) -> list[str]:
    return [n.op_type for n in lm.executor.generic_plan().graph.nodes]


def _assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"call {i}")


def test_decode_steps_past_the_softmax_size_floor_build_no_onednn_primitive() -> None:
    """From ``onednn_softmax.MIN_ELEMENTS`` scores on (batch 4 x 4 heads x 1030+ keys here; batch 4 x
    32 heads at 128 keys), each decode step, whose key length is new, made a oneDNN softmax primitive
    (1-4 ms) that oneDNN's primitive cache kept: RSS grew every step. Decode rows stay in numpy."""
    data = attention_layer("add")
    lm, run = _pycann(data)
    assert "FusedAttention" in _generic_ops(lm)
    before = len(onednn_softmax._plans)
    got = decode(run, batch=4, prompt=1, steps=5, past=1030)
    assert len(onednn_softmax._plans) == before, "a decode step made a oneDNN softmax primitive"
    _assert_close(got, decode(_ort(data), batch=4, prompt=1, steps=5, past=1030))
    assert lm.plan_cache_stats().built == 0
