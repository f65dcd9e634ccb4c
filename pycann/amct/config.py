"""AMCT's quantisation configuration (``create_quant_config``'s JSON file), as typed data.

The file has AMCT's shape: top-level ``version``, ``batch_num``, ``activation_offset``,
``do_fusion``, ``skip_fusion_layers``, and one entry per quantisable layer (by ONNX node name)
with ``quant_enable``, ``activation_quant_params`` and ``weight_quant_params``. pycann adds the
calibration algorithm per layer (``algo``: ``min_max``, ``percentile`` or ``kl``) and
``bias_correction``; AMCT's own files (without them) read with the defaults.

Defaults (the safe ones, issue 22): weights symmetric int8 per output channel; activations uint8
with an offset (``activation_offset=True``, as AMCT) from the 99.999th percentile.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pycann.errors import OptionError

ALGOS = ("min_max", "percentile", "kl")
QUANT_OP_TYPES = ("Conv", "Gemm", "MatMul")


@dataclass
class ActivationQuantParams:
    """How one layer's input activation is calibrated. ``max_percentile``/``min_percentile`` are
    fractions (0.99999 = the 99.999th percentile), used by ``algo="percentile"``."""

    num_bits: int = 8
    algo: str = "percentile"
    max_percentile: float = 0.99999
    min_percentile: float = 0.99999
    asymmetric: bool = True
    # pycann: 7-bit activations (0..127, a Clip before the QuantizeLinear), which make x86 int8
    # kernels exact on CPUs without VNNI (PyTorch's fbgemm "reduce_range"); costs one bit
    reduce_range: bool = False


@dataclass
class WeightQuantParams:
    """Weights: symmetric int8; ``channel_wise`` gives one scale per output channel."""

    num_bits: int = 8
    channel_wise: bool = True


@dataclass
class LayerConfig:
    """One quantisable node (Conv, Gemm, MatMul with a constant weight)."""

    quant_enable: bool = True
    activation_quant_params: ActivationQuantParams = field(default_factory=ActivationQuantParams)
    weight_quant_params: WeightQuantParams = field(default_factory=WeightQuantParams)
    bias_correction: bool = True


@dataclass
class QuantConfig:
    """The whole file. ``layers`` maps node names to their ``LayerConfig``."""

    version: int = 1
    batch_num: int = 1
    activation_offset: bool = True
    do_fusion: bool = True
    skip_fusion_layers: list[str] = field(default_factory=list)
    layers: dict[str, LayerConfig] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in asdict(self).items() if k != "layers"}
        for name, lc in self.layers.items():
            out[name] = asdict(lc)
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")

    @staticmethod
    def load(path: str | os.PathLike[str]) -> QuantConfig:
        """Read a config file; ``OptionError`` naming the field on a bad value."""
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            raise OptionError(f"AMCT config {path}: cannot read ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise OptionError(f"AMCT config {path}: not JSON ({e.msg} at line {e.lineno})") from None
        except RecursionError:  # json's decoder recurses per nesting level
            raise OptionError(f"AMCT config {path}: its JSON nests deeper than Python's recursion limit") from None
        if not isinstance(doc, dict):
            raise OptionError(f"AMCT config {path}: the top level must be an object")
        return parse_config(doc, str(path))


_TOP = {"version": int, "batch_num": int, "activation_offset": bool, "do_fusion": bool, "skip_fusion_layers": list}


def _typed(obj: Any, cls: type, where: str) -> Any:
    if not isinstance(obj, dict):
        raise OptionError(f"AMCT config {where}: expected an object")
    known = {f.name for f in fields(cls)}
    extra = set(obj) - known
    if extra:
        raise OptionError(f"AMCT config {where}: unknown field(s) {sorted(extra)}; known: {sorted(known)}")
    defaults = cls()
    for k, v in obj.items():
        want = type(getattr(defaults, k))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise OptionError(f"AMCT config {where}.{k}: expected {want.__name__}, got {v!r}")
        setattr(defaults, k, v)
    return defaults


def parse_config(doc: dict[str, Any], where: str = "config") -> QuantConfig:
    """A ``QuantConfig`` from the JSON document, checking every field's type and range."""
    cfg = QuantConfig()
    for key, value in doc.items():
        if key in _TOP:
            want = _TOP[key]
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise OptionError(f"AMCT config {where}: {key} must be {want.__name__}, got {value!r}")
            setattr(cfg, key, value)
            continue
        if not isinstance(value, dict):
            raise OptionError(f"AMCT config {where}: layer {key!r} must be an object")
        lc = LayerConfig()
        for k, v in value.items():
            if k == "activation_quant_params":
                lc.activation_quant_params = _typed(v, ActivationQuantParams, f"{key}.{k}")
            elif k == "weight_quant_params":
                lc.weight_quant_params = _typed(v, WeightQuantParams, f"{key}.{k}")
            elif k in ("quant_enable", "bias_correction"):
                if not isinstance(v, bool):
                    raise OptionError(f"AMCT config {where}: {key}.{k} must be true or false, got {v!r}")
                setattr(lc, k, v)
            else:
                raise OptionError(f"AMCT config {where}: layer {key!r} has unknown field {k!r}")
        check_layer(key, lc)
        cfg.layers[key] = lc
    if cfg.batch_num < 1:
        raise OptionError(f"AMCT config {where}: batch_num must be >= 1, got {cfg.batch_num}")
    return cfg


def check_layer(name: str, lc: LayerConfig) -> None:
    """Range checks for one layer (``OptionError`` naming the layer and field)."""
    a = lc.activation_quant_params
    if a.algo not in ALGOS:
        raise OptionError(f"AMCT config: layer {name!r} activation algo {a.algo!r} is not one of {', '.join(ALGOS)}")
    if a.num_bits != 8 or lc.weight_quant_params.num_bits != 8:
        raise OptionError(f"AMCT config: layer {name!r}: only 8-bit quantisation is supported")
    for k in ("max_percentile", "min_percentile"):
        v = getattr(a, k)
        if not 0.5 < v <= 1.0:
            raise OptionError(f"AMCT config: layer {name!r} {k} {v} must be in (0.5, 1]")
