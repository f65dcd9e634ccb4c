"""The work behind ``acl.media``'s calls: its descriptor objects and handle lookups, the
argument checks every ``*_async`` call shares, and the jobs it queues on a stream (VPC, batch VPC,
JPEG/PNG decode). ``acl.media`` keeps the pyACL-shaped functions themselves (each wrapped by
``_state.api``, which names it ``acl.media.<function>`` in logs and profiles).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._state import as_int, handles, require_init
from pycann.acl.errors import AclFault, ArgTypeError, fault
from pycann.acl.rt import stream_of
from pycann.dvpp import vpc
from pycann.dvpp.formats import DvppError, Fault, PicDesc, buffer_size, layout
from pycann.runtime.memory import DEVICE_KINDS, HOST_KINDS

# a DVPP fault -> the aclError code pyACL returns for it
CODES = {Fault.PARAM: C.ACL_ERROR_INVALID_PARAM, Fault.FORMAT: C.ACL_ERROR_FORMAT_NOT_MATCH,
         Fault.UNSUPPORTED: C.ACL_ERROR_FEATURE_UNSUPPORTED, Fault.DATA: C.ACL_ERROR_INVALID_PARAM}


def acl_fault(e: DvppError) -> AclFault:
    """``e`` as the ``AclFault`` carrying its aclError code (``CODES``)."""
    return fault(CODES[e.fault], str(e))


@dataclass
class ChannelDesc:
    created: bool = False


@dataclass
class BatchPicDesc:
    descs: list[PicDesc] = field(default_factory=list)
    handles: list[int] = field(default_factory=list)


@dataclass
class ResizeConfig:
    interpolation: int = 0


@dataclass
class JpegeConfig:
    level: int = 100


def open_channel(h: int) -> None:
    """Raise ``ACL_ERROR_INVALID_PARAM`` unless channel descriptor ``h`` has an open channel."""
    ch: ChannelDesc = handles.get("dvpp_channel", h, "channel_desc")
    if not ch.created:
        raise fault(C.ACL_ERROR_INVALID_PARAM, "channel_desc has no open channel: call dvpp_create_channel first")


def pic(h: int, what: str = "pic_desc") -> PicDesc:
    """The picture descriptor of handle ``h`` (``what`` names the argument in the error)."""
    desc: PicDesc = handles.get("dvpp_pic_desc", h, what)
    return desc


def host_bytes(data: Any, size: int) -> bytes:
    """Bytes of an encoded image given as a host pointer (or, as a pycann convenience, bytes)."""
    n = as_int(size, "size")
    if isinstance(data, (bytes, bytearray, memoryview)):
        if not 0 <= n <= len(data):  # as the pointer form: a negative size, or one past the data, is refused
            raise fault(C.ACL_ERROR_INVALID_PARAM, f"size {n} is outside the {len(data)} bytes given")
        return bytes(data)[:n]
    return _state.space.read(as_int(data, "data"), n, HOST_KINDS | DEVICE_KINDS, "data").tobytes()


def check_device(ptr: int, nbytes: int, what: str, write: bool = False) -> None:
    """Raise unless ``nbytes`` at ``ptr`` are device memory (writable when ``write``)."""
    require_init().space.resolve(ptr, nbytes, DEVICE_KINDS, write, what)


def run_on(stream: int, name: str, job: Callable[[], None], result: PicDesc | None) -> None:
    """Queue ``job``; a ``DvppError`` there becomes the task's aclError code and ``result.ret_code``."""
    def task() -> None:
        try:
            job()
            if result is not None:
                result.ret_code = 0
        except DvppError as e:
            if result is not None:
                result.ret_code = CODES[e.fault]
            raise acl_fault(e) from None

    stream_of(stream).submit(task, name)


def vpc_job(channel_desc: int, in_h: int, out_h: int, crop: vpc.Roi | None, paste: vpc.Roi | None,
            mode: int, stream: int, name: str) -> int:
    """Check one VPC call's pictures and areas now, then queue it on ``stream`` (crop, resize, paste)."""
    open_channel(channel_desc)
    inp, out = replace(pic(in_h, "input_desc")), pic(out_h, "output_desc")
    snap = replace(out)
    try:
        vpc.check(inp, snap, crop, paste)
    except DvppError as e:
        raise acl_fault(e) from None
    in_n = buffer_size(inp.format, inp.width_stride, inp.height_stride)
    out_n = buffer_size(snap.format, snap.width_stride, snap.height_stride)
    check_device(inp.data, in_n, "input picture")
    check_device(snap.data, out_n, "output picture", write=True)
    space = require_init().space
    c, p = replace(crop) if crop else None, replace(paste) if paste else None

    def job() -> None:
        with space.access(inp.data, in_n, DEVICE_KINDS, False, "input picture") as ib, \
                space.access(snap.data, out_n, DEVICE_KINDS, True, "output picture") as ob:
            vpc.run(ib, inp, ob, snap, c, p, mode)

    run_on(stream, name, job, out)
    return C.ACL_SUCCESS


