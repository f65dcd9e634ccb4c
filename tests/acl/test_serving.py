"""An inference service on pycann: several threads sharing one session / model id, bad dynamic
settings, and what a call in flight may meet. Each test reproduces a defect found by driving
pycann as a service would (values checked against numpy's reference of the small models)."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pycann import InferSession
from tests.acl.conftest import small_ref


def test_dymshape_caps_are_per_call_not_per_session(dyn_om: Path) -> None:
    """Two threads share one session with their own ``custom_sizes``: each call's outputs are
    checked against its own sizes. (The check read the session's latest sizes: a batch-8 call
    whose run overlapped a batch-1 call with ``custom_sizes=12`` failed, "needs 96 bytes, more
    than custom_sizes 12".)"""
    s = InferSession(0, dyn_om)
    run = s.model.run
    small_done = threading.Event()

    def run_after_small(feeds: Any) -> Any:
        if np.shape(feeds[0])[0] == 8:  # the big call's run overlaps the whole small call
            assert small_done.wait(10)
        return run(feeds)

    s.model.run = run_after_small  # type: ignore[method-assign]
    big = np.ones((8, 4), np.float32)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(s.infer([big], mode="dymshape", custom_sizes=96)))
    t.start()
    small = s.infer([np.ones((1, 4), np.float32)], mode="dymshape", custom_sizes=12)
    small_done.set()
    t.join(20)
    assert not t.is_alive()
    assert got, "the batch-8 call failed (see the thread's exception above)"
    for o, want in zip(got[0], small_ref(big)):
        np.testing.assert_allclose(o, want, rtol=1e-6)
    assert small[0].shape == (1, 3)
    with pytest.raises(RuntimeError, match="more than custom_sizes 12"):  # a call's own caps still hold
        s.infer([big], mode="dymshape", custom_sizes=12)


def _range_model(acl_ready: int, dyn_om: Path) -> tuple[int, int, int]:
    """(model id, its dynamic tensor's index, the output dataset) of ``dyn_om`` (x [1~8, 4])."""
    import pycann.acl as acl
    from tests.acl.helpers import dataset_of

    mid, ret = acl.mdl.load_from_file(str(dyn_om))
    assert ret == 0
    d = acl.mdl.create_desc()
    assert acl.mdl.get_desc(d, mid) == 0
    idx, _ = acl.mdl.get_input_index_by_name(d, "ascend_mbatch_shape_data")
    outd, _ = dataset_of([(acl.rt.malloc(8 * 12, 0)[0], 8 * 12) for _ in range(2)])
    return mid, idx, outd


def test_range_model_dynamic_dims_are_checked_against_the_ranges(acl_ready: int, dyn_om: Path) -> None:
    """``set_input_dynamic_dims`` on a range model checks each value as ``set_dynamic_batch_size``
    does: 145013 naming the input, dim and range, 145012 for the wrong count (docs/acl.md's table).
    (0, 9 and -2 for x [1~8, 4] were taken, the execute then failing on the shape or buffer size;
    -2's message was "1 dims given; the model has 1 dynamic dims"; a wrong count was 100000.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C
    from tests.acl.helpers import dataset_of, from_device, to_device

    mid, idx, outd = _range_model(acl_ready, dyn_om)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    ind, _ = dataset_of([(to_device(x), x.nbytes)])
    for bad in (0, 9, -2):
        assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, {"dimCount": 1, "dims": [bad]}) == \
            C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID, bad
        msg = acl.get_recent_err_msg()
        assert f"{bad} for x dim 0 is outside the range 1~8" in msg, msg
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, [3, 4]) == C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID
    assert "the model has 1 dynamic dims (x dim 0)" in acl.get_recent_err_msg()
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, [8]) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    np.testing.assert_allclose(from_device(_out_ptr(outd, 1), (8, 3)),
                               small_ref(x)[1], rtol=1e-6)


def _out_ptr(ds: int, i: int) -> int:
    import pycann.acl as acl

    return int(acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(ds, i)))


def test_desc_shape_outside_the_range_is_a_shape_error_before_the_buffer_size(acl_ready: int,
                                                                               dyn_om: Path) -> None:
    """A tensor desc outside the input's ``--input_shape`` range gives 145021 naming the input and
    range, whatever the buffer's size. (It gave 145006, "buffer of 128 bytes, shape [1099511627776,
    4] needs 17592186044416": the app would grow the buffer, to then learn the range.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C
    from tests.acl.helpers import dataset_of, to_device

    mid, _, outd = _range_model(acl_ready, dyn_om)
    x = np.ones((8, 4), np.float32)
    for dims in ([9, 4], [2**40, 4]):
        ind, _ = dataset_of([(to_device(x), x.nbytes)])
        td = acl.create_tensor_desc(C.ACL_FLOAT, dims, C.ACL_FORMAT_ND)
        assert acl.mdl.set_dataset_tensor_desc(ind, td, 0)[1] == 0
        assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_GE_SHAPE_INVALID, dims
        msg = acl.get_recent_err_msg()
        assert f"input 'x': expected shape [1~8,4], received {dims}" in msg and "range 1~8" in msg, msg


