"""AIPP configuration files (``atc --insert_op_conf``): parsing, validation, resolution.

The file is CANN's protobuf text format of ``domi.InsertNewOps`` (cann-interfaces.md §3):
one or more ``aipp_op { key: value ... }`` blocks, ``#`` comments, bare enum words, ``true`` /
``false``. A small hand-written parser reads it (no protobuf dependency). Keys, ranges and
defaults follow §3.1; every rejection is an ``OptionError`` in CANN's E10001 form
``Value [v] for parameter [key] is invalid. Reason: ...`` naming the key and its allowed range.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pycann.dtypes import DType, TensorDesc
from pycann.errors import OptionError
from pycann.ops.aipp import (
    DEFAULT_BIAS,
    DEFAULT_MATRIX_RGB2YUV,
    DEFAULT_MATRIX_YUV2RGB,
    FORMATS,
    YUV_FORMATS,
    AippParams,
    src_shape,
    var_reci_f16,
)

# CANN's InputFormat enum words that pycann does not implement (§3.1).
UNSUPPORTED_FORMATS = (
    "NC1HWC0DI_FP16", "NC1HWC0DI_S8", "YUYV_U8", "YUV422SP_U8", "AYUV444_U8", "RAW10", "RAW12", "RAW16",
    "RAW24", "RGB16", "RGB20", "RGB24", "RGB8_IR", "RGB16_IR", "RGB24_IR",
)
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Key:
    """One config key: kind (bool/int/float/enum/str), range or choices, default, and whether
    it is reserved in CANN (accepted only at its default)."""

    kind: str
    lo: float = 0
    hi: float = 0
    default: Any = None
    choices: tuple[str, ...] = ()
    reserved: bool = False

    def allowed(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "enum":
            return "one of " + ", ".join(self.choices)
        if self.kind == "str":
            return "a quoted string"
        return f"{'an integer' if self.kind == 'int' else 'a number'} in [{_num(self.lo)}, {_num(self.hi)}]"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _schema() -> dict[str, Key]:
    k: dict[str, Key] = {
        "aipp_mode": Key("enum", choices=("static", "dynamic")),
        "related_input_rank": Key("int", 0, INT32_MAX, 0),
        "related_input_name": Key("str", default=""),
        "input_edge_idx": Key("int", 0, INT32_MAX, None, reserved=True),
        "max_src_image_size": Key("int", 0, INT32_MAX, 0),
        "support_rotation": Key("bool", default=False, reserved=True),
        "input_format": Key("enum", choices=tuple(FORMATS)),
        "src_image_size_w": Key("int", 0, 4096, 0),
        "src_image_size_h": Key("int", 0, 4096, 0),
        "crop": Key("bool", default=False),
        "load_start_pos_w": Key("int", 0, 4095, 0),
        "load_start_pos_h": Key("int", 0, 4095, 0),
        "crop_size_w": Key("int", 0, 4096, 0),
        "crop_size_h": Key("int", 0, 4096, 0),
        "resize": Key("bool", default=False, reserved=True),
        "resize_output_w": Key("int", 0, 4096, 0, reserved=True),
        "resize_output_h": Key("int", 0, 4096, 0, reserved=True),
        "padding": Key("bool", default=False),
        "padding_value": Key("float", -65504, 65504, 0.0),
        "cpadding_value": Key("float", -65504, 65504, 0.0, reserved=True),
        "rotation_angle": Key("int", 0, 270, 0, reserved=True),
        "single_line_mode": Key("bool", default=False, reserved=True),
        "csc_switch": Key("bool", default=False),
        "rbuv_swap_switch": Key("bool", default=False),
        "ax_swap_switch": Key("bool", default=False),
        "raw_rgbir_to_f16_n": Key("int", 0, 31, 8, reserved=True),
    }
    for side in ("left", "right", "top", "bottom"):
        k[f"{side}_padding_size"] = Key("int", 0, 32, 0)
    for r in range(3):
        for c in range(3):
            k[f"matrix_r{r}c{c}"] = Key("int", -32768, 32767, None)
        k[f"input_bias_{r}"] = Key("int", 0, 255, DEFAULT_BIAS[r])
        k[f"output_bias_{r}"] = Key("int", 0, 255, DEFAULT_BIAS[r])
    for c in range(4):
        k[f"mean_chn_{c}"] = Key("int", 0, 255, 0)
        k[f"min_chn_{c}"] = Key("float", 0, 255, 0.0)
        k[f"var_reci_chn_{c}"] = Key("float", -65504, 65504, 1.0)
    return k


KEYS: dict[str, Key] = _schema()
DYNAMIC_KEYS = ("aipp_mode", "related_input_rank", "related_input_name", "max_src_image_size", "support_rotation")
# keys that make sense per inference in dynamic AIPP (``set_dynamic_aipp``)
RUNTIME_KEYS = tuple(k for k, v in KEYS.items() if not v.reserved and k not in DYNAMIC_KEYS and k != "padding_value")


def bad(value: Any, key: str, reason: str, where: str = "", exc: type[Exception] = OptionError) -> Exception:
    """CANN's E10001 error: ``Value [v] for parameter [key] is invalid. Reason: ...``."""
    loc = f" ({where})" if where else ""
    return exc(f"E10001: Value [{value}] for parameter [{key}] is invalid. Reason: {reason}{loc}.")


