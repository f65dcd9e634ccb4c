"""``acl.media``: DVPP with pyACL's call shapes and ``aclError`` codes (cann-interfaces.md §9.1).

A facade over ``pycann.dvpp``: descriptors and configs are handle ints, pictures live in device
memory (``dvpp_malloc``, or ``acl.rt.malloc``), ``*_async`` calls check their arguments now
(alignment and size faults return ``ACL_ERROR_INVALID_PARAM`` at once, unsupported pixel formats
``ACL_ERROR_FORMAT_NOT_MATCH``, features the device lacks ``ACL_ERROR_FEATURE_UNSUPPORTED``) and run
when the stream reaches them; a failure there (a corrupt JPEG) is returned by
``acl.rt.synchronize_stream`` and recorded in the output descriptor's ret code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.errors import ArgTypeError, fault
from pycann.acl.media_jobs import (
    BatchPicDesc,
    ChannelDesc,
    JpegeConfig,
    ResizeConfig,
    acl_fault,
    batch_jobs,
    check_device,
    decode_job,
    host_bytes,
    open_channel,
    pic,
    resize_mode,
    roi,
    run_on,
    vpc_job,
)
from pycann.dvpp import jpeg, png, vpc
from pycann.dvpp.formats import DvppError, Fault, PicDesc, buffer_size
from pycann.dvpp.resize import interpolation
from pycann.runtime.memory import DEVICE_KINDS, HOST_KINDS


# ---------------------------------------------------------------- memory
@api(out=(0,))
def dvpp_malloc(size: int) -> tuple[int, int]:
    """``ptr, ret``: device memory for DVPP (page-aligned, as the device's 128-byte rule needs)."""
    n = as_int(size, "size")
    if n <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"size must be > 0, not {n}")
    return require_init().malloc(n, _state.user_site()).base, C.ACL_SUCCESS


@api()
def dvpp_free(dev_ptr: int) -> int:
    """Free ``dvpp_malloc`` memory."""
    require_init().space.free(as_int(dev_ptr, "dev_ptr"), DEVICE_KINDS)
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- handles
def _create(kind: str, obj: Any) -> int:
    require_init()
    return handles.add(kind, obj)


def _destroy(kind: str, h: int) -> int:
    handles.pop(kind, h)
    return C.ACL_SUCCESS


@api(bare=0)
def dvpp_create_channel_desc() -> int:
    """A channel descriptor (0 before ``acl.init``)."""
    return _create("dvpp_channel", ChannelDesc())


@api()
def dvpp_create_channel(channel_desc: int) -> int:
    """Open the DVPP channel of ``channel_desc``."""
    handles.get("dvpp_channel", channel_desc, "channel_desc").created = True
    return C.ACL_SUCCESS


@api()
def dvpp_destroy_channel(channel_desc: int) -> int:
    ch: ChannelDesc = handles.get("dvpp_channel", channel_desc, "channel_desc")
    if not ch.created:
        raise fault(C.ACL_ERROR_INVALID_PARAM, "the channel was not created (dvpp_create_channel)")
    ch.created = False
    return C.ACL_SUCCESS


@api()
def dvpp_destroy_channel_desc(channel_desc: int) -> int:
    return _destroy("dvpp_channel", channel_desc)


# ---------------------------------------------------------------- picture descriptors
@api(bare=0)
def dvpp_create_pic_desc() -> int:
    """A picture descriptor (NV12, 0x0, no data until set)."""
    return _create("dvpp_pic_desc", PicDesc())


@api()
def dvpp_destroy_pic_desc(pic_desc: int) -> int:
    h = as_int(pic_desc, "pic_desc")
    if any(h in b.handles for b in handles.live("dvpp_batch_pic_desc")):
        # the batch owns it: destroying it alone left dvpp_destroy_batch_pic_desc failing half-way
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"pic_desc {h:#x} belongs to a batch (dvpp_get_pic_desc); "
                                               "destroy the batch with dvpp_destroy_batch_pic_desc")
    return _destroy("dvpp_pic_desc", h)


def _setter(name: str) -> Callable[[int, int], int]:
    @api(name=f"acl.media.dvpp_set_pic_desc_{name}")
    def set_field(pic_desc: int, value: int) -> int:
        v = as_int(value, name)
        if v < 0 and name != "ret_code":
            raise fault(C.ACL_ERROR_INVALID_PARAM, f"{name} must be >= 0, not {v}")
        setattr(pic(pic_desc), name, v)
        return C.ACL_SUCCESS

    set_field.__doc__ = f"``ret = dvpp_set_pic_desc_{name}(pic_desc, value)``."
    return set_field


