"""Models and streams of a destroyed context (``destroy_context``, or the last ``reset_device`` for a
device's default context): CANN loads, executes and unloads a model in one context (cann-interfaces.md
§1.4), and destroying it releases what the model and streams run on. Every call on them returns an
error code (``ACL_ERROR_INVALID_RESOURCE_HANDLE``, as docs/acl.md lists for destroyed contexts and
streams; ``ACL_ERROR_RT_CONTEXT_NULL`` when the thread is left without a context), never runs and
never raises; ``unload`` still releases the model. Values are checked against numpy."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

import pycann.acl as acl
from pycann.acl import constants as C
from tests.acl.conftest import small_ref
from tests.acl.helpers import dataset_of, from_device, to_device

X = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.0


def _io() -> tuple[int, int, int, int]:
    """(input dataset, output dataset, y pointer, z pointer) for the small model, x = X."""
    xi = to_device(X)
    y, ret = acl.rt.malloc(24, C.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    z, ret = acl.rt.malloc(24, C.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    _zero(y)
    _zero(z)
    ind, _ = dataset_of([(xi, 32)])
    outd, _ = dataset_of([(y, 24), (z, 24)])
    return ind, outd, y, z


def _check_ran(y: int, z: int) -> None:
    want = small_ref(X)
    np.testing.assert_allclose(from_device(y, (2, 3)), want[0], rtol=1e-6)
    np.testing.assert_allclose(from_device(z, (2, 3)), want[1], rtol=1e-6)


def _stream_and_model(small_om: Path) -> tuple[int, int, tuple[int, int, int, int]]:
    """A stream and the model loaded in the current context, and ``_io()``'s datasets and outputs."""
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    return stream, mid, _io()


def _zero(p: int) -> None:
    assert acl.rt.memset(p, 24, 0, 24) == 0


def test_a_model_of_a_destroyed_context_does_not_execute(acl_ready: int, small_om: Path) -> None:
    ctx = acl_ready
    stream, mid, (ind, outd, y, z) = _stream_and_model(small_om)
    assert acl.mdl.execute(mid, ind, outd) == 0
    _check_ran(y, z)
    assert acl.rt.destroy_context(ctx) == 0
    # the thread has no context now: that is the first error
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.mdl.execute_async(mid, ind, outd, 0) == C.ACL_ERROR_RT_CONTEXT_NULL
    # the context's own stream went with it
    assert acl.mdl.execute_async(mid, ind, outd, stream) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.synchronize_stream(stream) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.set_context(ctx) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.destroy_context(ctx) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    # in another live context the model may not run either (it ran, before)
    assert acl.rt.set_device(0) == 0
    ctx2, ret = acl.rt.create_context(0)
    assert ret == 0
    _zero(y)
    _zero(z)
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    msg = acl.get_recent_err_msg()
    assert f"model id {mid}" in msg and "destroy_context" in msg and "load it again" in msg
    s2, ret = acl.rt.create_stream()
    assert ret == 0
    assert acl.mdl.execute_async(mid, ind, outd, s2) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.execute_async(mid, ind, outd, 0) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.synchronize_stream(s2) == 0
    assert not from_device(y, (2, 3)).any() and not from_device(z, (2, 3)).any()  # nothing ran
    # describing it still works (host-side); unload releases it, then the id is gone
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, mid) == 0 and acl.mdl.get_num_outputs(desc) == 2
    assert acl.mdl.unload(mid) == 0
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_INVALID_MODEL_ID
    # loaded again in the live context, it runs
    mid2, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    assert acl.mdl.execute(mid2, ind, outd) == 0
    _check_ran(y, z)
    assert acl.mdl.unload(mid2) == 0
    assert acl.mdl.destroy_desc(desc) == 0
    assert acl.rt.destroy_stream(s2) == 0
    assert acl.rt.destroy_context(ctx2) == 0


def test_a_model_of_the_default_context_stops_with_the_last_reset_device(no_acl: None, small_om: Path) -> None:
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.set_device(0) == 0  # counted: the first reset leaves the default context
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    ind, outd, y, z = _io()
    assert acl.rt.reset_device(0) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0  # one set_device still holds it
    _check_ran(y, z)
    assert acl.rt.reset_device(0) == 0  # the last: the default context is destroyed
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.rt.set_device(0) == 0  # a new default context
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert "reset_device" in acl.get_recent_err_msg()
    assert acl.mdl.unload(mid) == 0
    assert acl.rt.reset_device(0) == 0