def roi(h: int, what: str) -> vpc.Roi:
    """The ROI config of handle ``h``."""
    r: vpc.Roi = handles.get("dvpp_roi", h, what)
    return r


def resize_mode(resize_config: int) -> int:
    """The interpolation mode of a resize config handle (0: none given, the default mode)."""
    if as_int(resize_config, "resize_config") == 0:
        return 0
    cfg: ResizeConfig = handles.get("dvpp_resize_cfg", resize_config, "resize_config")
    return cfg.interpolation


def batch_handles(h: int, what: str) -> list[int]:
    """The picture descriptor handles of batch descriptor ``h``."""
    b: BatchPicDesc = handles.get("dvpp_batch_pic_desc", h, what)
    return b.handles


def batch_jobs(channel_desc: int, src_batch: int, roi_nums: Sequence[int], size: int, dst_batch: int,
               crops: Sequence[int], pastes: Sequence[int] | None, mode: int, stream: int, name: str) -> int:
    """A batch VPC call: ``roi_nums[i]`` areas of source picture i, each a ``vpc_job`` into the next output."""
    if not isinstance(roi_nums, (list, tuple)) or not isinstance(crops, (list, tuple)):
        raise ArgTypeError("roi_nums and crop areas must be lists")
    src, dst = batch_handles(src_batch, "src_batch_pic_descs"), batch_handles(dst_batch, "dst_batch_pic_descs")
    nums = [as_int(n, "roi_num") for n in roi_nums]
    n = as_int(size, "size")
    total = sum(nums)
    if n != len(nums) or n > len(src) or any(k < 1 for k in nums):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"size {n} must equal len(roi_nums) {len(nums)} (each >= 1) and "
                                               f"be <= the {len(src)} source pictures")
    if len(crops) != total or total > len(dst) or (pastes is not None and len(pastes) != total):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"{total} areas asked for (sum of roi_nums): need as many crop "
                                               f"(and paste) areas ({len(crops)} given) and output pictures "
                                               f"({len(dst)} in the batch)")
    k = 0
    for i, cnt in enumerate(nums):
        for _ in range(cnt):
            crop = roi(crops[k], "crop_area")
            paste = roi(pastes[k], "paste_area") if pastes is not None else None
            vpc_job(channel_desc, src[i], dst[k], crop, paste, mode, stream, name)
            k += 1
    return C.ACL_SUCCESS


def decode_job(channel_desc: int, data: int, size: int, output_desc: int, stream: int, name: str,
               decode: Callable[[bytes, np.ndarray, PicDesc], None], check_format: Callable[[int], Any]) -> int:
    """Check a JPEG/PNG decode's input size and output picture now, then queue ``decode`` on ``stream``."""
    open_channel(channel_desc)
    ptr, n = as_int(data, "data"), as_int(size, "size")
    if n == 0:  # CANN checks the input size at submission (aclError now, not at the stream's sync)
        raise fault(C.ACL_ERROR_INVALID_PARAM, "the input data size is 0: pass the encoded image's "
                                               "length in bytes (the file's size, > 0)")
    out = pic(output_desc, "output_desc")
    try:
        check_format(out.format)
        layout(out.format)
    except DvppError as e:
        raise acl_fault(e) from None
    if out.data == 0 or out.size <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, "output_desc needs data and size (dvpp_set_pic_desc_data/size)")
    check_device(ptr, n, "input data")
    check_device(out.data, out.size, "output picture", write=True)
    space = require_init().space
    snap = replace(out)

    def job() -> None:
        with space.access(ptr, n, DEVICE_KINDS, False, "input data") as src, \
                space.access(snap.data, snap.size, DEVICE_KINDS, True, "output picture") as dst:
            decode(src.tobytes(), dst, snap)
        out.width, out.height = snap.width, snap.height

    run_on(stream, name, job, out)
    return C.ACL_SUCCESS