FORK_SCRIPT = """
import os, signal, sys, threading, warnings
import numpy as np
import pycann.acl as acl
from tests.acl.conftest import small_ref
from tests.acl.helpers import dataset_of, from_device, to_device
warnings.simplefilter("ignore")
acl.init(); acl.rt.set_device(0); acl.rt.create_context(0)
mid, _ = acl.mdl.load_from_file(sys.argv[1])
x = np.arange(8, dtype=np.float32).reshape(2, 4)
outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
ind, _ = dataset_of([(to_device(x), 32)]); outd, _ = dataset_of([(o, 24) for o in outs])
s = acl.rt.create_stream()[0]
idle = acl.rt.create_stream()[0]
assert acl.mdl.execute_async(mid, ind, outd, idle) == 0 and acl.rt.synchronize_stream(idle) == 0  # (its worker runs)
gate = threading.Event()
acl.rt.launch_callback(lambda _: gate.wait(10), None, 1, s)  # running when the process forks
ev = acl.rt.create_event()[0]
acl.mdl.execute_async(mid, ind, outd, s); acl.rt.record_event(ev, s)  # queued behind it
pid = os.fork()
if pid == 0:
    signal.alarm(10)  # (a hang dies of SIGALRM)
    print("lost", acl.rt.synchronize_stream(s), acl.get_recent_err_msg(), flush=True)
    print("event", acl.rt.synchronize_event(ev), flush=True)
    print("again", acl.rt.synchronize_stream(s), flush=True)
    for st in (s, idle):
        acl.mdl.execute_async(mid, ind, outd, st)
        print("rerun", acl.rt.synchronize_stream(st), np.allclose(from_device(outs[1], (2, 3)), small_ref(x)[1]), flush=True)
    os._exit(0)
gate.set()
ret, status = acl.rt.synchronize_stream(s), os.waitpid(pid, 0)[1]  # (printed once the child is done)
print("parent", ret, flush=True)
print("child", status, flush=True)
"""


def test_forked_child_streams_report_lost_tasks_and_run_new_ones(small_om: Path, tmp_path: Path) -> None:
    """A forked child (a pre-fork server's worker) uses the streams it inherited: the tasks queued or
    running at the fork are reported once by ``synchronize_stream`` (ACL_ERROR_RT_FAILURE, saying
    why), an event recorded behind them completes, and new tasks run. (The child's
    ``synchronize_stream`` waited forever: the stream's worker thread is not in the child.)"""
    from tests.forking import run_script

    r = run_script(tmp_path, FORK_SCRIPT.replace("sys.argv[1]", repr(str(small_om))), timeout=60)
    lines = r.stdout.splitlines()
    assert "child 0" in lines, r.stdout + r.stderr  # 14 (SIGALRM): the child hung
    lost = next(ln for ln in lines if ln.startswith("lost"))
    assert lost.startswith("lost 500003 ") and "task callback failed: it was queued or running when the " \
        "process forked" in lost and "(and 2 more failed tasks)" in lost, lost
    for want in ("event 0", "again 0", "rerun 0 True", "parent 0"):
        assert want in lines, r.stdout + r.stderr
    assert lines.count("rerun 0 True") == 2


