"""``param.data = tensor`` between the npu and the CPU, as between CUDA and the CPU.

``Tensor.data``'s setter (``set_data``) asks ``aten::_has_compatible_shallow_copy_type``, whose ATen
kernel grants a swap between dense CPU/CUDA/XPU/... tensors but not PrivateUse1 ones, so
``p.data = p.cpu()`` on an npu parameter (or ``p.data = p.npu()`` on a CPU one) raised "Attempted to
call `variable.set_data(tensor)`, but `variable` and `tensor` have incompatible tensor type": FSDP's
``CPUOffload(offload_params=True)`` failed in its constructor, and so did user code that moves
weights that way. An npu tensor is a dense strided tensor over host memory, exactly what ATen's
shallow copy handles for CUDA, so this kernel (PrivateUse1 wins the dispatch when either argument
is an npu tensor) grants cpu <-> npu and npu <-> npu pairs of the same layout.
"""

from __future__ import annotations

import torch

_libraries: list[torch.library.Library] = []


def _compatible(self: torch.Tensor, from_: torch.Tensor) -> bool:
    devices = {self.device.type, from_.device.type}
    return devices <= {"cpu", "npu"} and self.layout == from_.layout == torch.strided


def install() -> None:
    """Register the PrivateUse1 kernel (once)."""
    if _libraries:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_has_compatible_shallow_copy_type", _compatible, "PrivateUse1")
    _libraries.append(lib)
