"""A conv plan fed a non-channels-last input (an image stem's NCHW feed) copies it into one buffer
of its own, reused run after run (onednn_conv_plan._Plan.x_scratch): values against numpy's float64 conv,
one buffer per plan, and threads sharing the plan each get their own input's result."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn
from pycann.ops.nn.conv import conv_window

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

ATTRS = {"strides": [2, 2], "pads": [1, 1, 1, 1]}


def _want(x: np.ndarray, w: np.ndarray, b: np.ndarray, win: object) -> np.ndarray:
    return nb.conv_im2col_gemm(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1, win)


def test_nchw_inputs_reuse_the_plans_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onednn, "_plans", {})
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 3, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x1, x2 = (rng.standard_normal((1, 3, 40, 36)).astype(np.float32) for _ in range(2))
    win = conv_window(x1.shape, w.shape, ATTRS)
    y1 = onednn.conv_nhwc(x1, w, b, 1, win)
    (plan,) = [p for p in onednn._plans.values() if p is not None]
    first = plan.x_scratch
    assert first is not None and first.ctypes.data % 64 == 0
    y2 = onednn.conv_nhwc(x2, w, b, 1, win)
    assert plan.x_scratch is first  # (no new array per run)
    np.testing.assert_allclose(y1, _want(x1, w, b, win), rtol=1e-4, atol=1e-4)  # y1 untouched by the second run
    np.testing.assert_allclose(y2, _want(x2, w, b, win), rtol=1e-4, atol=1e-4)


def test_threads_sharing_a_plan_get_their_own_inputs_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onednn, "_plans", {})
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((24, 3, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    xs = [rng.standard_normal((1, 3, 64, 48)).astype(np.float32) for _ in range(4)]
    win = conv_window(xs[0].shape, w.shape, ATTRS)
    wants = [_want(x, w, b, win) for x in xs]
    onednn.conv_nhwc(xs[0], w, b, 1, win)  # the plan, made once
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(25):
            y = onednn.conv_nhwc(xs[i], w, b, 1, win)
            if not np.allclose(y, wants[i], rtol=1e-4, atol=1e-4):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