def _getter(name: str) -> Callable[[int], int]:
    @api(bare=0, name=f"acl.media.dvpp_get_pic_desc_{name}")
    def get_field(pic_desc: int) -> int:
        return int(getattr(pic(pic_desc), name))

    get_field.__doc__ = f"``value = dvpp_get_pic_desc_{name}(pic_desc)`` (0 for a bad handle)."
    return get_field


dvpp_set_pic_desc_data = _setter("data")
dvpp_set_pic_desc_size = _setter("size")
dvpp_set_pic_desc_format = _setter("format")
dvpp_set_pic_desc_width = _setter("width")
dvpp_set_pic_desc_height = _setter("height")
dvpp_set_pic_desc_width_stride = _setter("width_stride")
dvpp_set_pic_desc_height_stride = _setter("height_stride")
dvpp_set_pic_desc_ret_code = _setter("ret_code")
dvpp_get_pic_desc_data = _getter("data")
dvpp_get_pic_desc_size = _getter("size")
dvpp_get_pic_desc_format = _getter("format")
dvpp_get_pic_desc_width = _getter("width")
dvpp_get_pic_desc_height = _getter("height")
dvpp_get_pic_desc_width_stride = _getter("width_stride")
dvpp_get_pic_desc_height_stride = _getter("height_stride")
dvpp_get_pic_desc_ret_code = _getter("ret_code")


@api(bare=0)
def dvpp_create_batch_pic_desc(batch_size: int) -> int:
    """``batch_size`` picture descriptors in one (``dvpp_get_pic_desc(batch, i)`` gives each)."""
    n = as_int(batch_size, "batch_size")
    if not 1 <= n <= 256:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"batch_size must be in 1..256, not {n}")
    b = BatchPicDesc([PicDesc() for _ in range(n)])
    b.handles = [handles.add("dvpp_pic_desc", d) for d in b.descs]
    return _create("dvpp_batch_pic_desc", b)


@api(bare=0)
def dvpp_get_pic_desc(batch_pic_desc: int, index: int) -> int:
    """The ``index``-th picture descriptor of a batch (0 when out of range)."""
    b: BatchPicDesc = handles.get("dvpp_batch_pic_desc", batch_pic_desc, "batch_pic_desc")
    i = as_int(index, "index")
    if not 0 <= i < len(b.handles):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"index {i} is outside the batch of {len(b.handles)}")
    return b.handles[i]


@api()
def dvpp_destroy_batch_pic_desc(batch_pic_desc: int) -> int:
    b: BatchPicDesc = handles.pop("dvpp_batch_pic_desc", batch_pic_desc, "batch_pic_desc")
    for h in b.handles:
        handles.pop("dvpp_pic_desc", h)
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- ROI, resize and JPEGE configs
@api(bare=0)
def dvpp_create_roi_config(left: int, right: int, top: int, bottom: int) -> int:
    """An area with inclusive pixel coordinates."""
    return _create("dvpp_roi", vpc.Roi(as_int(left, "left"), as_int(right, "right"), as_int(top, "top"),
                                       as_int(bottom, "bottom")))


@api()
def dvpp_set_roi_config(roi_config: int, left: int, right: int, top: int, bottom: int) -> int:
    r: vpc.Roi = handles.get("dvpp_roi", roi_config, "roi_config")
    r.left, r.right, r.top, r.bottom = (as_int(left, "left"), as_int(right, "right"), as_int(top, "top"),
                                        as_int(bottom, "bottom"))
    return C.ACL_SUCCESS


def _roi_setter(name: str) -> Callable[[int, int], int]:
    @api(name=f"acl.media.dvpp_set_roi_config_{name}")
    def set_side(roi_config: int, value: int) -> int:
        setattr(handles.get("dvpp_roi", roi_config, "roi_config"), name, as_int(value, name))
        return C.ACL_SUCCESS

    return set_side


dvpp_set_roi_config_left = _roi_setter("left")
dvpp_set_roi_config_right = _roi_setter("right")
dvpp_set_roi_config_top = _roi_setter("top")
dvpp_set_roi_config_bottom = _roi_setter("bottom")


