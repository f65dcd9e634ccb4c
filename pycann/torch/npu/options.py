"""torch_npu's option switches: ``set_option``, ``set_aoe``, ``set_mm_bmm_format_nd``,
``set_sync_debug_mode`` (torch_npu / torch.cuda signatures and argument checks).

They are kept and returned by the getters (``get_option``, ``get_mm_bmm_format_nd``,
``get_sync_debug_mode``) and have no effect on how pycann computes: there is no CANN op compiler
to pass ACL options to, no AOE tuner and tensors are always ND. ``set_sync_debug_mode`` reports
the calls that would synchronize a device (warning or error, as torch.cuda), though every npu op
is synchronous here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

# torch_npu's checked compile options (npu_config._option_map): allowed values, a predicate, or None (any)
_OPTION_VALUES: dict[str, list[str] | Callable[[str], bool] | None] = {
    "ACL_PRECISION_MODE": ["allow_fp32_to_fp16", "must_keep_origin_dtype"],
    "ACL_OP_SELECT_IMPL_MODE": ["high_performance", "high_precision"],
    "ACL_AICORE_NUM": lambda v: v.isdigit() and 1 <= int(v) <= 32,
    "ACL_OPTYPELIST_FOR_IMPLMODE": None,
    "ACL_OP_DEBUG_LEVEL": ["0", "1", "2", "3", "4"],
    "ACL_DEBUG_DIR": None,
    "ACL_OP_COMPILER_CACHE_MODE": ["disable", "enable", "force"],
    "ACL_OP_COMPILER_CACHE_DIR": None,
}

_options: dict[str, str] = {}
_mm_bmm_nd = True
_aoe_path: str | None = None


def set_option(option: dict[str, Any]) -> None:
    """Keep ``option`` (a dict; values are stored as strings, as torch_npu does). The options
    torch_npu checks are checked the same way (ValueError for a value outside their set);
    ``MM_BMM_ND_ENABLE`` ("enable"/"disable") sets ``set_mm_bmm_format_nd``. No effect."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    if option.get("MM_BMM_ND_ENABLE") == "enable":
        set_mm_bmm_format_nd(True)
    elif option.get("MM_BMM_ND_ENABLE") == "disable":
        set_mm_bmm_format_nd(False)
    checked = {}
    for name, value in option.items():
        text = str(value)
        rule = _OPTION_VALUES.get(name)
        ok = rule is None or (rule(text) if callable(rule) else text in rule)
        if not ok:
            want = "an integer in [1, 32]" if callable(rule) else rule
            raise ValueError(f"value of {name} should be in {want} but got {value}")
        checked[name] = text
    option.update(checked)  # torch_npu writes the string values back into the caller's dict
    _options.update(checked)


def get_option(name: str) -> str | None:
    """The value ``set_option`` kept for ``name`` (None if never set). pycann's own accessor."""
    return _options.get(name)


def set_aoe(dump_path: str) -> None:
    """torch_npu's AOE (auto-tuning) switch: makes ``dump_path`` (as torch_npu does; ValueError
    if it cannot) and keeps it. pycann has no AOE tuner, so nothing is tuned or dumped there."""
    global _aoe_path
    if not os.path.exists(dump_path):
        try:
            os.makedirs(dump_path)
        except OSError:
            raise ValueError(f"the path of '{dump_path}' is invaild.") from None
    _aoe_path = os.fspath(dump_path)


def set_mm_bmm_format_nd(is_nd: bool = True) -> None:
    """Keep the flag (torch_npu: compute mm/bmm in ND format). npu tensors are always ND: no effect."""
    global _mm_bmm_nd
    _mm_bmm_nd = bool(is_nd)


def get_mm_bmm_format_nd() -> bool:
    """The flag ``set_mm_bmm_format_nd`` kept (default True, torch_npu's)."""
    return _mm_bmm_nd


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """torch.cuda's: "default"/0, "warn"/1, "error"/2 (RuntimeError for another string, as
    torch). With 1 / 2, a call on npu tensors that synchronizes on CUDA (``.item()``, ``.cpu()``,
    ``nonzero``, ...: ``_sync_debug.SYNCING``) warns "called a synchronizing NPU operation" (a
    UserWarning) / raises it (RuntimeError), as torch_npu and torch.cuda do; every npu op is
    synchronous here, so this reports what would stall a real device."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = modes[debug_mode]
    if isinstance(debug_mode, bool) or not isinstance(debug_mode, int):
        raise TypeError(f"set_sync_debug_mode: debug_mode must be an int or str, not {type(debug_mode).__name__}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode {debug_mode}, expected 0 (default), 1 (warn) or 2 (error)")
    from pycann.torch import _sync_debug

    _sync_debug.mode = debug_mode
    if debug_mode:
        _sync_debug.watch_setitem()


def get_sync_debug_mode() -> int:
    """The mode ``set_sync_debug_mode`` kept (0 by default)."""
    from pycann.torch import _sync_debug

    return _sync_debug.mode
