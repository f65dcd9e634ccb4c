"""Dynamic AIPP of ``acl.mdl`` (cann-interfaces.md §1.4 AIPP functions, §1.7 AIPP enums).

``create_aipp(batch)`` makes an ``aclmdlAIPP`` parameter set: image-wide values (input format,
source size, CSC, swaps) and per-image values (crop, padding, mean / min / var_reci, indexed by
``batch_index``), each checked when set (ranges as CANN's, ``ACL_ERROR_INVALID_PARAM`` with the
reason in ``acl.get_recent_err_msg()``). ``set_input_aipp(model_id, dataset, index, set)`` checks
the whole set against the model (``pycann.ge.aipp.dynamic.pack_params``: crop inside the image,
output size = model H x W, ``max_src_image_size``, batch) and writes CANN's ``kAippDynamicPara``
bytes into the dataset's buffer of the ``ascend_dynamic_aipp_data`` input ``index`` — device
memory of that dataset, so concurrent executions with different parameters do not interfere.
``set_aipp_by_input_index`` takes the image input's index instead. ``get_aipp_type`` and
``get_first_aipp_info`` read the model's AIPP entries (``LoadedModel.aipp_info``).

Not implemented: resize (``set_aipp_scf_params`` with the switch on gives
``ACL_ERROR_FEATURE_UNSUPPORTED``) and the input formats pycann's AIPP lacks (YUYV, YUV422SP,
AYUV444, RAW*, NC1HWC0DI*: ``ACL_ERROR_FEATURE_UNSUPPORTED``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from pycann.acl import constants as C
from pycann.acl._dataset import dataset
from pycann.acl._models import mdl_api as api
from pycann.acl._models import model_record
from pycann.acl._state import as_int, handles, require_init
from pycann.acl.errors import ArgTypeError, fault
from pycann.dtypes import ACL_DTYPE, DType, to_numpy
from pycann.errors import InputError
from pycann.ge.run.model import LoadedModel
from pycann.runtime.memory import DEVICE_KINDS

# The AIPP modules (ge.aipp, ops.aipp) are imported by the AIPP calls themselves: an application
# without AIPP never imports them (~2.5 ms of every first run; bench/RESULTS.md).
_UNSUPPORTED = {C.ACL_NC1HWC0DI_FP16, C.ACL_NC1HWC0DI_S8, C.ACL_YUYV_U8, C.ACL_YUV422SP_U8, C.ACL_AYUV444_U8,
                C.ACL_RAW10, C.ACL_RAW12, C.ACL_RAW16, C.ACL_RAW24}
_LAYOUTS = {"NCHW": C.ACL_FORMAT_NCHW, "NHWC": C.ACL_FORMAT_NHWC}
_MATRIX = [f"matrix_r{r}c{c}" for r in range(3) for c in range(3)]


@dataclass
class AippSet:
    """``aclmdlAIPP``: config keys (``pycann.ge.aipp.config`` names) for the batch and per image."""

    batch: int
    head: dict[str, Any] = field(default_factory=dict)
    # per image, by batch index, made when one is first set: a list of ``batch`` dicts made at
    # create_aipp(2**31) ate every byte of memory (set_input_aipp refuses a batch that is not the model's)
    images: dict[int, dict[str, Any]] = field(default_factory=dict)

    def params(self) -> list[dict[str, Any]]:
        """One ``set_dynamic_aipp`` mapping per image."""
        if "input_format" not in self.head:
            raise fault(C.ACL_ERROR_INVALID_PARAM, "the AIPP input format is not set: call set_aipp_input_format")
        return [{**self.head, **self.images.get(i, {})} for i in range(self.batch)]


def _set(h: Any) -> AippSet:
    return handles.get("aipp", h, "aipp parameter set")


def _check(key: str, value: Any) -> Any:
    """``value`` for config key ``key``, checked (E10001 reason in the error message)."""
    from pycann.ge.aipp.config import check_value

    if isinstance(value, (list, tuple, dict, set, bytes)) or value is None:
        # a parse failure, raised as pyACL's parser does (float([1]) was an internal error, 500000)
        raise ArgTypeError(f"{key} must be a number, not {type(value).__name__} {value!r}")
    try:
        return check_value(key, value, "", InputError)
    except InputError as e:
        raise fault(C.ACL_ERROR_INVALID_PARAM, str(e)) from None


def _real(value: Any, what: str) -> float:
    """``value`` as a float; a non-number is a parse failure (``ArgTypeError``), as pyACL raises
    (``float([1])``'s TypeError was an internal error, 500000)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgTypeError(f"{what} must be a number, not {type(value).__name__} {value!r}")
    return float(value)


def _switch(value: Any, what: str) -> bool:
    v = as_int(value, what)
    if v not in (0, 1):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"{what} must be 0 or 1, not {v}")
    return bool(v)


