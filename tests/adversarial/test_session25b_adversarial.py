"""Adversarial tests of session 25b's changes: plain-int oneDNN handles, the slotted pointwise
runner, FusedConvTranspose's bfloat16 rounding, the deconvolution NaN guard skipped for
PatchDeconv's dense numpy form, and the oneDNN machine roofs (``pycann.profiler.peak``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.kernels import conv as kconv
from pycann.kernels import providers
from pycann.ops.fused_deconv import _k_fused_conv_transpose

needs_dnnl = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")

_ACTS = [("Relu", 0.0, 0.0), ("LeakyRelu", 0.1, 0.0), ("HardSigmoid", 0.2, 0.5), ("Clip", -1.0, 1.0),
         ("Sigmoid", 0.0, 0.0), ("Gelu", 0.0, 0.0)]


def _nan_input(c: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, c, 8, 8)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    x[0, 1, 1, 1] = np.inf
    x[0, :, 5, 5] = -np.inf
    return x


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("act", _ACTS)
@pytest.mark.parametrize("cmk", [(4, 1, 2), (24, 1, 2), (4, 4, 2)])
def test_patch_plan_rejected_keeps_nan_guard(monkeypatch: pytest.MonkeyPatch, act: tuple[str, float, float],
                                             cmk: tuple[int, int, int]) -> None:
    """A kernel == stride deconvolution whose PatchDeconv oneDNN rejects (``patch_plan`` None: its
    matmul has only reference loops on this CPU, or fails) runs in the per-shape oneDNN
    deconvolution with the activation as a post-op: the NaN guard must still run there (it was
    skipped because the *geometry* said the dense numpy form runs)."""
    from pycann.kernels.providers import onednn_capi as capi
    from pycann.kernels.providers import onednn_pointwise as pw

    def rejected(self: Any, batch: int) -> Any:
        raise capi.DnnlError("simulated: oneDNN offers only its reference implementation", 3)

    monkeypatch.setattr(pw.PatchDeconv, "_primitive", rejected)
    monkeypatch.setattr(pw, "_patch_plans", {})
    c, m, k = cmk
    rng = np.random.default_rng(4)
    w = rng.standard_normal((c, m, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    x = _nan_input(c)
    attrs = {"kernel_shape": [k, k], "strides": [k, k], "activation": act[0], "act_alpha": act[1],
             "act_beta": act[2]}
    with np.errstate(all="ignore"):
        y = np.asarray(_k_fused_conv_transpose([x, w, b], attrs, kconv.conv_transpose_act)[0])
        ref = _k_fused_conv_transpose([x, w, b], attrs)[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
