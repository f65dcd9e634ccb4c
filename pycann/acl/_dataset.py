"""``aclmdlDataset`` (cann-interfaces.md §1.4): an ordered list of data buffers, optional
per-input tensor descs (dynamic shapes), the dynamic batch / HW / dims settings or the selected
gear's input shapes (``gear``; the selection lives here, per dataset, never in the model) and,
after an execution, the actual output shapes (``get_dataset_tensor_desc`` on an output dataset)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.acl import constants as C
from pycann.acl._models import mdl_api as api
from pycann.acl._state import as_int, handles
from pycann.acl.base import TensorDescObj, tensor_desc
from pycann.acl.errors import AclFault, fault
from pycann.dtypes import ACL_DTYPE, from_numpy


@dataclass
class Dataset:
    buffers: list[int] = field(default_factory=list)
    descs: dict[int, int] = field(default_factory=dict)
    batch: int | None = None
    hw: tuple[int, int] | None = None
    dyn_dims: list[int] | None = None
    gear: dict[str, list[int]] | None = None
    out_shapes: list[tuple[tuple[int, ...], np.dtype]] = field(default_factory=list)
    owned: dict[int, int] = field(default_factory=dict)


def dataset(h: Any) -> Dataset:
    return handles.get("dataset", h, "dataset")


@api(bare=0)
def create_dataset() -> int:
    return handles.add("dataset", Dataset())


@api()
def destroy_dataset(dataset_h: int) -> int:
    """Frees the dataset (and the tensor descs it made), not its data buffers."""
    ds = handles.pop("dataset", dataset_h, "dataset")
    for h in (*ds.owned.values(), *ds.descs.values()):
        _drop_desc(h)
    return C.ACL_SUCCESS


def _drop_desc(h: int) -> None:
    """Free a tensor desc the dataset owns (unless the app already destroyed it)."""
    try:
        handles.pop("tensor_desc", h)
    except AclFault:
        pass


@api(out=(0,))
def add_dataset_buffer(dataset_h: int, data_buffer: int) -> tuple[int, int]:
    """``dataset, ret = add_dataset_buffer(dataset, buffer)`` (the dataset is passed through, §1.1)."""
    ds = dataset(dataset_h)
    handles.get("data_buffer", data_buffer, "data buffer")
    ds.buffers.append(int(data_buffer))
    return int(dataset_h), C.ACL_SUCCESS


@api(bare=0)
def get_dataset_buffer(dataset_h: int, index: int) -> int:
    ds, i = dataset(dataset_h), as_int(index, "index")
    if not 0 <= i < len(ds.buffers):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {i} out of range: the dataset has {len(ds.buffers)} buffers")
    return ds.buffers[i]


@api(bare=0)
def get_dataset_num_buffers(dataset_h: int) -> int:
    return len(dataset(dataset_h).buffers)


@api(out=(0,))
def set_dataset_tensor_desc(dataset_h: int, desc: int, index: int) -> tuple[int, int]:
    """``dataset, ret = set_dataset_tensor_desc(dataset, desc, index)``: give buffer ``index`` its
    concrete shape (models with dynamic dims). As pyACL, the dataset is passed through (like
    ``add_dataset_buffer``); as ``aclmdlSetDatasetTensorDesc``, ``index`` must name one of the
    dataset's buffers, the dataset keeps its own copy of the desc (the app may destroy its desc at
    once) and ``desc`` 0 removes the one set."""
    ds, i = dataset(dataset_h), as_int(index, "index")
    if not 0 <= i < len(ds.buffers):
        raise fault(C.ACL_ERROR_INVALID_PARAM,
                    f"index {i} out of range: the dataset has {len(ds.buffers)} buffers (add them first)")
    if as_int(desc, "tensor desc") == 0:
        if i in ds.descs:
            _drop_desc(ds.descs.pop(i))
        return int(dataset_h), C.ACL_SUCCESS
    t = tensor_desc(desc)
    copy = TensorDescObj(t.dtype, list(t.dims), t.format, t.name, dict(t.extra))
    try:  # (updated in place, as CANN does: a handle from get_dataset_tensor_desc stays valid)
        mine = tensor_desc(ds.descs[i]) if i in ds.descs else None
    except AclFault:  # (the app destroyed the dataset's desc)
        mine = None
    if mine is None:
        ds.descs[i] = handles.add("tensor_desc", copy)
    else:
        mine.dtype, mine.dims, mine.format, mine.name, mine.extra = (copy.dtype, copy.dims, copy.format, copy.name,
                                                                    copy.extra)
    return int(dataset_h), C.ACL_SUCCESS


@api(bare=0)
def get_dataset_tensor_desc(dataset_h: int, index: int) -> int:
    """The tensor desc of buffer ``index``: the one set, or for an output dataset after an
    execution, one with the actual output shape (owned by the dataset)."""
    ds, i = dataset(dataset_h), as_int(index, "index")
    if i in ds.descs and not 0 <= i < len(ds.out_shapes):
        return ds.descs[i]
    if not 0 <= i < len(ds.out_shapes):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"the dataset has no tensor desc at index {i}")
    shape, dt = ds.out_shapes[i]
    acl_dt = ACL_DTYPE.get(from_numpy(dt), C.ACL_DT_UNDEFINED)
    if i in ds.owned:
        t = tensor_desc(ds.owned[i])
        t.dims, t.dtype = list(shape), acl_dt
    else:
        ds.owned[i] = handles.add("tensor_desc", TensorDescObj(acl_dt, list(shape), C.ACL_FORMAT_ND))
    return ds.owned[i]