def _image(s: AippSet, batch_index: Any) -> dict[str, Any]:
    i = as_int(batch_index, "batch_index")
    if not 0 <= i < s.batch:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"batch_index ({i}) is greater than or equal to batch_number ({s.batch})")
    return s.images.setdefault(i, {})


def _put(target: dict[str, Any], on: bool, switch: str, keys: list[str], values: tuple[Any, ...]) -> int:
    """Set ``switch`` and, when on, the checked ``keys`` (removed when off: CANN ignores them)."""
    checked = [_check(k, v) for k, v in zip(keys, values)] if on else []
    if switch:
        target[switch] = on
    for k in keys:
        target.pop(k, None)
    target.update(zip(keys, checked))
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- the parameter set
@api(bare=0)
def create_aipp(batch_size: int) -> int:
    """An ``aclmdlAIPP`` for ``batch_size`` images (0 on failure, as CANN's null pointer)."""
    b = as_int(batch_size, "batch_size")
    if b <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"batch_size must be > 0, not {b}")
    return handles.add("aipp", AippSet(b))


@api()
def destroy_aipp(aipp_parms_set: int) -> int:
    handles.pop("aipp", aipp_parms_set, "aipp parameter set")
    return C.ACL_SUCCESS


@api(out=(0,))
def get_aipp_data_size(batch_size: int) -> tuple[int, int]:
    """``size, ret``: bytes of ``ascend_dynamic_aipp_data`` for ``batch_size`` images."""
    b = as_int(batch_size, "batch_size")
    if b <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"batch_size must be > 0, not {b}")
    from pycann.ops.aipp import dynamic_buffer_bytes

    return dynamic_buffer_bytes(b), C.ACL_SUCCESS


@api()
def set_aipp_input_format(aipp_parms_set: int, input_format: int) -> int:
    """``aclAippInputFormat``: ``ACL_YUV420SP_U8``, ``ACL_XRGB8888_U8``, ``ACL_RGB888_U8``,
    ``ACL_YUV400_U8``, ``ACL_ARGB8888_U8``."""
    from pycann.ops.aipp import ACL_FORMAT_NAMES

    s, code = _set(aipp_parms_set), as_int(input_format, "input_format")
    if code in _UNSUPPORTED:
        raise fault(C.ACL_ERROR_FEATURE_UNSUPPORTED, f"AIPP input format {code} is not supported by pycann; use one "
                    f"of {', '.join(f'{n} ({c})' for c, n in sorted(ACL_FORMAT_NAMES.items()))}")
    if code not in ACL_FORMAT_NAMES:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"unsupported inputFormat[{code}]")
    s.head["input_format"] = ACL_FORMAT_NAMES[code]
    return C.ACL_SUCCESS


@api()
def set_aipp_csc_params(aipp_parms_set: int, csc_switch: int, *values: int) -> int:
    """``(set, switch, r0c0, r0c1, r0c2, r1c0, r1c1, r1c2, r2c0, r2c1, r2c2, output_bias_0..2,
    input_bias_0..2)``; the values are ignored when the switch is 0."""
    s = _set(aipp_parms_set)
    if len(values) != 15:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"set_aipp_csc_params takes 9 matrix values and 6 biases, "
                    f"not {len(values)} values")
    keys = _MATRIX + [f"output_bias_{i}" for i in range(3)] + [f"input_bias_{i}" for i in range(3)]
    return _put(s.head, _switch(csc_switch, "csc_switch"), "csc_switch", keys, tuple(as_int(v, "csc") for v in values))


@api()
def set_aipp_rbuv_swap_switch(aipp_parms_set: int, rbuv_swap_switch: int) -> int:
    _set(aipp_parms_set).head["rbuv_swap_switch"] = _switch(rbuv_swap_switch, "rbuv_swap_switch")
    return C.ACL_SUCCESS


