"""Adversarial checks of the measured first-conv implementation choice (``onednn_impl_search``):
what a remembered choice does to later image sizes of the same conv (``onednn_kernel_store``'s rule
that only a weight's first primitive may keep its JIT kernels in oneDNN's never-shrinking global
store)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.kernels import providers
from pycann.kernels.providers import onednn

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")]

from pycann.kernels.providers import onednn_impl_search as search  # noqa: E402
from pycann.ops.nn.conv import conv_window  # noqa: E402
from tests.kernels.test_onednn_provider import _ort_conv  # noqa: E402

PATCH = {"strides": [4, 4], "pads": [0, 0, 0, 0]}  # a ViT / ConvNeXt-style patchify stem


def _plan(x_shape: tuple[int, ...], w: np.ndarray, attrs: dict[str, Any]) -> Any:
    win = conv_window(x_shape, w.shape, attrs)
    return onednn._plan(x_shape, w, True, 1, win, tuple(win.out), False, None, False)


def test_a_remembered_brgemm_choice_does_not_pull_later_sizes_into_the_global_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first plan of a weight keeps oneDNN's brgconv (its first primitive may); a near tie keeps it
    as the kind's choice. Every later image size was then walked back to brgconv, whose kernels
    oneDNN keeps for good (the growth ``_own_kernels`` moves later shapes off it to stop)."""
    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_US", 0.0)
    monkeypatch.setattr(onednn, "_plans", {})
    monkeypatch.setattr(search._Candidate, "run_us", lambda self: 100.0)  # every implementation alike
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((256, 3, 4, 4)) / 7).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    first = _plan((1, 3, 32, 32), w, PATCH).impl
    if not first.startswith(onednn._GLOBAL_KERNELS):
        pytest.skip(f"oneDNN ranks {first} first for this conv on this CPU (no brgemm kernel to move off)")
    later = [_plan((1, 3, h, wd), w, PATCH).impl for h, wd in ((24, 40), (48, 16), (64, 64))]
    assert all(not i.startswith(onednn._GLOBAL_KERNELS) for i in later), later
    x = rng.standard_normal((1, 3, 48, 16)).astype(np.float32)
    y = onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, PATCH))
    np.testing.assert_allclose(y, _ort_conv(x, w, b, PATCH, 1), rtol=1e-4, atol=1e-4)
