"""Adversarial checks of the measured first-conv implementation choice (``onednn_impl_search``):
what a remembered choice does to later image sizes of the same conv (``onednn_kernel_store``'s rule
that only a weight's first primitive may keep its JIT kernels in oneDNN's never-shrinking global
store), and a search in a forked child's forking thread (whose libgomp pool is the parent's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pycann.kernels import providers
from pycann.kernels.providers import onednn, onednn_conv_plan
from tests.forking import run_script

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
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    monkeypatch.setattr(onednn, "_plans", {})
    monkeypatch.setattr(search._Candidate, "run_us", lambda self: 100.0)  # every implementation alike
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((256, 3, 4, 4)) / 7).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    first = _plan((1, 3, 32, 32), w, PATCH).impl
    if not first.startswith(onednn_conv_plan._GLOBAL_KERNELS):
        pytest.skip(f"oneDNN ranks {first} first for this conv on this CPU (no brgemm kernel to move off)")
    later = [_plan((1, 3, h, wd), w, PATCH).impl for h, wd in ((24, 40), (48, 16), (64, 64))]
    assert all(not i.startswith(onednn_conv_plan._GLOBAL_KERNELS) for i in later), later
    x = rng.standard_normal((1, 3, 48, 16)).astype(np.float32)
    y = onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, PATCH))
    np.testing.assert_allclose(y, _ort_conv(x, w, b, PATCH, 1), rtol=1e-4, atol=1e-4)


_FORK_LOAD = r"""
import os, signal, sys
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
from pycann.kernels.providers import omp_fork, onednn_capi
try:
    onednn_capi.load()
except OSError:
    print("NOLIB"); raise SystemExit
from pycann.kernels.providers import onednn_impl_search as search
from pycann.ge.run.model import LoadedModel

rng = np.random.default_rng(0)
w = (rng.standard_normal((32, 3, 3, 3)) / 5).astype(np.float32)
g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 96, 80])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, sys.argv[1])
x = rng.standard_normal((1, 3, 96, 80)).astype(np.float32)
want = LoadedModel.from_file(sys.argv[1]).run([x])[0]  # this thread has used OpenMP
search.MIN_FLOPS = 0  # (the child's load searches whatever the conv's size)
search.choices.clear()  # (a kind the parent never searched: another model, another team)
before = search.searched[0]
pid = os.fork()
if pid == 0:
    signal.alarm(30)
    y = LoadedModel.from_file(sys.argv[1]).run([x])[0]  # a static model: its plan is built at load
    os._exit(0 if omp_fork.stale() and search.searched[0] > before and np.allclose(y, want, rtol=1e-4, atol=1e-4) else 3)
_, status = os.waitpid(pid, 0)
print("child", status)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_loading_a_first_conv_model_does_not_hang(tmp_path: Path) -> None:
    """A child of ``os.fork`` (a multiprocessing worker) loading a static model with a 3-channel stem:
    the plan is built at load on the forking thread, and the search ran its candidates there, in the
    parent's libgomp pool (a barrier for threads that are not in the child: hung for ever)."""
    out = run_script(tmp_path, _FORK_LOAD.replace("sys.argv[1]", repr(str(tmp_path / "stem.onnx"))), timeout=180)
    if out.stdout.strip() == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    assert out.returncode == 0 and out.stdout.strip().endswith("child 0"), (out.stdout, out.stderr[-2000:])


def test_an_alternative_that_onednn_fails_to_make_is_skipped_not_the_whole_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate whose primitive oneDNN fails to create or run on the scratch buffers (out of
    memory for its scratchpad, a JIT failure) raised out of the plan: the conv that oneDNN's own
    first implementation runs fine fell back to the numpy kernel (``_plan`` -> None) for good."""
    from pycann.kernels.providers import onednn_capi as capi

    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    monkeypatch.setattr(onednn, "_plans", {})
    make = search._Candidate.__init__
    failed: list[str] = []

    def failing(self: Any, pd: Any, args: Any) -> None:
        if pd.impl_info().startswith("jit:avx2"):
            failed.append(pd.impl_info())
            raise capi.DnnlError("dnnl_primitive_create", 3)
        make(self, pd, args)

    monkeypatch.setattr(search._Candidate, "__init__", failing)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 40, 36)).astype(np.float32)
    w = (rng.standard_normal((24, 3, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    stem = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    p = _plan(x.shape, w, stem)
    if not failed:
        pytest.skip("oneDNN offers no jit:avx2 convolution for this conv here")
    assert p is not None and not p.impl.startswith("jit:avx2"), p and p.impl
    y = onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, stem))
    np.testing.assert_allclose(y, _ort_conv(x, w, b, stem, 1), rtol=1e-4, atol=1e-4)


_OTHER_THREAD = r"""
import threading
import numpy as np
from pycann.kernels.providers import onednn, onednn_capi
try:
    onednn_capi.load()