def test_an_async_execution_on_another_contexts_stream_is_refused_at_the_call(acl_ready: int, small_om: Path) -> None:
    """A model of ``ctx`` queued on another context's stream could see ``ctx`` destroyed before that stream
    runs it. CANN refuses the stream at the call (``ACL_ERROR_RT_STREAM_CONTEXT``); pycann accepted it and
    reported the destroyed context at ``synchronize_stream``. Nothing runs, the outputs are untouched."""
    ctx = acl_ready
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    ind, outd, y, z = _io()
    assert acl.rt.set_device(0) == 0  # the default context: another one, whose stream outlives ctx
    other, ret = acl.rt.create_stream()
    assert ret == 0
    assert acl.rt.set_context(ctx) == 0
    assert acl.mdl.execute_async(mid, ind, outd, other) == C.ACL_ERROR_RT_STREAM_CONTEXT
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.synchronize_stream(other) == 0  # nothing was queued
    assert not from_device(y, (2, 3)).any() and not from_device(z, (2, 3)).any()
    assert acl.mdl.unload(mid) == 0
    assert acl.rt.destroy_stream(other) == 0


def test_a_thread_whose_current_context_another_thread_destroyed(acl_ready: int, small_om: Path) -> None:
    """Thread B runs a model in context ctx; the main thread destroys ctx; B's next calls return codes."""
    ctx = acl_ready
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    ind, outd, y, z = _io()
    codes: list[int] = []
    destroyed = threading.Event()
    ran = threading.Event()

    def worker() -> None:
        codes.append(acl.rt.set_context(ctx))
        codes.append(acl.mdl.execute(mid, ind, outd))
        ran.set()
        destroyed.wait(30)
        codes.append(acl.mdl.execute(mid, ind, outd))
        codes.append(acl.rt.create_stream()[1])
        codes.append(acl.rt.malloc(16, C.ACL_MEM_MALLOC_HUGE_FIRST)[1])

    t = threading.Thread(target=worker)
    t.start()
    assert ran.wait(30)
    assert acl.rt.destroy_context(ctx) == 0
    destroyed.set()
    t.join(30)
    assert codes == [0, 0, C.ACL_ERROR_RT_CONTEXT_NULL, C.ACL_ERROR_RT_CONTEXT_NULL, C.ACL_ERROR_RT_CONTEXT_NULL]
    assert acl.rt.set_device(0) == 0  # (this thread's context went too)
    _check_ran(y, z)
    assert acl.mdl.unload(mid) == 0


def test_an_event_of_a_destroyed_context_is_refused_but_can_be_destroyed(acl_ready: int) -> None:
    """Events belong to their context too: after destroy_context every use of one is
    ACL_ERROR_INVALID_RESOURCE_HANDLE (they worked on, from another context's streams);
    destroy_event still releases it, once."""
    ctx = acl_ready
    ev, ret = acl.rt.create_event()
    assert ret == 0
    assert acl.rt.record_event(ev, 0) == 0 and acl.rt.synchronize_event(ev) == 0
    assert acl.rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_COMPLETE, 0)
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.set_device(0) == 0
    live, ret = acl.rt.create_event()
    assert ret == 0 and acl.rt.record_event(live, 0) == 0 and acl.rt.synchronize_event(live) == 0
    bad = C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.record_event(ev, 0) == bad
    assert "context was destroyed" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_event(ev) == bad
    assert acl.rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, bad)
    assert acl.rt.query_event(ev) == (C.ACL_EVENT_STATUS_NOT_READY, bad)
    assert acl.rt.reset_event(ev, 0) == bad
    assert acl.rt.stream_wait_event(0, ev) == bad
    assert acl.rt.event_elapsed_time(ev, live) == (0.0, bad)
    assert acl.rt.event_elapsed_time(live, live) == (0.0, 0)
    assert acl.rt.destroy_event(ev) == 0
    assert acl.rt.destroy_event(ev) == bad
    assert acl.rt.destroy_event(live) == 0


def test_a_stream_of_another_live_context_is_refused(acl_ready: int, small_om: Path) -> None:
    """CANN's runtime refuses a stream that is not of the current context (ACL_ERROR_RT_STREAM_CONTEXT,
    107003) while both contexts live; pycann ran the model there. Nothing runs; back in the stream's
    context the same call works and gives numpy's values."""
    ctx = acl_ready
    stream, mid, (ind, outd, y, z) = _stream_and_model(small_om)
    ctx2, ret = acl.rt.create_context(0)  # now current
    assert ret == 0 and acl.rt.get_context() == (ctx2, 0)
    assert acl.mdl.execute_async(mid, ind, outd, stream) == C.ACL_ERROR_RT_STREAM_CONTEXT == 107003
    assert "another context" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(stream) == 0
    np.testing.assert_array_equal(from_device(z, (2, 3)), np.zeros((2, 3), np.float32))  # it did not run
    assert acl.rt.set_context(ctx) == 0
    assert acl.mdl.execute_async(mid, ind, outd, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    _check_ran(y, z)
    assert acl.mdl.execute_async(mid, ind, outd, 0) == 0  # the current context's default stream
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.mdl.unload(mid) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_context(ctx2) == 0
