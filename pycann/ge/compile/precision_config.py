"""Readers and checks for atc's precision options (cann-interfaces.md §2.1; docs/precision.md).

``--precision_mode`` / ``--precision_mode_v2`` resolve to one canonical mode name; ``--keep_dtype``,
``--modify_mixlist``, ``--customize_dtypes`` files and ``--input_fp16_nodes`` are parsed here into
the plain values ``CompileOptions`` stores (and the .om manifest records). Errors are
``OptionError`` in CANN's wording and codes (E10001 bad value, E10003 bad op type in a file,
E10056 both mode options, E10410 missing file), as GE's ``option_utils.cc`` reports them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pycann.dtypes import DType
from pycann.errors import OptionError
from pycann.ge.compile.precision_lists import FUSED_FROM, MixLists, canonical_op_type

MODES = (
    "force_fp16", "force_fp32", "cube_fp16in_fp32out", "allow_mix_precision", "allow_fp32_to_fp16",
    "must_keep_origin_dtype", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16",
)
# --precision_mode spellings that mean the same thing (CANN documents them as equivalent).
_SYNONYMS = {"cube_fp16in_fp32out": "force_fp32", "allow_mix_precision": "allow_mix_precision_fp16"}
V2_MODES = {
    "fp16": "force_fp16", "origin": "must_keep_origin_dtype", "cube_fp16in_fp32out": "force_fp32",
    "mixed_float16": "allow_mix_precision_fp16", "mixed_bfloat16": "allow_mix_precision_bf16",
}
V2_UNSUPPORTED = ("cube_hif8", "mixed_hif8")
MIXED_MODES = ("allow_mix_precision_fp16", "allow_mix_precision_bf16")
BF16_MODES = ("allow_mix_precision_bf16", "allow_fp32_to_bf16")
# CANN's own default is force_fp16; pycann computes in the model's dtypes unless asked (the
# results then equal ONNX Runtime's). docs/differences.md lists this.
DEFAULT_MODE = "must_keep_origin_dtype"
# Chips with bfloat16 (precision_tuning.md: A2, A3, 310B, 950); "CPU" is pycann's own target.
_BF16_SOC_PREFIXES = ("Ascend910B", "Ascend910_93", "Ascend310B", "CPU")
# dtype names accepted in --customize_dtypes files
DTYPE_NAMES = {"float": DType.FLOAT, "float32": DType.FLOAT, "float16": DType.FLOAT16,
               "bfloat16": DType.BFLOAT16, "bf16": DType.BFLOAT16, "fp16": DType.FLOAT16, "fp32": DType.FLOAT}
_OP_TYPE_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_TYPE_PREFIX = "OpType::"


def _e10001(param: str, value: str, reason: str) -> OptionError:
    return OptionError(f"E10001: Value [{value}] for parameter [--{param}] is invalid. Reason: {reason}", code="E10001")


def resolve_mode(precision_mode: str = "", precision_mode_v2: str = "", soc_version: str = "CPU") -> str:
    """The canonical mode for the two options (one of ``MODES`` minus the synonyms)."""
    if precision_mode and precision_mode_v2:
        raise OptionError("E10056: Cannot configure both parameters --precision_mode and --precision_mode_v2 "
                          "simultaneously.", code="E10056")
    if precision_mode_v2:
        if precision_mode_v2 in V2_UNSUPPORTED:
            raise _e10001("precision_mode_v2", precision_mode_v2,
                          "HiFloat8 exists on Ascend 950 only and pycann does not model it.")
        if precision_mode_v2 not in V2_MODES:
            raise _e10001("precision_mode_v2", precision_mode_v2, "The current value is not within the valid range. "
                          f"Valid values are: {', '.join(list(V2_MODES) + list(V2_UNSUPPORTED))}.")
        mode = V2_MODES[precision_mode_v2]
    elif precision_mode:
        if precision_mode not in MODES:
            raise _e10001("precision_mode", precision_mode, "The current value is not within the valid range. "
                          f"Valid values are: {', '.join(MODES)}.")
        mode = _SYNONYMS.get(precision_mode, precision_mode)
    else:
        mode = DEFAULT_MODE
    if mode in BF16_MODES and not soc_version.startswith(_BF16_SOC_PREFIXES):
        raise _e10001("precision_mode" if precision_mode else "precision_mode_v2", precision_mode or precision_mode_v2,
                      f"bfloat16 is not supported by soc_version {soc_version}; it needs an Atlas A2/A3 or 310B chip "
                      "(e.g. --soc_version=Ascend910B2) or --soc_version=CPU.")
    return mode


def _read(path: str, param: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise OptionError(f"E10410: File {path} does not exist. (--{param})", code="E10410") from None
    except OSError as e:
        raise OptionError(f"E13001: Failed to open file {path}. Reason: {e.strerror}. (--{param})",
                          code="E13001") from None


def _check_op_type(line: str, param: str, path: str) -> None:
    op_type = line[len(_TYPE_PREFIX):]
    if not _OP_TYPE_RE.match(op_type):
        raise OptionError(f"E10003: Value [{path}] for parameter [--{param}] is invalid. Reason: The operator type "
                          f"[{op_type}] in the config file is invalid. It must be in PascalCase.", code="E10003")


def parse_keep_dtype(path: str) -> list[str]:
    """Lines of a ``--keep_dtype`` file: node names, or ``OpType::TypeName`` (op types)."""
    out = []
    for raw in _read(path, "keep_dtype").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(_TYPE_PREFIX):
            _check_op_type(line, "keep_dtype", path)
        out.append(line)
    return out


def parse_modify_mixlist(path: str) -> dict[str, dict[str, list[str]]]:
    """A ``--modify_mixlist`` JSON file: ``{"black-list": {"to-add": [...], "to-remove": [...]}, ...}``."""
    try:
        doc = json.loads(_read(path, "modify_mixlist"))
    except json.JSONDecodeError as e:
        raise _e10001("modify_mixlist", path, f"the file is not valid JSON: {e}") from None
    except RecursionError:  # json's decoder recurses per nesting level
        raise _e10001("modify_mixlist", path, "its JSON nests deeper than Python's recursion limit") from None
    return validate_mixlist(doc, path)


def validate_mixlist(doc: Any, where: str = "--modify_mixlist") -> dict[str, dict[str, list[str]]]:
    """Check the shape of a mixlist document; returns it with only the known keys."""
    if not isinstance(doc, dict):
        raise _e10001("modify_mixlist", where, "the top level must be a JSON object with black-list / white-list / "
                      "gray-list entries.")
    out: dict[str, dict[str, list[str]]] = {}
    for key, body in doc.items():
        if key not in ("black-list", "white-list", "gray-list"):
            raise _e10001("modify_mixlist", where, f"unknown key \"{key}\"; use black-list, white-list or gray-list.")
        if not isinstance(body, dict) or set(body) - {"to-add", "to-remove"}:
            raise _e10001("modify_mixlist", where, f"\"{key}\" must be an object with \"to-add\" and/or \"to-remove\".")
        if key == "gray-list" and body.get("to-remove"):
            raise _e10001("modify_mixlist", where, "\"gray-list\" takes \"to-add\" only (an op leaves the gray list by "
                          "being added to the white or black list).")
        entry = {}
        for action, ops in body.items():
            if not isinstance(ops, list) or not all(isinstance(o, str) and o for o in ops):
                raise _e10001("modify_mixlist", where, f"\"{key}\".\"{action}\" must be a list of op type names.")
            entry[action] = list(ops)
        out[key] = entry
    return out


def mix_lists(modify: dict[str, dict[str, list[str]]] | None, warn: Any = None) -> MixLists:
    """The default lists changed by a parsed ``--modify_mixlist`` (CANN's rules, precision_tuning.md):
    black/white ``to-remove`` moves an op to the gray list, ``to-add`` moves it onto that list."""
    lists = MixLists()
    for key, body in (modify or {}).items():
        name = key.split("-")[0]
        for op in body.get("to-remove", []):
            op_t = canonical_op_type(op)
            if op_t not in getattr(lists, name) and warn is not None:
                warn(f"[PrecisionMode] W: --modify_mixlist: {op} is not on the {key}; \"to-remove\" leaves it "
                     "where it is")
            if op_t in getattr(lists, name):
                lists.move(op_t, "gray")
        for op in body.get("to-add", []):
            lists.move(canonical_op_type(op), name)
    return lists


def parse_customize_dtypes(path: str) -> dict[str, dict[str, list[int]]]:
    """A ``--customize_dtypes`` file -> ``{"Opname" or "OpType::T": {"inputs": [dtype...], "outputs": [...]}}``.

    Lines: ``Opname::InputDtype:float16,float16,OutputDtype:float16`` or
    ``OpType::Relu:InputDtype:float16,OutputDtype:float16`` (dtypes: float, float16, bfloat16).
    """
    out: dict[str, dict[str, list[int]]] = {}
    for lineno, raw in enumerate(_read(path, "customize_dtypes").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(OpType::[^:]+|.+?)::?(InputDtype:.*)$", line)
        if m is None:
            raise _e10001("customize_dtypes", path, f"line {lineno} '{raw}': expected "
                          "Opname::InputDtype:dt,...,OutputDtype:dt,... or OpType::Type:InputDtype:...,OutputDtype:...")
        key, spec = m.group(1), m.group(2)
        if key.startswith(_TYPE_PREFIX):
            _check_op_type(key, "customize_dtypes", path)
        ins_s, sep, outs_s = spec[len("InputDtype:"):].partition("OutputDtype:")
        entry = {"inputs": _dtypes(ins_s, path, lineno), "outputs": _dtypes(outs_s, path, lineno) if sep else []}
        out[key] = entry
    return out


def _dtypes(text: str, path: str, lineno: int) -> list[int]:
    names = [t.strip().lower() for t in re.split(r"[,;]", text) if t.strip()]
    bad = [n for n in names if n not in DTYPE_NAMES]
    if bad:
        raise _e10001("customize_dtypes", path, f"line {lineno}: dtype {bad[0]} is not one pycann can compute in; "
                      "use float, float16 or bfloat16.")
    return [int(DTYPE_NAMES[n]) for n in names]


def parse_input_fp16_nodes(text: str) -> list[str]:
    """``"in1;in2"`` -> ["in1", "in2"]."""
    return [p.strip() for p in text.split(";") if p.strip()]


def check_modify_mixlist(mode: str, given: bool) -> None:
    """CANN accepts --modify_mixlist only with a mixed-precision mode (option_utils.cc)."""
    if given and mode not in MIXED_MODES:
        raise _e10001("modify_mixlist", "file", "Modify_mixlist is set. Please ensure that precision_mode is set to "
                      "any of {allow_mix_precision, allow_mix_precision_fp16, allow_mix_precision_bf16} or "
                      "precision_mode_v2 to any of {mixed_float16, mixed_bfloat16}.")


def matches(entry: str, node_name: str, op_type: str, origin: list[str]) -> bool:
    """Whether a keep_dtype / customize_dtypes entry names this node (by name, original name or type)."""
    if entry.startswith(_TYPE_PREFIX):
        want = canonical_op_type(entry[len(_TYPE_PREFIX):])
        return want == op_type or want in FUSED_FROM.get(op_type, ())
    return entry == node_name or entry in origin


@dataclass
class PrecisionSettings:
    """Everything the PrecisionMode pass needs, resolved from ``CompileOptions``."""

    mode: str = DEFAULT_MODE
    keep_dtype: list[str] = field(default_factory=list)
    lists: MixLists = field(default_factory=MixLists)
    customize: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    input_fp16_nodes: list[str] = field(default_factory=list)
    # --output_type by graph output value ("" = every float output): compile_model resolves the
    # option's node:index keys on the imported graph (compiler._output_type_by_value)
    output_type: dict[str, int] = field(default_factory=dict)
    weight_clip: bool = True

    @property
    def active(self) -> bool:
        """False when the pass has nothing to do (the model's own dtypes, no per-op settings)."""
        return self.mode != DEFAULT_MODE or bool(self.customize) or bool(self.input_fp16_nodes)

    def describe(self) -> dict[str, Any]:
        """What the .om manifest records (``atc --mode=6`` prints it)."""
        out: dict[str, Any] = {"precision_mode": self.mode}
        if self.keep_dtype:
            out["keep_dtype"] = list(self.keep_dtype)
        if self.customize:
            out["customize_dtypes"] = sorted(self.customize)
        if self.input_fp16_nodes:
            out["input_fp16_nodes"] = list(self.input_fp16_nodes)
        if self.mode in MIXED_MODES and self.lists.to_json() != MixLists().to_json():
            base = MixLists()
            out["mixlist_changes"] = {k: sorted(set(v) - set(getattr(base, k))) for k, v in self.lists.to_json().items()}
        return out


def settings_from_options(options: Any, warn: Any = None) -> PrecisionSettings:
    """``PrecisionSettings`` for a ``CompileOptions`` (checks the mode, the soc and the mixlist)."""
    mode = resolve_mode(options.precision_mode, options.precision_mode_v2, options.soc_version)
    check_modify_mixlist(mode, bool(options.modify_mixlist))
    if options.modify_mixlist:
        validate_mixlist(options.modify_mixlist)
    return PrecisionSettings(
        mode=mode, keep_dtype=list(options.keep_dtype), lists=mix_lists(options.modify_mixlist, warn),
        customize=dict(options.customize_dtypes), input_fp16_nodes=list(options.input_fp16_nodes),
        weight_clip=bool(options.is_weight_clip),
    )
