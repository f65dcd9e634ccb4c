"""``acl.json``, the file ``acl.init(config_path)`` reads (cann-interfaces.md §1.9).

Known top-level keys are checked; unknown keys (top level, or inside ``dump`` / ``profiler``)
are warned about and kept, never fatal. The parsed ``AclConfig`` stays available as
``pycann.acl._state.config`` for the profiler and dump features.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from pycann.acl import constants as C
from pycann.acl.errors import fault

TOP_KEYS = frozenset({"dump", "profiler", "max_opqueue_num", "err_msg_mode", "defaultDevice", "default_device"})
DUMP_KEYS = frozenset({"dump_path", "dump_list", "dump_mode", "dump_op_switch", "dump_data", "dump_debug",
                       "dump_step", "dump_level", "dump_stats", "dump_scene", "dump_exception"})
PROFILER_KEYS = frozenset({
    "switch", "output", "aicpu", "aic_metrics", "ai_core_metrics", "acl_api", "task_time", "runtime_api",
    "hccl", "l2", "msproftx", "ge_api", "task_trace", "training_trace", "fp_point", "bp_point",
    "sys_hardware_mem_freq", "sys_io_sampling_freq", "sys_interconnection_freq", "dvpp_freq",
    "instr_profiling_freq", "host_sys", "host_sys_usage", "host_sys_usage_freq", "llc_profiling",
    "storage_limit", "mem_freq", "op_attr", "sys_cpu_freq",
})
DUMP_MODES = ("input", "output", "all")
ON_OFF = ("on", "off")


class AclConfigWarning(UserWarning):
    """An ``acl.json`` key pycann does not know (kept, otherwise ignored)."""


@dataclass
class AclConfig:
    """The parsed ``acl.json``: ``raw`` as read, ``dump`` / ``profiler`` blocks (or ``None``),
    ``unknown`` keys that were warned about."""

    path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    dump: dict[str, Any] | None = None
    profiler: dict[str, Any] | None = None
    unknown: list[str] = field(default_factory=list)

    @property
    def dump_enabled(self) -> bool:
        """True when a dump block asks for model dump, single-op dump or overflow dump."""
        d = self.dump or {}
        return bool(d.get("dump_path")) and (
            "dump_list" in d or d.get("dump_op_switch") == "on" or d.get("dump_debug") == "on"
        )

    @property
    def profiling_enabled(self) -> bool:
        return (self.profiler or {}).get("switch") == "on"

    @property
    def default_device(self) -> int | None:
        dd = self.raw.get("defaultDevice", {})
        v = dd.get("default_device") if isinstance(dd, dict) else None
        try:
            return None if v is None else int(v)
        except (TypeError, ValueError):
            return None


def _warn_unknown(cfg: AclConfig, where: str, keys: Any, known: frozenset[str]) -> None:
    for k in keys:
        if k not in known:
            name = f"{where}.{k}" if where else k
            cfg.unknown.append(name)
            warnings.warn(f"acl.json: unknown key '{name}' ignored", AclConfigWarning, stacklevel=4)


def _check_dump_list(entries: list[Any]) -> None:
    """Each ``dump_list`` entry is ``{"model_name": str, "layer": [str, ...]}`` (both optional). Raises
    ``AclFault(ACL_ERROR_INVALID_DUMP_CONFIG)`` naming the entry; a malformed one was an internal error
    (500000) of ``acl.init`` (``[5]``, ``"layer": 7``) or, with a numeric model name, never matched."""
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG,
                        f"acl.json: dump_list[{i}] must be an object {{\"model_name\": ..., \"layer\": [...]}}, not {e!r}")
        if "model_name" in e and not isinstance(e["model_name"], str):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG,
                        f"acl.json: dump_list[{i}].model_name must be a string (the .om's name), not {e['model_name']!r}")
        layer = e.get("layer")
        if layer is not None and (not isinstance(layer, list) or not all(isinstance(x, str) for x in layer)):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG,
                        f"acl.json: dump_list[{i}].layer must be a list of op names (strings), not {layer!r}")


def parse_config(path: str | None) -> AclConfig:
    """Read and check ``path`` (``None`` or ``""``: no file). Raises ``AclFault`` with
    ``ACL_ERROR_INVALID_FILE`` (missing), ``ACL_ERROR_PARSE_FILE`` (not JSON / not an object),
    ``ACL_ERROR_INVALID_DUMP_CONFIG`` or ``ACL_ERROR_INVALID_PROFILING_CONFIG``."""
    if not path:
        return AclConfig()
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        raise fault(C.ACL_ERROR_INVALID_FILE, f"acl.json '{path}' {what}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        raw = json.loads(text) if text.strip() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise fault(C.ACL_ERROR_PARSE_FILE, f"acl.json '{path}' is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise fault(C.ACL_ERROR_PARSE_FILE, f"acl.json '{path}' must hold a JSON object")
    cfg = AclConfig(path=path, raw=raw)
    _warn_unknown(cfg, "", raw, TOP_KEYS)
    dump = raw.get("dump")
    if dump is not None:
        if not isinstance(dump, dict):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, "acl.json: 'dump' must be an object")
        _warn_unknown(cfg, "dump", dump, DUMP_KEYS)
        wants = "dump_list" in dump or dump.get("dump_op_switch") == "on" or dump.get("dump_debug") == "on"
        if wants and not dump.get("dump_path"):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, "acl.json: dump needs 'dump_path'")
        if "dump_path" in dump and not isinstance(dump["dump_path"], str):
            # (a number was taken as a folder of that name in the working folder)
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG,
                        f"acl.json: 'dump_path' must be a folder path (a string), not {dump['dump_path']!r}")
        if "dump_list" in dump and not isinstance(dump["dump_list"], list):
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, "acl.json: 'dump_list' must be a list")
        _check_dump_list(dump.get("dump_list") or [])
        if dump.get("dump_mode", "output") not in DUMP_MODES:
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG,
                        f"acl.json: dump_mode must be one of {DUMP_MODES}, not {dump.get('dump_mode')!r}")
        for k in ("dump_op_switch", "dump_debug"):
            if dump.get(k, "off") not in ON_OFF:
                raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, f"acl.json: {k} must be 'on' or 'off'")
        from pycann.profiler.dump import parse_steps

        try:
            parse_steps(dump.get("dump_step"))
        except ValueError as e:
            raise fault(C.ACL_ERROR_INVALID_DUMP_CONFIG, f"acl.json: {e}") from None
        cfg.dump = dump
    prof = raw.get("profiler")
    if prof is not None:
        if not isinstance(prof, dict):
            raise fault(C.ACL_ERROR_INVALID_PROFILING_CONFIG, "acl.json: 'profiler' must be an object")
        _warn_unknown(cfg, "profiler", prof, PROFILER_KEYS)
        if prof.get("switch", "off") not in ON_OFF:
            raise fault(C.ACL_ERROR_INVALID_PROFILING_CONFIG, "acl.json: profiler.switch must be 'on' or 'off'")
        if "output" in prof and not isinstance(prof["output"], str):
            raise fault(C.ACL_ERROR_INVALID_PROFILING_CONFIG,
                        f"acl.json: profiler.output must be a folder path (a string), not {prof['output']!r}")
        if prof.get("switch") == "on" and cfg.dump_enabled:
            warnings.warn("acl.json: dump and profiling are both on; dump skews the timings",
                          AclConfigWarning, stacklevel=3)
        cfg.profiler = prof
    return cfg