@api()
def set_aipp_ax_swap_switch(aipp_parms_set: int, ax_swap_switch: int) -> int:
    _set(aipp_parms_set).head["ax_swap_switch"] = _switch(ax_swap_switch, "ax_swap_switch")
    return C.ACL_SUCCESS


@api()
def set_aipp_src_image_size(aipp_parms_set: int, src_image_size_w: int, src_image_size_h: int) -> int:
    """Source width in [2, 4096], height in [1, 4096]."""
    s = _set(aipp_parms_set)
    w, h = as_int(src_image_size_w, "src_image_size_w"), as_int(src_image_size_h, "src_image_size_h")
    if w < 2 or h < 1:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"source image size {w}x{h}: width must be in [2, 4096], "
                    "height in [1, 4096]")
    s.head["src_image_size_w"], s.head["src_image_size_h"] = _check("src_image_size_w", w), _check("src_image_size_h", h)
    return C.ACL_SUCCESS


@api()
def set_aipp_scf_params(aipp_parms_set: int, scf_switch: int, scf_input_size_w: int, scf_input_size_h: int,
                        scf_output_size_w: int, scf_output_size_h: int, batch_index: int) -> int:
    """Resize is not implemented: switch 1 gives ``ACL_ERROR_FEATURE_UNSUPPORTED`` (0 is accepted)."""
    _image(_set(aipp_parms_set), batch_index)
    if _switch(scf_switch, "scf_switch"):
        raise fault(C.ACL_ERROR_FEATURE_UNSUPPORTED, "AIPP resize (scf) is not implemented by pycann")
    return C.ACL_SUCCESS


@api()
def set_aipp_crop_params(aipp_parms_set: int, crop_switch: int, crop_start_pos_w: int, crop_start_pos_h: int,
                         crop_size_w: int, crop_size_h: int, batch_index: int) -> int:
    img = _image(_set(aipp_parms_set), batch_index)
    keys = ["load_start_pos_w", "load_start_pos_h", "crop_size_w", "crop_size_h"]
    vals = (crop_start_pos_w, crop_start_pos_h, crop_size_w, crop_size_h)
    return _put(img, _switch(crop_switch, "crop_switch"), "crop", keys, tuple(as_int(v, "crop") for v in vals))


@api()
def set_aipp_padding_params(aipp_parms_set: int, padding_switch: int, padding_size_top: int,
                            padding_size_bottom: int, padding_size_left: int, padding_size_right: int,
                            batch_index: int) -> int:
    img = _image(_set(aipp_parms_set), batch_index)
    keys = [f"{side}_padding_size" for side in ("top", "bottom", "left", "right")]
    vals = (padding_size_top, padding_size_bottom, padding_size_left, padding_size_right)
    return _put(img, _switch(padding_switch, "padding_switch"), "padding", keys, tuple(as_int(v, "pad") for v in vals))


def _per_channel(aipp_parms_set: Any, key: str, values: tuple[Any, ...], batch_index: Any) -> int:
    img = _image(_set(aipp_parms_set), batch_index)
    return _put(img, True, "", [f"{key}_{i}" for i in range(4)], values)


@api()
def set_aipp_dtc_pixel_mean(aipp_parms_set: int, dtc_pixel_mean_chn0: int, dtc_pixel_mean_chn1: int,
                            dtc_pixel_mean_chn2: int, dtc_pixel_mean_chn3: int, batch_index: int) -> int:
    """Per-channel mean, integers in [0, 255]."""
    vals = (dtc_pixel_mean_chn0, dtc_pixel_mean_chn1, dtc_pixel_mean_chn2, dtc_pixel_mean_chn3)
    return _per_channel(aipp_parms_set, "mean_chn", tuple(as_int(v, "mean") for v in vals), batch_index)


@api()
def set_aipp_dtc_pixel_min(aipp_parms_set: int, dtc_pixel_min_chn0: float, dtc_pixel_min_chn1: float,
                           dtc_pixel_min_chn2: float, dtc_pixel_min_chn3: float, batch_index: int) -> int:
    """Per-channel min in [0, 255] (stored as float16, as on the device)."""
    vals = (dtc_pixel_min_chn0, dtc_pixel_min_chn1, dtc_pixel_min_chn2, dtc_pixel_min_chn3)
    return _per_channel(aipp_parms_set, "min_chn", tuple(_real(v, "min") for v in vals), batch_index)


