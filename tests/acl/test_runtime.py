"""pycann.runtime on its own: memory pool, address space, streams, events, devices."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pycann.runtime import AddressSpace, CopyKind, Event, MemKind, MemoryPool, Runtime, Stream, elapsed_ms
from pycann.runtime import errors as E
from pycann.runtime.memory import DEVICE_KINDS, HOST_KINDS
from pycann.runtime.memory_pool import round_size


def test_pool_caches_blocks_and_counts() -> None:
    pool = MemoryPool("t", 1 << 20)
    a = pool.take(1000)
    assert a.size == round_size(1000) == 1024
    pool.give(a, 1000)
    b = pool.take(900)  # same size class: the cached block comes back
    assert b is a
    st = pool.stats()
    assert (st["allocs"], st["frees"], st["cache_hits"], st["cache_misses"]) == (2, 1, 1, 1)
    assert st["in_use_bytes"] == 1024 and st["requested_bytes"] == 900 and st["peak_requested_bytes"] == 1000
    assert round_size(3 << 20) == 4 << 20


def test_pool_out_of_memory_after_dropping_cache() -> None:
    pool = MemoryPool("t", 4096)
    blk = pool.take(2048)
    pool.give(blk, 2048)
    big = pool.take(4096)  # needs the cached 2048 released first
    assert pool.stats()["cached_bytes"] == 0 and big.size == 4096
    with pytest.raises(E.OutOfMemory):
        pool.take(512)
    assert pool.stats()["oom"] == 1
    assert pool.free_bytes == 0


@pytest.fixture()
def space() -> AddressSpace:
    return AddressSpace()


def _dev(space: AddressSpace, n: int = 64) -> int:
    return space.allocate(MemoryPool("d", 1 << 20), n, MemKind.DEVICE, 0).base


def test_pointers_inside_allocations(space: AddressSpace) -> None:
    p = _dev(space, 100)
    space.write(p + 10, np.arange(5, dtype=np.uint8))
    assert list(space.read(p + 10, 5)) == [0, 1, 2, 3, 4]
    with pytest.raises(E.OutOfBounds):
        space.read(p + 90, 20)
    with pytest.raises(E.InvalidPointer):
        space.read(0, 1)
    with pytest.raises(E.InvalidPointer):
        space.read(p + 100 + 8192, 1)


def test_free_errors(space: AddressSpace) -> None:
    p = _dev(space)
    with pytest.raises(E.InvalidPointer):
        space.free(p + 1, DEVICE_KINDS)
    with pytest.raises(E.KindMismatch):
        space.free(p, HOST_KINDS)
    space.free(p, DEVICE_KINDS)
    with pytest.raises(E.DoubleFree):
        space.free(p, DEVICE_KINDS)
    with pytest.raises(E.UseAfterFree):
        space.read(p + 3, 1)
    q = _dev(space)
    assert q != p  # addresses are never reused


def test_copy_checks_kind_and_sizes(space: AddressSpace) -> None:
    d = _dev(space, 16)
    host = np.arange(16, dtype=np.uint8)
    h = space.register_user(host)
    with pytest.raises(E.KindMismatch):
        space.copy(d, 16, h, 16, CopyKind.DEVICE_TO_HOST)
    with pytest.raises(E.OutOfBounds):
        space.copy(d, 8, h, 16, CopyKind.HOST_TO_DEVICE)
    space.copy(d, 16, h, 16, CopyKind.HOST_TO_DEVICE)
    out = np.zeros(16, np.uint8)
    space.copy(space.register_user(out), 16, d, 16, CopyKind.DEFAULT)
    assert (out == host).all()


def test_user_registration_views_and_bytes(space: AddressSpace) -> None:
    arr = np.arange(10, dtype=np.float32)
    p = space.register_user(arr)
    p_view = space.register_user(arr[4:])
    assert p_view == p + 16
    assert space.read(p_view, 8).view(np.float32).tolist() == [4.0, 5.0]
    b = bytes(range(8))
    pb = space.register_user(b)
    with pytest.raises(E.ReadOnly):
        space.write(pb, np.zeros(1, np.uint8))
    assert space.kind_of(pb) is MemKind.USER


def test_user_registrations_are_bounded(space: AddressSpace) -> None:
    space.user_cap_count = 2
    a, b, c = (np.zeros(4, np.uint8) for _ in range(3))
    pa = space.register_user(a)
    space.register_user(b)
    space.register_user(c)
    with pytest.raises((E.UseAfterFree, E.InvalidPointer)):
        space.read(pa, 1)


def test_free_while_pinned_defers_recycling(space: AddressSpace) -> None:
    pool = MemoryPool("d", 1 << 20)
    p = space.allocate(pool, 64, MemKind.DEVICE, 0).base
    with space.access(p, 64) as view:
        space.free(p, DEVICE_KINDS)
        assert pool.stats()["cached_bytes"] == 0  # not recycled while in use
        view[:] = 1
    assert pool.stats()["cached_bytes"] == 512


def test_stream_runs_in_order_and_reports_errors() -> None:
    s = Stream()
    seen: list[int] = []
    for i in range(20):
        s.submit(lambda i=i: seen.append(i))
    s.submit(lambda: 1 / 0, "boom")
    s.submit(lambda: seen.append(99))
    with pytest.raises(E.TaskFailed) as ei:
        s.synchronize()
    assert isinstance(ei.value.cause, ZeroDivisionError)
    assert seen == list(range(20)) + [99]
    s.synchronize()  # the error was reported once
    s.destroy()
    with pytest.raises(E.InvalidHandle):
        s.submit(lambda: None)


def test_wait_event_orders_streams_and_elapsed_is_real() -> None:
    a, b = Stream(), Stream()
    start, done = Event(), Event()
    out: list[str] = []
    start.record(a)
    a.submit(lambda: (time.sleep(0.05), out.append("a")))
    done.record(a)
    b.wait_event(done)
    b.submit(lambda: out.append("b"))
    b.synchronize()
    assert out == ["a", "b"]
    ms = elapsed_ms(start, done)
    assert 40 <= ms < 20_000  # milliseconds (the 50 ms sleep would read 50000 in microseconds)
    fresh = Event()
    with pytest.raises(E.NotReady):
        _ = fresh.timestamp
    assert fresh.query()
    a.destroy()
    b.destroy()


def test_sync_timeout() -> None:
    s = Stream()
    gate = threading.Event()
    s.submit(gate.wait)
    with pytest.raises(E.WaitTimeout):
        s.synchronize(0.01)
    assert not s.query()
    gate.set()
    s.synchronize()
    assert s.query()


def test_shutdown_does_not_hang_on_a_stuck_stream() -> None:
    rt = Runtime(memory_bytes=1 << 20)
    ctx = rt.set_device(0)
    s = ctx.create_stream(site="app.py:1")
    gate = threading.Event()
    s.submit(gate.wait)
    _, streams = rt.shutdown(timeout=0.05)
    assert streams == [s] and s.describe() == f"stream {s.id} (created at app.py:1)"
    gate.set()


def test_runtime_devices_and_contexts() -> None:
    rt = Runtime(device_count=2, memory_bytes=1 << 20)
    with pytest.raises(E.NoContext):
        rt.malloc(10)
    with pytest.raises(E.InvalidDevice):
        rt.set_device(2)
    ctx = rt.set_device(1)
    assert rt.current is ctx and ctx.device.id == 1
    a = rt.malloc(100, site="here")
    assert rt.space.kind_of(a.base) is MemKind.DEVICE and a.device == 1
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(rt.current))
    t.start()
    t.join()
    assert seen == [None]  # the current context is per thread
    rt.set_device(1)
    rt.reset_device(1)
    assert rt.current is ctx  # still one set_device outstanding
    rt.reset_device(1)
    assert rt.current is None and ctx.destroyed
    leaked, _ = rt.shutdown()
    assert [x.site for x in leaked] == ["here"]
