"""ChannelShuffle's bound kernel (kernels/channel_shuffle.py): oneDNN reorders for the strided copies
of a channels-last shuffle give exactly the reference kernel's outputs (ops/channel_shuffle.py), into
the executor's arena views, for every group / split / batch; other layouts, overlapping outputs and
calls without arena views take the reference path."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels import providers
from pycann.kernels.channel_shuffle import MIN_ELEMENTS, prepare_channel_shuffle
from pycann.ops.channel_shuffle import _k_shuffle

pytestmark = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")
RNG = np.random.default_rng(17)


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _empty_cl(shape: tuple[int, ...]) -> np.ndarray:
    n, c, h, w = shape
    return np.full((n, h, w, c), np.nan, np.float32).transpose(0, 3, 1, 2)


def _bind(sizes: list[int], n: int, hw: tuple[int, int], group: int, split: list[int], layout: str = "NHWC"):  # noqa: ANN202
    attrs = {"group": group, "split": split, "_layout": layout}
    descs = [TensorDesc(1, (n, c, *hw)) for c in sizes]
    return prepare_channel_shuffle(attrs, descs, [None] * len(descs), []), attrs


@pytest.mark.parametrize("sizes,group,split", [
    ([58, 58], 2, [58, 58]),        # ShuffleNet v2's unit
    ([116], 2, [58, 58]),           # a downsampling unit's single input
    ([24, 24], 2, []),              # one output of every channel
    ([12, 6, 30], 4, [4, 28, 16]),  # uneven inputs and outputs
    ([96], 4, [48, 48]),
])
@pytest.mark.parametrize("n", [1, 2])
def test_bound_equals_reference(sizes: list[int], group: int, split: list[int], n: int) -> None:
    hw = (9, 11)
    k, attrs = _bind(sizes, n, hw, group, split)
    assert k is not None and k.writes_out and k.impl == "onednn:reorder"
    xs = [_cl(RNG.standard_normal((n, c, *hw)).astype(np.float32)) for c in sizes]
    want = _k_shuffle(xs, attrs)
    outs = [_empty_cl(w.shape) for w in want]
    for _ in range(2):  # the same arena views again (verified once)
        got = k.run(xs, attrs, outs)
        assert all(g is o for g, o in zip(got, outs))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert [len(o.shape) for o in k.run(xs, attrs)] == [4] * len(want)  # no arena views: the reference
    for g, w in zip(k.run(xs, attrs), want):
        np.testing.assert_array_equal(g, w)


def test_other_layouts_and_overlap_take_the_reference() -> None:
    k, attrs = _bind([58, 58], 1, (28, 28), 2, [58, 58])
    assert k is not None
    xs = [_cl(RNG.standard_normal((1, 58, 28, 28)).astype(np.float32)) for _ in range(2)]
    want = _k_shuffle(xs, attrs)
    nchw = [np.ascontiguousarray(x) for x in xs]  # NCHW inputs
    outs = [_empty_cl(w.shape) for w in want]
    for g, w in zip(k.run(nchw, attrs, outs), want):
        np.testing.assert_array_equal(g, w)
    plain_outs = [np.full(w.shape, np.nan, np.float32) for w in want]  # NCHW outputs
    for g, w in zip(k.run(xs, attrs, plain_outs), want):
        np.testing.assert_array_equal(g, w)
    buf = _cl(RNG.standard_normal((1, 58, 28, 28)).astype(np.float32))
    xs2 = [buf, xs[1]]
    want2 = _k_shuffle([buf.copy(), xs[1]], attrs)
    outs2 = [buf, _empty_cl(want2[1].shape)]  # output 0 over input 0: computed as numpy would
    got = k.run(xs2, attrs, outs2)
    assert np.isfinite(got[1]).all() and got[0].shape == want2[0].shape


def test_prepare_declines() -> None:
    # a copy whose every-3rd-channel span (11 x 3) is wider than its output's 32 channels: oneDNN
    # refuses such a memory descriptor, so the whole shuffle keeps the reference kernel
    assert _bind([96], 1, (9, 11), 3, [32, 32, 32])[0] is None
    assert _bind([58, 58], 1, (28, 28), 2, [58, 58], layout="")[0] is None  # outside an NHWC chain
    small = int(np.sqrt(MIN_ELEMENTS // 8)) // 2
    assert _bind([4, 4], 1, (small, small), 2, [4, 4])[0] is None  # tiny: numpy's copies
    attrs = {"group": 2, "split": [], "_layout": "NHWC"}
    dyn = TensorDesc(1, ("n", 8, 16, 16))
    assert prepare_channel_shuffle(attrs, [dyn], [None], []) is None
