"""bf16 FusedConvTranspose of a patch geometry (kernel == stride) in oneDNN's native bf16 matmul
(pycann/kernels/providers/onednn_bf16_deconv.py) against the widened path (float32 compute of the
bf16 values, the activation, one rounding to bf16: ops/fused_deconv.py, numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import bfloat16
from pycann.kernels import fused as kf
from pycann.kernels.providers import nan_guard
from pycann.kernels.providers import onednn_bf16 as ob
from pycann.kernels.providers import onednn_bf16_deconv as bd
from pycann.kernels.providers.onednn_eltwise import onednn_unary
from pycann.ops import fused_deconv as ref_deconv
from pycann.ops.nn.conv import check_conv_transpose

pytestmark = pytest.mark.skipif(not ob.native(), reason="no avx512_bf16/amx_bf16 CPU or no libdnnl.so.3")

BF = bfloat16()


@pytest.fixture(autouse=True)
def _no_run_left_open() -> Any:
    """The tests below start plan runs of the NaN guard (``new_run``) as a plan would; each ends its
    run, so ``PYCANN_NAN_GUARD`` is read afresh by the tests after them."""
    yield
    nan_guard.end_run()


def _attrs(act: str = "", k: int = 2, s: int = 2, pads: tuple[int, ...] = (0, 0, 0, 0)) -> dict[str, Any]:
    return {"kernel_shape": [k, k], "strides": [s, s], "pads": list(pads), "group": 1, "dilations": [1, 1],
            "activation": act, "act_alpha": 0.0, "act_beta": 0.0}


def _operands(x_shape: tuple[int, ...], m: int, k: int = 2, bias: bool = True, seed: int = 0,
              channels_last: bool = True) -> list[Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32).astype(BF)
    if channels_last:
        xc = ob._channels_last(x.shape)
        xc[...] = x
        x = xc
    w = (rng.standard_normal((x_shape[1], m, k, k)) * 0.3).astype(np.float32).astype(BF)
    return [x, w, rng.standard_normal((m,)).astype(np.float32).astype(BF) if bias else None]


def _close_to_widened(y: np.ndarray, ref: np.ndarray) -> None:
    """Within one bf16 rounding of the widened result (float32 sums in another order, oneDNN's
    activation against numpy's, each rounded once to 8 bits of mantissa)."""
    assert y.dtype == ref.dtype == BF and y.shape == ref.shape
    a, r = y.astype(np.float32), ref.astype(np.float32)
    np.testing.assert_allclose(a, r, rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize(("x_shape", "m", "act", "bias", "cl"), [
    ((1, 24, 20, 16), 24, "Relu", True, True),     # batched form (kw * M = 48 columns a patch row)
    ((1, 24, 18, 22), 1, "Sigmoid", True, True),   # dense form (kw * M = 2): a DB head's probability map
    ((2, 8, 5, 7), 3, "", False, True),            # two images, no bias, no activation
    ((1, 6, 9, 4), 5, "Relu", True, False),        # an NCHW input: made channels-last first
])
def test_native_patch_deconv_equals_the_widened_path(x_shape: tuple[int, ...], m: int, act: str, bias: bool,
                                                     cl: bool) -> None:
    ins = _operands(x_shape, m, bias=bias, channels_last=cl)
    before = bd.stats()["patch_deconv"]
    (y,) = kf.k_fused_conv_transpose(ins, _attrs(act))
    assert bd.stats()["patch_deconv"] == before + 1  # the native path ran
    assert y.strides[1] == 2  # channels-last bf16
    (ref,) = ref_deconv._k_fused_conv_transpose(ins, _attrs(act))
    _close_to_widened(y, ref)


def test_kernel_three_patches_with_bias_only_are_exact_sums() -> None:
    """One input channel, weights and inputs small integers: every product and sum is exact in
    float32 and bf16, so the result equals the spec's bit for bit."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4).astype(BF)
    w = np.array([[[[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[-1, 0, 1], [2, -2, 0], [1, 1, 1]]]], np.float32).astype(BF)
    b = np.array([0.5, -3], np.float32).astype(BF)
    (y,) = kf.k_fused_conv_transpose([x, w, b], _attrs(k=3, s=3))
    want = np.zeros((1, 2, 9, 12), np.float32)
    for h in range(3):
        for c in range(4):
            want[0, :, 3 * h:3 * h + 3, 3 * c:3 * c + 3] = float(x[0, 0, h, c]) * w[0].astype(np.float32)
    want += b.astype(np.float32).reshape(1, 2, 1, 1)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(BF).astype(np.float32))


def test_writes_into_a_bf16_channels_last_out() -> None:
    x, w, b = _operands((1, 4, 6, 5), 3)
    win, outs = check_conv_transpose(x, w, b, 1, _attrs())
    out = ob._channels_last((1, 3, 12, 10))
    y = bd.conv_transpose_patches(x, w, b, 1, win, outs, None, out)
    assert y is out
    (ref,) = ref_deconv._k_fused_conv_transpose([x, w, b], _attrs())
    _close_to_widened(out, ref)


@pytest.mark.parametrize("attrs", [_attrs(k=3, s=2), _attrs(k=2, s=2, pads=(1, 1, 1, 1)), _attrs(k=2, s=1)])
def test_other_geometries_are_declined_and_widened(attrs: dict[str, Any]) -> None:
    x, w, b = _operands((1, 4, 6, 5), 3, k=int(attrs["kernel_shape"][0]))
    win, outs = check_conv_transpose(x, w, b, 1, attrs)
    assert bd.conv_transpose_patches(x, w, b, 1, win, outs) is None
    (y,) = kf.k_fused_conv_transpose([x, w, b], attrs)
    (ref,) = ref_deconv._k_fused_conv_transpose([x, w, b], attrs)
    np.testing.assert_array_equal(y.astype(np.float32), ref.astype(np.float32))


def test_float32_weights_or_inputs_are_declined() -> None:
    x, w, b = _operands((1, 4, 6, 5), 3)
    win, outs = check_conv_transpose(x, w, b, 1, _attrs())
    assert bd.conv_transpose_patches(x.astype(np.float32), w, b, 1, win, outs) is None
    assert bd.conv_transpose_patches(x, w.astype(np.float32), b, 1, win, outs) is None


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
def test_nan_and_inf_inputs_keep_what_the_widened_path_gives(act: str) -> None:
    """A NaN-dropping activation runs fused only when the guard proves the sum finite: a NaN or inf
    input goes the widened way, so NaN stays NaN where ONNX Runtime's ConvTranspose + Relu has it."""
    for m in (24, 1):
        x, w, b = _operands((1, 24, 6, 5), m)
        x[0, 3, 2, 1] = np.nan
        x[0, 5, 4, 4] = np.inf
        nan_guard.new_run()
        (y,) = kf.k_fused_conv_transpose([x, w, b], _attrs(act))
        (ref,) = ref_deconv._k_fused_conv_transpose([x, w, b], _attrs(act))
        np.testing.assert_array_equal(np.isnan(y.astype(np.float32)), np.isnan(ref.astype(np.float32)))
        assert np.isnan(ref.astype(np.float32)).any()


def test_a_guarded_result_records_a_bound_the_next_deconv_reads_instead_of_its_input(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ConvTranspose + Relu, then ConvTranspose + Sigmoid (PP-OCRv4 det's head): the first records a
    bound of its output, the second's guard uses it and reads nothing."""
    x, w, b = _operands((1, 8, 6, 5), 8)
    w2 = (np.random.default_rng(1).standard_normal((8, 1, 2, 2)) * 0.3).astype(np.float32).astype(BF)
    b2 = np.array([0.25], np.float32).astype(BF)
    nan_guard.new_run()
    (h,) = kf.k_fused_conv_transpose([x, w, b], _attrs("Relu"))
    bound = nan_guard.proven(h)
    assert bound is not None and float(np.abs(h.astype(np.float32)).max()) <= bound
    reads: list[int] = []
    real = nan_guard._norm2
    monkeypatch.setattr(nan_guard, "_norm2", lambda a: reads.append(a.size) or real(a))
    (y,) = kf.k_fused_conv_transpose([h, w2, b2], _attrs("Sigmoid"))
    assert reads == []
    nan_guard.new_run()  # (the control: a record counts only in its run; a new run's guard reads h)
    kf.k_fused_conv_transpose([h, w2, b2], _attrs("Sigmoid"))
    assert reads == [h.size]
    (ref,) = ref_deconv._k_fused_conv_transpose([h, w2, b2], _attrs("Sigmoid"))
    _close_to_widened(y, ref)
    assert onednn_unary("Sigmoid", 0.0, 0.0) is not None
