"""Compile options and the parsers for ATC's option syntax (cann-interfaces.md §2.1)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pycann.errors import OptionError

if TYPE_CHECKING:  # pycann.dtypes loads ml_dtypes (~1 s): atc checks options without it
    from pycann.dtypes import Dim

SOC_VERSIONS = (
    "Ascend310", "Ascend310P1", "Ascend310P3", "Ascend310B1", "Ascend310B4", "Ascend910A", "Ascend910B",
    "Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910_9391", "Ascend910_9392",
    "Ascend910_9381", "Ascend910_9382", "Ascend910_9372", "Ascend910_9362", "CPU",
)


IMPLMODES = ("high_performance", "high_precision", "high_performance_for_all", "high_precision_for_all")


def check_implmode(mode: str) -> str:
    """``--op_select_implmode``'s value, or ``OptionError`` (E10001) naming the accepted ones."""
    if mode not in IMPLMODES:
        raise OptionError(f"E10001: value [{mode}] for parameter [--op_select_implmode] is invalid: "
                          f"use one of {', '.join(IMPLMODES)}")
    return mode


@dataclass
class CompileOptions:
    """What ``atc`` and ``compile_model`` accept. Shapes: dim int, -1 (dynamic) or (lo, hi) (atc's "lo~hi" text
    too; anything else is refused at compile, ``compiler._input_dim``)."""

    input_shape: dict[str, list[Any]] = field(default_factory=dict)
    input_format: str = "NCHW"
    soc_version: str = "Ascend310P3"
    output_type: dict[str, int] = field(default_factory=dict)  # "" (all outputs) or "node:idx" -> dtype
    out_nodes: list[tuple[str, int]] = field(default_factory=list)
    disabled_passes: list[str] = field(default_factory=list)
    log: str = "null"
    # AIPP config file (--insert_op_conf, cann-interfaces.md §3) and dynamic gears (§2.1);
    # parsers: pycann.ge.aipp.config, pycann.ge.compile.gears.
    insert_op_conf: str = ""
    dynamic_batch_size: list[int] = field(default_factory=list)
    dynamic_image_size: list[list[int]] = field(default_factory=list)
    dynamic_dims: list[list[int]] = field(default_factory=list)
    # Precision (docs/precision.md; readers in pycann.ge.compile.precision_config). "" = not given:
    # pycann then keeps the model's dtypes (must_keep_origin_dtype; CANN's default is force_fp16).
    precision_mode: str = ""
    precision_mode_v2: str = ""
    keep_dtype: list[str] = field(default_factory=list)  # node names or "OpType::Type"
    modify_mixlist: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # the JSON document
    customize_dtypes: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    input_fp16_nodes: list[str] = field(default_factory=list)
    is_weight_clip: bool = True  # clip weights to +-65504 when they become float16
    # CANN's --op_select_implmode / --optypelist_for_implmode (docs/kernels.md "Winograd"):
    # high_performance lets 3x3 convs use Winograd; high_precision keeps the direct algorithm.
    op_select_implmode: str = "high_performance"
    optypelist_for_implmode: list[str] = field(default_factory=list)
    # ConstantFolding keeps results larger than this (bytes) as nodes (passes/constant_folding.py)
    fold_max_bytes: int = 128 << 20
    # AOE's knowledge bank folder (--op_bank_path; "" = TUNE_BANK_PATH, else ~/.cache/pycann/aoe) and
    # which of its tuned choices apply (docs/aoe.md; pycann.ge.compile.tuned): "on" (a model's subgraph-tuning
    # record and the kernel records), "kernels" (kernel records only), "off" (neither)
    op_bank_path: str = ""
    tune_bank: str = "on"
    # record the imported model's content fingerprint in the manifest (atc does: ``pycann compare``
    # then refuses an .om compiled from another model; ~0.1-0.3 s per 100 MB of weights)
    source_fingerprint: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def dim_token(tok: str) -> int | tuple[int, int] | None:
    """One --input_shape dim written as text: ``"8"``, ``"-1"`` -> int, ``"8~32"`` -> (8, 32) (the order is
    not checked here); None when it is not of that form (ASCII digits with at most one sign)."""
    def number(t: str) -> int | None:
        t = t.strip()
        body = t[1:] if t[:1] in "+-" else t
        return int(t) if body.isascii() and body.isdigit() else None

    parts = [number(v) for v in tok.split("~")]
    if None in parts or len(parts) > 2:
        return None
    return (parts[0], parts[1]) if len(parts) == 2 else parts[0]  # type: ignore[return-value]


def parse_input_shape(text: str) -> dict[str, list[Any]]:
    """``"x:1,3,-1,-1;y:1~8,128;s:"`` -> {"x": [1, 3, -1, -1], "y": [(1, 8), 128], "s": []}.

    Raises ``OptionError`` (E10001) naming the bad entry.
    """
    out: dict[str, list[Any]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        if ":" not in part:
            raise OptionError(f"E10001: value [{part}] of --input_shape is invalid: expected name:dims, e.g. \"x:1,3,224,224\"")
        name, _, dims_s = part.rpartition(":")
        dims: list[Any] = []
        for tok in filter(None, (t.strip() for t in dims_s.split(","))):
            d = dim_token(tok)
            bad = f"E10001: value [{tok}] for input [{name}] of --input_shape is invalid: "
            if isinstance(d, tuple) and not 0 <= d[0] <= d[1]:
                lo, hi = d
                raise OptionError(bad + (f"a range lo~hi needs 0 <= lo <= hi (write {hi}~{lo})" if hi >= 0 <= lo
                                         else "a range lo~hi needs non-negative bounds"))
            if d is None or (isinstance(d, int) and d < -1):
                raise OptionError(bad + "use a non-negative int, -1 (dynamic) or a range lo~hi")
            dims.append(d)
        out[name] = dims
    return out


def parse_out_nodes(text: str) -> list[tuple[str, int]]:
    """``"node:0;node2:1"`` -> [("node", 0), ("node2", 1)]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, idx = part.rpartition(":")
        if not sep or not idx.isdigit():
            raise OptionError(f"E10001: value [{part}] of --out_nodes is invalid: expected node_name:output_index")
        out.append((name, int(idx)))
    return out


def parse_output_type(text: str) -> dict[str, int]:
    """``"FP16"`` -> {"": FLOAT16}; ``"node:0:FP16;n2:1:FP32"`` -> per output."""
    def dt(name: str) -> int:
        from pycann.dtypes import OUTPUT_TYPE

        if name.upper() not in OUTPUT_TYPE:
            raise OptionError(
                f"E10001: value [{name}] of --output_type is invalid: use one of {', '.join(OUTPUT_TYPE)}"
            )
        return int(OUTPUT_TYPE[name.upper()])

    text = text.strip()
    if ":" not in text:
        return {"": dt(text)}
    out = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        bits = part.split(":")
        if len(bits) != 3 or not bits[1].isdigit():
            raise OptionError(f"E10001: value [{part}] of --output_type is invalid: expected node:index:TYPE")
        out[f"{bits[0]}:{bits[1]}"] = dt(bits[2])
    return out


def dims_to_desc_shape(dims: list[Any], names: tuple[str, ...]) -> tuple[Dim, ...]:
    """Compile-time shape for one input: -1 and ranges become symbolic dims named per position."""
    return tuple(d if isinstance(d, int) and d >= 0 else names[i] for i, d in enumerate(dims))


