"""Which parameter/buffer values an inference GE plan was built with, and whether they still hold.

Why: the npu backend embeds the parameters and buffers Dynamo lifts into graph inputs as ONNX
initializers, so GE's fusions (conv+bn folding, packed weights) see constants. Dynamo guards those
inputs by metadata only, so after ``m.weight = nn.Parameter(...)``, ``load_state_dict`` or an
optimizer step under ``no_grad`` the same compiled frame is called with new values. Eager
PyTorch and Inductor compute with the new values; a plan with the old constants would silently
give another answer. The plan's caller checks ``FrozenWeights.still_hold`` per call and re-lowers
when it is False.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


class FrozenWeights:
    """The identity, in-place version counter and storage of each static (lifted) input.

    ``args``: the example inputs the plan was lowered from; ``static``: which of them are lifted
    parameters/buffers. A tensor counts as unchanged when it is the same Python object (each is
    held by a weak reference whose callback marks these weights stale when it dies, so a freed
    parameter whose id is reused is not mistaken for it), its ``_version`` (bumped by every
    in-place write, ``copy_``, ``load_state_dict``, optimizer steps) is the same, and its
    ``data_ptr()`` is the same (``p.data = t`` swaps storage without bumping the version). Cost:
    one comprehension over the static tensors per call, ~0.2 ms for ResNet-50's 268 after a plan
    run has cooled the caches (reading each version counter is half of it; ~0.28 ms before, with a
    weakref call per tensor and the statistics' bytes).

    ``by_value``: the BatchNorm running statistics, which a train-mode forward updates inside
    ATen's kernel without bumping their ``_version``, so an eval call after it gave the old
    statistics' answer. CPU ones are compared by their bytes each call (a snapshot, a value per
    channel); npu ones by the count of train-mode batch norms run on the npu
    (``_pycann_ops.stat_writes``: every such forward reaches the npu kernel), which costs nothing
    per call (their bytes were ~100 us for ResNet-50's 106)."""

    def __init__(self, args: Sequence[Any], static: Sequence[bool], by_value: Sequence[bool] = ()) -> None:
        from pycann.torch import _pycann_ops

        self.index = [i for i, s in enumerate(static) if s]
        picked = [i for i in self.index if i < len(by_value) and by_value[i]]
        # byte views of the CPU statistics' storage (a swapped storage fails the data_ptr check
        # first; bytes for any dtype, bfloat16 included; ``by_value`` tensors are contiguous)
        self._views = [args[i].detach().reshape(-1).view(torch.uint8).numpy()
                       for i in picked if args[i].device.type == "cpu"]
        self._snapshot = self._bytes()
        self._stat_writes = _pycann_ops.stat_writes
        self._npu_stats = any(args[i].device.type != "cpu" for i in picked)
        self._writes_seen = self._stat_writes[0]
        self._epoch = _pycann_ops.epoch
        self._epoch_seen = self._epoch[0]
        self._dead = [False]
        dead = self._dead

        def died(_: Any) -> None:
            dead[0] = True

        self._refs = [weakref.ref(args[i], died) for i in self.index]
        self._state = self._now(args)

    def _now(self, args: Sequence[Any]) -> list[tuple[int, int, int]]:
        return [(id(t), t._version, t.data_ptr()) for t in map(args.__getitem__, self.index)]

    def still_hold(self, args: Sequence[Any]) -> bool:
        """True when every static input of this call is the tensor, version and storage the plan
        was built from."""
        if self._dead[0] or self._epoch[0] != self._epoch_seen or self._now(args) != self._state:
            return False
        if self._npu_stats and self._stat_writes[0] != self._writes_seen:
            return False
        return self._snapshot is None or self._bytes() == self._snapshot

    def _bytes(self) -> bytes | None:
        """The CPU ``by_value`` inputs' bytes now (bytes, so a NaN statistic compares equal)."""
        if not self._views:
            return None
        return np.concatenate(self._views).tobytes()
