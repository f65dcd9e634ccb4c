"""Weight reorders queued on a plan build's helper thread (``kernels/providers/background_pack.py``):
the block's jobs run off the calling thread and are all done when it ends, a primitive bound to a
packing still queued waits for it (on the building thread and on any other), a failed reorder
fails the build, and models give the same numbers (against ONNX Runtime) with the helper on or off.
The static model's first arena is made during the load and taken by the first run."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ge.run.plan import Plan
from pycann.kernels.providers import background_pack, onednn, onednn_packed
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from tests.kernels.pack_faults import fail_queued_reorders
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(20261205)
needs_onednn = pytest.mark.skipif(not onednn.available(), reason="oneDNN (libdnnl.so.3) missing")


def test_jobs_run_on_a_helper_and_are_done_when_the_block_ends() -> None:
    ran_on: list[str] = []
    first_ran = threading.Event()
    tickets = []
    with background_pack.packing():
        assert background_pack.active()
        tickets.append(background_pack.submit(lambda: (ran_on.append(threading.current_thread().name),
                                                       first_ran.set())))
        assert first_ran.wait(5), "the helper did not run the job while the block was open"
        for _ in range(5):
            tickets.append(background_pack.submit(lambda: ran_on.append(threading.current_thread().name)))
    assert not background_pack.active()
    assert all(t.done() for t in tickets) and len(ran_on) == 6
    assert ran_on[0] == "pycann-pack"
    # what was still queued at the end ran on the helper or, beside it, on the building thread
    assert set(ran_on) <= {"pycann-pack", threading.current_thread().name}


def test_the_block_end_takes_queued_jobs_beside_the_helper() -> None:
    gate, held = threading.Event(), threading.Event()
    ran_on: list[str] = []
    with background_pack.packing():
        background_pack.submit(lambda: (held.set(), gate.wait(5)))  # the helper is held: what follows
        assert held.wait(5)  # can only run at the block's end, on this thread
        background_pack.submit(lambda: ran_on.append(threading.current_thread().name))
        background_pack.submit(gate.set)
    assert ran_on == [threading.current_thread().name]


def test_outside_a_block_a_job_runs_now_on_the_caller() -> None:
    ran_on: list[str] = []
    t = background_pack.submit(lambda: ran_on.append(threading.current_thread().name))
    assert t.done() and ran_on == [threading.current_thread().name]


def test_nested_blocks_share_the_outer_helper_and_the_outer_end_waits() -> None:
    gate = threading.Event()
    order: list[str] = []
    with background_pack.packing():
        background_pack.submit(gate.wait)  # holds the helper until released
        try:
            with background_pack.packing():
                t = background_pack.submit(lambda: order.append("inner job"))
            order.append("inner block ended")  # the inner end did not wait for its job
            assert not t.done()
        finally:
            gate.set()
    assert order == ["inner block ended", "inner job"] and t.done()


def test_a_failed_job_fails_the_block_and_its_ticket() -> None:
    def boom() -> None:
        raise capi.DnnlError("dnnl_primitive_execute", 5)

    with pytest.raises(capi.DnnlError, match="dnnl_primitive_execute"), background_pack.packing():
        t = background_pack.submit(boom)
        later = background_pack.submit(lambda: None)  # a later good job does not hide the failure
    assert t.done() and later.done()
    with pytest.raises(capi.DnnlError):
        t.wait()


def test_the_block_own_error_wins_and_the_helper_is_stopped() -> None:
    with pytest.raises(KeyError), background_pack.packing():
        background_pack.submit(lambda: None)
        raise KeyError("the build failed")
    assert not background_pack.active()
    assert not [t for t in threading.enumerate() if t.name == "pycann-pack"]


def test_switched_off_every_job_runs_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_pack, "ENABLED", False)
    ran_on: list[str] = []
    with background_pack.packing():
        assert not background_pack.active()
        background_pack.submit(lambda: ran_on.append(threading.current_thread().name))
    assert ran_on == [threading.current_thread().name]


def _plain_copy(mem: capi.Memory, shape: tuple[int, ...]) -> np.ndarray:
    """``mem`` (any layout) reordered back into a C-order array: a primitive that reads it."""
    out = np.empty(shape, np.float32)
    user = capi.MemoryDesc.strided(shape, [s // 4 for s in out.strides])
    capi.Primitive(capi.reorder_pd(mem.md, user), [(capi.ARG_FROM, mem), (capi.ARG_TO, capi.Memory(user, capi.ptr(out)))]).execute()
    return out


def _blocked(shape: tuple[int, ...]) -> tuple[np.ndarray, capi.MemoryDesc, capi.MemoryDesc]:
    w = RNG.standard_normal(shape).astype(np.float32)
    src = capi.MemoryDesc.strided(shape, [s // 4 for s in w.strides])
    dst = capi.MemoryDesc.strided(shape, list(reversed([int(np.prod(shape[-i:])) if i else 1
                                                        for i in range(len(shape))])))  # column-major
    return w, src, dst


@needs_onednn
def test_a_primitive_bound_to_a_queued_packing_waits_for_it() -> None:
    w, src, dst = _blocked((64, 48))
    gate = threading.Event()
    with background_pack.packing():
        background_pack.submit(gate.wait)  # the reorder below queues behind this
        timer = threading.Timer(0.05, gate.set)
        try:
            mem = capi_ops.reorder(src, capi.ptr(w), dst, keep=w)
            assert mem.ticket is not None and not mem.ticket.done()
            timer.start()
            got = _plain_copy(mem, w.shape)  # executes before the block ends: must wait for the reorder
        finally:
            timer.cancel()
            gate.set()
    np.testing.assert_array_equal(got, w)


@needs_onednn
def test_another_thread_finds_the_shared_packing_and_waits_for_it() -> None:
    w, src, dst = _blocked((32, 80))
    gate = threading.Event()
    got: list[np.ndarray] = []
    with background_pack.packing():
        background_pack.submit(gate.wait)
        try:
            mem = onednn_packed.packed(w, src, dst)

            def other() -> None:  # (no block on this thread: the shared cache hands it the queued memory)
                again = onednn_packed.packed(w, src, dst)
                assert again is mem
                got.append(_plain_copy(again, w.shape))

            t = threading.Thread(target=other)
            t.start()
            t.join(0.2)
            assert t.is_alive(), "the other thread read the packing before its reorder ran"
        finally:
            gate.set()  # (a failed check must not leave the helper waiting: the block's end joins it)
        t.join()
    np.testing.assert_array_equal(got[0], w)


def _conv_model() -> onnx.ModelProto:
    """3x3 convs of 64 channels (Winograd-eligible), a 1x1 conv, a residual and a Gemm head."""
    def conv(name: str, i: str, o: str, m: int, c: int, k: int) -> tuple[onnx.NodeProto, onnx.TensorProto]:
        wt = (RNG.standard_normal((m, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype(np.float32)
        return (helper.make_node("Conv", [i, name], [o], pads=[k // 2] * 4),
                numpy_helper.from_array(wt, name))

    n1, w1 = conv("w1", "x", "a", 64, 64, 3)
    n2, w2 = conv("w2", "ar", "b", 64, 64, 3)
    n3, w3 = conv("w3", "s", "c", 32, 64, 1)
    fc = numpy_helper.from_array(RNG.standard_normal((32, 10)).astype(np.float32), "fc")
    nodes = [n1, helper.make_node("Relu", ["a"], ["ar"]), n2, helper.make_node("Add", ["b", "x"], ["s"]), n3,
             helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "packs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], [w1, w2, w3, fc])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@needs_onednn
@pytest.mark.parametrize("enabled", [True, False])
def test_model_numbers_with_the_helper_on_and_off(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_pack, "ENABLED", enabled)
    model = _conv_model()
    x = RNG.standard_normal((2, 64, 20, 20)).astype(np.float32)
    lm = LoadedModel.from_compiled(compile_model(model))
    (want,) = run_ort(model, {"x": x})
    for _ in range(2):
        np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_failed_packing_fails_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    fail_queued_reorders(monkeypatch)
    cm = compile_model(_conv_model())
    with pytest.raises(capi.DnnlError, match="dnnl_primitive_execute"):
        LoadedModel.from_compiled(cm)


def _static_plans(lm: LoadedModel) -> list[Plan]:
    return [c.plan for c in lm.executor._cache.values()]  # type: ignore[attr-defined]


@needs_onednn
def test_the_static_model_first_arena_is_made_at_load_and_taken_by_the_first_run() -> None:
    model = _conv_model()
    lm = LoadedModel.from_compiled(compile_model(model))
    (plan,) = _static_plans(lm)
    assert plan.arena_layout and plan.arenas_made == 1 and len(plan._arenas) == 1
    buffer = plan._arenas[0].buffer
    assert buffer.nbytes >= plan.arena_bytes and not buffer.any()  # written (zeros) at load
    x = RNG.standard_normal((2, 64, 20, 20)).astype(np.float32)
    (want,) = run_ort(model, {"x": x})
    np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)
    assert plan.arenas_made == 1 and plan._arenas[0].buffer is buffer


def test_inline_keeps_every_job_on_the_calling_thread() -> None:
    ran_on: list[str] = []
    with background_pack.inline(), background_pack.packing():
        assert not background_pack.active()
        background_pack.submit(lambda: ran_on.append(threading.current_thread().name))
    assert ran_on == [threading.current_thread().name]
    with background_pack.packing():
        assert background_pack.active()  # (inline ended with its block)


@needs_onednn
def test_a_weight_finalizer_inside_a_locked_section_does_not_deadlock() -> None:
    """A garbage collection inside one of ``onednn_packed``'s locked sections can run a dead weight's
    finalizer on the same thread: it took the (non-reentrant) lock and hung the thread (a CI run).
    The drop now waits for the next locked section, and a lookup of that key misses meanwhile."""
    w, src, dst = _blocked((16, 24))
    mem = onednn_packed.packed(w, src, dst)
    key = (capi.ptr(w), tuple(w.shape), tuple(w.strides), w.dtype.str)
    done = threading.Event()

    def finalizer_inside_the_lock() -> None:
        with onednn_packed._locked():
            onednn_packed._drop(key)  # what the weight's finalizer does when a GC runs here
            assert onednn_packed._lookup(key, src, dst) is None  # (pending: not served)
        done.set()

    t = threading.Thread(target=finalizer_inside_the_lock, daemon=True)
    t.start()
    t.join(5)
    assert done.is_set(), "deadlock: the finalizer waited for the lock its own thread held"
    with onednn_packed._locked():
        assert key not in onednn_packed._entries and not onednn_packed._pending
    again = onednn_packed.packed(w, src, dst)  # packed anew, right values
    assert again is not mem
    np.testing.assert_array_equal(_plain_copy(again, w.shape), w)