except OSError:
    print("NOLIB"); raise SystemExit
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn_impl_search as search
from pycann.ops.nn.conv import conv_window

search.MIN_FLOPS, search.WARM_CUTOFF = 0, float("inf")
# the CPU at hand measures oneDNN's gemm convolution fastest (as it may: the search's premise)
search._Candidate.run_us = lambda self: 1.0 if "gemm" in self.name else 100.0
rng = np.random.default_rng(0)
x = rng.standard_normal((1, 3, 33, 47)).astype(np.float32)
w = (rng.standard_normal((24, 3, 3, 3)) / 5).astype(np.float32)
b = rng.standard_normal(24).astype(np.float32)
win = conv_window(x.shape, w.shape, {"strides": [2, 2], "pads": [1, 1, 1, 1]})
want = nb.conv_im2col_gemm(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1, win)
y = onednn.conv_nhwc(x, w, b, 1, win)  # the plan is made (and run) on this thread
got = {}
t = threading.Thread(target=lambda: got.update(y=onednn.conv_nhwc(x, w, b, 1, win)))  # a plan's later runs
t.start()
t.join()
print("OK" if np.allclose(y, want, rtol=1e-4, atol=1e-4) and np.allclose(got["y"], want, rtol=1e-4, atol=1e-4)
      else "WRONG")
