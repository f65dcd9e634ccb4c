"""Dynamic inputs of ``acl.mdl`` (cann-interfaces.md §1.4).

**Gear models** (``atc --dynamic_batch_size / --dynamic_image_size / --dynamic_dims``,
``LoadedModel.gears``): ``set_dynamic_batch_size`` / ``set_dynamic_hw_size`` /
``set_input_dynamic_dims`` select one compiled gear *for the dataset* (CANN's codes: 145013
``ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID`` for a value that is no gear, 145012
``ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID`` for dims of the wrong length or with a wrong static
dim). The selection is stored in the dataset, never in the model: ``execute`` feeds the gear's
concrete shapes and ``LoadedModel`` checks them against its gears, so two datasets (threads,
streams) may run different gears of one model at once. ``get_dynamic_batch`` / ``get_dynamic_hw``
/ ``get_input_dynamic_gear_count`` / ``get_input_dynamic_dims`` report the gears as CANN does
(dims: each gear as the concatenated shapes of the inputs in ``--input_shape`` order).

**Range models** (``-1`` / ``lo~hi`` without gears): the input shape comes from
``set_dataset_tensor_desc``, ``set_dynamic_batch_size`` / ``set_dynamic_hw_size`` (fill the batch
/ H,W dims, checked against the ranges) or ``set_input_dynamic_dims`` (every dynamic dim, input
after input); ``get_dynamic_batch`` lists a range's batch sizes (up to 128).

The "dynamic tensor" ``ACL_DYNAMIC_TENSOR_NAME`` is a virtual input at index ``num_inputs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pycann.acl import constants as C
from pycann.acl._dataset import Dataset, dataset
from pycann.acl._models import ModelDesc, ModelRecord, desc_obj, model_record
from pycann.acl._models import mdl_api as api
from pycann.acl._state import as_int
from pycann.acl.base import tensor_desc
from pycann.acl.errors import ArgTypeError, fault
from pycann.ge.run.model import LoadedModel

if TYPE_CHECKING:  # (the gear table comes with a model that has gears: LoadedModel.gears)
    from pycann.ge.compile.gears import GearTable

_CALL = {"batch": "set_dynamic_batch_size", "image_size": "set_dynamic_hw_size", "dims": "set_input_dynamic_dims"}


def _hw_axes(m: LoadedModel) -> tuple[int, int]:
    return (1, 2) if m.input_format == "NHWC" else (2, 3)


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
        elif ds.gear is not None and info.name in ds.gear:
            shape = list(ds.gear[info.name])
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
                hi, wi = _hw_axes(m)
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


# ---------------------------------------------------------------- gears (LoadedModel.gears)
def gear_order(m: LoadedModel) -> list[str]:
    """Inputs whose shapes, concatenated, are a gear's dims in ``get/set_input_dynamic_dims``: the
    ``--input_shape`` order (CANN's user-designated order), else the model's input order."""
    assert m.gears is not None
    names = [i.name for i in m.inputs]
    have = {n for s in m.gears.shapes for n in s}
    order: list[str] = []
    for key in m.input_ranges:  # (--input_shape's order; older files also keep it under "options")
        name = names[int(key)] if key not in names and str(key).isdigit() and int(key) < len(names) else key
        if name in have and name not in order:
            order.append(name)
    return order or [n for n in names if n in have]


def gear_dims(m: LoadedModel, i: int) -> list[int]:
    """Gear ``i``'s dims as CANN's ``get_input_dynamic_dims`` gives them."""
    assert m.gears is not None
    return [int(d) for n in gear_order(m) for d in m.gears.shapes[i][n]]


def _select(ds: Dataset, g: GearTable, kind: str, values: list[int]) -> int:
    """Store the gear ``values`` of ``kind`` in the dataset. Raises 145013 listing the gears."""
    if g.kind != kind:
        raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                    f"{_CALL[kind]} does not apply: the model was compiled with {g.option}; use {_CALL[g.kind]} "
                    f"(gears: {g.listing()})")
    if values not in g.profiles:
        raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                    f"{','.join(map(str, values))} matches no gear of the model ({g.option}); the gears are: "
                    f"{g.listing()}")
    i = g.profiles.index(values)
    ds.gear = {k: list(v) for k, v in g.shapes[i].items()}
    return C.ACL_SUCCESS


def _select_dims(rec: ModelRecord, ds: Dataset, g: GearTable, vals: list[int]) -> int:
    """``set_input_dynamic_dims`` on a gear model: ``vals`` are all dims of the gear inputs in
    order (CANN), or for ``--dynamic_dims`` also just the profile (one value per ``-1``)."""
    m = rec.model
    order = gear_order(m)
    template = [d for n in order for d in next(i.shape for i in m.inputs if i.name == n)]
    if len(vals) == len(template):
        bad = [k for k, (t, v) in enumerate(zip(template, vals)) if t != -1 and t != v]
        if bad:
            raise fault(C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID,
                        f"dims {vals}: position {bad[0]} is {vals[bad[0]]}, the model's static dim is "
                        f"{template[bad[0]]} (the dims are the shapes of {', '.join(order)} in order: {template})")
        for i in range(len(g.profiles)):
            if gear_dims(m, i) == vals:
                ds.gear = {k: list(v) for k, v in g.shapes[i].items()}
                return C.ACL_SUCCESS
        raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                    f"dims {vals} match no gear of the model ({g.option}); the gears are: {g.listing()}")
    if g.kind == "dims" and len(vals) == len(g.profiles[0]):
        return _select(ds, g, "dims", vals)
    raise fault(C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID,
                f"{len(vals)} dims given; the model's gears have {len(template)} (the shapes of "
                f"{', '.join(order)} in order: {template})")


# ---------------------------------------------------------------- set_* (per dataset)
@api()
def set_dynamic_batch_size(model_id: int, dataset: int, index: int, batch_size: int) -> int:
    """Selects the batch gear (gear models) or sets dim 0 of the inputs whose batch is dynamic
    (checked against ``--input_shape`` ranges)."""
    rec, ds = _dyn_target(model_id, dataset, index)
    b = as_int(batch_size, "batch_size")
    if rec.model.gears is not None:
        return _select(ds, rec.model.gears, "batch", [b])
    batch_dyn = [info for info in rec.model.inputs if info.shape and info.shape[0] == -1]
    if not batch_dyn:
        raise fault(C.ACL_ERROR_MODEL_NOT_DYNAMIC, "no input of the model has a dynamic batch dim")
    for info in batch_dyn:
        r = rec.model.input_ranges.get(info.name, [])
        lo, hi = (r[0][0], r[0][1]) if r and isinstance(r[0], list) else (1, None)
        if b < lo or (hi is not None and hi >= 0 and b > hi):
            raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID, f"batch {b} is outside {info.name}'s range {lo}~{hi}")
    ds.batch = b
    return C.ACL_SUCCESS


@api()
def set_dynamic_hw_size(model_id: int, dataset: int, index: int, height: int, width: int) -> int:
    """Selects the image-size gear (gear models) or sets the dynamic H and W of 4-D inputs."""
    rec, ds = _dyn_target(model_id, dataset, index)
    h, w = as_int(height, "height"), as_int(width, "width")
    if rec.model.gears is not None:
        return _select(ds, rec.model.gears, "image_size", [h, w])
    if h <= 0 or w <= 0:  # outside every range (a dim is at least 1): the code of a batch of 0 too
        raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                    f"{'height' if h <= 0 else 'width'} {h if h <= 0 else w}: an image size is at least 1x1")
    dyn4 = [i for i in rec.model.inputs if len(i.shape) == 4 and -1 in i.shape[1:]]
    if not dyn4:
        raise fault(C.ACL_ERROR_MODEL_NOT_DYNAMIC, "no 4-D input of the model has a dynamic H or W")
    # (checked here as set_dynamic_batch_size checks the batch: a value outside an input's range, or
    # one for a dim that no input has dynamic, was taken, and the run failed or used the static dim)
    hi, wi = _hw_axes(rec.model)
    for axis, v, what in ((hi, h, "height"), (wi, w, "width")):
        free = [i for i in dyn4 if i.shape[axis] == -1]
        # (inputs whose static dims differ take any one of them: no value would fit them all)
        if not free and all(i.shape[axis] != v for i in dyn4):
            fixed = ", ".join(f"{i.name}'s is {i.shape[axis]}" for i in dyn4)
            raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                        f"{what} {v}: no input has a dynamic {what} ({fixed}); pass "
                        f"{'that value' if len({i.shape[axis] for i in dyn4}) == 1 else 'one of those values'}")
        for info in free:
            r = rec.model.input_ranges.get(info.name, [])
            rng = r[axis] if len(r) == 4 and isinstance(r[axis], list) else None
            if rng is not None and (v < rng[0] or (rng[1] >= 0 and v > rng[1])):
                raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                            f"{what} {v} is outside {info.name}'s range {rng[0]}~{rng[1]}")
    ds.hw = (h, w)
    return C.ACL_SUCCESS


def _dim_values(dims: Any) -> list[int]:
    """pyACL's ``{"dimCount": n, "dims": [...]}`` (``dimCount`` values are read) or a list."""
    values = dims.get("dims") if isinstance(dims, dict) else dims
    if not isinstance(values, (list, tuple)):
        raise ArgTypeError("dims must be a dict with a 'dims' list, or a list")
    if isinstance(dims, dict) and "dimCount" in dims:
        n = as_int(dims["dimCount"], "dimCount")
        if n > len(values):
            raise ArgTypeError(f"dimCount {n} exceeds the {len(values)} values of 'dims'")
        values = values[:n]
    return [as_int(v, "dim") for v in values]


@api()
def set_input_dynamic_dims(model_id: int, dataset: int, index: int, dims: Any) -> int:
    """``dims``: ``{"dimCount": n, "dims": [...]}`` (or a list). Gear models: a gear as
    ``get_input_dynamic_dims`` lists it (all dims of the inputs, concatenated). Range models: the
    values of every dynamic dim, input after input, in order."""
    rec, ds = _dyn_target(model_id, dataset, index)
    vals = _dim_values(dims)
    if rec.model.gears is not None:
        return _select_dims(rec, ds, rec.model.gears, vals)
    slots = [(info, k) for info in rec.model.inputs for k, d in enumerate(info.shape) if d == -1]
    if len(vals) != len(slots):
        raise fault(C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID,
                    f"{len(vals)} dims given; the model has {len(slots)} dynamic dims "
                    f"({', '.join(f'{info.name} dim {k}' for info, k in slots)}): give one value each, in that order")
    # (checked here, as set_dynamic_batch_size checks the batch: a value outside an input's range was
    # taken, and the execute failed on it with a shape error, or on the buffer size first)
    for v, (info, k) in zip(vals, slots):
        r = rec.model.input_ranges.get(info.name, [])
        rng = r[k] if k < len(r) and isinstance(r[k], list) else None
        if v < 0 or (rng is not None and (v < rng[0] or (rng[1] >= 0 and v > rng[1]))):
            where = f"the range {rng[0]}~{rng[1]} set by --input_shape" if rng is not None else "dims >= 0"
            raise fault(C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID,
                        f"dims {vals}: {v} for {info.name} dim {k} is outside {where}")
    ds.dyn_dims = vals
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- get_* (model desc)
def _desc_gears(d: ModelDesc) -> tuple[LoadedModel | None, GearTable | None]:
    m = d.record.model if d.record is not None else None
    return m, (m.gears if m is not None else None)


@api(out=({"batchCount": 0, "batch": []},))
def get_dynamic_batch(model_desc: int) -> tuple[dict[str, Any], int]:
    """``{"batchCount", "batch"}, ret``: the batch gears, or the batch sizes a range allows (up to
    128); none for other models."""
    d = desc_obj(model_desc)
    _, g = _desc_gears(d)
    if g is not None:
        batches = [p[0] for p in g.profiles] if g.kind == "batch" else []
        return {"batchCount": len(batches), "batch": batches}, C.ACL_SUCCESS
    for info in d.inputs:
        r = d.ranges.get(info.name, [])
        if info.shape and info.shape[0] == -1 and r and isinstance(r[0], list) and \
                0 <= r[0][1] - r[0][0] < C.ACL_MAX_BATCH_NUM:
            batches = list(range(max(1, r[0][0]), r[0][1] + 1))
            return {"batchCount": len(batches), "batch": batches}, C.ACL_SUCCESS
    return {"batchCount": 0, "batch": []}, C.ACL_SUCCESS


@api(out=({"hwCount": 0, "hw": []},))
def get_dynamic_hw(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """``{"hwCount", "hw": [[h, w], ...]}, ret``: the image-size gears (``index`` is reserved, -1);
    empty for other models (a range model runs any H, W within its ranges)."""
    _, g = _desc_gears(desc_obj(model_desc))
    hw = [list(p) for p in g.profiles] if g is not None and g.kind == "image_size" else []
    return {"hwCount": len(hw), "hw": hw}, C.ACL_SUCCESS


@api(out=(0,))
def get_input_dynamic_gear_count(model_desc: int, index: int) -> tuple[int, int]:
    """``count, ret``: the number of ``--dynamic_dims`` gears (``index`` is reserved, -1); 0 otherwise."""
    _, g = _desc_gears(desc_obj(model_desc))
    return (len(g.profiles) if g is not None and g.kind == "dims" else 0), C.ACL_SUCCESS


@api(out=([],))
def get_input_dynamic_dims(model_desc: int, index: int, gear_count: int) -> tuple[list[Any], int]:
    """``[{"name": "", "dimCount", "dims"}, ...], ret``: each ``--dynamic_dims`` gear as the
    concatenated shapes of the inputs (``--input_shape`` order), as CANN reports them."""
    m, g = _desc_gears(desc_obj(model_desc))
    n = as_int(gear_count, "gear_count")
    if m is None or g is None or g.kind != "dims":
        return [], C.ACL_SUCCESS
    if n < len(g.profiles):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"gear_count {n} is less than the model's {len(g.profiles)} gears "
                    "(get it with get_input_dynamic_gear_count)")
    out = []
    for i in range(len(g.profiles)):
        dims = gear_dims(m, i)
        out.append({"name": "", "dimCount": len(dims), "dims": dims})
    return out, C.ACL_SUCCESS
