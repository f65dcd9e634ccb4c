"""pycann.dvpp below the facade: colour conversion, resize and the codecs against libjpeg-turbo,
Pillow and OpenCV."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from pycann.dvpp import color, jpeg, png, resize
from pycann.dvpp.formats import DvppError, Fault, PicDesc, PixelFormat, buffer_size, vpc_strides

from .conftest import jpeg_bytes, png_bytes, scene

cv2 = pytest.importorskip("cv2")


def test_layout_table() -> None:
    assert vpc_strides(PixelFormat.YUV_SEMIPLANAR_420, 401, 301) == (416, 302, 416 * 302 * 3 // 2)
    assert vpc_strides(PixelFormat.RGB_888, 224, 224) == (672, 224, 672 * 224)
    assert vpc_strides(PixelFormat.YUYV_PACKED_422, 100, 10) == (208, 10, 2080)
    assert buffer_size(PixelFormat.YUV_SEMIPLANAR_422, 64, 4) == 512
    assert buffer_size(PixelFormat.YVU_SEMIPLANAR_444, 64, 4) == 768
    assert buffer_size(PixelFormat.ARGB_8888, 256, 4) == 1024


def test_yuv_to_rgb_is_libjpeg_turbo_exact() -> None:
    """A 4:4:4 JPEG: libjpeg's YCbCr output converted here == libjpeg-turbo's own RGB output."""
    data = jpeg_bytes(scene(96, 130), subsampling=0)
    with Image.open(io.BytesIO(data)) as im:
        im.draft("YCbCr", im.size)
        ycc = np.asarray(im)
    assert np.array_equal(color.yuv_to_rgb(ycc), simplejpeg.decode_jpeg(data, "RGB"))


def test_rgb_to_yuv_within_one_of_opencv() -> None:
    rgb = np.random.default_rng(1).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    ours = color.rgb_to_yuv(rgb).astype(int)
    ref = cv2.cvtColor(rgb, cv2.COLOR_RGB2YCrCb)[..., [0, 2, 1]].astype(int)
    assert np.abs(ours - ref).max() <= 1
    assert np.abs(color.yuv_to_rgb(color.rgb_to_yuv(rgb)).astype(int) - rgb).max() <= 3


@pytest.mark.parametrize("shape", [(1080, 1920, 224, 224), (37, 53, 100, 71), (100, 100, 33, 67), (6, 10, 200, 300),
                                   (736, 1000, 32, 320)])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_bilinear_within_one_lsb_of_opencv(shape: tuple[int, int, int, int], c: int) -> None:
    h, w, oh, ow = shape
    rng = np.random.default_rng(h + c)
    a = rng.integers(0, 256, (h, w, c) if c > 1 else (h, w), dtype=np.uint8)
    ours = resize.resize(a, oh, ow, 1)
    ref = cv2.resize(a, (ow, oh), interpolation=cv2.INTER_LINEAR).reshape(ours.shape)
    assert ours.shape == (oh, ow) + a.shape[2:] and ours.dtype == np.uint8
    assert np.array_equal(ours, ref)  # with OpenCV installed, modes 0/1 are cv2.resize itself
    # without it, the numpy fallback: OpenCV's fixed-point arithmetic, within one LSB
    d = np.abs(resize.bilinear_numpy(a, oh, ow).astype(int) - ref)
    assert d.max() <= 1 and (d > 0).mean() < 0.03
    assert np.array_equal(resize.resize(a, oh, ow, 0), ours)  # 0 means 1 on Atlas inference products
    near = resize.resize(a, oh, ow, 2)
    assert np.array_equal(near, cv2.resize(a, (ow, oh), interpolation=cv2.INTER_NEAREST).reshape(near.shape))


def test_bilinear_tf_mode_against_float_reference() -> None:
    """Mode 3: TensorFlow's legacy bilinear (src = dst * in/out), checked against float64 math."""
    a = np.random.default_rng(3).integers(0, 256, (20, 30), dtype=np.uint8)
    out = resize.resize(a, 50, 45, 3).astype(int)
    sy, sx = np.arange(50) * 20 / 50, np.arange(45) * 30 / 45
    y0, x0 = np.floor(sy).astype(int), np.floor(sx).astype(int)
    y1, x1 = np.minimum(y0 + 1, 19), np.minimum(x0 + 1, 29)
    fy, fx = (sy - y0)[:, None], (sx - x0)[None, :]
    f = a.astype(float)
    ref = (f[y0][:, x0] * (1 - fy) * (1 - fx) + f[y0][:, x1] * (1 - fy) * fx + f[y1][:, x0] * fy * (1 - fx)
           + f[y1][:, x1] * fy * fx)
    assert np.abs(out - np.rint(ref)).max() <= 1