"""


def test_a_plan_made_on_one_thread_runs_on_another(tmp_path: Path) -> None:
    """oneDNN's f32 ``x64:gemm:jit`` convolution, one of the search's candidates, crashed the process
    (SIGSEGV) when executed on another thread than the one that made it, as a plan's kernels are
    (a thread pool serving a model, a forked child's worker thread): onednn_bf16 already refuses
    its bf16 twin for that reason. Run in a child process (a crash must not take pytest down)."""
    out = run_script(tmp_path, _OTHER_THREAD, timeout=180)
    if out.stdout.strip() == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), (out.returncode, out.stdout, out.stderr[-2000:])


def test_candidates_are_timed_on_weights_that_start_on_a_cache_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan runs on packed weights oneDNN allocated (64-byte aligned), and the scratch source and
    destination are ``aligned``; the candidates' weights were a plain numpy buffer (16-byte aligned):
    each 64-byte weight load of an AVX-512 kernel straddled two lines in the timing only, a
    1.1-1.5x handicap (aligned.py's numbers) against a ``MARGIN`` of 1.2, biased by vector width."""
    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    monkeypatch.setattr(onednn, "_plans", {})
    seen: list[Any] = []
    make = search._Candidate.__init__

    def spy(self: Any, pd: Any, args: Any) -> None:
        make(self, pd, args)
        seen.append(self)

    monkeypatch.setattr(search._Candidate, "__init__", spy)
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((32, 3, 3, 3)) / 5).astype(np.float32)
    _plan((1, 3, 30, 34), w, {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    assert seen
    assert all(c.weights.ctypes.data % 64 == 0 for c in seen), [(c.name, c.weights.ctypes.data % 64) for c in seen]


def test_threads_searching_one_kind_at_once_settle_on_one_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads building plans of one conv kind at once (a server's first requests, two image
    sizes) each searched, each plan kept its own thread's winner, and the later one overwrote the
    remembered choice: the same conv ran on two implementations (results differing in rounding by
    which thread finished first). The first choice stored is the kind's, for every plan."""
    import threading

    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    monkeypatch.setattr(onednn, "_plans", {})
    both = threading.Barrier(2, timeout=30)
    order = iter(["jit:avx2", "jit:avx512_core"])  # (the two threads' measurements disagree)
    lock = threading.Lock()

    def search_at_once(pd: Any, make: Any, mds: Any) -> str:
        with lock:
            name = next(order)
        try:
            both.wait(timeout=1)  # both searching before either stores
        except threading.BrokenBarrierError:
            pass  # (since the others wait for the first search of a kind, only one thread gets here)
        return name

    monkeypatch.setattr(search, "_search", search_at_once)
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((16, 3, 3, 3)) / 5).astype(np.float32)
    stem = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    impls: dict[int, str] = {}

    def build(h: int) -> None:
        impls[h] = _plan((1, 3, h, 40), w, stem).impl

    threads = [threading.Thread(target=build, args=(h,)) for h in (24, 32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(impls) == 2 and len(set(impls.values())) == 1, impls
    assert list(search.choices.values()) == [impls[24]]


def test_a_searched_residual_conv_keeps_its_in_place_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first conv with a residual (binary-add plan) whose search kept another implementation than
    oneDNN's first: ``in_place`` made its "sum" form on oneDNN's first choice, whose packed weight
    layout differs (16 vs 8 output channels a block), so the in-place form was refused and the
    executor's output-over-residual plan ran the binary form. It now takes the plan's implementation."""
    from pycann.kernels.providers import onednn_capi as capi

    monkeypatch.setattr(search, "choices", {})
    monkeypatch.setattr(search, "MIN_FLOPS", 0)
    monkeypatch.setattr(onednn, "_plans", {})
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 3, 33, 47)).astype(np.float32)
    w = (rng.standard_normal((24, 3, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    stem = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    win = conv_window(x.shape, w.shape, stem)
    with monkeypatch.context() as m:
        m.setattr(search, "eligible", lambda *a: False)
        first = onednn_conv_plan._Plan(x.shape, w, True, 1, win, tuple(win.out), False, None, True)  # oneDNN's choice
    other = "jit:avx2" if first.impl != "jit:avx2" else "jit:avx512_core"
    monkeypatch.setattr(search, "_search", lambda pd, make, mds: other)
    p = onednn._plan(x.shape, w, True, 1, win, tuple(win.out), False, None, True)
    if p.impl != other:
        pytest.skip(f"oneDNN offers no {other} convolution with a residual here")
    prim = p.in_place()
    assert prim is not None, (first.impl, p.impl)
    want = _ort_conv(x, w, b, stem, 1)
    r = rng.standard_normal(want.shape).astype(np.float32)
    xc, y = onednn.empty_channels_last(x.shape), onednn.empty_channels_last(want.shape)
    xc[...], y[...] = x, r
    with p.lock:
        p.src.set(capi.ptr(xc))
        p.dst.set(capi.ptr(y))
        p.bias.set(capi.ptr(b))
        prim.execute()
    np.testing.assert_allclose(y, want + r, rtol=1e-4, atol=1e-4)


_WIDE_PADS = r"""
import threading
import numpy as np
from pycann.kernels.providers import onednn, onednn_capi
try:
    onednn_capi.load()
except OSError:
    print("NOLIB"); raise SystemExit
from pycann.kernels.providers import numpy_blas as nb
from pycann.ops.nn.conv import conv_window

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 3, 33, 33)).astype(np.float32)
w = (rng.standard_normal((24, 3, 3, 3)) / 5).astype(np.float32)
b = rng.standard_normal(24).astype(np.float32)
win = conv_window(x.shape, w.shape, {"pads": [3, 3, 3, 3]})
want = nb.conv_im2col_gemm(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1, win)
y = onednn.conv_nhwc(x, w, b, 1, win)  # the plan is made (and run) on this thread
plans = [p for p in onednn._plans.values() if p is not None and p.x_shape == x.shape]
got = {}
t = threading.Thread(target=lambda: got.update(y=onednn.conv_nhwc(x, w, b, 1, win)))
t.start()
t.join()
print("IMPL", [p.impl for p in plans])
print("OK" if np.allclose(y, want, rtol=1e-4, atol=1e-4) and np.allclose(got["y"], want, rtol=1e-4, atol=1e-4)
      else "WRONG")
"""


def test_a_conv_whose_pads_reach_its_kernel_runs_on_another_thread(tmp_path: Path) -> None:
    """oneDNN's first choice for a conv whose pads reach the kernel size (3x3, pads 3) is its gemm
    convolution, which crashed the process (SIGSEGV) when run on another thread than its maker: such a
    plan takes the next implementation, or numpy computes it. Run in a child process."""
    out = run_script(tmp_path, _WIDE_PADS, timeout=180)
    if out.stdout.strip() == "NOLIB":
        pytest.skip("libdnnl.so.3 is not installed")
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), (out.returncode, out.stdout, out.stderr[-2000:])
    assert "gemm" not in out.stdout, out.stdout