@api()
def dvpp_destroy_roi_config(roi_config: int) -> int:
    return _destroy("dvpp_roi", roi_config)


@api(bare=0)
def dvpp_create_resize_config() -> int:
    """A resize config (interpolation 0: bilinear as OpenCV on Atlas inference products)."""
    return _create("dvpp_resize_cfg", ResizeConfig())


@api()
def dvpp_set_resize_config_interpolation(resize_config: int, interpolation_mode: int) -> int:
    """0/1 bilinear (OpenCV), 2 nearest (OpenCV), 3 bilinear / 4 nearest (TensorFlow legacy);
    5 (the device's own filter) returns ``ACL_ERROR_FEATURE_UNSUPPORTED``."""
    cfg: ResizeConfig = handles.get("dvpp_resize_cfg", resize_config, "resize_config")
    try:
        cfg.interpolation = int(interpolation(as_int(interpolation_mode, "interpolation")))
    except DvppError as e:
        raise acl_fault(e) from None
    return C.ACL_SUCCESS


@api(bare=0)
def dvpp_get_resize_config_interpolation(resize_config: int) -> int:
    cfg: ResizeConfig = handles.get("dvpp_resize_cfg", resize_config, "resize_config")
    return cfg.interpolation


@api()
def dvpp_destroy_resize_config(resize_config: int) -> int:
    return _destroy("dvpp_resize_cfg", resize_config)


@api(bare=0)
def dvpp_create_jpege_config() -> int:
    """A JPEGE config (level 100)."""
    return _create("dvpp_jpege_cfg", JpegeConfig())


@api()
def dvpp_set_jpege_config_level(jpege_config: int, level: int) -> int:
    """Quality 0..100 (0 encodes as 100, as on the device)."""
    lv = as_int(level, "level")
    if not 0 <= lv <= 100:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"level must be in 0..100, not {lv}")
    handles.get("dvpp_jpege_cfg", jpege_config, "jpege_config").level = lv
    return C.ACL_SUCCESS


@api(bare=0)
def dvpp_get_jpege_config_level(jpege_config: int) -> int:
    cfg: JpegeConfig = handles.get("dvpp_jpege_cfg", jpege_config, "jpege_config")
    return cfg.level


@api()
def dvpp_destroy_jpege_config(jpege_config: int) -> int:
    return _destroy("dvpp_jpege_cfg", jpege_config)


# ---------------------------------------------------------------- VPC
@api()
def dvpp_vpc_resize_async(channel_desc: int, input_desc: int, output_desc: int, resize_config: int,
                          stream: int) -> int:
    """Resize the whole input into the whole output (converting the pixel format if they differ)."""
    return vpc_job(channel_desc, input_desc, output_desc, None, None, resize_mode(resize_config), stream,
                    "dvpp_vpc_resize")


@api()
def dvpp_vpc_crop_async(channel_desc: int, input_desc: int, output_desc: int, crop_area: int, stream: int) -> int:
    """Crop ``crop_area`` and resize it to the output's size."""
    return vpc_job(channel_desc, input_desc, output_desc, roi(crop_area, "crop_area"), None, 0, stream,
                    "dvpp_vpc_crop")


@api()
def dvpp_vpc_crop_resize_async(channel_desc: int, input_desc: int, output_desc: int, crop_area: int,
                               resize_config: int, stream: int) -> int:
    """``dvpp_vpc_crop_async`` with the resize config's interpolation."""
    return vpc_job(channel_desc, input_desc, output_desc, roi(crop_area, "crop_area"), None,
                    resize_mode(resize_config), stream, "dvpp_vpc_crop_resize")


@api()
def dvpp_vpc_crop_and_paste_async(channel_desc: int, input_desc: int, output_desc: int, crop_area: int,
                                  paste_area: int, stream: int) -> int:
    """Crop ``crop_area``, resize it to ``paste_area``'s size and write it there (the rest of the
    output keeps its bytes)."""
    return vpc_job(channel_desc, input_desc, output_desc, roi(crop_area, "crop_area"),
                    roi(paste_area, "paste_area"), 0, stream, "dvpp_vpc_crop_and_paste")


