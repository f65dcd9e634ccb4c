"""KV-cache decoding through FusedAttention (ge/compile/passes/fuse_attention.py, ops/fused.py) on
one attention-over-cache layer (tests/ge/kv_graphs.py): every call's values against ONNX Runtime,
which rewrites fire, and what a decode step must not build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import CompileOptions, compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import onednn_bf16, onednn_softmax
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


@pytest.mark.parametrize("policy", [PlanPolicy.AUTO, PlanPolicy.SPECIALIZE])
@pytest.mark.parametrize("mask", ["where", "masked_fill", "add"])
def test_every_mask_spelling_fuses_with_orts_values(mask: str, policy: PlanPolicy) -> None:
    """torch.where(keep, s, -inf), s.masked_fill(~keep, -inf) (exported Where(drop, -inf, s): it was
    left unfused) and an additive mask: one FusedAttention each, ORT's values with left padding on the
    shape-generic plan and on specialised plans (oneDNN's bound attention)."""
    data = attention_layer(mask)
    lm = LoadedModel.from_compiled(compile_model(data), plan_cache=PlanCacheConfig(policy=policy, build="inline"))
    assert [n.op_type for n in lm.graph.nodes].count("FusedAttention") == 1
    assert "Softmax" not in [n.op_type for n in lm.graph.nodes]
    got = decode(lm.run_dict, batch=4, prompt=6, steps=4, pad=[0, 1, 3, 5])
    _assert_close(got, decode(_ort(data), batch=4, prompt=6, steps=4, pad=[0, 1, 3, 5]))


@pytest.mark.parametrize("policy", [PlanPolicy.AUTO, PlanPolicy.SPECIALIZE])
def test_sdpa_nan_guard_fuses_and_zeroes_fully_masked_rows(policy: PlanPolicy) -> None:
    """A boolean-masked scaled_dot_product_attention, as both torch exporters write it: Softmax ->
    Where(IsNaN(p), 0, p) -> MatMul. It fuses (it was left unfused) into FusedAttention(nan_to_zero),
    and a fully masked query row (left padding that sees nothing) gives ORT's zeros, not NaN."""
    data = attention_layer("add", guard=0.0)
    lm = LoadedModel.from_compiled(compile_model(data), plan_cache=PlanCacheConfig(policy=policy, build="inline"))
    fused = [n for n in lm.graph.nodes if n.op_type == "FusedAttention"]
    assert len(fused) == 1 and fused[0].attrs.get("nan_to_zero") == 1
    assert not {"IsNaN", "Softmax"} & {n.op_type for n in lm.graph.nodes}
    kw: dict[str, Any] = {"batch": 4, "prompt": 6, "steps": 4, "pad": [0, 1, 3, 5], "self_attend": False}
    got, want = decode(lm.run_dict, **kw), decode(_ort(data), **kw)
    assert np.isfinite(want[0]).all() and not np.isfinite(decode(_ort(attention_layer("add")), **kw)[0]).all()
    _assert_close(got, want)


def test_a_nan_guard_with_another_fill_is_not_absorbed() -> None:
    """Where(IsNaN(p), 0.5, p) is not the SDPA guard: p has two readers, nothing fuses; values as ORT."""
    data = attention_layer("add", guard=0.5)
    lm, run = _pycann(data)
    ops = [n.op_type for n in lm.graph.nodes]
    assert "IsNaN" in ops and "FusedAttention" not in ops
    kw: dict[str, Any] = {"batch": 2, "prompt": 5, "steps": 2, "pad": [0, 4], "self_attend": False}
    _assert_close(decode(run, **kw), decode(_ort(data), **kw))


@pytest.mark.parametrize("shape", [(1, 2, 1, 7), (2, 4, 64, 64)])  # a decode row; a prompt past oneDNN's softmax floor
def test_nan_guard_rows_with_nan_inf_or_no_key_are_zero_as_in_ort(shape: tuple[int, int, int, int]) -> None:
    """FusedAttention(nan_to_zero) against ORT's Softmax -> Where(IsNaN(p), 0, p) -> MatMul where mask
    rows hold a NaN, a +inf or only -inf (each makes the whole probability row NaN, so zeros)."""
    b, h, s, t = shape
    n = helper.make_node
    nodes = [n("MatMul", ["q", "kt"], ["s0"]), n("Add", ["s0", "mask"], ["s1"]), n("Softmax", ["s1"], ["p0"], axis=-1),
             n("IsNaN", ["p0"], ["nan"]), n("Where", ["nan", "zero", "p0"], ["p"]), n("MatMul", ["p", "v"], ["y"])]
    dims = {"q": [b, h, s, 8], "kt": [b, h, 8, t], "v": [b, h, t, 8], "mask": [b, 1, s, t]}
    m = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, d) for k, d in dims.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    data = m.SerializeToString()
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(d).astype(np.float32) for k, d in dims.items()}
    mask = feeds["mask"]
    mask[0, 0, 0, -1] = np.nan
    mask[-1, 0, -1, 0] = np.inf
    mask[0, 0, s // 2, :] = -np.inf
    lm = LoadedModel.from_compiled(compile_model(data))
    assert [n.op_type for n in lm.graph.nodes] == ["FusedAttention"]
    got, want = lm.run_dict(feeds)[0], _ort(data)(feeds)[0]
    assert (want[0, :, 0] == 0).all() and (want[0, :, s // 2] == 0).all() and np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_bf16_decode_steps_make_no_native_kernel_per_key_length() -> None:
    """Under ``allow_fp32_to_bf16`` each decode step's two bf16 attention products went to oneDNN's
    native bf16 matmul, which made and kept a kernel per shape: two a step, for a key length that is
    new every step (a tiny decoder's RSS +79 MB over 200 steps). Decode rows run widened in numpy
    (the same products: exact, summed in float32); values against ORT's bf16-free float32 within
    bfloat16's precision, and against the prompt-sized native path's numbers."""
    data = attention_layer("add")
    cm = compile_model(data, CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2"))
    lm = LoadedModel.from_compiled(cm)
    assert "FusedAttention" in _generic_ops(lm)
    decode(lm.run_dict, batch=2, prompt=1, steps=1, past=20)  # the projections' kernels: made once
    before = set(onednn_bf16._plans)
    got = decode(lm.run_dict, batch=2, prompt=1, steps=6, past=40)
    assert set(onednn_bf16._plans) == before, "a decode step made a native bf16 kernel"
    want = decode(_ort(data), batch=2, prompt=1, steps=6, past=40)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=0.05, atol=0.05 * float(np.abs(w).max()), err_msg=f"call {i}")


def test_force_fp16_casts_around_the_cache_concat_still_append_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """``force_fp16`` writes ``present = Cast(Concat(Cast(past, f16), new16), f32)``: no CacheAppend,
    three copies of the whole past a step. Now CacheAppend(round_to=f16) appends in place; every
    output bit-equal to the Concat plan's (PYCANN_KV_CACHE=off), a float32 past the buffer did not
    write rounded through float16 as the Cast did; ORT's float32 values within float16's precision."""
    data = attention_layer("add")
    opts, generic = CompileOptions(precision_mode="force_fp16"), PlanCacheConfig(policy=PlanPolicy.GENERIC)
    lm = LoadedModel.from_compiled(compile_model(data, opts), plan_cache=generic)
    appends = [n for n in lm.executor.generic_plan().graph.nodes if n.op_type == "CacheAppend"]
    assert len(appends) == 2 and all(n.attrs.get("round_to") == 10 for n in appends)
    monkeypatch.setenv("PYCANN_KV_CACHE", "off")
    plain = LoadedModel.from_compiled(compile_model(data, opts), plan_cache=generic)
    assert "CacheAppend" not in [n.op_type for n in plain.executor.generic_plan().graph.nodes]
    monkeypatch.delenv("PYCANN_KV_CACHE")
    rng = np.random.default_rng(3)
    past = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)  # not float16 values: rounded on the way in
    feeds = {"x": rng.standard_normal((2, 1, 16)).astype(np.float32), "keep": np.ones((2, 1, 1, 6), bool),
             "past_key": past, "past_value": past}
    got = lm.run_dict(feeds)
    np.testing.assert_array_equal(got[1][:, :, :5], past.astype(np.float16).astype(np.float32))
    for g, w in zip(got, plain.run_dict(feeds)):
        np.testing.assert_array_equal(g, w)
    kw: dict[str, Any] = {"batch": 2, "prompt": 4, "steps": 5, "pad": [0, 2]}
    presents: list[np.ndarray] = []

    def run(feeds: dict[str, np.ndarray]) -> list[Any]:
        out = lm.run_dict(feeds)
        presents.append(out[1])
        return out
    got_y, plain_y = decode(run, **kw), decode(plain.run_dict, **kw)
    for g, w in zip(got_y, plain_y):
        np.testing.assert_array_equal(g, w)
    assert all(np.shares_memory(a, b) for a, b in zip(presents[1:], presents[2:])), "appended in place"
    want = decode(_ort(data), **kw)
    for i, (g, w) in enumerate(zip(got_y, want)):
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2 * float(np.abs(w).max()), err_msg=f"call {i}")


def test_onnx_attention_23_with_its_own_cache_fuses_and_appends_in_place() -> None:
    """ONNX Attention-23 (torch's dynamo exporter at opset 23 writes it for SDPA) with past_key /
    past_value: its function body zeroes the rows the mask hides entirely (Where(Equal(ReduceMax(mask),
    -inf), 0, P), the 0 a CastLike of P), which kept AttentionFusion off; now FusedAttention
    (masked_rows_zero) and CacheAppend for its presents, ORT's values with fully masked rows."""
    b, h, d = 2, 2, 8
    f = TensorProto.FLOAT
    io = {"q": [b, h, "s", d], "k": [b, h, "s", d], "v": [b, h, "s", d], "mask": [b, 1, "s", "t"],
          "past_key": [b, h, "p", d], "past_value": [b, h, "p", d]}
    # K and V computed (as a decoder's projections are): a cache Concat's new rows never are a graph input
    nodes = [helper.make_node("Add", [x, "half"], [f"{x}2"]) for x in ("k", "v")]
    nodes.append(helper.make_node("Attention", ["q", "k2", "v2", "mask", "past_key", "past_value"],
                                  ["y", "present_key", "present_value"]))
    m = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, f, s) for k, s in io.items()],
        [helper.make_tensor_value_info("y", f, [b, h, "s", d]),
         helper.make_tensor_value_info("present_key", f, [b, h, "t", d]),
         helper.make_tensor_value_info("present_value", f, [b, h, "t", d])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")]),
        opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    data = m.SerializeToString()
    try:
        ref = _ort(data)
    except Exception as e:  # noqa: BLE001 - an ORT without Attention-23: nothing to compare with
        pytest.skip(f"ONNX Runtime cannot run Attention-23 here: {type(e).__name__}")
    lm = LoadedModel.from_compiled(compile_model(data))
    fused = [n for n in lm.graph.nodes if n.op_type == "FusedAttention"]
    assert len(fused) == 1 and fused[0].attrs.get("masked_rows_zero") == 1
    assert not {"Softmax", "ReduceMax"} & {n.op_type for n in lm.graph.nodes}
    assert _generic_ops(lm).count("CacheAppend") == 2
    rng = np.random.default_rng(0)

    def feeds(past: list[np.ndarray], s: int) -> dict[str, np.ndarray]:
        t = past[0].shape[2] + s
        mask = np.where(rng.random((b, 1, s, t)) < 0.3, -np.inf, 0).astype(np.float32)
        mask[0, 0, 0] = -np.inf  # a row hidden entirely: zeros
        x = {k: rng.standard_normal((b, h, s, d)).astype(np.float32) for k in "qkv"}
        return {**x, "mask": mask, "past_key": past[0], "past_value": past[1]}
    past_p = past_o = [np.zeros((b, h, 0, d), np.float32)] * 2
    for s in (5, 1, 1, 1):
        fd = feeds(past_p, s)
        got, want = lm.run_dict(fd), ref({**fd, "past_key": past_o[0], "past_value": past_o[1]})
        assert (want[0][0, :, 0] == 0).all() and np.isfinite(want[0]).all()
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        past_p, past_o = got[1:], want[1:]
