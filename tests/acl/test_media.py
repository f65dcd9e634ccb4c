"""acl.media (DVPP) with pyACL's call shapes: the sample flows, results against OpenCV and
libjpeg-turbo, and the documented error codes."""

from __future__ import annotations

import io

import numpy as np
import pytest

import pycann.acl as acl
from pycann.acl import constants as C

M = acl.media
PIL = pytest.importorskip("PIL.Image")
simplejpeg = pytest.importorskip("simplejpeg")
cv2 = pytest.importorskip("cv2")
NV12, NV21, RGB, BGR, YUYV = 1, 2, 12, 13, 7
H2D, D2H = C.ACL_MEMCPY_HOST_TO_DEVICE, C.ACL_MEMCPY_DEVICE_TO_HOST


def _scene(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(0)
    base = np.stack([128 + 100 * np.sin(xx / 23), 128 + 90 * np.cos(yy / 17), (xx + yy) * 0.3 % 256], -1)
    return np.clip(base + rng.normal(0, 10, base.shape), 0, 255).astype(np.uint8)


def _jpeg(img: np.ndarray, **kw: object) -> bytes:
    bio = io.BytesIO()
    PIL.fromarray(img).save(bio, "JPEG", quality=90, **kw)
    return bio.getvalue()


def _to_dvpp(data: bytes) -> int:
    ptr, ret = M.dvpp_malloc(len(data))
    assert ret == 0
    assert acl.rt.memcpy(ptr, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
    return ptr


def _from_dvpp(ptr: int, n: int) -> np.ndarray:
    host = bytearray(n)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(host), n, ptr, n, D2H) == 0
    return np.frombuffer(bytes(host), np.uint8)


def _pic(fmt: int, w: int, h: int, ws: int, hs: int, size: int, ptr: int | None = None) -> int:
    if ptr is None:
        ptr, ret = M.dvpp_malloc(size)
        assert ret == 0
    d = M.dvpp_create_pic_desc()
    for name, v in (("data", ptr), ("size", size), ("format", fmt), ("width", w), ("height", h),
                    ("width_stride", ws), ("height_stride", hs)):
        assert getattr(M, f"dvpp_set_pic_desc_{name}")(d, v) == 0
    return d


@pytest.fixture()
def dvpp(acl_ready: int):  # type: ignore[no-untyped-def]
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    ch = M.dvpp_create_channel_desc()
    assert M.dvpp_create_channel(ch) == 0
    yield ch, stream
    assert M.dvpp_destroy_channel(ch) == 0 and M.dvpp_destroy_channel_desc(ch) == 0
    assert acl.rt.destroy_stream(stream) == 0


def test_jpeg_decode_resize_flow(dvpp: tuple[int, int]) -> None:
    """sampleResnetDVPP's flow: info -> predict -> decode NV12 (128/16 strides) -> resize -> RGB."""
    ch, stream = dvpp
    data = _jpeg(_scene(300, 400))
    host = acl.util.bytes_to_ptr(data)
    assert M.dvpp_jpeg_get_image_info(host, len(data)) == (400, 300, 3, 0)
    size, ret = M.dvpp_jpeg_predict_dec_size(host, len(data), NV12)
    assert ret == 0 and size == 448 * 304 * 3 // 2  # Ascend310P: ALIGN(w, 64) x ALIGN(h, 16)
    dec = _pic(NV12, 400, 300, 448, 304, size)
    src = _to_dvpp(data)
    assert M.dvpp_jpeg_decode_async(ch, src, len(data), dec, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert (M.dvpp_get_pic_desc_width(dec), M.dvpp_get_pic_desc_ret_code(dec)) == (400, 0)
    y = _from_dvpp(M.dvpp_get_pic_desc_data(dec), size)[: 448 * 304].reshape(304, 448)[:300, :400]
    assert np.array_equal(y, simplejpeg.decode_jpeg(data, "GRAY")[..., 0])  # libjpeg-turbo's Y

    out = _pic(NV12, 224, 224, 224, 224, 224 * 224 * 3 // 2)
    cfg = M.dvpp_create_resize_config()
    assert M.dvpp_set_resize_config_interpolation(cfg, 1) == 0
    assert M.dvpp_vpc_resize_async(ch, dec, out, cfg, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = _from_dvpp(M.dvpp_get_pic_desc_data(out), 224 * 224 * 3 // 2)
    ref_y = cv2.resize(y, (224, 224), interpolation=cv2.INTER_LINEAR)
    assert np.abs(got[: 224 * 224].reshape(224, 224).astype(int) - ref_y).max() <= 1
    # NV12 -> RGB (the colour conversion step), against OpenCV's full-range YCrCb -> RGB
    rgb = _pic(RGB, 224, 224, 672, 224, 672 * 224)
    assert M.dvpp_vpc_convert_color_async(ch, out, rgb, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got_rgb = _from_dvpp(M.dvpp_get_pic_desc_data(rgb), 672 * 224).reshape(224, 224, 3).astype(int)
    yuv = got[: 224 * 224].reshape(224, 224)
    uv = np.repeat(np.repeat(got[224 * 224 :].reshape(112, 112, 2), 2, 0), 2, 1)
    ycrcb = np.dstack([yuv, uv[..., 1], uv[..., 0]])
    assert np.abs(got_rgb - cv2.cvtColor(ycrcb, cv2.COLOR_YCrCb2RGB)).max() <= 1
    for d in (dec, out, rgb):
        assert M.dvpp_free(M.dvpp_get_pic_desc_data(d)) == 0 and M.dvpp_destroy_pic_desc(d) == 0
    assert M.dvpp_destroy_resize_config(cfg) == 0 and M.dvpp_free(src) == 0


def test_alignment_and_format_errors(dvpp: tuple[int, int]) -> None:
    ch, stream = dvpp
    src = _pic(NV12, 64, 48, 64, 48, 64 * 48 * 3 // 2)
    cases = [(_pic(NV12, 32, 32, 40, 32, 40 * 32 * 3 // 2), C.ACL_ERROR_INVALID_PARAM, "multiple of 16"),
             (_pic(NV12, 32, 32, 32, 31, 32 * 32 * 3 // 2), C.ACL_ERROR_INVALID_PARAM, "even"),
             (_pic(NV12, 31, 32, 32, 32, 32 * 32 * 3 // 2), C.ACL_ERROR_INVALID_PARAM, "even width"),
             (_pic(NV12, 32, 32, 32, 32, 1000), C.ACL_ERROR_INVALID_PARAM, "smaller"),
             (_pic(RGB, 32, 32, 32, 32, 3072), C.ACL_ERROR_INVALID_PARAM, ">= 96"),
             (_pic(18, 32, 32, 32, 32, 4096), C.ACL_ERROR_FORMAT_NOT_MATCH, "not supported"),
             (_pic(99, 32, 32, 32, 32, 4096), C.ACL_ERROR_FORMAT_NOT_MATCH, "unknown pixel format")]
    for out, code, text in cases:
        assert M.dvpp_vpc_resize_async(ch, src, out, 0, stream) == code
        assert text in acl.get_recent_err_msg()
    cfg = M.dvpp_create_resize_config()
    assert M.dvpp_set_resize_config_interpolation(cfg, 5) == C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert M.dvpp_set_resize_config_interpolation(cfg, 7) == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_get_resize_config_interpolation(cfg) == 0
    assert M.dvpp_vpc_resize_async(ch, 12345, src, cfg, stream) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    ch2 = M.dvpp_create_channel_desc()  # never created: no channel
    out = _pic(NV12, 32, 32, 32, 32, 1536)
    assert M.dvpp_vpc_resize_async(ch2, src, out, cfg, stream) == C.ACL_ERROR_INVALID_PARAM
    # a host pointer is not DVPP memory
    host = np.zeros(1536, np.uint8)
    bad = _pic(NV12, 32, 32, 32, 32, 1536, acl.util.numpy_to_ptr(host))
    assert M.dvpp_vpc_resize_async(ch, src, bad, cfg, stream) == C.ACL_ERROR_INVALID_PARAM
    assert "expected device memory" in acl.get_recent_err_msg()
    # crop areas: odd left, even right, too small, outside
    for roi, text in (((1, 31, 0, 31), "left must be even"), ((0, 30, 0, 31), "right odd"),
                      ((0, 7, 0, 31), "at least 10x6"), ((0, 65, 0, 31), "not inside")):
        r = M.dvpp_create_roi_config(*roi)
        assert M.dvpp_vpc_crop_async(ch, src, out, r, stream) == C.ACL_ERROR_INVALID_PARAM
        assert text in acl.get_recent_err_msg()
    big = _pic(NV12, 64, 48, 64, 48, 64 * 48 * 3 // 2)
    crop, paste = M.dvpp_create_roi_config(0, 31, 0, 31), M.dvpp_create_roi_config(8, 39, 0, 31)
    assert M.dvpp_vpc_crop_and_paste_async(ch, src, big, crop, paste, stream) == C.ACL_ERROR_INVALID_PARAM
    assert "multiple of 16" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(stream) == 0


def test_crop_and_paste_and_batch(dvpp: tuple[int, int]) -> None:
    ch, stream = dvpp
    img = _scene(64, 96)
    src = _pic(BGR, 96, 64, 288, 64, 288 * 64, _to_dvpp(img[..., ::-1].tobytes()))
    out_n = 128 * 64 * 3
    out_ptr = _to_dvpp(bytes([7]) * out_n)
    out = _pic(BGR, 128, 64, 384, 64, out_n, out_ptr)
    crop, paste = M.dvpp_create_roi_config(10, 49, 4, 43), M.dvpp_create_roi_config(16, 95, 10, 49)
    assert M.dvpp_vpc_crop_and_paste_async(ch, src, out, crop, paste, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = _from_dvpp(out_ptr, out_n).reshape(64, 128, 3)
    ref = cv2.resize(np.ascontiguousarray(img[4:44, 10:50, ::-1]), (80, 40), interpolation=cv2.INTER_LINEAR)
    assert np.abs(got[10:50, 16:96].astype(int) - ref).max() <= 1
    outside = np.ones(got.shape[:2], bool)
    outside[10:50, 16:96] = False
    assert (got[outside] == 7).all()  # the rest of the output keeps its bytes
    # batch crop: 2 crops of one picture into a batch of 2 outputs
    sb, db = M.dvpp_create_batch_pic_desc(1), M.dvpp_create_batch_pic_desc(2)
    s0 = M.dvpp_get_pic_desc(sb, 0)
    for name in ("data", "size", "format", "width", "height", "width_stride", "height_stride"):
        getattr(M, f"dvpp_set_pic_desc_{name}")(s0, getattr(M, f"dvpp_get_pic_desc_{name}")(src))
    rois = [M.dvpp_create_roi_config(0, 31, 0, 31), M.dvpp_create_roi_config(32, 95, 0, 63)]
    for i in range(2):
        d = M.dvpp_get_pic_desc(db, i)
        ptr, _ = M.dvpp_malloc(48 * 32 * 3)
        for name, v in (("data", ptr), ("size", 48 * 32 * 3), ("format", BGR), ("width", 32), ("height", 32),
                        ("width_stride", 96), ("height_stride", 32)):
            getattr(M, f"dvpp_set_pic_desc_{name}")(d, v)
    assert M.dvpp_get_pic_desc(db, 2) == 0
    assert M.dvpp_vpc_batch_crop_async(ch, sb, [2], 1, db, rois, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    second = _from_dvpp(M.dvpp_get_pic_desc_data(M.dvpp_get_pic_desc(db, 1)), 96 * 32).reshape(32, 32, 3)
    ref2 = cv2.resize(np.ascontiguousarray(img[0:64, 32:96, ::-1]), (32, 32), interpolation=cv2.INTER_LINEAR)
    assert np.abs(second.astype(int) - ref2).max() <= 1
    assert M.dvpp_vpc_batch_crop_async(ch, sb, [3], 1, db, rois, stream) == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_destroy_batch_pic_desc(sb) == 0 and M.dvpp_destroy_batch_pic_desc(db) == 0
    assert M.dvpp_get_pic_desc_width(s0) == 0  # its descriptors went with it


def test_batch_member_is_destroyed_with_its_batch(acl_ready: int) -> None:
    """A descriptor dvpp_get_pic_desc handed out belongs to the batch: destroying it alone is
    refused, and the batch's own destroy then succeeds and takes every member with it."""
    b = M.dvpp_create_batch_pic_desc(3)
    members = [M.dvpp_get_pic_desc(b, i) for i in range(3)]
    assert M.dvpp_destroy_pic_desc(members[1]) == C.ACL_ERROR_INVALID_PARAM
    assert "destroy the batch" in acl.get_recent_err_msg()
    assert M.dvpp_set_pic_desc_width(members[1], 32) == 0  # still usable
    assert M.dvpp_destroy_batch_pic_desc(b) == 0
    assert all(M.dvpp_set_pic_desc_width(m, 32) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE for m in members)
    single = M.dvpp_create_pic_desc()
    assert M.dvpp_destroy_pic_desc(single) == 0


def test_corrupt_and_refused_jpegs(dvpp: tuple[int, int]) -> None:
    ch, stream = dvpp
    good = _jpeg(_scene(64, 64))
    out = _pic(NV12, 64, 64, 64, 64, 64 * 64 * 3 // 2)
    bad = good[:200] + bytes(len(good) - 200)
    assert M.dvpp_jpeg_decode_async(ch, _to_dvpp(bad), len(bad), out, stream) == 0
    assert acl.rt.synchronize_stream(stream) == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_get_pic_desc_ret_code(out) == C.ACL_ERROR_INVALID_PARAM
    prog = _jpeg(_scene(64, 64), progressive=True)
    assert M.dvpp_jpeg_predict_dec_size(acl.util.bytes_to_ptr(prog), len(prog), NV12)[1] == \
        C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert M.dvpp_jpeg_get_image_info(acl.util.bytes_to_ptr(b"xx" * 20), 40)[3] == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_jpeg_predict_dec_size(acl.util.bytes_to_ptr(good), len(good), 20)[1] == C.ACL_ERROR_FORMAT_NOT_MATCH
    # the input must be in device memory
    assert M.dvpp_jpeg_decode_async(ch, acl.util.bytes_to_ptr(good), len(good), out, stream) == C.ACL_ERROR_INVALID_PARAM


def test_jpeg_encode_and_png_decode(dvpp: tuple[int, int]) -> None:
    ch, stream = dvpp
    img = _scene(64, 96)
    data = _jpeg(img)
    dec = _pic(NV12, 96, 64, 128, 64, 128 * 64 * 3 // 2)
    assert M.dvpp_jpeg_decode_async(ch, _to_dvpp(data), len(data), dec, stream) == 0
    cfg = M.dvpp_create_jpege_config()
    assert M.dvpp_set_jpege_config_level(cfg, 101) == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_set_jpege_config_level(cfg, 90) == 0 and M.dvpp_get_jpege_config_level(cfg) == 90
    cap, ret = M.dvpp_jpeg_predict_enc_size(dec, cfg)
    assert ret == 0 and cap > 0
    out, _ = M.dvpp_malloc(cap)
    size_box = np.array([cap], np.uint32)
    assert M.dvpp_jpeg_encode_async(ch, dec, out, acl.util.numpy_to_ptr(size_box), cfg, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    n = int(size_box[0])
    assert 0 < n < cap and n == M.last_encode_size()
    enc = _from_dvpp(out, n).tobytes()
    assert enc[:2] == b"\xff\xd8" and simplejpeg.decode_jpeg_header(enc)[:2] == (64, 96)
    back = simplejpeg.decode_jpeg(enc, "GRAY")[..., 0].astype(int)
    assert np.abs(back - simplejpeg.decode_jpeg(data, "GRAY")[..., 0]).mean() < 3
    # PNG
    bio = io.BytesIO()
    PIL.fromarray(img).save(bio, "PNG")
    pdata = bio.getvalue()
    hp = acl.util.bytes_to_ptr(pdata)
    assert M.dvpp_png_get_image_info(hp, len(pdata)) == (96, 64, 3, 0)
    size, ret = M.dvpp_png_predict_dec_size(hp, len(pdata), RGB)
    assert ret == 0 and size == 384 * 64
    pic = _pic(RGB, 96, 64, 384, 64, size)
    assert M.dvpp_png_decode_async(ch, _to_dvpp(pdata), len(pdata), pic, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = _from_dvpp(M.dvpp_get_pic_desc_data(pic), size).reshape(64, 384)[:, :288].reshape(64, 96, 3)
    assert np.array_equal(got, img)


def test_png_predict_refuses_a_size_pngd_cannot_decode(acl_ready: int) -> None:
    """A 20x20 PNG (PNGD takes 32x32..4096x4096): ``dvpp_png_predict_dec_size`` refuses it up front with
    the code the decode reports at the stream's sync (200006), as JPEG's predict does; 32x32 is sized."""
    for side, want in ((20, C.ACL_ERROR_FEATURE_UNSUPPORTED), (32, 0)):
        bio = io.BytesIO()
        PIL.fromarray(np.zeros((side, side, 3), np.uint8)).save(bio, "PNG")
        data = bio.getvalue()
        size, ret = M.dvpp_png_predict_dec_size(acl.util.bytes_to_ptr(data), len(data), RGB)
        assert ret == want
        assert (size == 128 * 32) if want == 0 else size == 0


def _png_header_only(w: int, h: int) -> bytes:
    """A PNG whose IHDR says ``w x h`` (its data is a stub: only the header is read)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))


def test_png_larger_than_pillows_bomb_limit_is_sized_then_refused(dvpp: tuple[int, int]) -> None:
    """A 20000x20000 PNG header: Pillow's decompression-bomb guard turned get_image_info, predict and
    decode into ACL_ERROR_INTERNAL_ERROR (500000). The info is the header's; predict and decode give
    200006 (outside PNGD's 4096x4096), as for any other too-large PNG."""
    ch, stream = dvpp
    data = _png_header_only(20000, 20000)
    host = acl.util.bytes_to_ptr(data)
    assert M.dvpp_png_get_image_info(host, len(data)) == (20000, 20000, 3, 0)
    assert M.dvpp_png_predict_dec_size(host, len(data), RGB) == (0, C.ACL_ERROR_FEATURE_UNSUPPORTED)
    src = _to_dvpp(data)
    out = _pic(RGB, 64, 64, 256, 64, 256 * 64)
    assert M.dvpp_png_decode_async(ch, src, len(data), out, stream) == 0
    assert acl.rt.synchronize_stream(stream) == C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert M.dvpp_get_pic_desc_ret_code(out) == C.ACL_ERROR_FEATURE_UNSUPPORTED


def test_image_info_from_bytes_checks_the_size(acl_ready: int) -> None:
    """With bytes for ``data`` (a pycann convenience), a negative size sliced the data from the end
    (``data[:-5]``) and succeeded; as with a host pointer, a size outside the data is 100000."""
    data = _jpeg(_scene(64, 80))
    assert M.dvpp_jpeg_get_image_info(data, len(data)) == (80, 64, 3, 0)
    for bad in (-5, len(data) + 1):
        assert M.dvpp_jpeg_get_image_info(data, bad)[3] == C.ACL_ERROR_INVALID_PARAM
        assert M.dvpp_jpeg_predict_dec_size(data, bad, NV12)[1] == C.ACL_ERROR_INVALID_PARAM


def test_empty_input_is_refused_at_submission(dvpp: tuple[int, int]) -> None:
    """A 0-byte JPEG/PNG is ACL_ERROR_INVALID_PARAM from the *_decode_async call itself (CANN checks the
    size before queueing); nothing is queued, so the stream's sync succeeds and the output is untouched."""
    ch, stream = dvpp
    src = _to_dvpp(_jpeg(_scene(64, 64)))
    out = _pic(NV12, 64, 64, 64, 64, 64 * 64 * 3 // 2)
    rgb = _pic(RGB, 64, 64, 192, 64, 192 * 64)
    assert M.dvpp_jpeg_decode_async(ch, src, 0, out, stream) == C.ACL_ERROR_INVALID_PARAM
    assert M.dvpp_png_decode_async(ch, src, 0, rgb, stream) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_stream(stream) == 0
    assert (M.dvpp_get_pic_desc_ret_code(out), M.dvpp_get_pic_desc_width(out)) == (0, 64)
    for d in (out, rgb):
        assert M.dvpp_free(M.dvpp_get_pic_desc_data(d)) == 0 and M.dvpp_destroy_pic_desc(d) == 0
    assert M.dvpp_free(src) == 0


def test_zero_capacity_encode_is_refused_at_submission(dvpp: tuple[int, int]) -> None:
    """dvpp_jpeg_encode_async with an output capacity of 0 (an int, or a host uint32 holding 0) is
    ACL_ERROR_INVALID_PARAM from the call, as the decoders' 0-byte input; it surfaced at the sync."""
    ch, stream = dvpp
    src = _pic(NV12, 64, 64, 64, 64, 64 * 64 * 3 // 2)
    cfg = M.dvpp_create_jpege_config()
    out, ret = M.dvpp_malloc(64 * 64 * 3)
    assert ret == 0
    assert M.dvpp_jpeg_encode_async(ch, src, out, 0, cfg, stream) == C.ACL_ERROR_INVALID_PARAM
    cap = np.zeros(1, np.uint32)
    assert M.dvpp_jpeg_encode_async(ch, src, out, acl.util.numpy_to_ptr(cap), cfg, stream) == \
        C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_stream(stream) == 0  # nothing was queued
    assert M.dvpp_free(out) == 0 and M.dvpp_free(M.dvpp_get_pic_desc_data(src)) == 0
    assert M.dvpp_destroy_pic_desc(src) == 0 and M.dvpp_destroy_jpege_config(cfg) == 0
