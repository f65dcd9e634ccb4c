"""Dynamic inputs of ``acl.mdl`` (cann-interfaces.md §1.4) — partial: pycann has no gears.

The input shape of a model with dynamic dims comes from ``set_dataset_tensor_desc``,
``set_dynamic_batch_size`` / ``set_dynamic_hw_size`` (fill the batch / H,W dims) or
``set_input_dynamic_dims`` (fill every dynamic dim, input after input). The "dynamic tensor"
``ACL_DYNAMIC_TENSOR_NAME`` is a virtual input at index ``num_inputs``.
"""

from __future__ import annotations

from typing import Any

from pycann.acl import constants as C
from pycann.acl._dataset import Dataset, dataset
from pycann.acl._models import ModelRecord, desc_obj, model_record
from pycann.acl._state import api, as_int
from pycann.acl.base import tensor_desc
from pycann.acl.errors import ArgTypeError, fault


def input_shapes(rec: ModelRecord, ds: Dataset) -> list[list[int]]:
    """The concrete input shapes for one execution (see module doc for the dynamic rules)."""
    m = rec.model
    fill = iter(ds.dyn_dims or [])
    out = []
    for i, info in enumerate(m.inputs):
        gdesc = m.graph.descs.get(info.name)
        if i in ds.descs:
            t = tensor_desc(ds.descs[i])
            shape = list(t.dims)
            if gdesc is not None and gdesc.shape is not None and (
                len(shape) != len(info.shape) or any(a not in (-1, b) for a, b in zip(info.shape, shape))
            ):
                raise fault(C.ACL_ERROR_GE_SHAPE_INVALID,
                            f"input {i} ({info.name}): tensor desc dims {shape} do not fit the model's {info.shape}")
        elif gdesc is not None and gdesc.shape is None:
            raise fault(C.ACL_ERROR_GE_SHAPE_INVALID,
                        f"input {i} ({info.name}) has unknown rank: give its shape with set_dataset_tensor_desc")
        else:
            shape = list(info.shape)
            if ds.dyn_dims is not None:
                shape = [next(fill, -1) if d == -1 else d for d in shape]
            if ds.batch is not None and shape and shape[0] == -1:
                shape[0] = ds.batch
            if ds.hw is not None and len(shape) == 4:
                hi, wi = (1, 2) if rec.model.manifest.get("options", {}).get("input_format") == "NHWC" else (2, 3)
                shape[hi] = ds.hw[0] if shape[hi] == -1 else shape[hi]
                shape[wi] = ds.hw[1] if shape[wi] == -1 else shape[wi]
        if any(d < 0 for d in shape):
            raise fault(C.ACL_ERROR_GE_SHAPE_INVALID,
                        f"input {i} ({info.name}) has dynamic dims {shape}: set them with set_dynamic_batch_size, "
                        "set_dynamic_hw_size, set_input_dynamic_dims or set_dataset_tensor_desc")
        out.append(shape)
    return out


def _dyn_target(model_id: Any, ds_h: Any, index: Any) -> tuple[ModelRecord, Dataset]:
    rec, ds = model_record(model_id), dataset(ds_h)
    if not rec.dynamic:
        raise fault(C.ACL_ERROR_MODEL_NOT_DYNAMIC, f"model {int(model_id)} has no dynamic inputs")
    if as_int(index, "index") != len(rec.model.inputs):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {index} is not the dynamic tensor's index "
                    f"({len(rec.model.inputs)}; get it with get_input_index_by_name(desc, ACL_DYNAMIC_TENSOR_NAME))")
    return rec, ds


@api()
def set_dynamic_batch_size(model_id: int, dataset: int, index: int, batch_size: int) -> int:
    """Sets dim 0 of the inputs whose batch is dynamic (checked against ``--input_shape`` ranges)."""
    rec, ds = _dyn_target(model_id, dataset, index)
    b = as_int(batch_size, "batch_size")
    batch_dyn = [info for i, info in enumerate(rec.model.inputs) if info.shape and info.shape[0] == -1]
    if not batch_dyn:
        raise fault(C.ACL_ERROR_MODEL_NOT_DYNAMIC, "no input of the model has a dynamic batch dim")
    for info in batch_dyn:
        r = rec.model.manifest.get("input_ranges", {}).get(info.name, [])
        lo, hi = (r[0][0], r[0][1]) if r and isinstance(r[0], list) else (1, None)
        if b < lo or (hi is not None and b > hi):
            raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID, f"batch {b} is outside {info.name}'s range {lo}~{hi}")
    ds.batch = b
    return C.ACL_SUCCESS


@api()
def set_dynamic_hw_size(model_id: int, dataset: int, index: int, height: int, width: int) -> int:
    """Sets the dynamic H and W of 4-D inputs."""
    rec, ds = _dyn_target(model_id, dataset, index)
    h, w = as_int(height, "height"), as_int(width, "width")
    if h <= 0 or w <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"invalid image size {h}x{w}")
    if not any(len(i.shape) == 4 and -1 in i.shape[1:] for i in rec.model.inputs):
        raise fault(C.ACL_ERROR_MODEL_NOT_DYNAMIC, "no 4-D input of the model has a dynamic H or W")
    ds.hw = (h, w)
    return C.ACL_SUCCESS


@api()
def set_input_dynamic_dims(model_id: int, dataset: int, index: int, dims: Any) -> int:
    """``dims``: ``{"dimCount": n, "dims": [...]}`` (or a list): the values of every dynamic dim,
    input after input, in order."""
    rec, ds = _dyn_target(model_id, dataset, index)
    values = dims.get("dims") if isinstance(dims, dict) else dims
    if not isinstance(values, (list, tuple)):
        raise ArgTypeError("dims must be a dict with a 'dims' list, or a list")
    vals = [as_int(v, "dim") for v in values]
    want = sum(1 for info in rec.model.inputs for d in info.shape if d == -1)
    if len(vals) != want or any(v < 0 for v in vals):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"{len(vals)} dims given; the model has {want} dynamic dims")
    ds.dyn_dims = vals
    return C.ACL_SUCCESS


@api(out=({"batchCount": 0, "batch": []},))
def get_dynamic_batch(model_desc: int) -> tuple[dict[str, Any], int]:
    """``{"batchCount", "batch"}, ret``: the batch sizes a range allows (up to 128), else none."""
    d = desc_obj(model_desc)
    for info in d.inputs:
        r = d.ranges.get(info.name, [])
        if info.shape and info.shape[0] == -1 and r and isinstance(r[0], list) and r[0][1] - r[0][0] < C.ACL_MAX_BATCH_NUM:
            batches = list(range(max(1, r[0][0]), r[0][1] + 1))
            return {"batchCount": len(batches), "batch": batches}, C.ACL_SUCCESS
    return {"batchCount": 0, "batch": []}, C.ACL_SUCCESS


@api(out=({"hwCount": 0, "hw": []},))
def get_dynamic_hw(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """``{"hwCount", "hw"}, ret``: always empty (no gears; any H, W within the ranges runs)."""
    desc_obj(model_desc)
    return {"hwCount": 0, "hw": []}, C.ACL_SUCCESS


@api(out=(0,))
def get_input_dynamic_gear_count(model_desc: int, index: int) -> tuple[int, int]:
    desc_obj(model_desc)
    return 0, C.ACL_SUCCESS


@api(out=([],))
def get_input_dynamic_dims(model_desc: int, index: int, gear_count: int) -> tuple[list[Any], int]:
    desc_obj(model_desc)
    return [], C.ACL_SUCCESS