@api()
def dvpp_vpc_crop_resize_paste_async(channel_desc: int, input_desc: int, output_desc: int, crop_area: int,
                                     paste_area: int, resize_config: int, stream: int) -> int:
    return vpc_job(channel_desc, input_desc, output_desc, roi(crop_area, "crop_area"),
                    roi(paste_area, "paste_area"), resize_mode(resize_config), stream, "dvpp_vpc_crop_resize_paste")


@api()
def dvpp_vpc_convert_color_async(channel_desc: int, input_desc: int, output_desc: int, stream: int) -> int:
    """Colour-space / layout conversion: input and output have the same size."""
    inp, out = pic(input_desc, "input_desc"), pic(output_desc, "output_desc")
    if (inp.width, inp.height) != (out.width, out.height):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"convert colour keeps the size: input {inp.width}x{inp.height}, "
                                               f"output {out.width}x{out.height}")
    return vpc_job(channel_desc, input_desc, output_desc, None, None, 0, stream, "dvpp_vpc_convert_color")


@api()
def dvpp_vpc_batch_crop_async(channel_desc: int, src_batch_pic_descs: int, roi_nums: Sequence[int], size: int,
                              dst_batch_pic_descs: int, crop_area: Sequence[int], stream: int) -> int:
    """``roi_nums[i]`` crops of source picture ``i``, into the output pictures in order."""
    return batch_jobs(channel_desc, src_batch_pic_descs, roi_nums, size, dst_batch_pic_descs, crop_area,
                       None, 0, stream, "dvpp_vpc_batch_crop")


@api()
def dvpp_vpc_batch_crop_resize_async(channel_desc: int, src_batch_pic_descs: int, roi_nums: Sequence[int],
                                     size: int, dst_batch_pic_descs: int, crop_area: Sequence[int],
                                     resize_config: int, stream: int) -> int:
    return batch_jobs(channel_desc, src_batch_pic_descs, roi_nums, size, dst_batch_pic_descs, crop_area,
                       None, resize_mode(resize_config), stream, "dvpp_vpc_batch_crop_resize")


@api()
def dvpp_vpc_batch_crop_and_paste_async(channel_desc: int, src_batch_pic_descs: int, roi_nums: Sequence[int],
                                        size: int, dst_batch_pic_descs: int, crop_area: Sequence[int],
                                        paste_area: Sequence[int], stream: int) -> int:
    if not isinstance(paste_area, (list, tuple)):
        raise ArgTypeError("paste_area must be a list")
    return batch_jobs(channel_desc, src_batch_pic_descs, roi_nums, size, dst_batch_pic_descs, crop_area,
                       paste_area, 0, stream, "dvpp_vpc_batch_crop_and_paste")


# ---------------------------------------------------------------- JPEG / PNG
def _soc() -> str:
    return str(require_init().devices[0].soc_name)


@api(out=(0, 0, 0))
def dvpp_jpeg_get_image_info(data: Any, size: int) -> tuple[int, int, int, int]:
    """``width, height, components, ret`` of the JPEG at host pointer ``data``."""
    try:
        info = jpeg.get_image_info(host_bytes(data, size))
    except DvppError as e:
        raise acl_fault(e) from None
    return info.width, info.height, info.components, C.ACL_SUCCESS


dvpp_jpeg_get_image_info_v2 = dvpp_jpeg_get_image_info


@api(out=(0,))
def dvpp_jpeg_predict_dec_size(data: Any, size: int, output_pixel_format: int) -> tuple[int, int]:
    """``size, ret``: bytes JPEGD's output picture needs (strides aligned for this soc)."""
    try:
        info = jpeg.get_image_info(host_bytes(data, size))
        jpeg.check_decodable(info)
        return jpeg.output_layout(info.width, info.height, as_int(output_pixel_format, "format"), _soc())[4], 0
    except DvppError as e:
        raise acl_fault(e) from None


@api()
def dvpp_jpeg_decode_async(channel_desc: int, data: int, size: int, output_desc: int, stream: int) -> int:
    """Decode the JPEG at device pointer ``data`` into ``output_desc`` (its format: NV12/NV21 and the
    other YUV SP formats, YUV400, RGB/BGR 888); its width and height are set to the decoded size."""
    soc = _soc()
    return decode_job(channel_desc, data, size, output_desc, stream, "dvpp_jpeg_decode",
                       lambda b, buf, pic: jpeg.decode_into(b, buf, pic, soc), jpeg.decode_format)