@api()
def set_aipp_pixel_var_reci(aipp_parms_set: int, dtc_pixel_var_reci_chn0: float, dtc_pixel_var_reci_chn1: float,
                            dtc_pixel_var_reci_chn2: float, dtc_pixel_var_reci_chn3: float, batch_index: int) -> int:
    """Per-channel 1/variance in the float16 range (stored as float16)."""
    vals = (dtc_pixel_var_reci_chn0, dtc_pixel_var_reci_chn1, dtc_pixel_var_reci_chn2, dtc_pixel_var_reci_chn3)
    return _per_channel(aipp_parms_set, "var_reci_chn", tuple(_real(v, "var_reci") for v in vals), batch_index)


# ---------------------------------------------------------------- the model side
def _entry(m: LoadedModel, index: int) -> dict[str, Any] | None:
    if not 0 <= index < len(m.inputs):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {index} out of range: the model has {len(m.inputs)} inputs")
    return m.aipp_info(index)


@api()
def set_input_aipp(model_id: int, dataset_h: int, index: int, aipp_parms_set: int) -> int:
    """Write the parameter set into ``dataset``'s buffer ``index`` (the ``ascend_dynamic_aipp_data``
    input; find it with ``get_input_index_by_name(desc, ACL_DYNAMIC_AIPP_NAME)``)."""
    rec, ds, s, i = model_record(model_id), dataset(dataset_h), _set(aipp_parms_set), as_int(index, "index")
    e = _entry(rec.model, i)
    if e is None or e.get("mode") != "dynamic" or e.get("params_input_index") != i:
        have = [x["params_input_index"] for x in rec.model.aipp if x.get("mode") == "dynamic"]
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {i} is not a dynamic AIPP data input "
                    f"({C.ACL_DYNAMIC_AIPP_NAME}); the model's are {have or 'none'}")
    batch = int(e["output_shape"][0])
    if s.batch != batch:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"the dynamic aipp batchSize[{s.batch}] is not equal to model origin "
                    f"batch[{batch}]")
    from pycann.ge.aipp.dynamic import pack_params

    try:
        buf = pack_params(s.params(), e)
    except InputError as err:
        raise fault(C.ACL_ERROR_INVALID_PARAM, str(err)) from None
    if not 0 <= i < len(ds.buffers):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"failed to get data buffer by index[{i}]: the dataset has "
                    f"{len(ds.buffers)} buffers")
    b = handles.get("data_buffer", ds.buffers[i], "data buffer")
    if b.size < buf.size:
        raise fault(C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID, f"input dynamic aipp param len [{buf.size}] is "
                    f"larger than aipp_data size [{b.size}]")
    require_init().space.write(b.ptr, buf, DEVICE_KINDS, f"dynamic AIPP data (input {i})")
    return C.ACL_SUCCESS


@api()
def set_aipp_by_input_index(model_id: int, dataset_h: int, index: int, aipp_parms_set: int) -> int:
    """``set_input_aipp`` addressed by the image input's index."""
    rec, i = model_record(model_id), as_int(index, "index")
    e = _entry(rec.model, i)
    if e is None or e.get("mode") != "dynamic" or e.get("input_index") != i:
        raise fault(C.ACL_ERROR_FAILURE, f"input {i} has no dynamic aipp linked, modelId[{int(model_id)}]")
    return set_input_aipp(model_id, dataset_h, int(e["params_input_index"]), aipp_parms_set)


@api(out=(C.ACL_DATA_WITHOUT_AIPP, C.ACL_INVALID_NODE_INDEX))
def get_aipp_type(model_id: int, index: int) -> tuple[int, int, int]:
    """``type, dynamic_attached_data_index, ret`` (``aclmdlInputAippType``; the attached index is
    the ``ascend_dynamic_aipp_data`` input of a dynamic-AIPP image input, else 0xFFFFFFFF)."""
    i = as_int(index, "index")
    e = _entry(model_record(model_id).model, i)
    if e is None:
        return C.ACL_DATA_WITHOUT_AIPP, C.ACL_INVALID_NODE_INDEX, C.ACL_SUCCESS
    if e.get("mode") != "dynamic":
        return C.ACL_DATA_WITH_STATIC_AIPP, C.ACL_INVALID_NODE_INDEX, C.ACL_SUCCESS
    if e.get("params_input_index") == i:
        return C.ACL_DYNAMIC_AIPP_NODE, C.ACL_INVALID_NODE_INDEX, C.ACL_SUCCESS
    return C.ACL_DATA_WITH_DYNAMIC_AIPP, int(e["params_input_index"]), C.ACL_SUCCESS