@pytest.mark.parametrize("call", ["synchronize_stream", "synchronize_device", "synchronize_event", "destroy_stream"])
def test_callback_waiting_for_its_own_stream_fails_instead_of_hanging(acl_ready: int, call: str) -> None:
    """A callback that synchronizes its own stream (or the device, or an event recorded behind it
    there), or destroys it, gets ACL_ERROR_INVALID_PARAM saying why, and the stream goes on. (Each
    waited for itself: the stream hung for good, every later synchronize timing out.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C

    s, _ = acl.rt.create_stream()
    ev, _ = acl.rt.create_event()
    got: dict[str, Any] = {}

    def callback(_: Any) -> None:
        assert acl.rt.set_context(acl_ready) == 0
        if call == "synchronize_event":
            assert acl.rt.record_event(ev, s) == 0
            got["ret"] = acl.rt.synchronize_event(ev)
        elif call == "synchronize_device":
            got["ret"] = acl.rt.synchronize_device()
        else:
            got["ret"] = getattr(acl.rt, call)(s)
        got["msg"] = acl.get_recent_err_msg()

    assert acl.rt.launch_callback(callback, None, C.ACL_CALLBACK_BLOCK, s) == 0
    assert acl.rt.synchronize_stream_with_timeout(s, 10_000) == 0, acl.get_recent_err_msg()
    assert got["ret"] == C.ACL_ERROR_INVALID_PARAM
    assert "(a callback) would wait forever" in got["msg"], got["msg"]
    assert acl.rt.launch_callback(lambda _: got.update(later=True), None, C.ACL_CALLBACK_BLOCK, s) == 0
    assert acl.rt.synchronize_stream_with_timeout(s, 10_000) == 0 and got["later"]
    assert acl.rt.destroy_event(ev) == 0
    assert acl.rt.destroy_stream(s) == 0


class _MeetingDict(dict):  # type: ignore[type-arg]
    """A dict whose ``get`` (from a thread other than the main one) looks up, then waits up to 0.3 s for
    a second thread to have looked up too: two threads releasing one thing both check it before
    either removes it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.meet = threading.Barrier(2, timeout=0.3)

    def get(self, *args: Any) -> Any:
        found = super().get(*args)
        if threading.current_thread() is not threading.main_thread():
            try:
                self.meet.wait()
            except threading.BrokenBarrierError:
                pass
        return found


