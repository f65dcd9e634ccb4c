"""PP-OCR as a pyACL application: DVPP (acl.media) decodes the image and resizes it for det on
device buffers and a stream; det, cls and rec run with acl.mdl (models with dynamic shapes: each
input's shape set with set_dataset_tensor_desc); DB boxes, crops and CTC come from pycann.ocr.

    python samples/ocr/ocr_acl.py IMAGE [MODEL_DIR]

Runs on pycann as ``import pycann.acl as acl``; the same calls are CANN's pyACL (on a device the
models would be .om files built by atc, and JPEGD's output NV12, converted by AIPP).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import pycann.acl as acl
from pycann.ocr import ctc
from pycann.ocr.pipeline import OcrPipeline, det_size, normalize

ACL_MEM_MALLOC_HUGE_FIRST, H2D, D2H = 0, 1, 2
ACL_FLOAT, ACL_FORMAT_NCHW = 0, 0
PIXEL_FORMAT_BGR_888, PIXEL_FORMAT_RGB_888 = 13, 12


def check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} failed: {ret} {acl.get_recent_err_msg()}")


class AclModel:
    """One model through acl.mdl: ``model(x) -> first output`` with x of any allowed shape."""

    def __init__(self, path: str) -> None:
        self.id, ret = acl.mdl.load_from_file(path)
        check(ret, f"load {path}")
        self.desc = acl.mdl.create_desc()
        check(acl.mdl.get_desc(self.desc, self.id), "get_desc")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        dev_in, ret = acl.rt.malloc(x.nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
        check(ret, "malloc input")
        check(acl.rt.memcpy(dev_in, x.nbytes, acl.util.numpy_to_ptr(x), x.nbytes, H2D), "memcpy input")
        out_cap = max(x.nbytes * 4, x.shape[0] * 200 * 6625 * 4)  # det map / cls probs / rec steps fit
        dev_out, ret = acl.rt.malloc(out_cap, ACL_MEM_MALLOC_HUGE_FIRST)
        check(ret, "malloc output")
        ins, outs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        in_buf, out_buf = acl.create_data_buffer(dev_in, x.nbytes), acl.create_data_buffer(dev_out, out_cap)
        acl.mdl.add_dataset_buffer(ins, in_buf)
        acl.mdl.add_dataset_buffer(outs, out_buf)
        tdesc = acl.create_tensor_desc(ACL_FLOAT, list(x.shape), ACL_FORMAT_NCHW)
        _, ret = acl.mdl.set_dataset_tensor_desc(ins, tdesc, 0)
        check(ret, "set_dataset_tensor_desc")
        check(acl.mdl.execute(self.id, ins, outs), "execute")
        dims, ret = acl.mdl.get_cur_output_dims(self.desc, 0)
        check(ret, "get_cur_output_dims")
        shape = tuple(dims["dims"])
        n = int(np.prod(shape)) * 4
        host = np.empty(shape, np.float32)
        check(acl.rt.memcpy(acl.util.numpy_to_ptr(host), n, dev_out, n, D2H), "memcpy output")
        acl.destroy_tensor_desc(tdesc)
        for b in (in_buf, out_buf):
            acl.destroy_data_buffer(b)
        acl.mdl.destroy_dataset(ins)
        acl.mdl.destroy_dataset(outs)
        check(acl.rt.free(dev_in), "free")
        check(acl.rt.free(dev_out), "free")
        return host

    def close(self) -> None:
        check(acl.mdl.unload(self.id), "unload")
        acl.mdl.destroy_desc(self.desc)


class Dvpp:
    """Decode (JPEGD / PNGD) and resize (VPC) with acl.media on one channel and stream."""

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self.channel = acl.media.dvpp_create_channel_desc()
        check(acl.media.dvpp_create_channel(self.channel), "dvpp_create_channel")

    def _pic(self, fmt: int, w: int, h: int, ws: int, hs: int, size: int) -> tuple[int, int]:
        ptr, ret = acl.media.dvpp_malloc(size)
        check(ret, "dvpp_malloc")
        d = acl.media.dvpp_create_pic_desc()
        for name, v in (("data", ptr), ("size", size), ("format", fmt), ("width", w), ("height", h),
                        ("width_stride", ws), ("height_stride", hs)):
            check(getattr(acl.media, f"dvpp_set_pic_desc_{name}")(d, v), f"set {name}")
        return d, ptr

    def _to_host(self, d: int) -> np.ndarray:
        w, h = acl.media.dvpp_get_pic_desc_width(d), acl.media.dvpp_get_pic_desc_height(d)
        ws, hs = acl.media.dvpp_get_pic_desc_width_stride(d), acl.media.dvpp_get_pic_desc_height_stride(d)
        host = np.empty((hs, ws), np.uint8)
        check(acl.rt.memcpy(acl.util.numpy_to_ptr(host), ws * hs, acl.media.dvpp_get_pic_desc_data(d), ws * hs, D2H),
              "memcpy picture")
        return host[:h, : w * 3].reshape(h, w, 3)

    def _free(self, d: int) -> None:
        check(acl.media.dvpp_free(acl.media.dvpp_get_pic_desc_data(d)), "dvpp_free")
        check(acl.media.dvpp_destroy_pic_desc(d), "dvpp_destroy_pic_desc")

    def decode(self, data: bytes) -> int:
        """A BGR picture descriptor (RGB for PNG) of the decoded image, in DVPP memory."""
        is_jpeg = data[:2] == b"\xff\xd8"
        host = acl.util.bytes_to_ptr(data)
        fmt = PIXEL_FORMAT_BGR_888 if is_jpeg else PIXEL_FORMAT_RGB_888
        info = acl.media.dvpp_jpeg_get_image_info if is_jpeg else acl.media.dvpp_png_get_image_info
        w, h, _c, ret = info(host, len(data))
        check(ret, "get_image_info")
        predict = acl.media.dvpp_jpeg_predict_dec_size if is_jpeg else acl.media.dvpp_png_predict_dec_size
        size, ret = predict(host, len(data), fmt)
        check(ret, "predict_dec_size")
        ws, hs = -(-w * 3 // 128) * 128, -(-h // 16) * 16  # 128/16 alignment is valid on every chip
        d, _ = self._pic(fmt, w, h, ws, hs, max(size, ws * hs))
        src, ret = acl.media.dvpp_malloc(len(data))
        check(ret, "dvpp_malloc")
        check(acl.rt.memcpy(src, len(data), host, len(data), H2D), "memcpy image")
        decode = acl.media.dvpp_jpeg_decode_async if is_jpeg else acl.media.dvpp_png_decode_async
        check(decode(self.channel, src, len(data), d, self.stream), "decode")
        check(acl.rt.synchronize_stream(self.stream), "synchronize (decode)")
        check(acl.media.dvpp_free(src), "dvpp_free")
        return d

    def resized(self, d: int, w: int, h: int) -> np.ndarray:
        """The picture ``d`` resized to w x h (bilinear as OpenCV), copied to the host."""
        fmt = acl.media.dvpp_get_pic_desc_format(d)
        ws = -(-w * 3 // 16) * 16
        out, _ = self._pic(fmt, w, h, ws, h + h % 2, ws * (h + h % 2))
        cfg = acl.media.dvpp_create_resize_config()
        check(acl.media.dvpp_set_resize_config_interpolation(cfg, 1), "interpolation")
        check(acl.media.dvpp_vpc_resize_async(self.channel, d, out, cfg, self.stream), "vpc_resize")
        check(acl.rt.synchronize_stream(self.stream), "synchronize (resize)")
        img = self._to_host(out).copy()
        acl.media.dvpp_destroy_resize_config(cfg)
        self._free(out)
        return img

    def close(self) -> None:
        check(acl.media.dvpp_destroy_channel(self.channel), "dvpp_destroy_channel")
        check(acl.media.dvpp_destroy_channel_desc(self.channel), "dvpp_destroy_channel_desc")


def main(image: str, model_dir: Path) -> int:
    check(acl.init(), "acl.init")
    check(acl.rt.set_device(0), "set_device")
    context, ret = acl.rt.create_context(0)
    check(ret, "create_context")
    stream, ret = acl.rt.create_stream()
    check(ret, "create_stream")
    dvpp = Dvpp(stream)
    det, cls, rec = (AclModel(str(model_dir / f"{n}.onnx")) for n in
                     ("rapidocr_ppocrv4_det", "rapidocr_ppocr_mobile_v2_cls", "rapidocr_ppocrv4_rec"))
    pic = dvpp.decode(Path(image).read_bytes())
    img = dvpp._to_host(pic).copy()
    if acl.media.dvpp_get_pic_desc_format(pic) == PIXEL_FORMAT_RGB_888:
        img = np.ascontiguousarray(img[..., ::-1])  # the models take BGR, as RapidOCR feeds them
    h, w = img.shape[:2]
    rh, rw = det_size(h, w)
    det_input = dvpp.resized(pic, rw, rh)
    if acl.media.dvpp_get_pic_desc_format(pic) == PIXEL_FORMAT_RGB_888:
        det_input = np.ascontiguousarray(det_input[..., ::-1])
    # det's input is the VPC-resized picture (the pipeline's own resize computes the same numbers)
    ocr = OcrPipeline(lambda x: det(normalize(det_input)[None]), cls, rec,
                      ctc.characters_from_model(str(model_dir / "rapidocr_ppocrv4_rec.onnx")))
    for line in ocr(img):
        print(f"{line.text}\t{line.score:.3f}\t{line.box.astype(int).tolist()}")
    dvpp._free(pic)
    for m in (det, cls, rec):
        m.close()
    dvpp.close()
    check(acl.rt.destroy_stream(stream), "destroy_stream")
    check(acl.rt.destroy_context(context), "destroy_context")
    check(acl.rt.reset_device(0), "reset_device")
    check(acl.finalize(), "finalize")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    default = Path(os.environ.get("PYCANN_MODEL_DIR", Path.home() / ".cache" / "pycann" / "models"))
    sys.exit(main(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else default))
