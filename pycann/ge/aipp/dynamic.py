"""Dynamic AIPP at run time (``aipp_mode: dynamic``, cann-interfaces.md §3.2 last paragraph).

A dynamic-AIPP model has, per AIPP input, an image input (a flat uint8 buffer of
``max_src_image_size`` bytes; images packed one after another) and a parameter input
``ascend_dynamic_aipp_data`` (CANN's ``kAippDynamicPara`` bytes, see ``pycann.ops.aipp``).
``DynamicAipp`` keeps the parameters set with ``LoadedModel.set_dynamic_aipp`` and fills the
parameter inputs the caller leaves out; the pyACL calls (``acl.mdl.create_aipp`` /
``set_aipp_*`` / ``set_input_aipp``) can build the same buffer with ``pack_params``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.errors import InputError
from pycann.ge.aipp.config import KEYS, RUNTIME_KEYS, ModelInput, bad, check_value, resolve_params
from pycann.ops.aipp import AippParams, canonical_format, dynamic_buffer_bytes, pack_dynamic, src_bytes

Params = Mapping[str, Any] | AippParams | Sequence[Mapping[str, Any] | AippParams] | np.ndarray


def model_input(entry: Mapping[str, Any]) -> ModelInput:
    """The model input a manifest ``"aipp"`` entry feeds (what AIPP must produce)."""
    return ModelInput(entry["input"], int(entry["output_dtype"]), tuple(entry["output_shape"]),
                      str(entry["output_layout"]))


def resolve_mapping(values: Mapping[str, Any], inp: ModelInput, where: str = "") -> AippParams:
    """Config keys (``input_format``, ``src_image_size_w``, ``crop``, ``mean_chn_0``, ...) given
    from Python -> ``AippParams`` checked against the model input. Raises ``InputError`` (E10001)."""
    full: dict[str, Any] = {k: KEYS[k].default for k in RUNTIME_KEYS}
    full["padding_value"] = 0.0
    for k, v in values.items():
        if k not in RUNTIME_KEYS:
            raise bad(k, "dynamic AIPP parameter", f"unknown or not settable at run time; use one of "
                      f"{', '.join(RUNTIME_KEYS)}", where, InputError)
        full[k] = check_value(k, v, where, InputError)
    if full.get("input_format") is None:
        raise bad("", "input_format", "dynamic AIPP parameters need input_format", where, InputError)
    return resolve_params(full, inp, where, InputError)


def pack_params(params: Params, entry: Mapping[str, Any]) -> np.ndarray:
    """The ``ascend_dynamic_aipp_data`` buffer for a manifest ``"aipp"`` entry. ``params``: one
    mapping / ``AippParams`` for every image, a sequence with one per image, or a packed buffer."""
    inp = model_input(entry)
    batch = int(inp.shape[0])
    nbytes = dynamic_buffer_bytes(batch)
    where = f"dynamic AIPP of input {inp.name}"
    if isinstance(params, np.ndarray):
        buf = np.ascontiguousarray(params, np.uint8).reshape(-1)
        if buf.size < nbytes:
            raise InputError(f"{where}: the parameter buffer has {buf.size} bytes, {nbytes} needed for batch {batch}")
        return buf[:nbytes].copy()
    items = list(params) if isinstance(params, Sequence) else [params] * batch
    if len(items) != batch:
        raise InputError(f"{where}: {len(items)} parameter sets given, the model runs batch {batch}")
    resolved = [p if isinstance(p, AippParams) else resolve_mapping(p, inp, where) for p in items]
    first = resolved[0]
    for p in resolved[1:]:
        if canonical_format(p.input_format, p.rbuv_swap) != canonical_format(first.input_format, first.rbuv_swap) \
                or (p.src_w, p.src_h, p.csc, p.ax_swap) != (first.src_w, first.src_h, first.csc, first.ax_swap):
            raise InputError(f"{where}: input_format, source size, CSC and swaps must be the same for every image")
    need = batch * src_bytes(first.input_format, first.src_h, first.src_w)
    if need > int(entry["max_src_image_size"]):
        raise InputError(f"{where}: {batch} x {first.input_format} {first.src_w}x{first.src_h} images need {need} "
                         f"bytes, more than max_src_image_size {entry['max_src_image_size']}")
    return pack_dynamic(resolved)


class DynamicAipp:
    """Run-time state for a model's dynamic-AIPP inputs (manifest ``"aipp"`` entries)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]]) -> None:
        self.entries = [dict(e) for e in entries if e.get("mode") == "dynamic"]
        self.images = {e["input"]: int(e["max_src_image_size"]) for e in self.entries}
        self.buffers: dict[int, np.ndarray] = {}

    def entry_for(self, index: int) -> dict[str, Any]:
        """The entry whose image input or parameter input has model-input ``index``."""
        for e in self.entries:
            if index in (e["input_index"], e["params_input_index"]):
                return e
        have = ", ".join(f"{e['input_index']} ({e['input']})" for e in self.entries)
        raise InputError(f"input {index} has no dynamic AIPP; dynamic-AIPP inputs: {have or 'none'}")

    def set(self, index: int, params: Params) -> None:
        e = self.entry_for(index)
        self.buffers[int(e["params_input_index"])] = pack_params(params, e)

    def complete(self, feeds: Sequence[Any], n_inputs: int) -> list[Any]:
        """Insert the stored parameter buffers when ``feeds`` leaves the parameter inputs out."""
        feeds = list(feeds)
        if len(feeds) != n_inputs - len(self.entries):
            return feeds
        for e in sorted(self.entries, key=lambda e: e["params_input_index"]):
            i = int(e["params_input_index"])
            if i not in self.buffers:
                raise InputError(f"dynamic AIPP parameters for input {e['input']} are not set: call "
                                 f"set_dynamic_aipp({e['input_index']}, params) first")
            feeds.insert(i, self.buffers[i])
        return feeds

    def image(self, name: str, x: Any) -> np.ndarray:
        """A dynamic-AIPP image feed as the model's flat ``max_src_image_size`` byte buffer."""
        arr = np.asarray(x)
        cap = self.images[name]
        if arr.dtype != np.uint8:
            raise InputError(f"input '{name}' (dynamic AIPP): expected uint8 image bytes, received {arr.dtype}")
        if arr.size > cap:
            raise InputError(f"input '{name}' (dynamic AIPP): {arr.size} bytes exceed max_src_image_size {cap}")
        flat = arr.reshape(-1)
        if flat.size == cap:
            return flat
        out = np.zeros(cap, np.uint8)
        out[: flat.size] = flat
        return out