@api(out=(0,))
def dvpp_jpeg_predict_enc_size(input_desc: int, jpege_config: int) -> tuple[int, int]:
    """``size, ret``: an upper bound of JPEGE's output bytes for ``input_desc``."""
    inp = pic(input_desc, "input_desc")
    handles.get("dvpp_jpege_cfg", jpege_config, "jpege_config")
    try:
        jpeg.check_encodable(inp)
    except DvppError as e:
        raise acl_fault(e) from None
    return jpeg.predict_enc_size(inp.width, inp.height, inp.format), C.ACL_SUCCESS


@api()
def dvpp_jpeg_encode_async(channel_desc: int, input_desc: int, data: int, size: Any, jpege_config: int,
                           stream: int) -> int:
    """Encode ``input_desc`` into device memory at ``data``. ``size``: a host pointer to a uint32
    holding the buffer's capacity, overwritten with the JPEG's length (C's ``uint32_t *size``); a
    plain capacity int is accepted too (then ``last_encode_size()`` gives the length)."""
    open_channel(channel_desc)
    inp = replace(pic(input_desc, "input_desc"))
    level = handles.get("dvpp_jpege_cfg", jpege_config, "jpege_config").level
    try:
        jpeg.check_encodable(inp)
    except DvppError as e:
        raise acl_fault(e) from None
    space = require_init().space
    s = as_int(size, "size")
    size_ptr = s if s > 0 and space.kind_of(s) in HOST_KINDS else 0
    cap = int(space.read(size_ptr, 4, HOST_KINDS, "size").view(np.uint32)[0]) if size_ptr else s
    if cap <= 0:  # a parameter fault, refused at submission as the decoders' 0-byte input is
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"the output buffer's size is {cap}: pass its capacity in bytes "
                    "(dvpp_jpeg_predict_enc_size gives what the JPEG may need)")
    out_ptr = as_int(data, "data")
    in_n = buffer_size(inp.format, inp.width_stride, inp.height_stride)
    check_device(inp.data, in_n, "input picture")
    check_device(out_ptr, cap, "output data", write=True)

    def job() -> None:
        with space.access(inp.data, in_n, DEVICE_KINDS, False, "input picture") as ib:
            encoded = jpeg.encode(ib, inp, level)
        if len(encoded) > cap:
            raise DvppError(Fault.PARAM, f"the JPEG needs {len(encoded)} bytes; the output buffer has {cap} "
                                         "(size it with dvpp_jpeg_predict_enc_size)")
        space.write(out_ptr, np.frombuffer(encoded, np.uint8), DEVICE_KINDS, "output data")
        _last_encode[0] = len(encoded)
        if size_ptr:
            space.write(size_ptr, np.array([len(encoded)], np.uint32), HOST_KINDS, "size")

    run_on(stream, "dvpp_jpeg_encode", job, None)
    return C.ACL_SUCCESS


_last_encode = [0]


def last_encode_size() -> int:
    """pycann extension: the length of the last JPEG ``dvpp_jpeg_encode_async`` wrote."""
    return _last_encode[0]


@api(out=(0, 0, 0))
def dvpp_png_get_image_info(data: Any, size: int) -> tuple[int, int, int, int]:
    """``width, height, components, ret`` of the PNG at host pointer ``data``."""
    try:
        info = png.get_image_info(host_bytes(data, size))
    except DvppError as e:
        raise acl_fault(e) from None
    return info.width, info.height, info.components, C.ACL_SUCCESS


@api(out=(0,))
def dvpp_png_predict_dec_size(data: Any, size: int, output_pixel_format: int) -> tuple[int, int]:
    """``size, ret``: bytes PNGD's output picture needs."""
    try:
        info = png.get_image_info(host_bytes(data, size))
        png.check_decodable(info.width, info.height)
        return png.output_layout(info.width, info.height, as_int(output_pixel_format, "format"))[2], 0
    except DvppError as e:
        raise acl_fault(e) from None


@api()
def dvpp_png_decode_async(channel_desc: int, data: int, size: int, output_desc: int, stream: int) -> int:
    """Decode the PNG at device pointer ``data`` into ``output_desc`` (RGB_888 or RGBA_8888)."""
    return decode_job(channel_desc, data, size, output_desc, stream, "dvpp_png_decode", png.decode_into,
                       png.decode_format)
