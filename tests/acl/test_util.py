"""acl.util: host pointers to and from Python buffers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pycann.acl as acl
from pycann.acl import constants as C


def test_numpy_and_bytes_pointers(acl_ready: int) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = acl.util.numpy_to_ptr(a)
    assert p == a.ctypes.data  # the real address, no copy
    view = acl.util.ptr_to_numpy(p, (2, 3), C.NPY_FLOAT32)
    view[0, 0] = 42.0
    assert a[0, 0] == 42.0  # zero-copy both ways
    assert acl.util.ptr_to_bytes(p + 4, 8) == a.tobytes()[4:12]
    b = b"hello pycann"
    pb = acl.util.bytes_to_ptr(b)
    assert acl.util.ptr_to_bytes(pb, len(b)) == b
    assert not acl.util.ptr_to_numpy(pb, (4,), C.NPY_UBYTE).flags.writeable
    ba = bytearray(4)
    acl.rt.memcpy(acl.util.bytes_to_ptr(ba), 4, pb, 4, C.ACL_MEMCPY_HOST_TO_HOST)
    assert bytes(ba) == b"hell"
    assert "bytes_to_ptr" in dir(acl.util)  # samples feature-test this


def test_discontiguous_arrays(acl_ready: int) -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4).T
    with pytest.warns(UserWarning, match="discontiguous"):
        acl.util.numpy_to_ptr(a)
    ptr, c = acl.util.numpy_contiguous_to_ptr(a)
    assert c.flags.c_contiguous and acl.util.ptr_to_numpy(ptr, (4, 3), C.NPY_INT).tolist() == a.tolist()


def test_malloc_host_views(acl_ready: int) -> None:
    h, _ = acl.rt.malloc_host(16)
    arr = acl.util.ptr_to_numpy(h, (4,), C.NPY_FLOAT32)
    arr[:] = [1, 2, 3, 4]
    assert np.frombuffer(acl.util.ptr_to_bytes(h, 16), np.float32).tolist() == [1, 2, 3, 4]
    assert acl.rt.free_host(h) == 0
    h2, _ = acl.rt.malloc_host(16)
    assert acl.rt.memset(h2, 16, 0x11, 16) == 0
    arr[:] = 0  # the exported view of freed memory must not alias the new allocation
    assert acl.util.ptr_to_bytes(h2, 16) == b"\x11" * 16


def test_util_errors(acl_ready: int) -> None:
    d, _ = acl.rt.malloc(16, 0)
    with pytest.raises(ValueError, match="host memory"):
        acl.util.ptr_to_numpy(d, (4,), C.NPY_FLOAT32)  # device memory is not host-visible
    with pytest.raises(ValueError):
        acl.util.ptr_to_bytes(d, 16)
    with pytest.raises(ValueError):
        acl.util.ptr_to_bytes(0xBAD, 4)
    p = acl.util.numpy_to_ptr(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="past the end"):
        acl.util.ptr_to_numpy(p, (3,), C.NPY_FLOAT32)
    # a shape whose element count passes 2**63: np.prod wrapped around ("cannot reshape array of size 0")
    for shape in ((2**62, 4), (2**32, 2**32), (2**62 + 1, 4)):
        with pytest.raises(ValueError, match="past the end"):
            acl.util.ptr_to_numpy(p, shape, C.NPY_FLOAT32)
    with pytest.raises(ValueError, match="type number"):
        acl.util.ptr_to_numpy(p, (1,), 99)
    with pytest.raises(TypeError):
        acl.util.numpy_to_ptr([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acl.util.bytes_to_ptr("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acl.util.numpy_to_ptr(np.array([object()]))


def test_threads() -> None:
    """pyACL calls ``thr_func(args_list)`` with the list itself (CANN's samples unpack it inside)."""
    seen: list[object] = []

    def thread_entry(args_list: list[int]) -> None:
        context, timeout = args_list
        seen.append((context, timeout))

    tid, ret = acl.util.start_thread(thread_entry, [7, 100])
    assert ret == 0
    assert acl.util.stop_thread(tid) == 0 and seen == [(7, 100)]
    assert acl.util.stop_thread(tid) == C.ACL_ERROR_INVALID_PARAM
    tid, ret = acl.util.start_thread(lambda args_list: seen.append(args_list), [])  # the samples' form
    assert ret == 0 and acl.util.stop_thread(tid) == 0 and seen[-1] == []
    with pytest.raises(TypeError, match="args_list must be a list"):
        acl.util.start_thread(thread_entry, 5)  # type: ignore[arg-type]


def test_pointers_work_before_init(no_acl: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = acl.util.bytes_to_ptr(b"abc")
        assert acl.util.ptr_to_bytes(p, 3) == b"abc"