@dataclass
class AippConfig:
    """One ``aipp_op`` block: every key with its default filled in; ``explicit`` lists what
    the file set. ``where`` names the file and line for messages."""

    values: dict[str, Any]
    explicit: list[str] = field(default_factory=list)
    where: str = ""

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def mode(self) -> str:
        return str(self.values["aipp_mode"])

    def to_json(self) -> dict[str, Any]:
        """The keys the file set (for the .om manifest and ``atc --mode=6``)."""
        return {k: self.values[k] for k in self.explicit}


# ------------------------------------------------------------------------------- parsing
_TOKEN = re.compile(r"""\s+|\#[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[{}:;,]|[^\s{}:;,\#"']+""")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def _tokens(text: str, source: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise bad(text[pos:pos + 20].split("\n")[0], "--insert_op_conf", "unreadable text", f"{source}:{line}")
        tok = m.group(0)
        if not tok.isspace() and not tok.startswith("#"):
            out.append((tok, line))
        line += tok.count("\n")
        pos = m.end()
    return out


_MAX_DEPTH = 16
Entry = tuple[str, Any, int]  # (key, raw value token or nested entries, line)


def _message(toks: list[tuple[str, int]], i: int, depth: int, source: str) -> tuple[list[Entry], int]:
    entries: list[Entry] = []
    while i < len(toks):
        tok, line = toks[i]
        if tok == "}":
            if depth == 0:
                raise bad("}", "--insert_op_conf", "unbalanced '}'", f"{source}:{line}")
            return entries, i + 1
        if tok in (";", ","):
            i += 1
            continue
        if not _IDENT.match(tok):
            raise bad(tok, "--insert_op_conf", "expected a key name", f"{source}:{line}")
        i += 1
        if i < len(toks) and toks[i][0] == ":":
            i += 1
        if i >= len(toks):
            raise bad(tok, tok, "the key has no value", f"{source}:{line}")
        if toks[i][0] == "{":
            if depth >= _MAX_DEPTH:  # (recursing on, a damaged file ended in a RecursionError traceback)
                raise bad("{", tok, f"blocks nest deeper than {_MAX_DEPTH} levels (an AIPP config nests 1)",
                          f"{source}:{line}")
            sub, i = _message(toks, i + 1, depth + 1, source)
            entries.append((tok, sub, line))
        elif toks[i][0] in "{}:;,":
            raise bad(toks[i][0], tok, "the key has no value", f"{source}:{line}")
        else:
            entries.append((tok, toks[i][0], line))
            i += 1
    if depth:
        raise bad("{", "--insert_op_conf", "a '{' block is not closed", source)
    return entries, i


def _convert(key: str, raw: str, spec: Key, where: str, exc: type[Exception] = OptionError) -> Any:
    text = raw[1:-1] if raw[:1] in "\"'" and len(raw) > 1 else raw
    if spec.kind == "str":
        return text
    if spec.kind == "bool":
        low = text.lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise bad(raw, key, "must be true or false", where, exc)
    if spec.kind == "enum":
        if text in spec.choices:
            return text
        if key == "input_format" and text in UNSUPPORTED_FORMATS:
            raise bad(raw, key, f"{text} is not supported by pycann; use {spec.allowed()}", where, exc)
        raise bad(raw, key, f"must be {spec.allowed()}", where, exc)
    try:
        num: float = int(text, 10) if spec.kind == "int" else float(text)
    except ValueError:
        raise bad(raw, key, f"must be {spec.allowed()}", where, exc) from None
    if not math.isfinite(num) or not spec.lo <= num <= spec.hi:
        raise bad(raw, key, f"must be {spec.allowed()}", where, exc)
    return num


def check_value(key: str, value: Any, where: str = "", exc: type[Exception] = OptionError) -> Any:
    """Validate one key's value given from Python (``set_dynamic_aipp``); returns it converted."""
    spec = KEYS.get(key)
    if spec is None:
        raise bad(key, "aipp_op", f"unknown key; allowed keys: {', '.join(KEYS)}", where, exc)
    raw = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return _convert(key, raw, spec, where, exc)


def _config(entries: list[Entry], source: str, line: int) -> AippConfig:
    where = f"aipp_op at {source}:{line}"
    values: dict[str, Any] = {}
    for key, raw, kline in entries:
        loc = f"{source}:{kline}"
        spec = KEYS.get(key)
        if spec is None:
            raise bad(key, "aipp_op", f"unknown key; allowed keys: {', '.join(KEYS)}", loc)
        if isinstance(raw, list):
            raise bad("{...}", key, f"must be {spec.allowed()}, not a block", loc)
        if key in values:
            raise bad(raw, key, "the key is configured repeatedly", loc)
        v = _convert(key, raw, spec, loc)
        if spec.reserved and v != spec.default:
            raise bad(raw, key, "the key is reserved in CANN and not supported by pycann; remove it"
                      + ("" if spec.default is None else f" or set it to {spec.default}"), loc)
        values[key] = v
    cfg = AippConfig({k: s.default for k, s in KEYS.items()}, list(values), where)
    cfg.values.update(values)
    _validate(cfg)
    return cfg


def _validate(cfg: AippConfig) -> None:
    """Model-independent checks (§3.1): required keys, dynamic-mode keys, YUV evenness, CSC."""
    v, where = cfg.values, cfg.where
    if "aipp_mode" not in cfg.explicit:
        raise bad("", "aipp_mode", "aipp_mode is required; must be static or dynamic", where)
    if cfg.mode == "dynamic":
        extra = [k for k in cfg.explicit if k not in DYNAMIC_KEYS]
        if extra:
            raise bad(extra[0], "aipp_op", "with aipp_mode dynamic only " + ", ".join(DYNAMIC_KEYS)
                      + " may be set; the other parameters are set at run time", where)
        if v["max_src_image_size"] <= 0:
            raise bad(v["max_src_image_size"], "max_src_image_size",
                      f"must be an integer in [1, {INT32_MAX}] when aipp_mode is dynamic", where)
        return
    if "input_format" not in cfg.explicit:
        raise bad("", "input_format", f"input_format is required in static mode; use {KEYS['input_format'].allowed()}",
                  where)
    if v["max_src_image_size"]:
        raise bad(v["max_src_image_size"], "max_src_image_size", "only valid when aipp_mode is dynamic", where)
    fmt = v["input_format"]
    if 0 < v["src_image_size_w"] < 2:
        raise bad(v["src_image_size_w"], "src_image_size_w", "must be 0 or an integer in [2, 4096]", where)
    if fmt in ("YUV420SP_U8", "YVU420SP_U8"):
        for key in ("src_image_size_w", "src_image_size_h", "load_start_pos_w", "load_start_pos_h"):
            if v[key] % 2 and (v["crop"] or key.startswith("src")):
                raise bad(v[key], key, f"must be even for {fmt} (chroma is subsampled 2x2)", where)
    if v["csc_switch"] and fmt == "YUV400_U8":
        raise bad("true", "csc_switch", "YUV400_U8 has one channel; colour-space conversion needs 3", where)


# float16 keeps 11 significant bits for normal values: a rounding error above half a unit in the
# last place relative to the value means the value fell into the subnormal range (or to 0)
_F16_REL_ERR = 2.0 ** -11


def fp16_warnings(cfg: AippConfig) -> list[str]:
    """Warnings for ``var_reci_chn_*`` values the device's float16 cannot hold: a non-zero value
    that rounds to 0, or one below float16's normal range (6.1e-05) that keeps fewer bits."""
    out = []
    for i in range(4):
        key = f"var_reci_chn_{i}"
        if key not in cfg.explicit:
            continue
        v = float(cfg.values[key])
        h = var_reci_f16(v)
        if v == 0 or abs(h - v) <= _F16_REL_ERR * abs(v):
            continue
        what = "rounds to 0" if h == 0 else f"becomes the float16 subnormal {h:.6g} (off by {abs(h - v) / abs(v):.1%})"
        out.append(f"{key} {v:g} {what}: AIPP applies var_reci_chn as float16 ({cfg.where}); "
                   f"keep |var_reci_chn| >= 6.1e-05, e.g. scale the model's first layer instead")
    return out


def parse_aipp_config(text: str, source: str = "<aipp config>") -> list[AippConfig]:
    """Parse the text of an ``--insert_op_conf`` file. Raises ``OptionError`` (E10001)."""
    entries, _ = _message(_tokens(text, source), 0, 0, source)
    out: list[AippConfig] = []
    for key, body, line in entries:
        if key == "multi_shape_op":
            raise bad(key, "--insert_op_conf", "multi_shape_op is not supported by pycann; use aipp_op blocks",
                      f"{source}:{line}")
        if key != "aipp_op":
            raise bad(key, "--insert_op_conf", "unknown top-level key; the file holds aipp_op { ... } blocks",
                      f"{source}:{line}")
        if not isinstance(body, list):
            raise bad(body, "aipp_op", "must be a { ... } block", f"{source}:{line}")
        out.append(_config(body, source, line))
    if not out:
        raise bad(source, "--insert_op_conf", "the file has no aipp_op { ... } block", "")
    return out


def load_aipp_config(path: str | os.PathLike[str]) -> list[AippConfig]:
    """Read and parse an AIPP config file. Raises ``OptionError`` (E10001)."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise bad(p, "--insert_op_conf", f"the file cannot be read ({e.strerror or e})") from None
    return parse_aipp_config(text, os.path.basename(p))


# ---------------------------------------------------------------------------- resolution
@dataclass(frozen=True)
class ModelInput:
    """The model input AIPP feeds: name, dtype, dims and layout (NCHW or NHWC)."""

    name: str
    dtype: int
    shape: tuple[Any, ...]
    layout: str

    @property
    def nchw(self) -> tuple[Any, Any, Any, Any]:
        s = self.shape
        return (s[0], s[1], s[2], s[3]) if self.layout == "NCHW" else (s[0], s[3], s[1], s[2])


OUT_DTYPES = (int(DType.FLOAT), int(DType.FLOAT16), int(DType.UINT8))


def check_model_input(inp: ModelInput, mode: str, where: str, exc: type[Exception] = OptionError) -> None:
    """AIPP needs a 4-D NCHW/NHWC float32/float16/uint8 input with static C, H and W."""
    if inp.layout not in ("NCHW", "NHWC"):
        raise bad(inp.layout, "--input_format", "with --insert_op_conf the input format must be NCHW or NHWC", where,
                  exc)
    if len(inp.shape) != 4:
        raise bad(list(inp.shape), f"input {inp.name} shape", "AIPP needs a 4-D NCHW or NHWC input", where, exc)
    if inp.dtype not in OUT_DTYPES:
        raise bad(inp.dtype, f"input {inp.name} dtype", "AIPP feeds float32, float16 or uint8 model inputs", where,
                  exc)
    n, c, h, w = inp.nchw
    # dims as atc writes them (-1 for a dynamic one, not the exporter's symbol such as 'H')
    dims = [d if isinstance(d, int) else -1 for d in inp.shape]
    if not all(isinstance(d, int) for d in (c, h, w)):
        example = ",".join(str(d) if d >= 0 else ("1" if i == 0 else "224") for i, d in enumerate(dims))
        raise bad(dims, f"input {inp.name} shape", "AIPP needs static C, H and W (-1 is dynamic); set them with "
                  f"--input_shape, e.g. \"{inp.name}:{example}\"", where, exc)
    if mode == "dynamic" and not isinstance(n, int):
        raise bad(dims, f"input {inp.name} shape", "dynamic AIPP needs a static batch N", where, exc)


def resolve_params(v: Mapping[str, Any], inp: ModelInput, where: str, exc: type[Exception] = OptionError) -> AippParams:
    """Static parameters against the model input: source size, crop and padding defaults, then
    the range checks that need the model (crop inside the image, output size = model H x W)."""
    _, c, h, w = inp.nchw
    fmt = v["input_format"]
    if FORMATS[fmt][0] != c:
        raise bad(fmt, "input_format", f"{fmt} gives {FORMATS[fmt][0]} channel(s) but input {inp.name} has C={c}",
                  where, exc)
    crop, pad = bool(v["crop"]), bool(v["padding"])
    pads = (v["top_padding_size"], v["bottom_padding_size"], v["left_padding_size"], v["right_padding_size"])
    sizes = {}
    for ax, model_dim, (p0, p1) in (("w", w, pads[2:]), ("h", h, pads[:2])):
        src = v[f"src_image_size_{ax}"]
        if src == 0:
            if crop or pad:
                raise bad(0, f"src_image_size_{ax}", "must be set (1..4096) when crop or padding is on", where, exc)
            src = model_dim
        start, size = (v[f"load_start_pos_{ax}"], v[f"crop_size_{ax}"]) if crop else (0, src)
        if size == 0:
            if pad:
                raise bad(0, f"crop_size_{ax}", "must be set (1..4096) when padding is on", where, exc)
            size = model_dim
        if start + size > src:
            raise bad(size, f"crop_size_{ax}", f"the crop [{start}, {start + size}) lies outside the source image "
                      f"(src_image_size_{ax} {src}); need load_start_pos_{ax} + crop_size_{ax} <= {src}", where, exc)
        if size + p0 + p1 != model_dim:
            what = "crop_size" if crop else "src_image_size"
            raise bad(size + p0 + p1, f"{what}_{ax}", f"the AIPP output {'width' if ax == 'w' else 'height'} "
                      f"({what}_{ax} {size} + padding {p0 + p1}) must equal the model input's {model_dim}",
                      where, exc)
        sizes[ax] = (src, start, size)
    if fmt in ("YUV420SP_U8", "YVU420SP_U8") and (sizes["w"][0] % 2 or sizes["h"][0] % 2):
        raise bad(f"{sizes['w'][0]}x{sizes['h'][0]}", "src_image_size_w", f"{fmt} needs an even width and height",
                  where, exc)
    default = DEFAULT_MATRIX_YUV2RGB if fmt in YUV_FORMATS else DEFAULT_MATRIX_RGB2YUV
    matrix = tuple(default[i] if v.get(k) is None else int(v[k])
                   for i, k in enumerate(f"matrix_r{r}c{c_}" for r in range(3) for c_ in range(3)))
    return AippParams(
        input_format=fmt, src_w=sizes["w"][0], src_h=sizes["h"][0],
        crop=(sizes["w"][1], sizes["h"][1], sizes["w"][2], sizes["h"][2]) if crop else None,
        csc=bool(v["csc_switch"]), matrix=matrix,
        input_bias=(int(v["input_bias_0"]), int(v["input_bias_1"]), int(v["input_bias_2"])),
        output_bias=(int(v["output_bias_0"]), int(v["output_bias_1"]), int(v["output_bias_2"])),
        rbuv_swap=bool(v["rbuv_swap_switch"]), ax_swap=bool(v["ax_swap_switch"]),
        mean=tuple(float(v[f"mean_chn_{i}"]) for i in range(4)), min=tuple(float(v[f"min_chn_{i}"]) for i in range(4)),
        var_reci=tuple(var_reci_f16(v[f"var_reci_chn_{i}"]) for i in range(4)),
        pad=(int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3])) if pad else (0, 0, 0, 0),
        pad_value=float(v["padding_value"]),
    )


def node_attrs(cfg: AippConfig, inp: ModelInput, rank: int) -> tuple[dict[str, Any], TensorDesc]:
    """``Aipp`` node attributes and the new uint8 graph-input desc for ``inp``."""
    check_model_input(inp, cfg.mode, cfg.where)
    n = inp.nchw[0]
    base: dict[str, Any] = {"aipp_mode": cfg.mode, "related_input_rank": rank, "out_layout": inp.layout,
                            "out_dtype": inp.dtype, "out_shape": [-1 if not isinstance(n, int) else n, *inp.shape[1:]]}
    if cfg.mode == "dynamic":
        base["max_src_image_size"] = int(cfg["max_src_image_size"])
        return base, TensorDesc(int(DType.UINT8), (int(cfg["max_src_image_size"]),))
    p = resolve_params(cfg.values, inp, cfg.where)
    src = src_shape(p.input_format, p.src_h, p.src_w)
    crop = p.crop or (0, 0, 0, 0)
    base.update({
        "input_format": p.input_format, "src_image_size_w": p.src_w, "src_image_size_h": p.src_h,
        "crop": int(p.crop is not None), "load_start_pos_w": crop[0], "load_start_pos_h": crop[1],
        "crop_size_w": crop[2], "crop_size_h": crop[3], "padding": int(any(p.pad)),
        "top_padding_size": p.pad[0], "bottom_padding_size": p.pad[1], "left_padding_size": p.pad[2],
        "right_padding_size": p.pad[3], "padding_value": p.pad_value, "csc_switch": int(p.csc),
        "matrix": list(p.matrix), "input_bias": list(p.input_bias), "output_bias": list(p.output_bias),
        "rbuv_swap_switch": int(p.rbuv_swap), "ax_swap_switch": int(p.ax_swap), "mean_chn": list(p.mean),
        "min_chn": list(p.min), "var_reci_chn": list(p.var_reci), "src_shape": [-1, *src],
    })
    return base, TensorDesc(int(DType.UINT8), (n, *src))
