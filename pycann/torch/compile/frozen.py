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


def _host(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself on the CPU, a CPU view of its memory on npu (``_alias.to_cpu``)."""
    if t.device.type == "cpu":
        return t
    from pycann.torch._alias import to_cpu

    return to_cpu(t)


class FrozenWeights:
    """The identity, in-place version counter and storage of each static (lifted) input.

    ``args``: the example inputs the plan was lowered from; ``static``: which of them are lifted
    parameters/buffers. A tensor counts as unchanged when it is the same Python object (held by
    weak reference, so a freed parameter whose id is reused is not mistaken for it), its
    ``_version`` (bumped by every in-place write, ``copy_``, ``load_state_dict``, optimizer
    steps) is the same, and its ``data_ptr()`` is the same (``p.data = t`` swaps storage without
    bumping the version). Cost: three attribute reads per static tensor per call (ResNet-50: 268
    tensors, ~30 us measured).

    ``by_value``: static inputs also compared by their bytes each call (a snapshot). Why: a
    train-mode BatchNorm forward on CPU or npu tensors updates ``running_mean`` / ``running_var`` inside
    ATen's kernel without bumping their ``_version``, so an eval call after it gave the old
    statistics' answer. These are small (a value per channel)."""

    def __init__(self, args: Sequence[Any], static: Sequence[bool], by_value: Sequence[bool] = ()) -> None:
        self.index = [i for i, s in enumerate(static) if s]
        # byte views of their storage (a swapped storage fails the data_ptr check first; bytes for
        # any dtype, bfloat16 included; ``by_value`` tensors are contiguous CPU or npu tensors)
        self._views = [_host(args[i].detach()).reshape(-1).view(torch.uint8).numpy()
                       for i in self.index if i < len(by_value) and by_value[i]]
        self._snapshot = self._bytes()
        self._refs: list[weakref.ref[torch.Tensor]] = []
        self._versions: list[int] = []
        self._ptrs: list[int] = []
        for i in self.index:
            t = args[i]
            self._refs.append(weakref.ref(t))
            self._versions.append(t._version)
            self._ptrs.append(t.data_ptr())

    def still_hold(self, args: Sequence[Any]) -> bool:
        """True when every static input of this call is the tensor, version and storage the plan
        was built from."""
        for k, i in enumerate(self.index):
            t: torch.Tensor = args[i]
            if self._refs[k]() is not args[i] or t._version != self._versions[k] or t.data_ptr() != self._ptrs[k]:
                return False
        return self._snapshot is None or self._bytes() == self._snapshot

    def _bytes(self) -> bytes | None:
        """The ``by_value`` inputs' bytes now (bytes, so a NaN statistic compares equal; ~30 us for
        ResNet-50's 106 statistics)."""
        if not self._views:
            return None
        return np.concatenate(self._views).tobytes()
