"""AIPP (--insert_op_conf): every input format against a numpy re-implementation of the formulas
in cann-interfaces.md §3.2, crops / padding / CSC / swaps, multi-input models, dynamic AIPP,
.om round trip, invalid configs (key + allowed range), and PP-OCR fed raw RGB bytes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.errors import InputError, OptionError
from pycann.ge.aipp.config import fp16_warnings, parse_aipp_config
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.om import load_om
from pycann.ge.run.model import LoadedModel
from pycann.ops.aipp import AippParams, pack_dynamic, unpack_dynamic

ROOT = Path(__file__).resolve().parents[2]
JPEG = dict(matrix_r0c0=256, matrix_r0c1=0, matrix_r0c2=359, matrix_r1c0=256, matrix_r1c1=-88, matrix_r1c2=-183,
            matrix_r2c0=256, matrix_r2c1=454, matrix_r2c2=0, input_bias_0=0, input_bias_1=128, input_bias_2=128)


# ------------------------------------------------------------------ numpy golden (§3.2)
def ref_aipp(img: np.ndarray, c: dict[str, Any], layout: str = "NCHW", out_dtype: Any = np.float32) -> np.ndarray:
    """Per-image golden written from the documentation, independently of pycann.ops.aipp."""
    return np.stack([_ref_one(im.reshape(-1), c, layout, out_dtype) for im in img])


def _ref_one(buf: np.ndarray, c: dict[str, Any], layout: str, out_dtype: Any) -> np.ndarray:
    fmt, w, h = c["input_format"], c["src_image_size_w"], c["src_image_size_h"]
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    yuv = fmt in ("YUV420SP_U8", "YVU420SP_U8", "YUV400_U8")
    if fmt in ("YUV420SP_U8", "YVU420SP_U8"):  # NV12 / NV21: Y plane, then interleaved chroma rows
        y = buf[: h * w].reshape(h, w)
        uv = buf[h * w: h * w * 3 // 2].reshape(h // 2, w)
        u, v = (uv[:, 0::2], uv[:, 1::2]) if fmt == "YUV420SP_U8" else (uv[:, 1::2], uv[:, 0::2])
        px = np.stack([y, u[yy // 2, xx // 2], v[yy // 2, xx // 2]], -1)
    elif fmt == "YUV400_U8":
        px = buf[: h * w].reshape(h, w, 1)
    elif fmt in ("RGB888_U8", "BGR888_U8"):
        px = buf.reshape(h, w, 3)
        px = px[..., [2, 1, 0]] if fmt == "BGR888_U8" else px
    else:  # XRGB / ARGB; ax_swap: the data is RGBX / RGBA
        p4 = buf.reshape(h, w, 4)
        px = p4[..., 0:3] if c.get("ax_swap_switch") else p4[..., 1:4]
    px = px.astype(np.int64)
    if c.get("rbuv_swap_switch") and px.shape[-1] == 3:
        px = px[..., [0, 2, 1]] if yuv else px[..., [2, 1, 0]]
    if c.get("crop"):
        x0, y0 = c.get("load_start_pos_w", 0), c.get("load_start_pos_h", 0)
        px = px[y0: y0 + c["crop_size_h"], x0: x0 + c["crop_size_w"]]
    if c.get("csc_switch"):
        dm = (298, 516, 0, 298, -100, -208, 298, 0, 409) if yuv else (66, 129, 25, -38, -74, 112, 112, -94, -18)
        m = np.array([c.get(f"matrix_r{i // 3}c{i % 3}", dm[i]) for i in range(9)]).reshape(3, 3)
        if yuv:
            ib = np.array([c.get(f"input_bias_{i}", (16, 128, 128)[i]) for i in range(3)])
            px = np.floor(np.einsum("ij,hwj->hwi", m, px - ib) / 256)
        else:
            ob = np.array([c.get(f"output_bias_{i}", (16, 128, 128)[i]) for i in range(3)])
            px = np.floor(np.einsum("ij,hwj->hwi", m, px) / 256) + ob
        px = np.clip(px, 0, 255)
    ch = px.shape[-1]
    if np.dtype(out_dtype).kind == "f":
        mean = np.array([c.get(f"mean_chn_{i}", 0) for i in range(ch)], np.float64)
        mn = np.array([c.get(f"min_chn_{i}", 0.0) for i in range(ch)], np.float64)
        # var_reci_chn is a float16 on the device (CANN: range [-65504, 65504]; the dynamic AIPP
        # buffer holds its fp16 bits): round it as the hardware does
        var = np.array([c.get(f"var_reci_chn_{i}", 1.0) for i in range(ch)], np.float16).astype(np.float64)
        out = (px - mean - mn) * var
    else:
        out = px
    if c.get("padding"):
        t, b, le, r = (c.get(f"{s}_padding_size", 0) for s in ("top", "bottom", "left", "right"))
        out = np.pad(out, ((t, b), (le, r), (0, 0)), constant_values=c.get("padding_value", 0.0))
    out = out.transpose(2, 0, 1) if layout == "NCHW" else out
    return out.astype(out_dtype)


# ----------------------------------------------------------------------------- helpers
def identity_model(shape: list[Any], dtype: int = TensorProto.FLOAT, n_inputs: int = 1) -> onnx.ModelProto:
    names = ["x", "z"][:n_inputs]
    nodes = [helper.make_node("Identity", [n], [f"y_{n}"]) for n in names]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, dtype, shape) for n in names],
                          [helper.make_tensor_value_info(f"y_{n}", dtype, shape) for n in names])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cfg_text(c: dict[str, Any], mode: str = "static") -> str:
    def val(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    return "aipp_op {\n  aipp_mode: " + mode + "\n" + "".join(f"  {k}: {val(v)}\n" for k, v in c.items()) + "}\n"


def compile_with(tmp_path: Path, model: onnx.ModelProto, text: str, **opts: Any) -> LoadedModel:
    p = tmp_path / "aipp.cfg"
    p.write_text(text)
    return LoadedModel.from_compiled(compile_model(model, CompileOptions(insert_op_conf=str(p), **opts)))


def src_image(fmt: str, n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    shape = {"YUV420SP_U8": (h * 3 // 2, w), "YVU420SP_U8": (h * 3 // 2, w), "YUV400_U8": (h, w),
             "XRGB8888_U8": (h, w, 4), "ARGB8888_U8": (h, w, 4)}.get(fmt, (h, w, 3))
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


NORM = dict(mean_chn_0=10, mean_chn_1=20, mean_chn_2=30, min_chn_0=1.5, min_chn_1=2.5, min_chn_2=3.5,
            var_reci_chn_0=0.5, var_reci_chn_1=0.25, var_reci_chn_2=0.125)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("rgb_plain", dict(input_format="RGB888_U8", **NORM)),
    ("rgb_odd_crop", dict(input_format="RGB888_U8", crop=True, load_start_pos_w=3, load_start_pos_h=1,
                          crop_size_w=5, crop_size_h=7, **NORM)),
    ("rgb_swap_pad", dict(input_format="RGB888_U8", rbuv_swap_switch=True, padding=True, left_padding_size=1,
                          right_padding_size=2, top_padding_size=3, bottom_padding_size=0, padding_value=-1.5,
                          crop=True, load_start_pos_w=0, load_start_pos_h=2, crop_size_w=2, crop_size_h=4, **NORM)),
    ("bgr", dict(input_format="BGR888_U8", **NORM)),
    ("rgb_to_yuv", dict(input_format="RGB888_U8", csc_switch=True)),
    ("xrgb", dict(input_format="XRGB8888_U8", **NORM)),
    ("xrgb_ax_swap", dict(input_format="XRGB8888_U8", ax_swap_switch=True, rbuv_swap_switch=True)),
    ("argb_crop", dict(input_format="ARGB8888_U8", crop=True, load_start_pos_w=1, load_start_pos_h=3,
                       crop_size_w=5, crop_size_h=7)),
    ("nv12_default_csc", dict(input_format="YUV420SP_U8", csc_switch=True, **NORM)),
    ("nv12_jpeg_odd_crop", dict(input_format="YUV420SP_U8", csc_switch=True, crop=True, load_start_pos_w=2,
                                load_start_pos_h=2, crop_size_w=5, crop_size_h=7, **JPEG)),
    ("nv12_no_csc", dict(input_format="YUV420SP_U8", **NORM)),
    ("nv21_swap", dict(input_format="YUV420SP_U8", rbuv_swap_switch=True, csc_switch=True, **JPEG)),
    ("yvu420sp", dict(input_format="YVU420SP_U8", csc_switch=True, **JPEG)),
]


@pytest.mark.parametrize("name,c", CASES, ids=[n for n, _ in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_formats_match_numpy_golden(tmp_path: Path, name: str, c: dict[str, Any], layout: str) -> None:
    mh, mw = 7, 5  # model H x W; sources are 10 x 8 when cropping, else the model size
    c = dict(c)
    if c.get("crop"):
        c.setdefault("src_image_size_w", 8)
        c.setdefault("src_image_size_h", 10)
    if name == "rgb_swap_pad":
        c["src_image_size_w"], c["src_image_size_h"] = 8, 10
    shape = [2, 3, mh, mw] if layout == "NCHW" else [2, mh, mw, 3]
    if c["input_format"] in ("YUV420SP_U8", "YVU420SP_U8") and not c.get("crop"):
        mh, mw = 6, 4  # YUV420SP needs an even source
        shape = [2, 3, mh, mw] if layout == "NCHW" else [2, mh, mw, 3]
    lm = compile_with(tmp_path, identity_model(shape), cfg_text(c), input_format=layout)
    sw, sh = c.get("src_image_size_w", mw), c.get("src_image_size_h", mh)
    img = src_image(c["input_format"], 2, sh, sw)
    assert lm.inputs[0].dtype == TensorProto.UINT8 and tuple(lm.inputs[0].shape) == img.shape
    got = lm.run([img])[0]
    want = ref_aipp(img, {**c, "src_image_size_w": sw, "src_image_size_h": sh}, layout)
    assert got.shape == tuple(shape) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_yuv400_float16_and_uint8_outputs(tmp_path: Path) -> None:
    c = dict(input_format="YUV400_U8", mean_chn_0=3, min_chn_0=0.5, var_reci_chn_0=0.1)
    lm = compile_with(tmp_path, identity_model([1, 1, 4, 6], TensorProto.FLOAT16), cfg_text(c))
    img = src_image("YUV400_U8", 1, 4, 6)
    assert img.shape == (1, 4, 6)
    got = lm.run([img])[0]
    assert got.dtype == np.float16
    want = ref_aipp(img, {**c, "src_image_size_w": 6, "src_image_size_h": 4}, out_dtype=np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3)
    # uint8 model input: normalisation is skipped (§3.2), CSC still applies
    c8 = dict(input_format="YUV420SP_U8", csc_switch=True, mean_chn_0=100)
    lm8 = compile_with(tmp_path, identity_model([1, 3, 4, 6], TensorProto.UINT8), cfg_text(c8))
    img8 = src_image("YUV420SP_U8", 1, 4, 6, seed=3)
    got8 = lm8.run([img8])[0]
    assert got8.dtype == np.uint8
    np.testing.assert_array_equal(got8, ref_aipp(img8, {**c8, "src_image_size_w": 6, "src_image_size_h": 4},
                                                 out_dtype=np.uint8))


def test_multi_input_related_input_rank_and_om_round_trip(tmp_path: Path) -> None:
    m = identity_model([1, 3, 4, 4], n_inputs=2)
    text = cfg_text(dict(related_input_rank=1, input_format="BGR888_U8", var_reci_chn_0=0.5))
    cm = compile_model(m, CompileOptions(insert_op_conf=str(_write(tmp_path, text))))
    cm.save(tmp_path / "m.om")
    lm = LoadedModel.from_file(tmp_path / "m.om")
    assert [i.datatype for i in lm.inputs] == ["float32", "uint8"] and lm.inputs[1].shape == [1, 4, 4, 3]
    assert lm.aipp_info(1)["params"]["input_format"] == "BGR888_U8" and lm.aipp_info(0) is None
    x = np.ones((1, 3, 4, 4), np.float32)
    z = src_image("BGR888_U8", 1, 4, 4)
    a, b = lm.run([x, z])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_allclose(b, ref_aipp(z, dict(input_format="BGR888_U8", src_image_size_w=4, src_image_size_h=4,
                                                   var_reci_chn_0=0.5)))
    assert load_om(tmp_path / "m.om").manifest["aipp"][0]["input_index"] == 1


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.txt"
    p.write_text(text)
    return p


# ------------------------------------------------------------------------- dynamic AIPP
def test_dynamic_aipp_matches_static(tmp_path: Path) -> None:
    m = identity_model([2, 3, 6, 4])
    lm = compile_with(tmp_path, m, "aipp_op {\n aipp_mode: dynamic\n max_src_image_size: 200\n}\n")
    assert [i.name for i in lm.inputs] == ["x", "ascend_dynamic_aipp_data"]
    assert lm.inputs[0].shape == [200] and lm.inputs[1].shape == [64 + 96 * 2]
    with pytest.raises(InputError, match="set_dynamic_aipp"):
        lm.run([np.zeros(10, np.uint8)])
    params = dict(input_format="YUV420SP_U8", src_image_size_w=6, src_image_size_h=8, csc_switch=True, crop=True,
                  load_start_pos_w=2, load_start_pos_h=2, crop_size_w=4, crop_size_h=6, min_chn_0=16.0,
                  var_reci_chn_0=0.5, mean_chn_1=4, **JPEG)
    lm.set_dynamic_aipp(0, params)
    img = src_image("YUV420SP_U8", 2, 8, 6)
    got = lm.run([img])[0]
    np.testing.assert_allclose(got, ref_aipp(img, params), rtol=1e-6, atol=1e-5)
    # one parameter set per image: different crops
    per = [dict(params, load_start_pos_w=0), dict(params, load_start_pos_h=0, var_reci_chn_0=2.0)]
    lm.set_dynamic_aipp(1, per)  # the parameter input's index works too
    got = lm.run([img])[0]
    np.testing.assert_allclose(got[0], ref_aipp(img[:1], per[0])[0], rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(got[1], ref_aipp(img[1:], per[1])[0], rtol=1e-6, atol=1e-5)
    with pytest.raises(InputError, match=r"crop_size_w.*must be an integer in \[0, 4096\]"):
        lm.set_dynamic_aipp(0, dict(params, crop_size_w=5000))
    with pytest.raises(InputError, match=r"must equal the model input's 4"):
        lm.set_dynamic_aipp(0, dict(params, crop_size_w=2))
    with pytest.raises(InputError, match="max_src_image_size 200"):
        lm.set_dynamic_aipp(0, dict(input_format="RGB888_U8", src_image_size_w=8, src_image_size_h=10, crop=True,
                                    crop_size_w=4, crop_size_h=6))


def test_dynamic_buffer_layout_round_trip() -> None:
    p = AippParams("RGB888_U8", 8, 6, crop=(1, 2, 4, 3), csc=True, rbuv_swap=True, mean=(1, 2, 3, 0),
                   min=(0.5, 1.5, 2.5, 0.0), var_reci=(0.25, 0.5, 2.0, 1.0), pad=(1, 0, 2, 3))
    buf = pack_dynamic([p, p])
    assert buf.dtype == np.uint8 and buf.size == 64 + 2 * 96
    assert buf[0] == 3 and buf[4] == 2  # aclAippInputFormat RGB888_U8, batchNum
    back = unpack_dynamic(buf, 2)
    assert back[0] == p and back[1] == p


# ------------------------------------------------------------------------ invalid configs
BAD = [
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 colour: 1 }", r"\[colour\].*unknown key; allowed keys"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 padding: true left_padding_size: 33 }",
     r"Value \[33\] for parameter \[left_padding_size\].*an integer in \[0, 32\]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 mean_chn_0: 300 }", r"\[mean_chn_0\].*\[0, 255\]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 min_chn_1: -1 }", r"\[min_chn_1\].*\[0, 255\]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 matrix_r0c0: 40000 }",
     r"\[matrix_r0c0\].*\[-32768, 32767\]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 csc_switch: maybe }", r"\[csc_switch\].*true or false"),
    ("aipp_op { aipp_mode: static input_format: YUYV_U8 }", r"\[input_format\].*not supported by pycann"),
    ("aipp_op { aipp_mode: static input_format: RGB }", r"\[input_format\].*one of YUV420SP_U8"),
    ("aipp_op { aipp_mode: sometimes }", r"\[aipp_mode\].*static, dynamic"),
    ("aipp_op { input_format: RGB888_U8 }", r"\[aipp_mode\].*required"),
    ("aipp_op { aipp_mode: static }", r"\[input_format\].*required"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 resize: true }", r"\[resize\].*reserved"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 crop: true crop: false }", r"configured repeatedly"),
    ("aipp_op { aipp_mode: dynamic max_src_image_size: 10 csc_switch: true }", r"only aipp_mode"),
    ("aipp_op { aipp_mode: dynamic }", r"\[max_src_image_size\].*\[1, "),
    ("aipp_op { aipp_mode: static input_format: YUV420SP_U8 src_image_size_w: 9 src_image_size_h: 8 }",
     r"\[src_image_size_w\].*even"),
    ("aipp_op { aipp_mode: static input_format: YUV420SP_U8 crop: true load_start_pos_h: 1 }",
     r"\[load_start_pos_h\].*even"),
    ("aipp_op { aipp_mode: static input_format: YUV400_U8 csc_switch: true }", r"\[csc_switch\]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 ", r"not closed"),
    ("multi_shape_op { }", r"multi_shape_op is not supported"),
    ("", r"no aipp_op"),
]


@pytest.mark.parametrize("text,pattern", BAD)
def test_invalid_config_names_key_and_range(text: str, pattern: str) -> None:
    with pytest.raises(OptionError, match=pattern) as e:
        parse_aipp_config(text, "t.cfg")
    assert str(e.value).startswith("E10001: Value [")


MODEL_BAD = [
    (dict(input_format="RGB888_U8", crop=True, src_image_size_w=8, src_image_size_h=8, load_start_pos_w=5,
          crop_size_w=4, crop_size_h=4), r"\[crop_size_w\].*lies outside the source image.*load_start_pos_w \+ crop_size_w <= 8"),
    (dict(input_format="RGB888_U8", src_image_size_w=6, src_image_size_h=4), r"\[src_image_size_w\].*must equal the model input's 4"),
    (dict(input_format="RGB888_U8", crop=True, crop_size_w=4, crop_size_h=4), r"\[src_image_size_w\].*must be set"),
    (dict(input_format="YUV400_U8"), r"\[input_format\].*1 channel\(s\) but input x has C=3"),
    (dict(input_format="RGB888_U8", related_input_rank=1), r"\[related_input_rank\].*\[0, 0\]"),
    (dict(input_format="YUV420SP_U8", src_image_size_w=4, src_image_size_h=3), r"\[src_image_size_h\].*even"),
]


@pytest.mark.parametrize("c,pattern", MODEL_BAD)
def test_invalid_config_against_model(tmp_path: Path, c: dict[str, Any], pattern: str) -> None:
    with pytest.raises(OptionError, match=pattern):
        compile_with(tmp_path, identity_model([1, 3, 4, 4]), cfg_text(c))


def test_aipp_needs_nchw_or_nhwc_and_static_hw(tmp_path: Path) -> None:
    text = cfg_text(dict(input_format="RGB888_U8"))
    with pytest.raises(OptionError, match="NCHW or NHWC"):
        compile_with(tmp_path, identity_model([1, 3, 4, 4]), text, input_format="ND")
    with pytest.raises(OptionError, match="static C, H and W") as e:
        compile_with(tmp_path, identity_model([1, 3, "H", "W"]), text)
    # the dims as atc writes them (they read [1, 3, 'H', 'W'], the exporter's symbols) and a fix
    assert "[1, 3, -1, -1]" in str(e.value) and 'e.g. "x:1,3,224,224"' in str(e.value), str(e.value)


# ------------------------------------------------------------------------- real model
@pytest.mark.models
def test_ppocr_cls_raw_rgb_matches_normalised_float(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from scripts.model_zoo import MODELS

    path = MODELS["rapidocr_ppocr_mobile_v2_cls"].ensure()
    # PaddleOCR normalisation (x / 255 - 0.5) / 0.5 == (x - 127.5) * (1 / 127.5)
    norm = {f"{k}_{i}": v for i in range(3) for k, v in (("min_chn", 127.5), ("var_reci_chn", 1 / 127.5))}
    text = cfg_text(dict(input_format="RGB888_U8", **norm))
    cfg = _write(tmp_path, text)
    opts = dict(input_shape={"x": [2, 3, 48, 192]})
    aipp = LoadedModel.from_compiled(compile_model(str(path), CompileOptions(insert_op_conf=str(cfg), **opts)))
    plain = LoadedModel.from_compiled(compile_model(str(path), CompileOptions(**opts)))
    rgb = np.random.default_rng(0).integers(0, 256, (2, 48, 192, 3), dtype=np.uint8)
    x = ((rgb.astype(np.float32) / 255 - 0.5) / 0.5).transpose(0, 3, 1, 2)
    got, want = aipp.run([rgb])[0], plain.run([np.ascontiguousarray(x)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_var_reci_applied_as_float16(tmp_path: Path) -> None:
    """var_reci_chn below float16's range was applied in float32 (1e-45 scaled by 1e-45, not 0):
    the device holds it as float16, so 1e-45 -> 0 and 1e-6 -> the subnormal 1.013e-6 (17 x 2**-24)."""
    c = dict(input_format="RGB888_U8", min_chn_0=1.5, var_reci_chn_0=1e-45, var_reci_chn_1=1e-6,
             var_reci_chn_2=0.1)
    lm = compile_with(tmp_path, identity_model([2, 3, 4, 6]), cfg_text(c))
    img = src_image("RGB888_U8", 2, 4, 6, seed=5)
    got = lm.run([img])[0]
    px = img.astype(np.float64).transpose(0, 3, 1, 2)
    f16 = np.array([1e-45, 1e-6, 0.1], np.float16).astype(np.float64)
    assert f16[0] == 0.0 and f16[1] == 17 * 2.0 ** -24  # (the numpy float16 values the device holds)
    want = (px - np.array([1.5, 0, 0])[:, None, None]) * f16[:, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got, ref_aipp(img, {**c, "src_image_size_w": 6, "src_image_size_h": 4}),
                               rtol=1e-6, atol=1e-12)
    assert not got[:, 0].any()  # exactly 0, not x * 1.4e-45 (float32 denormals)
    assert not np.allclose(got[:, 1], px[:, 1] * 1e-6, rtol=1e-3)  # not the float32 scale


def test_var_reci_fp16_warnings() -> None:
    """atc warns (InsertAippPass W: lines) for values float16 turns to 0 or a subnormal only."""
    cfg = parse_aipp_config("aipp_op {\n aipp_mode: static\n input_format: RGB888_U8\n var_reci_chn_0: 1e-45\n"
                            " var_reci_chn_1: 1e-6\n var_reci_chn_2: 0.00784313725490196\n var_reci_chn_3: 0\n}\n",
                            "a.cfg")[0]
    msgs = fp16_warnings(cfg)
    assert len(msgs) == 2, msgs
    assert msgs[0].startswith("var_reci_chn_0 1e-45 rounds to 0: AIPP applies var_reci_chn as float16 "
                              "(aipp_op at a.cfg:1)"), msgs[0]
    assert msgs[1].startswith("var_reci_chn_1 1e-06 becomes the float16 subnormal 1.01328e-06 (off by 1.3%)"), msgs[1]
