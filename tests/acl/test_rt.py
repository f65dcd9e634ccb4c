"""acl.rt: devices, contexts, streams, memory, events — results and error codes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pycann.acl as acl
from pycann.acl import constants as C

from .helpers import from_device, to_device

H2D, D2H, D2D, H2H = (C.ACL_MEMCPY_HOST_TO_DEVICE, C.ACL_MEMCPY_DEVICE_TO_HOST,
                      C.ACL_MEMCPY_DEVICE_TO_DEVICE, C.ACL_MEMCPY_HOST_TO_HOST)


def test_devices(acl_ready: int) -> None:
    assert acl.rt.get_device_count() == (1, 0)
    assert acl.rt.get_device() == (0, 0)
    assert acl.rt.get_run_mode() == (C.ACL_HOST, 0)
    assert acl.rt.set_device(1) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.reset_device(7) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.synchronize_device() == 0
    assert acl.rt.reset_device(0) == 0
    # a second reset (the device is no longer set) is an error, with the reason recorded
    assert acl.rt.reset_device(0) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert "device 0 is not set" in acl.get_recent_err_msg()
    with pytest.raises(TypeError):
        acl.rt.set_device("0")  # type: ignore[arg-type]


def test_contexts(acl_ready: int) -> None:
    ctx = acl_ready
    assert acl.rt.get_context() == (ctx, 0)
    ctx2, ret = acl.rt.create_context(0)
    assert ret == 0 and acl.rt.get_current_context() == (ctx2, 0)
    assert acl.rt.set_context(ctx) == 0 and acl.rt.get_context() == (ctx, 0)
    assert acl.rt.set_current_context(ctx2) == 0
    assert acl.rt.destroy_context(ctx2) == 0
    assert acl.rt.destroy_context(ctx2) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.set_context(ctx2) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.get_context()[1] == C.ACL_ERROR_RT_CONTEXT_NULL  # ctx2 was current
    assert acl.rt.malloc(16, 0) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    assert acl.rt.create_context(5)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.set_context(ctx) == 0
    # another thread has no current context until it sets one
    got: list[tuple[int, int]] = []

    def worker() -> None:
        got.append(acl.rt.get_context())
        acl.rt.set_context(ctx)
        got.append(acl.rt.get_context())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got[0][1] == C.ACL_ERROR_RT_CONTEXT_NULL and got[1] == (ctx, 0)


def test_default_context_of_set_device(no_acl: None) -> None:
    acl.init()
    acl.rt.set_device(0)
    ctx, ret = acl.rt.get_context()
    assert ret == 0 and ctx
    assert acl.rt.destroy_context(ctx) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE  # reset_device owns it
    assert acl.rt.reset_device(0) == 0
    assert acl.rt.get_context()[1] == C.ACL_ERROR_RT_CONTEXT_NULL
    acl.finalize()


def test_reset_device_force_releases_whatever_the_count(no_acl: None) -> None:
    """pyACL: ``set_device(0); set_device(0); reset_device_force(0)`` releases the device (it balanced
    one set_device only: the default context stayed current and a later reset_device succeeded)."""
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0 and acl.rt.set_device(0) == 0
    s, ret = acl.rt.create_stream()
    assert ret == 0
    assert acl.rt.reset_device_force(0) == 0
    assert acl.rt.get_context()[1] == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.rt.malloc(16, 0) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    assert acl.rt.reset_device_force(0) == C.ACL_ERROR_RT_INVALID_DEVICEID  # released already
    assert acl.rt.reset_device(0) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.set_device(0) == 0 and acl.rt.reset_device_force(0) == 0  # paired use works too
    assert acl.rt.reset_device_force(3) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.finalize() == 0


def test_malloc_free(acl_ready: int) -> None:
    p, ret = acl.rt.malloc(1000, C.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0 and p
    assert acl.rt.malloc(0, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert acl.rt.malloc(10, 99) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert acl.rt.malloc(10, C.ACL_MEM_MALLOC_NORMAL_ONLY | C.ACL_MEM_TYPE_HIGH_BAND_WIDTH)[1] == 0
    assert acl.rt.malloc(1 << 60, 0) == (0, C.ACL_ERROR_RT_MEMORY_ALLOCATION)
    assert acl.rt.malloc_cached(10, 0)[1] == 0
    assert acl.rt.free(p + 8) == C.ACL_ERROR_INVALID_PARAM  # interior pointer
    assert acl.rt.free_host(p) == C.ACL_ERROR_INVALID_PARAM  # wrong kind
    assert acl.rt.free(p) == 0
    assert acl.rt.free(p) == C.ACL_ERROR_RT_MEMORY_FREE  # double free
    assert "already freed" in acl.get_recent_err_msg()
    assert acl.rt.free(0) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.free(12345) == C.ACL_ERROR_INVALID_PARAM
    h, ret = acl.rt.malloc_host(64)
    assert ret == 0
    assert acl.rt.free(h) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.free_host(h) == 0 and acl.rt.free_host(h) == C.ACL_ERROR_RT_MEMORY_FREE
    assert acl.rt.malloc_host(-1) == (0, C.ACL_ERROR_INVALID_PARAM)
    st = acl.rt.memory_stats(0)
    assert st["allocs"] >= 3 and st["frees"] >= 1


def test_memcpy_all_kinds(acl_ready: int) -> None:
    x = np.arange(16, dtype=np.float32)
    d1 = to_device(x)
    d2, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memcpy(d2, 64, d1, 64, D2D) == 0
    np.testing.assert_array_equal(from_device(d2, (16,)), x)
    h, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy(h, 64, d2, 64, D2H) == 0
    y = np.zeros(16, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(y), 64, h, 64, H2H) == 0
    np.testing.assert_array_equal(y, x)
    z = np.zeros(16, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(z), 64, d1, 64, C.ACL_MEMCPY_DEFAULT) == 0
    np.testing.assert_array_equal(z, x)
    # a pointer inside an allocation (base + offset)
    assert acl.rt.memcpy(d2 + 32, 32, acl.util.numpy_to_ptr(np.full(8, 7, np.float32)), 32, H2D) == 0
    assert from_device(d2, (16,))[8:].tolist() == [7.0] * 8


def test_memcpy_errors(acl_ready: int) -> None:
    d, _ = acl.rt.malloc(64, 0)
    host = np.zeros(32, np.float32)  # 128 bytes
    hp = acl.util.numpy_to_ptr(host)
    assert acl.rt.memcpy(d, 64, hp, 128, H2D) == C.ACL_ERROR_INVALID_PARAM  # count > destMax
    assert acl.rt.memcpy(d, 128, hp, 128, H2D) == C.ACL_ERROR_INVALID_PARAM  # past the allocation
    assert acl.rt.memcpy(d, 64, hp, 64, D2H) == C.ACL_ERROR_INVALID_PARAM  # wrong kind
    assert acl.rt.memcpy(d, 64, hp, 64, 9) == C.ACL_ERROR_INVALID_PARAM  # unknown kind
    assert acl.rt.memcpy(d, 64, 0, 64, H2D) == C.ACL_ERROR_INVALID_PARAM  # null
    assert acl.rt.memcpy(d, 64, 0xDEAD0000, 64, H2D) == C.ACL_ERROR_INVALID_PARAM  # unknown
    ro = acl.util.bytes_to_ptr(b"\0" * 64)
    assert acl.rt.memcpy(ro, 64, d, 64, D2H) == C.ACL_ERROR_INVALID_PARAM  # bytes are read-only
    assert "read-only" in acl.get_recent_err_msg()
    acl.rt.free(d)
    assert acl.rt.memcpy(d, 64, hp, 64, H2D) == C.ACL_ERROR_INVALID_PARAM  # use after free
    assert "freed" in acl.get_recent_err_msg()
    assert host.sum() == 0  # nothing was written anywhere


def test_memset(acl_ready: int) -> None:
    d, _ = acl.rt.malloc(16, 0)
    assert acl.rt.memset(d, 16, 0x41, 16) == 0
    assert from_device(d, (16,), np.uint8).tolist() == [0x41] * 16
    assert acl.rt.memset(d + 8, 8, 0, 8) == 0
    assert from_device(d, (16,), np.uint8).tolist() == [0x41] * 8 + [0] * 8
    assert acl.rt.memset(d, 8, 0, 16) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.memset(d, 32, 0, 32) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.memset(0, 8, 0, 8) == C.ACL_ERROR_INVALID_PARAM


def test_get_mem_info(acl_ready: int) -> None:
    free0, total, ret = acl.rt.get_mem_info(C.ACL_HBM_MEM)
    assert ret == 0 and total >= free0 > 0
    acl.rt.malloc(1 << 20, 0)
    free1, _, _ = acl.rt.get_mem_info(C.ACL_DDR_MEM)
    assert free1 == free0 - (1 << 20)
    assert acl.rt.get_mem_info(42) == (0, 0, C.ACL_ERROR_INVALID_PARAM)


def test_streams_and_async_memory(acl_ready: int) -> None:
    s, ret = acl.rt.create_stream()
    assert ret == 0
    x = np.arange(1 << 16, dtype=np.float32)
    d, _ = acl.rt.malloc(x.nbytes, 0)
    out = np.zeros_like(x)
    assert acl.rt.memset_async(d, x.nbytes, 0, x.nbytes, s) == 0
    assert acl.rt.memcpy_async(d, x.nbytes, acl.util.numpy_to_ptr(x), x.nbytes, H2D, s) == 0
    assert acl.rt.memcpy_async(acl.util.numpy_to_ptr(out), x.nbytes, d, x.nbytes, D2H, s) == 0
    assert acl.rt.synchronize_stream(s) == 0
    np.testing.assert_array_equal(out, x)
    assert acl.rt.stream_query(s) == (0, 0)
    # errors found at enqueue time come back at once; nothing is queued
    assert acl.rt.memcpy_async(d, 4, acl.util.numpy_to_ptr(x), 8, H2D, s) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.memset_async(d, 4, 0, 8, s) == C.ACL_ERROR_INVALID_PARAM
    # a fault found when the stream runs the copy (freed meanwhile) comes back from synchronize
    gate = threading.Event()
    assert acl.rt.launch_callback(lambda _: gate.wait(), None, C.ACL_CALLBACK_BLOCK, s) == 0
    assert acl.rt.memcpy_async(d, x.nbytes, acl.util.numpy_to_ptr(x), x.nbytes, H2D, s) == 0
    assert acl.rt.stream_query(s) == (1, 0)
    acl.rt.free(d)
    gate.set()
    assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_stream(s) == 0
    assert acl.rt.synchronize_stream_with_timeout(s, 1000) == 0
    held = threading.Event()  # the stream is busy until the test says (a sleep could end first on a loaded CPU)
    assert acl.rt.launch_callback(lambda _: held.wait(), None, C.ACL_CALLBACK_NO_BLOCK, s) == 0
    assert acl.rt.synchronize_stream_with_timeout(s, 10) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    held.set()
    assert acl.rt.subscribe_report(1, s) == 0 and acl.rt.process_report(10) == 0
    assert acl.rt.unsubscribe_report(1, s) == 0
    assert acl.rt.launch_callback(lambda _: None, None, 7, s) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.destroy_stream(s) == 0
    assert acl.rt.destroy_stream(s) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.synchronize_stream(0) == 0  # the default stream
    assert acl.rt.destroy_stream_force(12345) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE


def test_query_event_status_reports_the_recorded_status(acl_ready: int) -> None:
    """aclrtQueryEventStatus gives aclrtEventRecordedStatus (NOT_READY 0: never recorded or not run
    yet, COMPLETE 1); aclrtQueryEvent (``query_event``) gives aclrtEventStatus (COMPLETE 0)."""
    s, _ = acl.rt.create_stream()
    ev, _ = acl.rt.create_event()
    assert acl.rt.query_event_status(ev) == (0, 0)  # never recorded: not ready
    assert acl.rt.query_event(ev) == (C.ACL_EVENT_STATUS_COMPLETE, 0)
    gate = threading.Event()
    acl.rt.launch_callback(lambda _: gate.wait(), None, C.ACL_CALLBACK_BLOCK, s)
    assert acl.rt.record_event(ev, s) == 0
    assert acl.rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0) == (0, 0)
    assert acl.rt.query_event(ev) == (C.ACL_EVENT_STATUS_NOT_READY, 0) == (1, 0)
    gate.set()
    assert acl.rt.synchronize_event(ev) == 0
    assert acl.rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_COMPLETE, 0) == (1, 0)
    assert acl.rt.query_event(ev) == (C.ACL_EVENT_STATUS_COMPLETE, 0) == (0, 0)
    assert acl.rt.reset_event(ev, s) == 0
    assert acl.rt.query_event_status(ev) == (0, 0)
    assert acl.rt.destroy_event(ev) == 0
    assert acl.rt.destroy_stream(s) == 0


def test_event_flags(acl_ready: int) -> None:
    """aclrtCreateEventWithFlag accepts its documented flags (cann-interfaces.md §1.7) and ORs of them;
    anything else is ACL_ERROR_INVALID_PARAM with event 0."""
    for flag in (C.ACL_EVENT_SYNC, C.ACL_EVENT_CAPTURE_STREAM_PROGRESS, C.ACL_EVENT_TIME_LINE,
                 C.ACL_EVENT_EXTERNAL, C.ACL_EVENT_TIME_LINE | C.ACL_EVENT_SYNC):
        for create in (acl.rt.create_event_with_flag, acl.rt.create_event_ex_with_flag):
            ev, ret = create(flag)
            assert ret == 0 and ev != 0
            assert acl.rt.destroy_event(ev) == 0
    for flag in (0, 0x4, 0x10, 0x40, 12345, -1):
        assert acl.rt.create_event_with_flag(flag) == (0, C.ACL_ERROR_INVALID_PARAM)
        assert "invalid event flag" in acl.get_recent_err_msg()
    with pytest.raises(TypeError):
        acl.rt.create_event_with_flag("1")  # type: ignore[arg-type]


def test_events(acl_ready: int) -> None:
    s, _ = acl.rt.create_stream()
    start, _ = acl.rt.create_event()
    end, ret = acl.rt.create_event_with_flag(C.ACL_EVENT_TIME_LINE)
    assert ret == 0
    assert acl.rt.event_elapsed_time(start, end) == (0.0, C.ACL_ERROR_INVALID_PARAM)  # never recorded
    gate = threading.Event()
    assert acl.rt.record_event(start, s) == 0
    acl.rt.launch_callback(lambda _: (gate.wait(), time.sleep(0.03)), None, C.ACL_CALLBACK_BLOCK, s)
    assert acl.rt.record_event(end, s) == 0
    assert acl.rt.query_event_status(end) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)
    assert acl.rt.query_event(end) == (C.ACL_EVENT_STATUS_NOT_READY, 0)
    assert acl.rt.event_elapsed_time(start, end)[1] == C.ACL_ERROR_INVALID_PARAM  # not complete yet
    gate.set()
    assert acl.rt.synchronize_event(end) == 0
    assert acl.rt.query_event(end) == (C.ACL_EVENT_STATUS_COMPLETE, 0)
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and 25 <= ms < 20_000  # milliseconds (the 30 ms sleep would read 30000 in microseconds)
    # stream_wait_event orders a second stream after the first
    s2, _ = acl.rt.create_stream()
    ev, _ = acl.rt.create_event()
    order: list[str] = []
    acl.rt.launch_callback(lambda _: (time.sleep(0.03), order.append("first")), None, 1, s)
    acl.rt.record_event(ev, s)
    assert acl.rt.stream_wait_event(s2, ev) == 0
    acl.rt.launch_callback(lambda _: order.append("second"), None, 1, s2)
    assert acl.rt.synchronize_stream(s2) == 0
    assert order == ["first", "second"]
    assert acl.rt.reset_event(ev, s) == 0
    assert acl.rt.record_event(ev, 0) == 0 and acl.rt.synchronize_event(ev) == 0
    assert acl.rt.record_event(ev, 999) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.stream_wait_event(s2, 999) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.record_event(s, s) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE  # a stream is not an event
    for e in (start, end, ev):
        assert acl.rt.destroy_event(e) == 0
    assert acl.rt.destroy_event(ev) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.synchronize_event(ev) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, C.ACL_ERROR_INVALID_RESOURCE_HANDLE)
    assert acl.rt.query_event(ev) == (C.ACL_EVENT_STATUS_NOT_READY, C.ACL_ERROR_INVALID_RESOURCE_HANDLE)
    acl.rt.destroy_stream(s)
    acl.rt.destroy_stream(s2)


def test_calls_need_init(no_acl: None) -> None:
    assert acl.rt.malloc(8, 0) == (0, C.ACL_ERROR_UNINITIALIZE)
    assert acl.rt.create_stream() == (0, C.ACL_ERROR_UNINITIALIZE)
    assert acl.rt.get_device_count() == (0, C.ACL_ERROR_UNINITIALIZE)
    assert acl.rt.create_event() == (0, C.ACL_ERROR_UNINITIALIZE)
    assert acl.rt.memcpy(1, 1, 1, 1, 1) == C.ACL_ERROR_UNINITIALIZE


def test_a_callback_copies_the_streams_result_to_the_host(acl_ready: int) -> None:
    """CANN's async samples copy each result to the host inside its callback; the callback ran on the
    stream worker, which had no context: memcpy returned ACL_ERROR_RT_CONTEXT_NULL and the app read
    an unwritten buffer. It now runs in the launching thread's context."""
    s, _ = acl.rt.create_stream()
    x = np.arange(16, dtype=np.float32)
    src = to_device(x)
    dev, _ = acl.rt.malloc(64, 0)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy_async(dev, 64, src, 64, C.ACL_MEMCPY_DEVICE_TO_DEVICE, s) == 0
    rets: list[int] = []
    assert acl.rt.launch_callback(lambda h: rets.append(acl.rt.memcpy(h, 64, dev, 64, C.ACL_MEMCPY_DEVICE_TO_HOST)),
                                  host, C.ACL_CALLBACK_BLOCK, s) == 0
    assert acl.rt.synchronize_stream(s) == 0
    assert rets == [0], acl.get_recent_err_msg()
    np.testing.assert_array_equal(np.frombuffer(acl.util.ptr_to_bytes(host, 64), np.float32), x)
    for p in (src, dev):
        assert acl.rt.free(p) == 0
    assert acl.rt.free_host(host) == 0 and acl.rt.destroy_stream(s) == 0


