"""FusedAttention at a decode step (a query row or a few over a key length that grows every
step): its products go straight to numpy (no per-shape kernel lookup or oneDNN primitive per new
key length), with values against the unfused numpy formula and ONNX Runtime's MatMul/Softmax."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pycann.kernels import fused as kfused
from pycann.kernels.fused import k_attention
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(31)


def _ort_attention(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["sc"]),
             helper.make_node("Add", ["sc", "m"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
           for n, a in (("q", q), ("kt", kt), ("v", v), ("m", mask))]
    g = helper.make_graph(nodes, "attn", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("c", TensorProto.FLOAT, [], [scale])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return run_ort(m, {"q": q, "kt": kt, "v": v, "m": mask})[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("rows", [1, 4])
def test_decode_rows_use_numpy_and_match_onnxruntime_as_the_key_length_grows(rows: int) -> None:
    for length in (1, 7, 33, 700, 1500):  # 1500: past the tiny-GEMM bound, where a primitive per length was made
        q = RNG.standard_normal((2, 12, rows, 64)).astype(np.float32)
        kt = RNG.standard_normal((2, 12, 64, length)).astype(np.float32)
        v = RNG.standard_normal((2, 12, length, 64)).astype(np.float32)
        mask = np.where(RNG.random((2, 1, rows, length)) < 0.1, -1e9, 0).astype(np.float32)
        assert kfused._provider_matmul(q, kt) is np.matmul
        got = k_attention([q, kt, v, mask], {"scale": 0.125})[0]
        np.testing.assert_allclose(got, _ort_attention(q, kt, v, mask, 0.125), rtol=1e-4, atol=1e-5)


def test_prompt_rows_keep_the_kernel_table_choice() -> None:
    q = RNG.standard_normal((1, 12, 32, 64)).astype(np.float32)
    kt = RNG.standard_normal((1, 12, 64, 32)).astype(np.float32)
    assert kfused._provider_matmul(q, kt) is not np.matmul


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 5])
def test_no_keys_gives_zeros_as_onnxruntime(rows: int, dtype: str) -> None:
    """A key length of 0 (an empty cache): the scores are empty and P @ V is zeros in ORT; the
    numpy formula raised 'zero-size array to reduction operation maximum'."""
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    q = RNG.standard_normal((2, 3, rows, 8)).astype(np.float32)
    kt, v = np.zeros((2, 3, 8, 0), np.float32), np.zeros((2, 3, 0, 8), np.float32)
    mask = np.zeros((2, 1, rows, 0), np.float32)
    want = _ort_attention(q, kt, v, mask, 0.125)
    for m in (mask, None):
        ins = [q.astype(dt), kt.astype(dt), v.astype(dt)] + ([] if m is None else [m.astype(dt)])
        got = k_attention(ins, {"scale": 0.125})[0]
        assert got.dtype == dt and got.shape == want.shape == (2, 3, rows, 8)
        np.testing.assert_array_equal(got.astype(np.float32), want)


@pytest.mark.parametrize("rows", [1, 4])
def test_decode_rows_broadcast_batches_and_masks_as_onnxruntime(rows: int) -> None:
    """Decode-step products by np.matmul: K/V with batch 1 against Q with batch 3, and a mask that
    widens the scores' batch (the second product then has more batches than the first)."""
    q = RNG.standard_normal((3, 2, rows, 16)).astype(np.float32)
    kt = RNG.standard_normal((1, 2, 16, 9)).astype(np.float32)
    v = RNG.standard_normal((1, 2, 9, 16)).astype(np.float32)
    for mask in (np.where(RNG.random((3, 1, 1, 9)) < 0.3, -1e9, 0).astype(np.float32),
                 np.where(RNG.random((rows, 9)) < 0.3, -1e9, 0).astype(np.float32)):
        got = k_attention([q, kt, v, mask], {"scale": 0.25})[0]
        np.testing.assert_allclose(got, _ort_attention(q, kt, v, mask, 0.25), rtol=1e-4, atol=1e-5)
    q1 = RNG.standard_normal((1, 2, rows, 16)).astype(np.float32)
    wide = np.where(RNG.random((3, 2, 1, 9)) < 0.3, -1e9, 0).astype(np.float32)
    got = k_attention([q1, kt, v, wide], {"scale": 0.25})[0]
    np.testing.assert_allclose(got, _ort_attention(q1, kt, v, wide, 0.25), rtol=1e-4, atol=1e-5)


def test_in_place_mask_check_agrees_with_numpy_broadcasting() -> None:
    """``_broadcasts_into`` (the mask is added into the scores in place) says what
    ``np.broadcast_shapes(scores, mask) == scores`` says, for shapes that widen, fit, or do not broadcast."""
    from pycann.ops.fused import _broadcasts_into

    rng = np.random.default_rng(5)
    for _ in range(400):
        big = tuple(int(d) for d in rng.integers(1, 4, rng.integers(0, 5)))
        small = tuple(int(d) for d in rng.integers(1, 4, rng.integers(0, 6)))
        try:
            want = np.broadcast_shapes(big, small) == big
        except ValueError:
            want = False
        assert _broadcasts_into(small, big) == want, (small, big)
