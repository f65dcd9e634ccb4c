"""torch_npu's debugging functions: ``init_dump`` / ``set_dump`` / ``finalize_dump``, the overflow
flag (``get_npu_overflow_flag``, ``clear_npu_overflow_flag``, ``npu_check_overflow``,
``is_support_inf_nan``) and ``stress_detect``.

* Dump: ``set_dump(cfg_file)`` reads an acl.json dump config (``{"dump": {"dump_path": ...,
  "dump_list": [...], "dump_mode": ..., "dump_step": ...}}``) and starts pycann's tensor dump
  (``pycann.profiler.dump``, the dump acl.json enables): it writes the tensors of the nodes of
  the models pycann runs as graphs (acl / GE models, ``InferSession``) as .npy files plus
  ``dump_index.csv``. Eager npu ops are not graph nodes and are not dumped. ``finalize_dump``
  closes the dumpers; ``init_dump`` arms the switch (``set_dump`` works without it, as torch_npu's).
* Overflow: pycann computes IEEE floats (an overflow is inf, an invalid op NaN), which is
  torch_npu's INF_NAN mode of Ascend910B and later: there is no saturation-mode float status
  register, and torch_npu raises for the register functions in that mode. So do these, with
  torch_npu's message; ``npu_check_overflow(grad)`` (its replacement) works.
* ``stress_detect``: there is no NPU hardware to stress-test; it raises ``RuntimeError``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

_armed = False
_dumpers: list[Any] = []


def init_dump() -> None:
    """Arm the dump switch (torch_npu's ``mdldumpswitch``); the dump starts with ``set_dump``."""
    global _armed
    _armed = True


def set_dump(cfg_file: str) -> None:
    """Start pycann's tensor dump from the acl.json-style file ``cfg_file``. Raises
    ``AssertionError`` for a missing file (torch_npu's check) and ``ValueError`` when its
    ``"dump"`` block has no ``dump_path`` or no ``dump_list``."""
    from pycann.profiler import dump

    if not os.path.exists(cfg_file):
        raise AssertionError(f"cfg_file {cfg_file} path does not exists.")
    with open(cfg_file, encoding="utf-8") as f:
        cfg = json.load(f)
    d = dump.configure_from_acl_json(cfg)
    if d is None:
        raise ValueError(f"set_dump: {cfg_file} has no dump config: it needs a \"dump\" block with "
                         "\"dump_path\" and \"dump_list\" (e.g. {\"dump\": {\"dump_path\": \"out\", "
                         "\"dump_list\": []}})")
    _dumpers.append(d)


def finalize_dump() -> None:
    """Stop the dumps ``set_dump`` started and close their ``dump_index.csv``."""
    global _armed
    while _dumpers:
        d = _dumpers.pop()
        d.close()
        from pycann.profiler import dump

        if d in dump._ACTIVE:
            dump._ACTIVE.remove(d)
    _armed = False


def dump_folders() -> list[str]:
    """The ``<dump_path>/<time>`` folders of the dumps ``set_dump`` started and not finalized
    (pycann's own accessor)."""
    return [d.root for d in _dumpers]


_INF_NAN_MESSAGE = "Unsupport api when soc_version >= Ascend910B1, please use npu_check_overflow"


def is_support_inf_nan() -> bool:
    """True: pycann computes IEEE inf / NaN (torch_npu's INF_NAN mode)."""
    return True


def get_npu_overflow_flag() -> bool:
    """torch_npu raises this in INF_NAN mode, pycann's only mode (there is no float status
    register to read): ``RuntimeError`` with torch_npu's message. Use ``npu_check_overflow``."""
    raise RuntimeError(_INF_NAN_MESSAGE + " (pycann computes IEEE inf/NaN and keeps no float status register)")


def clear_npu_overflow_flag() -> None:
    """As ``get_npu_overflow_flag``: raises ``RuntimeError`` (no float status register)."""
    raise RuntimeError(_INF_NAN_MESSAGE + " (pycann computes IEEE inf/NaN and keeps no float status register)")


def npu_check_overflow(grad: torch.Tensor | float) -> bool:
    """Whether ``grad`` (a tensor or float) sums to inf, -inf or NaN (torch_npu's INF_NAN check)."""
    if isinstance(grad, float):
        total = grad
    elif isinstance(grad, torch.Tensor):
        total = float(grad.float().sum())
    else:
        raise RuntimeError("Unsupport type.")
    return total in (float("inf"), -float("inf")) or total != total


def stress_detect(*args: Any, **kwargs: Any) -> int:
    """torch_npu's hardware stress test of the NPU's AI cores: pycann has no NPU hardware to test,
    so this raises ``RuntimeError`` rather than report a result it did not measure."""
    raise RuntimeError("torch.npu.stress_detect: pycann's npu device is the host CPU; there is no NPU "
                       "hardware to stress-test")
