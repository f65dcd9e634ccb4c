"""Small pyACL-style helpers shared by the acl tests (written the way applications do it)."""

from __future__ import annotations

import numpy as np

import pycann.acl as acl
from pycann.acl.constants import (
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
)


def to_device(arr: np.ndarray, size: int | None = None) -> int:
    """Device copy of ``arr`` (buffer of ``size`` bytes, default ``arr.nbytes``)."""
    n = size or arr.nbytes
    dev, ret = acl.rt.malloc(n, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0, acl.get_recent_err_msg()
    data = np.ascontiguousarray(arr).tobytes()
    assert acl.rt.memcpy(dev, n, acl.util.bytes_to_ptr(data), len(data), ACL_MEMCPY_HOST_TO_DEVICE) == 0
    return dev


def from_device(dev: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """Host copy of device memory as an array."""
    out = np.empty(shape, dtype)
    ret = acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, dev, out.nbytes, ACL_MEMCPY_DEVICE_TO_HOST)
    assert ret == 0, acl.get_recent_err_msg()
    return out


def dataset_of(ptrs_sizes: list[tuple[int, int]]) -> tuple[int, list[int]]:
    """A dataset holding one data buffer per (ptr, size); returns (dataset, buffers)."""
    ds = acl.mdl.create_dataset()
    bufs = []
    for p, n in ptrs_sizes:
        b = acl.create_data_buffer(p, n)
        _, ret = acl.mdl.add_dataset_buffer(ds, b)
        assert ret == 0
        bufs.append(b)
    return ds, bufs
