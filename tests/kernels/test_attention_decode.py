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
