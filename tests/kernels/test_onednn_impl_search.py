"""The measured implementation choice for first convolutions (onednn_impl_search) and the
cache-line-aligned host buffers (aligned): values against ONNX Runtime on whichever
implementation the search keeps, one search per problem kind, the bounds of what is searched."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.kernels.providers import aligned, onednn
from pycann.ops.nn.conv import conv_window
from tests.kernels.test_onednn_provider import _data, _ort_conv

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_impl_search as search  # noqa: E402

STEM = {"strides": [2, 2], "pads": [1, 1, 1, 1]}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An empty choice table and plan cache (restored after), every stem searched (no size floor, no
    warm-up cutoff)."""
    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    # (every candidate timed: a warm-up run slowed by another process must not drop the alternatives
    # a test relies on, leaving oneDNN's first choice the only one)
    monkeypatch.setattr(search, "WARM_CUTOFF", float("inf"))
    monkeypatch.setattr(onednn, "_plans", {})
    return search


def _plan_of(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any], group: int = 1) -> Any:
    win = conv_window(x.shape, w.shape, attrs)
    return onednn._plan(tuple(x.shape), w, b is not None, group, win, tuple(win.out), False, None, False)


def _first_impl(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any],
                monkeypatch: pytest.MonkeyPatch) -> str:
    """The implementation oneDNN ranks first for this conv (no search)."""
    with monkeypatch.context() as m:
        m.setattr(search, "eligible", lambda *a: False)
        m.setattr(onednn, "_plans", {})
        return str(_plan_of(x, w, b, attrs).impl)


def test_a_slower_ranked_implementation_computes_the_same_conv(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # the search made to prefer anything but oneDNN's first choice: the walk lands on another
    # implementation, and its values are still ONNX Runtime's
    x, w, b = _data((1, 3, 40, 44), (24, 3, 3, 3), True)
    first = _first_impl(x, w, b, STEM, monkeypatch)
    monkeypatch.setattr(search, "MARGIN", 0.0)  # (any time beats first / 0 = inf)
    p = _plan_of(x, w, b, STEM)
    assert p.impl != first and not p.impl.startswith("ref"), (first, p.impl)
    assert search.searched[0] >= 1 and list(search.choices.values()) == [p.impl]
    y = onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, STEM))
    np.testing.assert_allclose(y, _ort_conv(x, w, b, STEM, 1), rtol=1e-4, atol=1e-4)