def _twice_at_once(release: Any) -> list[int]:
    rets: list[int] = []
    ts = [threading.Thread(target=lambda: rets.append(release())) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    return sorted(rets)


def test_two_threads_releasing_one_handle_or_model_one_succeeds(acl_ready: int, small_om: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads unloading one model id, or destroying one dataset / data buffer / desc, at once:
    one gets ACL_SUCCESS, the other the documented code. (Both checked the handle, then both removed
    it: two successes, the second release of a released model never reported.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C
    from pycann.acl import _models, _state

    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    monkeypatch.setattr(_models, "_models", _MeetingDict(_models._models))
    assert _twice_at_once(lambda: acl.mdl.unload(mid)) == [0, C.ACL_ERROR_INVALID_MODEL_ID]
    assert mid not in _models._models

    handles = _state.handles
    monkeypatch.setattr(handles, "_objs", _MeetingDict(handles._objs))
    ds, buf, td = acl.mdl.create_dataset(), acl.create_data_buffer(0, 0), acl.mdl.create_desc()
    for destroy, h in ((acl.mdl.destroy_dataset, ds), (acl.destroy_data_buffer, buf), (acl.mdl.destroy_desc, td)):
        assert _twice_at_once(functools.partial(destroy, h)) == [0, C.ACL_ERROR_INVALID_RESOURCE_HANDLE], destroy


def test_single_op_uses_its_descs_as_they_were_at_the_call(acl_ready: int) -> None:
    """``op.execute_v2`` runs when the stream gets to it, with the descs as they were when it was
    called: an app that reuses a desc for its next op (``set_tensor_shape``) or destroys it gets the
    op it asked for; so does an op handle whose descs were destroyed after ``create_handle``. (The
    queued op read the desc at run time: a Softmax asked for on [2, 3] ran on [3, 2], wrong values
    and ACL_SUCCESS; the handle's execution failed with 200005.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C
    from tests.acl.helpers import from_device, to_device

    s, _ = acl.rt.create_stream()
    x = np.arange(6, dtype=np.float32)
    e = np.exp(x.reshape(2, 3))
    want = e / e.sum(-1, keepdims=True)
    d = acl.create_tensor_desc(C.ACL_FLOAT, [2, 3], C.ACL_FORMAT_ND)
    ib = acl.create_data_buffer(to_device(x), 24)
    outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
    obs = [acl.create_data_buffer(o, 24) for o in outs]
    attr = acl.op.create_attr()
    assert acl.op.set_attr_int(attr, "axis", -1) == 0
    h, ret = acl.op.create_handle("Softmax", [d], [d], attr)
    assert ret == 0
    gate = threading.Event()
    assert acl.rt.launch_callback(lambda _: gate.wait(10), None, C.ACL_CALLBACK_BLOCK, s) == 0  # (holds the stream)
    assert acl.op.execute_v2("Softmax", [d], [ib], [d], [obs[0]], attr, s) == 0
    assert acl.set_tensor_shape(d, [3, 2]) == 0  # the next op's shape, before the stream ran this one
    acl.destroy_tensor_desc(d)  # (void, as pyACL)
    assert acl.op.execute_with_handle(h, [ib], [obs[1]], s) == 0
    gate.set()
    assert acl.rt.synchronize_stream(s) == 0, acl.get_recent_err_msg()
    for o in outs:
        np.testing.assert_allclose(from_device(o, (2, 3)), want, rtol=1e-6)


def test_freed_and_evicted_memory_is_not_kept_alive_by_the_registry() -> None:
    """What the address space remembers of a freed allocation (for "use after free" messages) holds
    none of its memory: a host buffer evicted from the ``numpy_to_ptr`` registry can die, and a
    device block dropped from the pool's cache is released. (The records kept a view of each: a
    service registering a 20 MB array per request grew by 20 MB a request past the registry's
    512 MiB, to 2 GB after 100; ``empty_cache`` released nothing.)"""
    import gc
    import weakref

    from pycann.runtime import errors as E
    from pycann.runtime.memory import DEVICE_KINDS, HOST_KINDS, AddressSpace, MemKind
    from pycann.runtime.memory_pool import MemoryPool

    space = AddressSpace(user_cap_bytes=1 << 20)
    users = [np.full(512 << 10, i, np.uint8) for i in range(6)]
    ptrs = [space.register_user(u) for u in users]
    refs = [weakref.ref(u) for u in users]
    del users
    gc.collect()
    assert sum(r() is None for r in refs) == 4  # evicted (the registry holds the newest 1 MiB)
    with pytest.raises(E.UseAfterFree):
        space.resolve(ptrs[0], 1, HOST_KINDS)

    pool = MemoryPool("d", 64 << 20)
    a = space.allocate(pool, 4 << 20, MemKind.DEVICE, 0)
    block = weakref.ref(a.block)
    space.free(a.base, DEVICE_KINDS)
    del a
    pool.empty_cache()
    gc.collect()
    assert block() is None


def test_pool_cache_stays_within_the_peak_in_use() -> None:
    """A service allocating a new size class per request (images of any size) keeps at most its peak
    in use (or 64 MiB) of free blocks cached, dropping the least recently freed first; sizes that
    recur still come from the cache. (Every size class ever freed stayed cached until the pool's
    capacity, the machine's RAM, was reached: 40 sizes of at most 80 MiB, one at a time, held
    1640 MiB.)"""
    from pycann.runtime.memory_pool import MemoryPool

    mib = 1 << 20
    pool = MemoryPool("d", 64 << 30)  # (np.empty: the blocks' pages are never touched)
    for k in range(40):
        pool.give(pool.take((k + 1) * 2 * mib), (k + 1) * 2 * mib)
    st = pool.stats()
    assert st["peak_in_use_bytes"] == 80 * mib
    assert st["cached_bytes"] == st["reserved_bytes"] <= 80 * mib, st
    assert st["cached_bytes"] >= 78 * mib  # the newest block stays
    hits = st["cache_hits"]
    for _ in range(10):  # two recurring sizes: both stay cached
        for n in (30 * mib, 40 * mib):
            pool.give(pool.take(n), n)
    assert pool.stats()["cache_hits"] >= hits + 18
    small = MemoryPool("s", 1 << 30)
    for k in range(100):  # small blocks: up to 64 MiB cached whatever the peak
        small.give(small.take((k + 1) * 4096), (k + 1) * 4096)
    assert small.stats()["cached_bytes"] == sum((k + 1) * 4096 for k in range(100)) <= 64 * mib


def test_finalize_while_another_thread_unloads(small_om: Path, no_acl: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A model unloaded by another thread while ``acl.finalize`` lists the models left loaded is not
    an error: finalize completes and reports the others. (It raised KeyError in the middle:
    ACL_ERROR_INTERNAL_ERROR, acl left initialised with its runtime running.)"""
    import warnings

    import pycann.acl as acl
    from pycann.acl import _state, mdl

    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    a, _ = acl.mdl.load_from_file(str(small_om))
    b, _ = acl.mdl.load_from_file(str(small_om))
    listing = mdl.loaded_model_ids

    def listed_then_unloaded() -> list[int]:
        ids = listing()
        assert acl.mdl.unload(a) == 0  # another thread, right after the listing
        return ids

    monkeypatch.setattr(mdl, "loaded_model_ids", listed_then_unloaded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert acl.finalize() == 0, acl.get_recent_err_msg()
    assert not _state.initialized
    assert _state.last_leak_report == [f"model {b} ({small_om}) was not unloaded"]


SIGNALS_SCRIPT = """
import signal, sys, time
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import pycann
from pycann.config import PlanCacheConfig
from pycann.ge.run.model import LoadedModel
rng = np.random.default_rng(0)
nodes, inits, prev = [], [], "x"
for i in range(4):  # pointwise convs: one oneDNN gemm:jit matmul each on the shape-generic plan
    inits.append(numpy_helper.from_array((rng.standard_normal((96, 96, 1, 1)) * 0.1).astype(np.float32), f"w{i}"))
    nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"]), helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    prev = f"r{i}"
g = helper.make_graph(nodes, "pw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96, "H", "W"])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
lm = LoadedModel.from_compiled(pycann.compile_model(m), plan_cache=PlanCacheConfig(policy="generic"))
xs = [rng.random((1, 96, h, w)).astype(np.float32) for h, w in ((3, 24), (6, 40), (1, 80), (3, 64))]
want = [lm.run([x])[0] for x in xs]
signal.signal(signal.SIGALRM, lambda *_: None)  # a handler that does nothing
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
t, n, bad = time.time(), 0, 0
while time.time() - t < 1.0:
    bad += not np.array_equal(lm.run([xs[n % 4]])[0], want[n % 4])
    n += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print("runs", n, "bad", bad)
"""


def test_signals_during_runs_do_not_corrupt_memory(tmp_path: Path) -> None:
    """A process taking signals while it runs models (a 5 kHz ``setitimer``, as a per-request timeout
    or a process manager's signals would) keeps running, with the same results. (oneDNN's JIT gemm
    keeps data below the stack pointer and the handler's frame landed on it: the shape-generic plan's
    pointwise convs aborted within half a second, "corrupted size vs. prev_size", even with a
    handler that does nothing; runtime/signal_stack.py.)"""
    from tests.forking import run_script

    r = run_script(tmp_path, SIGNALS_SCRIPT, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert "bad 0" in r.stdout, r.stdout
    assert "Exception ignored" not in r.stderr, r.stderr[-2000:]  # (the alternate stack's cleanup at exit)


def test_openmp_workers_of_a_thread_that_runs_models_block_process_signals(dyn_om: Path) -> None:
    """The OpenMP workers that run a model's kernels with its thread block the process-directed
    signals (a timer's SIGALRM, SIGCHLD, ...), so those land on a thread with an alternate signal
    stack, never on a worker inside oneDNN's JIT gemm; the calling thread's own mask is unchanged."""
    import ctypes
    import signal

    from pycann.ge.run.model import LoadedModel
    from pycann.kernels.providers import openmp

    lm = LoadedModel.from_file(dyn_om)
    masks: dict[int, set[int]] = {}

    def work() -> None:
        lm.run([np.ones((2, 4), np.float32)])
        lib = openmp.library()
        if lib is None or lib.omp_get_max_threads() < 2:
            return
        cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            lambda _: masks.__setitem__(int(lib.omp_get_thread_num()), set(signal.pthread_sigmask(signal.SIG_BLOCK, []))))
        lib.GOMP_parallel(ctypes.cast(cb, ctypes.c_void_p), None, 0, 0)

    before = set(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    if not masks:
        pytest.skip("no libgomp loaded or a one-thread OpenMP team")
    assert signal.SIGALRM not in masks[0] and signal.SIGCHLD not in masks[0], masks[0]  # the caller: as it was
    workers = [i for i in masks if i > 0]
    assert workers, masks
    for i in workers:
        assert openmp.ASYNC_SIGNALS <= masks[i], (i, sorted(openmp.ASYNC_SIGNALS - masks[i]))
        assert signal.SIGSEGV not in masks[i] and signal.SIGFPE not in masks[i]
    assert set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) == before  # (this thread untouched)


def test_threads_that_run_models_get_an_alternate_signal_stack(dyn_om: Path) -> None:
    """Each thread that runs a model has an alternate signal stack (Python's handlers run there, off
    the stack oneDNN's kernels use), switched off again when the thread ends."""
    from pycann.ge.run.model import LoadedModel
    from pycann.runtime import signal_stack

    if signal_stack.current() is None:
        pytest.skip("no sigaltstack in this C library")
    lm = LoadedModel.from_file(dyn_om)
    seen: list[Any] = []

    def work() -> None:
        seen.append(signal_stack.current())
        lm.run([np.ones((2, 4), np.float32)])
        seen.append(signal_stack.current())

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    before, after = seen
    assert before[1] & 2  # SS_DISABLE: a new thread has none
    assert not after[1] & 2 and after[2] >= 1 << 16, after


def test_dims_text_names_the_bad_value() -> None:
    """``--dymShape`` / ``--dymDims`` text (``parse_dims``) with a negative or non-integer dim says
    which. (A negative dim passed, and the bench then said the input "has dynamic dims: set
    --dymShape" although it was set; 'abc' gave "invalid literal for int() with base 10".)"""
    from pycann.acl.session import parse_dims

    with pytest.raises(ValueError, match=r"invalid dims 'x:1,3,48,-5': -5 is negative"):
        parse_dims("x:1,3,48,-5")
    with pytest.raises(ValueError, match=r"invalid dims 'x:1,3,48,abc': 'abc' is not an integer"):
        parse_dims("x:1,3,48,abc")
    assert parse_dims("x:1, 3,48,0;y:2") == {"x": [1, 3, 48, 0], "y": [2]}


def test_callback_destroying_its_context_completes(acl_ready: int) -> None:
    """A callback that destroys the context its stream belongs to succeeds: the context's other
    streams are drained and destroyed, its own stream ends after the callback. (It waited for itself;
    then, refused half-way, left the context's later streams running.)"""
    import pycann.acl as acl
    import pycann.acl.constants as C

    ctx, ret = acl.rt.create_context(0)
    assert ret == 0
    s1, _ = acl.rt.create_stream()
    s2, _ = acl.rt.create_stream()
    got: dict[str, Any] = {}
    done = threading.Event()

    def callback(_: Any) -> None:
        acl.rt.set_context(ctx)
        got["ret"] = acl.rt.destroy_context(ctx)
        got["msg"] = acl.get_recent_err_msg()
        done.set()

    assert acl.rt.launch_callback(callback, None, C.ACL_CALLBACK_BLOCK, s1) == 0
    assert done.wait(10), "the callback hung"
    assert got["ret"] == 0, got["msg"]
    assert acl.rt.set_context(acl_ready) == 0
    assert acl.rt.synchronize_stream(s2) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE  # destroyed with its context


def test_onednn_object_whose_init_raised_is_dropped_quietly() -> None:
    """A oneDNN object whose construction raised before it had a handle (an exception from a signal
    handler, a per-request timeout, lands anywhere) is dropped without an error. (Its ``__del__``
    raised AttributeError: "Exception ignored in _Owned.__del__ ... no attribute 'handle'" on stderr
    for every interrupted call.)"""
    import sys

    from pycann.kernels.providers import onednn_capi

    try:
        onednn_capi.load()
    except OSError:
        pytest.skip("oneDNN is not installed")
    raised: list[Any] = []
    old, sys.unraisablehook = sys.unraisablehook, raised.append
    try:
        with pytest.raises(AttributeError):
            onednn_capi.Memory(None)  # (md.handle: raises before the memory has a handle)
        import gc

        gc.collect()
    finally:
        sys.unraisablehook = old
    assert not raised, [str(r.exc_value) for r in raised]


FORK_HELD = """
import numpy as np
import pycann.acl as acl
from pycann.acl import _models, _state
from pycann.acl.constants import ACL_MEMCPY_HOST_TO_DEVICE
acl.init(); acl.rt.set_device(0); ctx, _ = acl.rt.create_context(0)
rt = _state.runtime
pool = rt.devices[0].pool
"""
FORK_HELD_CHILD = """
x = np.ones(16, np.float32)
p, ret = acl.rt.malloc(64, 0)
ok = ret == 0 and acl.rt.memcpy(p, 64, acl.util.numpy_to_ptr(x), 64, ACL_MEMCPY_HOST_TO_DEVICE) == 0
ok = ok and acl.rt.free(p) == 0 and acl.mdl.destroy_dataset(acl.mdl.create_dataset()) == 0
ok = ok and acl.rt.create_stream()[1] == 0 and acl.mdl.unload(12345) != 0 and acl.rt.set_device(0) == 0
os._exit(0 if ok else 3)
"""


def test_forked_child_is_not_stuck_on_a_lock_a_parent_thread_held(tmp_path: Path) -> None:
    """A process forks while another of its threads is inside an acl call (holding the address
    space's, the memory pool's, the handle table's, the model table's, the runtime's or the
    context's lock): the child's acl calls work. (That thread is not in the child: its first malloc,
    memcpy or dataset call waited for it for ever.)"""
    from tests.forking import fork_while_held, run_script

    locks = "_state.space._lock, pool._lock, _state.handles._lock, _models._lock, rt._lock, rt.devices[0].contexts[-1]._lock"
    r = run_script(tmp_path, fork_while_held(FORK_HELD, locks, FORK_HELD_CHILD), timeout=60)
    assert "child 0" in r.stdout, r.stdout + r.stderr[-2000:]  # 14: SIGALRM, the child hung


def test_cur_output_dims_are_the_calling_threads_execution(acl_ready: int, dyn_om: Path) -> None:
    """Two threads execute one dynamic-batch model id with batches 2 and 5 (``execute`` and
    ``execute_async``); each reads ``get_cur_output_dims`` after its own execution, which the other's
    ended after: each gets its own batch. (The model kept one latest execution: a thread got the
    other's dims and would read its output buffer as [5, 3] instead of [2, 3]; 20 of 120 calls of
    three threads.) A thread that executed nothing gets the model's latest."""
    import pycann.acl as acl
    import pycann.acl.constants as C
    from tests.acl.helpers import dataset_of, to_device

    mid, ret = acl.mdl.load_from_file(str(dyn_om))
    assert ret == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, mid) == 0
    mine_done, other_done = threading.Event(), threading.Event()
    got: dict[int, list[int]] = {}

    def work(batch: int, first: bool) -> None:
        assert acl.rt.set_context(acl_ready) == 0
        x = np.ones((batch, 4), np.float32)
        ind, _ = dataset_of([(to_device(x, 8 * 16), 8 * 16)])
        outd, _ = dataset_of([(acl.rt.malloc(8 * 12, 0)[0], 8 * 12) for _ in range(2)])
        td = acl.create_tensor_desc(C.ACL_FLOAT, [batch, 4], C.ACL_FORMAT_ND)
        acl.mdl.set_dataset_tensor_desc(ind, td, 0)
        if not first:
            assert mine_done.wait(10)  # the other thread executed: this one's execution ends last
        if first:
            assert acl.mdl.execute(mid, ind, outd) == 0
        else:
            stream, _ = acl.rt.create_stream()
            assert acl.mdl.execute_async(mid, ind, outd, stream) == 0
            assert acl.rt.synchronize_stream(stream) == 0
            assert acl.rt.destroy_stream(stream) == 0
        (mine_done if first else other_done).set()
        if first:
            assert other_done.wait(10)
        got[batch] = acl.mdl.get_cur_output_dims(desc, 1)[0]["dims"]

    ts = [threading.Thread(target=work, args=(2, True)), threading.Thread(target=work, args=(5, False))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert got == {2: [2, 3], 5: [5, 3]}
    assert acl.mdl.get_cur_output_dims(desc, 1)[0]["dims"] == [5, 3]  # (this thread ran none: the latest)
    assert acl.mdl.destroy_desc(desc) == 0
    assert acl.mdl.unload(mid) == 0