def test_interpolation_errors() -> None:
    a = np.zeros((10, 10), np.uint8)
    with pytest.raises(DvppError) as e:
        resize.resize(a, 5, 5, 5)
    assert e.value.fault is Fault.UNSUPPORTED
    with pytest.raises(DvppError) as e:
        resize.resize(a, 5, 5, 9)
    assert e.value.fault is Fault.PARAM


@pytest.mark.parametrize("sub", [0, 1, 2])
def test_jpeg_rgb_decode_byte_identical_to_libjpeg_turbo(sub: int) -> None:
    img = scene(121, 203, sub)
    data = jpeg_bytes(img, subsampling=sub)
    ours = jpeg.decode_array(data, PixelFormat.RGB_888)
    assert np.array_equal(ours, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))  # Pillow's libjpeg-turbo
    assert np.array_equal(jpeg.decode_array(data, PixelFormat.BGR_888),
                          cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))  # OpenCV's


def test_jpeg_nv12_decode() -> None:
    """NV12 output: the Y plane is libjpeg-turbo's decoded Y byte for byte; chroma is the 2x2 mean."""
    img = scene(120, 200)
    data = jpeg_bytes(img)
    info = jpeg.get_image_info(data)
    assert (info.width, info.height, info.components, info.process) == (200, 120, 3, "baseline")
    w, h, ws, hs, size = jpeg.output_layout(200, 120, 1, "Ascend310")
    assert (w, h, ws, hs, size) == (200, 120, 256, 128, 256 * 128 * 3 // 2)
    assert jpeg.output_layout(201, 121, 1, "Ascend310P3")[:4] == (202, 122, 256, 128)
    buf = np.zeros(size, np.uint8)
    pic = PicDesc(1, size, 1, 0, 0, ws, hs)
    jpeg.decode_into(data, buf, pic, "Ascend310")
    assert (pic.width, pic.height) == (200, 120)
    y = buf[: ws * hs].reshape(hs, ws)[:120, :200]
    assert np.array_equal(y, simplejpeg.decode_jpeg(data, "GRAY")[..., 0])
    uv = buf[ws * hs :].reshape(hs // 2, ws)[:60, :200].reshape(60, 100, 2).astype(int)
    ycc = cv2.cvtColor(simplejpeg.decode_jpeg(data, "RGB"), cv2.COLOR_RGB2YCrCb)[..., [2, 1]].astype(int)
    ref = ycc.reshape(60, 2, 100, 2, 2).mean(axis=(1, 3))
    assert np.abs(uv - ref).max() <= 3 and np.abs(uv - ref).mean() < 0.75  # RGB clipping in the reference
    with pytest.raises(DvppError, match="multiples of 128x16"):
        jpeg.decode_into(data, buf, PicDesc(1, size, 1, 0, 0, 200, 128), "Ascend310")


def test_jpeg_refusals() -> None:
    img = scene(64, 64)
    with pytest.raises(DvppError) as e:
        jpeg.check_decodable(jpeg.get_image_info(jpeg_bytes(img, progressive=True)))
    assert e.value.fault is Fault.UNSUPPORTED and "progressive" in str(e.value)
    with pytest.raises(DvppError) as e:
        jpeg.check_decodable(jpeg.get_image_info(jpeg_bytes(scene(16, 64))))
    assert e.value.fault is Fault.UNSUPPORTED
    with pytest.raises(DvppError) as e:
        jpeg.get_image_info(b"not a jpeg at all")
    assert e.value.fault is Fault.DATA
    good = jpeg_bytes(img)
    with pytest.raises(DvppError):
        jpeg.decode_array(good[: len(good) // 3], PixelFormat.RGB_888)


def test_jpeg_encode_round_trip() -> None:
    img = scene(64, 96)
    yuv = color.rgb_to_yuv(img)
    ws, hs = 96, 64
    buf = np.zeros(ws * hs * 3 // 2, np.uint8)
    buf[: ws * hs] = yuv[..., 0].reshape(-1)
    buf[ws * hs :] = color.subsample(yuv[..., 1:], 2, 2).reshape(-1)
    pic = PicDesc(1, buf.size, int(PixelFormat.YUV_SEMIPLANAR_420), 96, 64, ws, hs)
    data = jpeg.encode(buf, pic, 95)
    assert len(data) <= jpeg.predict_enc_size(96, 64, 1)
    ref = simplejpeg.encode_jpeg_yuv_planes(yuv[..., 0].copy(), *(np.ascontiguousarray(c) for c in
                                            np.moveaxis(color.subsample(yuv[..., 1:], 2, 2), -1, 0)), quality=95)
    assert data == ref
    back = simplejpeg.decode_jpeg(data, "GRAY")[..., 0].astype(int)
    assert np.abs(back - yuv[..., 0]).mean() < 3


def test_png_decode_identical_to_opencv() -> None:
    img = scene(50, 70)
    data = png_bytes(img)
    info = png.get_image_info(data)
    assert (info.width, info.height, info.components) == (70, 50, 3)
    assert np.array_equal(png.decode_array(data, PixelFormat.RGB_888),
                          cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1])
    rgba = png.decode_array(data, PixelFormat.RGBA_8888)
    assert rgba.shape == (50, 70, 4) and (rgba[..., 3] == 255).all()
    assert png.output_layout(70, 50, 12) == (256, 64, 256 * 64)
    with pytest.raises(DvppError) as e:
        png.decode_array(data, PixelFormat.YUV_SEMIPLANAR_420)
    assert e.value.fault is Fault.FORMAT


@pytest.mark.parametrize(("n_in", "n_out"), [(6, 34), (6, 68), (7, 61), (37, 100), (100, 37), (33, 7)])
def test_nearest_modes_sample_as_opencv_and_tensorflow(n_in: int, n_out: int) -> None:
    """Mode 2 picks OpenCV's INTER_NEAREST source pixels (``floor(x * (1 / (out / in)))``: 6 -> 34
    differs from ``floor(x * in / out)`` at x = 17); mode 4 TensorFlow's legacy float32 sampling."""
    a = np.random.default_rng(n_in * n_out).integers(0, 256, (n_in, n_in + 3), dtype=np.uint8)
    ow = n_out + 3
    near = resize.resize(a, n_out, ow, 2)
    assert np.array_equal(near, cv2.resize(a, (ow, n_out), interpolation=cv2.INTER_NEAREST))

    def tf_axis(i: int, o: int) -> np.ndarray:
        s = np.float32(i) / np.float32(o)
        return np.minimum(np.floor(np.arange(o, dtype=np.float32) * s).astype(int), i - 1)

    assert np.array_equal(resize.resize(a, n_out, ow, 4), a[tf_axis(n_in, n_out)][:, tf_axis(n_in + 3, ow)])


@pytest.mark.parametrize("fmt", [PixelFormat.YUV_SEMIPLANAR_444, PixelFormat.YVU_SEMIPLANAR_444])
def test_jpeg_yuv444sp_decode_chroma_rows_are_two_strides(fmt: PixelFormat) -> None:
    """YUV444SP's chroma plane holds ``2 * width_stride`` bytes a row (buffer x3): a 4:4:4 JPEG
    decodes into it even when ``2 * width`` exceeds the width stride (it raised before)."""
    img = scene(47, 33)
    data = jpeg_bytes(img, subsampling=0)
    w, h, ws, hs, size = jpeg.output_layout(33, 47, int(fmt), "Ascend310P3")
    assert (w, h, ws, hs, size) == (33, 47, 64, 48, 64 * 48 * 3)
    buf = np.zeros(size, np.uint8)
    jpeg.decode_into(data, buf, PicDesc(1, size, int(fmt), 0, 0, ws, hs), "Ascend310P3")
    with Image.open(io.BytesIO(data)) as im:
        im.draft("YCbCr", im.size)
        ycc = np.asarray(im)
    assert np.array_equal(buf[: ws * hs].reshape(hs, ws)[:h, :w], ycc[..., 0])
    uv = buf[ws * hs :].reshape(hs, 2 * ws)[:h, : 2 * w].reshape(h, w, 2)
    if fmt == PixelFormat.YVU_SEMIPLANAR_444:
        uv = uv[..., ::-1]
    assert np.array_equal(uv, ycc[..., 1:])


def test_png_16bit_grey_reduced_to_8_bits_as_opencv() -> None:
    g = scene(50, 37)[..., 0].astype(np.uint16) * 257 + 100
    data = cv2.imencode(".png", g)[1].tobytes()
    ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    assert np.array_equal(png.decode_array(data, PixelFormat.RGB_888), ref)
    rgba = png.decode_array(data, PixelFormat.RGBA_8888)
    assert np.array_equal(rgba[..., :3], ref) and (rgba[..., 3] == 255).all()
