"""torch_npu's debugging functions: ``init_dump`` / ``set_dump`` / ``finalize_dump``, the overflow
flag (``get_npu_overflow_flag``, ``clear_npu_overflow_flag``, ``npu_check_overflow``,
``is_support_inf_nan``) and ``stress_detect``.

* Dump: ``set_dump(cfg_file)`` reads an acl.json dump config (``{"dump": {"dump_path": ...,
  "dump_list": [...], "dump_op_switch": "on", "dump_mode": ..., "dump_step": ...}}``) and starts
  pycann's tensor dump (``pycann.profiler.dump``, the dump acl.json enables), which writes .npy
  files plus ``dump_index.csv``: with ``dump_list``, the nodes of the models pycann runs as graphs
  (acl / GE models, ``InferSession``); with ``"dump_op_switch": "on"`` (CANN's single-op dump),
  also every eager ATen op with an npu tensor that the calling thread runs (a ``TorchDispatchMode``,
  model name ``npu_eager``; ``dump_step`` does not apply to them). ``finalize_dump`` stops and
  closes the dumps; ``init_dump`` arms the switch (``set_dump`` works without it, as torch_npu's).
* Overflow: pycann computes IEEE floats (an overflow is inf, an invalid op NaN), whatever
  ``PYCANN_SOC_VERSION`` says, which is torch_npu's INF_NAN mode of Ascend910B and later: there is no saturation-mode float status
  register, and torch_npu raises for the register functions in that mode. So do these, with
  torch_npu's message; ``npu_check_overflow(grad)`` (its replacement) works.
* ``stress_detect``: there is no NPU hardware to stress-test; it raises ``RuntimeError``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_armed = False
_dumpers: list[tuple[Any, Any]] = []  # (TensorDump, the eager-op dispatch mode or None)


class _EagerDump(TorchDispatchMode):
    """Writes each ATen op with an npu tensor among its arguments or results to ``dumper``
    (its ``dump_mode``: inputs, outputs or both), as ``<dump>/0/npu_eager/0/0/<op>.<op>_<n>.<io>.<i>.npy``
    with a ``dump_index.csv`` row each (model ``npu_eager``). Tensors numpy has no dtype for (bfloat16, float8) are skipped."""

    def __init__(self, dumper: Any) -> None:
        super().__init__()
        self.dumper = dumper
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if func.namespace == "aten" and any(t.device.type == "npu" for t in ins + outs):
            self._write(str(func), ins, outs)
        return out

    def _write(self, op: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        from types import SimpleNamespace

        d = self.dumper
        self.count += 1
        node = SimpleNamespace(name=f"{op}_{self.count}", op_type=op, origin=(),
                               inputs=[f"input{i}" for i in range(len(ins))],
                               outputs=[f"output{i}" for i in range(len(outs))])
        rel_dir = os.path.join("0", "npu_eager", "0", "0")
        with d._lock:
            os.makedirs(os.path.join(d.root, rel_dir), exist_ok=True)
            if d.mode in ("input", "all"):
                d._save(rel_dir, "npu_eager", 0, 0, node, "input", node.inputs, [_host(t) for t in ins])
            if d.mode in ("output", "all"):
                d._save(rel_dir, "npu_eager", 0, 0, node, "output", node.outputs, [_host(t) for t in outs])
            d._index_f.flush()


def _host(t: torch.Tensor) -> Any:
    try:
        return t.detach().cpu().resolve_conj().resolve_neg().numpy()
    except TypeError:  # no numpy dtype (bfloat16, float8, ...): not dumped
        return None


def init_dump() -> None:
    """Arm the dump switch (torch_npu's ``mdldumpswitch``); the dump starts with ``set_dump``."""
    global _armed
    _armed = True


def set_dump(cfg_file: str) -> None:
    """Start pycann's tensor dump from the acl.json-style file ``cfg_file``: with ``dump_list``,
    the nodes of graph models; with ``"dump_op_switch": "on"``, the eager npu ops this thread runs.
    Raises ``AssertionError`` for a missing file (torch_npu's check) and ``ValueError`` when the
    ``"dump"`` block has no ``dump_path`` or neither ``dump_list`` nor ``dump_op_switch: on``."""
    from pycann.profiler import dump

    if not os.path.exists(cfg_file):
        raise AssertionError(f"cfg_file {cfg_file} path does not exists.")
    with open(cfg_file, encoding="utf-8") as f:
        cfg = json.load(f)
    block = cfg.get("dump", cfg) if isinstance(cfg, dict) else None
    eager = isinstance(block, dict) and bool(block.get("dump_path")) and block.get("dump_op_switch") == "on"
    d = dump.configure_from_acl_json(cfg)
    if d is None and eager:
        assert isinstance(block, dict)
        d = dump.TensorDump(block["dump_path"], None, str(block.get("dump_mode", "output")), block.get("dump_step"))
    if d is None:
        raise ValueError(f"set_dump: {cfg_file} has no dump config: it needs a \"dump\" block with \"dump_path\" "
                         "and \"dump_list\" (graph models' nodes) or \"dump_op_switch\": \"on\" (eager npu ops), "
                         "e.g. {\"dump\": {\"dump_path\": \"out\", \"dump_list\": [], \"dump_op_switch\": \"on\"}}")
    mode = None
    if eager:
        mode = _EagerDump(d)
        mode.__enter__()
    _dumpers.append((d, mode))


def finalize_dump() -> None:
    """Stop the dumps ``set_dump`` started and close their ``dump_index.csv``."""
    global _armed
    from pycann.profiler import dump

    while _dumpers:
        d, mode = _dumpers.pop()
        if mode is not None:
            mode.__exit__(None, None, None)
        d.close()
        if d in dump._ACTIVE:
            dump._ACTIVE.remove(d)
    _armed = False


def dump_folders() -> list[str]:
    """The ``<dump_path>/<time>`` folders of the dumps ``set_dump`` started and not finalized
    (pycann's own accessor)."""
    return [d.root for d, _ in _dumpers]


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