def _io_dims(name: str, dims: list[int]) -> dict[str, Any]:
    return {"name": name, "dimCount": len(dims), "dims": dims}


def _info(m: LoadedModel, e: dict[str, Any]) -> dict[str, Any]:
    """pyACL's ``aclAippInfo`` dict for a manifest AIPP entry."""
    shape = [int(d) for d in e["output_shape"]]
    shapes = [shape]
    if m.gears is not None and shape and shape[0] < 0:  # static AIPP with batch gears: one per gear
        shapes = [[int(s[e["input"]][0]), *shape[1:]] for s in m.gears.shapes if e["input"] in s]
    item = to_numpy(int(e["output_dtype"])).itemsize
    out_dims = [{"srcDims": _io_dims(e["input"], s), "srcSize": math.prod(s) * item,
                 "aippOutdims": _io_dims(e["input"], s), "aippOutSize": math.prod(s) * item} for s in shapes]
    from pycann.ops.aipp import ACL_FORMAT_CODES, canonical_format

    p = e.get("params") or {}
    fmt, swap = canonical_format(str(p.get("input_format", "")), bool(p.get("rbuv_swap_switch", 0))) if p else ("", 0)
    matrix, ob, ib = p.get("matrix", [0] * 9), p.get("output_bias", [0] * 3), p.get("input_bias", [0] * 3)
    info: dict[str, Any] = {
        "inputFormat": ACL_FORMAT_CODES.get(fmt, 0), "srcImageSizeW": int(p.get("src_image_size_w", 0)),
        "srcImageSizeH": int(p.get("src_image_size_h", 0)), "cropSwitch": int(p.get("crop", 0)),
        "loadStartPosW": int(p.get("load_start_pos_w", 0)), "loadStartPosH": int(p.get("load_start_pos_h", 0)),
        "cropSizeW": int(p.get("crop_size_w", 0)), "cropSizeH": int(p.get("crop_size_h", 0)),
        "resizeSwitch": 0, "resizeOutputW": 0, "resizeOutputH": 0, "paddingSwitch": int(p.get("padding", 0)),
        "cscSwitch": int(p.get("csc_switch", 0)), "rbuvSwapSwitch": int(swap),
        "axSwapSwitch": int(p.get("ax_swap_switch", 0)), "singleLineMode": 0,
        "srcFormat": _LAYOUTS.get(str(e["output_layout"]), C.ACL_FORMAT_ND),
        "srcDatatype": ACL_DTYPE.get(DType(int(e["output_dtype"])), C.ACL_DT_UNDEFINED), "srcDimNum": len(shape),
        "shapeCount": len(out_dims), "outDims": out_dims, "aippExtend": 0,
    }
    for side in ("left", "right", "top", "bottom"):
        info[f"{side}PaddingSize"] = int(p.get(f"{side}_padding_size", 0))
    for k in range(9):
        info[f"matrixR{k // 3}C{k % 3}"] = int(matrix[k])
    for k in range(3):
        info[f"outputBias{k}"], info[f"inputBias{k}"] = int(ob[k]), int(ib[k])
    for k in range(4):
        info[f"meanChn{k}"] = int(p.get("mean_chn", [0] * 4)[k])
        info[f"minChn{k}"] = float(p.get("min_chn", [0.0] * 4)[k])
        info[f"varReciChn{k}"] = float(p.get("var_reci_chn", [0.0] * 4)[k])
    return info


@api(out=(None,))
def get_first_aipp_info(model_id: int, index: int) -> tuple[dict[str, Any] | None, int]:
    """``aipp_info, ret``: the static AIPP configuration of image input ``index`` (for dynamic AIPP
    only ``srcFormat``, ``srcDatatype``, ``srcDimNum``, ``shapeCount`` and ``outDims`` are
    meaningful, as in CANN); ``ACL_ERROR_GE_AIPP_NOT_EXIST`` for an input without AIPP."""
    m, i = model_record(model_id).model, as_int(index, "index")
    e = _entry(m, i)
    if e is None or e.get("input_index") != i:
        raise fault(C.ACL_ERROR_GE_AIPP_NOT_EXIST, f"the tensor index[{i}] is not configured with aipp")
    return _info(m, e), C.ACL_SUCCESS