def test_a_near_tie_keeps_onednn_first_choice(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, b = _data((1, 3, 32, 32), (16, 3, 3, 3), False)
    first = _first_impl(x, w, b, STEM, monkeypatch)
    monkeypatch.setattr(search._Candidate, "run_us", lambda self: 100.0)  # every implementation alike
    assert _plan_of(x, w, b, STEM).impl == first
    assert list(search.choices.values()) == [first]


def test_the_choice_is_remembered_per_kind_not_per_image_size(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "MARGIN", 0.0)
    x, w, b = _data((1, 3, 36, 36), (32, 3, 3, 3), True)
    p1 = _plan_of(x, w, b, STEM)
    before = search.searched[0]
    x2 = np.random.default_rng(1).standard_normal((1, 3, 52, 30)).astype(np.float32)
    p2 = _plan_of(x2, w, b, STEM)
    assert search.searched[0] == before and p2.impl == p1.impl  # walked to, not measured again
    y = onednn.conv_nhwc(x2, w, b, 1, conv_window(x2.shape, w.shape, STEM))
    np.testing.assert_allclose(y, _ort_conv(x2, w, b, STEM, 1), rtol=1e-4, atol=1e-4)


def test_concurrent_first_plans_of_a_kind_share_one_search(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads making their first plans of one kind at once (a thread pool's first calls of a model
    at several image sizes) each ran a search: N times the JIT compiles, each timed beside the
    others, so the choice was noise. The others wait for the first one's search and walk to it."""
    import threading
    import time

    real, calls = search._search, []

    def slow_search(*a: Any) -> Any:
        calls.append(1)
        time.sleep(0.2)  # (the others reach ``fastest`` meanwhile)
        return real(*a)

    monkeypatch.setattr(search, "_search", slow_search)
    _, w, b = _data((1, 3, 36, 36), (32, 3, 3, 3), True)
    xs = [np.random.default_rng(i).standard_normal((1, 3, 30 + 4 * i, 36)).astype(np.float32) for i in range(4)]
    start, impls = threading.Barrier(len(xs)), {}

    def first_plan(i: int) -> None:
        start.wait()
        impls[i] = _plan_of(xs[i], w, b, STEM).impl

    threads = [threading.Thread(target=first_plan, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1 and len(impls) == len(xs) and len(set(impls.values())) == 1, (calls, impls)
    assert list(search.choices.values()) == [impls[0]]


def test_a_child_forked_during_a_search_does_not_wait_for_it(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parent's thread searching a kind at a fork is not in the child: the child's first plan of
    that kind searches itself instead of waiting for a search that never ends there."""
    import os
    import signal
    import threading
    import time

    real, started = search._search, threading.Event()

    def slow_search(*a: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            started.set()
            time.sleep(1.0)  # (the fork happens meanwhile)
        return real(*a)

    monkeypatch.setattr(search, "_search", slow_search)
    _, w, b = _data((1, 3, 36, 36), (32, 3, 3, 3), True)
    x1, x2 = (np.random.default_rng(i).standard_normal((1, 3, 30 + 6 * i, 36)).astype(np.float32) for i in range(2))
    t = threading.Thread(target=_plan_of, args=(x1, w, b, STEM))
    t.start()
    assert started.wait(30)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(20)  # (a hang ends the child with SIGALRM)
        ok = False
        try:
            ok = bool(_plan_of(x2, w, b, STEM).impl) and search.choices != {}
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    t.join(60)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_fast_conv_is_not_searched_and_nothing_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 10**18)
    monkeypatch.setattr(onednn, "_plans", {})
    before = search.searched[0]
    x, w, b = _data((1, 3, 20, 20), (8, 3, 3, 3), True)
    _plan_of(x, w, b, STEM)
    assert search.searched[0] == before and search.choices == {}


@pytest.mark.parametrize("group,c,transpose,want", [
    (1, 3, False, True), (1, 15, False, True), (1, 16, False, False),  # oneDNN's "first conv" class only
    (3, 3, False, False), (32, 32, False, False),  # grouped / depthwise keep their own rule
    (1, 3, True, False),  # deconvolutions: onednn_kernel_store's ``no_jit`` rule
])
def test_which_convs_are_searched(group: int, c: int, transpose: bool, want: bool) -> None:
    assert search.eligible(group, c, transpose) is want


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16, np.int64])
@pytest.mark.parametrize("shape", [(1,), (3, 5), (7, 33, 9), 1000, (1, 64, 111, 111)])
def test_aligned_buffers_start_on_a_cache_line(shape: Any, dtype: Any) -> None:
    a = aligned.empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else shape
    assert a.shape == want and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % aligned.ALIGN == 0
    a[...] = 1  # the whole view is writable memory of its own
    assert int(a.sum(dtype=np.int64)) == a.size


def test_channels_last_results_and_arenas_are_aligned() -> None:
    from pycann.ge.run.plan_arena import Arena, _warm_buffer

    assert onednn.empty_channels_last((1, 3, 224, 224)).ctypes.data % 64 == 0
    assert _warm_buffer(3 << 20).ctypes.data % 64 == 0
    arena = Arena(1 << 20, [[(64, np.dtype(np.float32), (1, 8, 4, 4), True)]])
    assert arena.buffer.ctypes.data % 64 == 0 and arena.views[0][0].ctypes.data % 64 == 0


@pytest.mark.parametrize("xs,ws,stride,pad", [
    ((1, 3, 64, 64), (64, 3, 3, 3), 2, 0),  # SqueezeNet's stem geometry, smaller image
    ((1, 3, 66, 66), (32, 3, 7, 7), 2, 3),  # ResNet's
    ((1, 3, 48, 80), (16, 3, 3, 3), 2, 1),  # PP-OCR's
])
def test_the_jit_family_sums_in_one_order(xs: Any, ws: Any, stride: int, pad: int) -> None:
    # a search that switches between oneDNN's jit kernels of two ISAs changes no output bit
    # (what makes a timing-dependent choice harmless to reproducibility: docs/kernels.md)
    from pycann.kernels.providers import onednn_capi as c
    from pycann.kernels.providers import onednn_capi_ops as capi_ops
    from pycann.kernels.providers.onednn_conv_plan import _cl_strides

    rng = np.random.default_rng(3)
    x = aligned.empty(int(np.prod(xs)))
    x[:] = rng.standard_normal(x.size)
    w = rng.standard_normal(ws).astype(np.float32)
    ys = (1, ws[0], (xs[2] + 2 * pad - ws[2]) // stride + 1, (xs[3] + 2 * pad - ws[3]) // stride + 1)
    src = c.MemoryDesc.strided(xs, [q // 4 for q in _cl_strides(xs)])
    dst = c.MemoryDesc.strided(ys, [q // 4 for q in _cl_strides(ys)])
    w_user = c.MemoryDesc.strided(ws, [int(np.prod(ws[i + 1:])) for i in range(4)])
    outs = {}
    for impl in ("jit:avx512_core", "jit:avx2"):
        pd = capi_ops.convolution_pd(src, c.MemoryDesc.any(ws), None, dst, [stride] * 2, [0, 0], [pad] * 2, [pad] * 2,
                              capi_ops.Attr([]))
        while pd.impl_info() != impl:
            if not pd.next_impl():
                pytest.skip(f"oneDNN offers no {impl} here")
        wmd = pd.query_md(c.QUERY_WEIGHTS_MD)
        wp = aligned.empty(wmd.size() // 4 + 1)
        c.Primitive(c.reorder_pd(w_user, wmd), [(c.ARG_FROM, c.Memory(w_user, w.ctypes.data)),
                                                 (c.ARG_TO, c.Memory(wmd, wp.ctypes.data))]).execute()
        y = aligned.empty(int(np.prod(ys)))
        c.Primitive(pd, [(c.ARG_SRC, c.Memory(src, x.ctypes.data)), (c.ARG_WEIGHTS, c.Memory(wmd, wp.ctypes.data)),
                         (c.ARG_DST, c.Memory(dst, y.ctypes.data))]).execute()
        outs[impl] = y
    assert np.array_equal(outs["jit:avx512_core"], outs["jit:avx2"])
    assert np.abs(outs["jit:avx2"]).max() > 0  # (a conv that ran)