def test_a_raising_callback_is_logged_and_named(acl_ready: int, caplog: pytest.LogCaptureFixture) -> None:
    """A callback that raises: its traceback is logged at once (naming it), synchronize_stream reports it
    once, naming the callback as the application's (it said "internal error TaskFailed"), and the stream
    goes on. CANN documents no code for it (aclrtCallback returns void): the code stays
    ACL_ERROR_INTERNAL_ERROR."""
    s, _ = acl.rt.create_stream()
    ran: list[int] = []

    def broken_callback(_: object) -> None:
        raise ValueError("user bug")

    with caplog.at_level("ERROR", logger="pycann.acl"):
        assert acl.rt.launch_callback(broken_callback, None, C.ACL_CALLBACK_BLOCK, s) == 0
        assert acl.rt.launch_callback(lambda d: ran.append(d), 7, C.ACL_CALLBACK_BLOCK, s) == 0
        assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_INTERNAL_ERROR
    msg = acl.get_recent_err_msg()
    assert "broken_callback" in msg and "ValueError: user bug" in msg and "internal error" not in msg
    (rec,) = [r for r in caplog.records if r.exc_info and "broken_callback" in r.getMessage()]
    assert rec.exc_info is not None and rec.exc_info[0] is ValueError
    assert ran == [7]  # the stream went on
    assert acl.rt.synchronize_stream(s) == 0  # reported once
    assert acl.rt.destroy_stream(s) == 0
