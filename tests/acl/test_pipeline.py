"""Concurrency: a two-stream copy/compute pipeline ordered by events, and several threads
executing one loaded model at once — both must give the synchronous path's answers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

import pycann.acl as acl
from pycann.acl import constants as C

from .conftest import small_ref
from .helpers import dataset_of, from_device, to_device


def test_two_stream_pipeline(acl_ready: int, small_om: Path) -> None:
    mid, _ = acl.mdl.load_from_file(str(small_om))
    rng = np.random.default_rng(7)
    frames = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(6)]
    copy_s, _ = acl.rt.create_stream()
    comp_s, _ = acl.rt.create_stream()
    # a slow start on the copy stream: without the events, compute would read zeros
    acl.rt.launch_callback(lambda _: time.sleep(0.05), None, C.ACL_CALLBACK_BLOCK, copy_s)
    results = [(np.full((2, 3), np.nan, np.float32), np.full((2, 3), np.nan, np.float32)) for _ in frames]
    events = []
    for k, x in enumerate(frames):
        din, _ = acl.rt.malloc(32, 0)
        acl.rt.memset(din, 32, 0, 32)
        outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
        ind, _ = dataset_of([(din, 32)])
        outd, _ = dataset_of([(o, 24) for o in outs])
        copied, _ = acl.rt.create_event()
        computed, _ = acl.rt.create_event()
        events += [copied, computed]
        assert acl.rt.memcpy_async(din, 32, acl.util.numpy_to_ptr(x), 32, C.ACL_MEMCPY_HOST_TO_DEVICE, copy_s) == 0
        assert acl.rt.record_event(copied, copy_s) == 0
        assert acl.rt.stream_wait_event(comp_s, copied) == 0
        assert acl.mdl.execute_async(mid, ind, outd, comp_s) == 0
        assert acl.rt.record_event(computed, comp_s) == 0
        assert acl.rt.stream_wait_event(copy_s, computed) == 0
        for o, host in zip(outs, results[k]):
            ret = acl.rt.memcpy_async(acl.util.numpy_to_ptr(host), 24, o, 24, C.ACL_MEMCPY_DEVICE_TO_HOST, copy_s)
            assert ret == 0
    assert acl.rt.synchronize_stream(copy_s) == 0
    assert acl.rt.synchronize_stream(comp_s) == 0
    for x, (y, z) in zip(frames, results):
        sync = _sync_run(mid, x)
        np.testing.assert_array_equal(y, sync[0])
        np.testing.assert_array_equal(z, sync[1])
        np.testing.assert_allclose(y, small_ref(x)[0], rtol=1e-6)
    ms, ret = acl.rt.event_elapsed_time(events[0], events[-1])
    assert ret == 0 and ms >= 0  # events of different streams share one clock
    for e in events:
        acl.rt.destroy_event(e)


def _sync_run(mid: int, x: np.ndarray) -> list[np.ndarray]:
    dx = to_device(x)
    outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
    ind, _ = dataset_of([(dx, 32)])
    outd, _ = dataset_of([(o, 24) for o in outs])
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    return [from_device(o, (2, 3)) for o in outs]


def test_threads_share_one_model(acl_ready: int, small_om: Path) -> None:
    ctx = acl_ready
    mid, _ = acl.mdl.load_from_file(str(small_om))
    errors: list[str] = []

    def worker(seed: int) -> None:
        try:
            assert acl.rt.set_context(ctx) == 0
            rng = np.random.default_rng(seed)
            for _ in range(10):
                x = rng.standard_normal((2, 4)).astype(np.float32)
                got = _sync_run(mid, x)
                for g, w in zip(got, small_ref(x)):
                    np.testing.assert_allclose(g, w, rtol=1e-6)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
