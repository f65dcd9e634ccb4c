"""bf16 FusedAttention on the providers rounds P with oneDNN's reorder and P @ V in the kernel
(``kernels/fused.py`` ``_bf16_operand`` / ``_bf16_matmul_bf16``): the same bf16 values as rounding
with numpy's exact cast (the golden: the same kernels with the exact casts), bit for bit, for
masks of every kind, fully masked rows and NaN/inf scores; the two may differ only where P or the
result would be a float32 subnormal (the native products read bf16 subnormals as zero)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pycann.dtypes import bfloat16
from pycann.kernels import fused as kf
from pycann.kernels.providers import onednn_bf16
from pycann.ops import fused as rf

pytestmark = pytest.mark.skipif(not onednn_bf16.native(), reason="needs a bf16 CPU (avx512_bf16 / amx_bf16) and libdnnl")

RNG = np.random.default_rng(61)
EXACT = dataclasses.replace(kf.PROVIDED, bf16_operand=rf.REFERENCE.bf16_operand,
                            bf16_matmul_bf16=rf.REFERENCE.bf16_matmul_bf16)


def _bf(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32).astype(bfloat16())


@pytest.mark.parametrize("mask_kind", ["none", "zeros", "finfo_min", "minus_inf", "minus_1e4", "full_row"])
@pytest.mark.parametrize("s_len", [64, 128, 200])
def test_fast_rounding_equals_the_exact_casts(mask_kind: str, s_len: int) -> None:
    q, kt, v = _bf(1, 12, s_len, 64), _bf(1, 12, 64, s_len), _bf(1, 12, s_len, 64)
    mask = None
    if mask_kind != "none":
        mask = np.zeros((1, 1, 1, s_len), np.float32)
        fill = {"zeros": 0.0, "finfo_min": np.finfo(np.float32).min, "minus_inf": -np.inf, "minus_1e4": -1e4,
                "full_row": np.finfo(np.float32).min}[mask_kind]
        mask[..., s_len // 2:] = fill
        if mask_kind == "full_row":
            mask = np.broadcast_to(mask, (1, 1, s_len, s_len)).copy()
            mask[0, 0, 3, :] = np.finfo(np.float32).min  # a row with every key masked
    ins = [q, kt, v] + ([] if mask is None else [mask])
    fast = kf.k_attention(ins, {"scale": 0.125})[0]
    exact = rf._k_attention(ins, {"scale": 0.125}, EXACT)[0]
    assert fast.dtype == exact.dtype == bfloat16()
    np.testing.assert_array_equal(np.isnan(fast.astype(np.float32)), np.isnan(exact.astype(np.float32)))
    assert np.array_equal(fast.view(np.uint16)[~np.isnan(fast.astype(np.float32))],
                          exact.view(np.uint16)[~np.isnan(exact.astype(np.float32))])


def test_nan_and_inf_scores_stay_as_the_exact_path_has_them() -> None:
    q, kt, v = _bf(1, 4, 64, 64), _bf(1, 4, 64, 128), _bf(1, 4, 128, 64)
    q[0, 1, 5, 7] = np.float32(np.nan)
    kt[0, 2, 3, 9] = np.float32(np.inf)
    fast = kf.k_attention([q, kt, v], {"scale": 0.125})[0].astype(np.float32)
    exact = rf._k_attention([q, kt, v], {"scale": 0.125}, EXACT)[0].astype(np.float32)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(exact))
    ok = ~np.isnan(fast)
    assert np.array_equal(fast[ok], exact[ok])
