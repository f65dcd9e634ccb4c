"""torch_npu's ``torch_npu.npu_*`` names: the few pycann provides, and a clear error for the rest.

torch_npu exposes its NPU-specific operators as ``torch_npu.npu_<name>`` (fused attention, rotary
embeddings, format casts, ...). pycann provides only the format helpers below, which torch_npu code
calls all over (``x = torch_npu.npu_format_cast(x, 29)`` before a matmul, ``get_npu_format(x)`` in
checks): pycann's npu tensors are always in the plain ND / NCHW layout, so a format cast changes
nothing and returns the tensor, as torch_npu's does when the tensor already has the format. Any
other ``npu_*`` name raises an AttributeError saying that pycann does not provide it (the bare
"module 'torch_npu' has no attribute ..." read like a broken install); it stays an AttributeError,
so ``hasattr(torch_npu, "npu_fusion_attention")`` feature checks answer False and take their
fallback path. ``module_getattr`` is the ``__getattr__`` of ``pycann.torch`` and of pycann-run's
``torch_npu`` shim.
"""

from __future__ import annotations

from typing import NoReturn

import torch

# torch_npu's ``ACL_FORMAT_*`` values (torch_npu/csrc/core/npu/NPUFormat / acl_base.h aclFormat)
ACL_FORMATS: dict[int, str] = {
    -1: "UNDEFINED", 0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 12: "NC1HWC0_C04",
    16: "HWCN", 27: "NDHWC", 29: "FRACTAL_NZ", 30: "NCDHW", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D",
    35: "NC", 47: "NCL",
}
_PROVIDED = ("npu_format_cast", "npu_format_cast_", "get_npu_format")


def _check(op: str, t: object, fmt: object | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"torch_npu.{op}(): argument 'self' must be a Tensor, not {type(t).__name__}")
    if t.device.type != "npu":
        raise RuntimeError(f"torch_npu.{op}(): expected an npu tensor, got one on {t.device} "
                           "(move it with .npu() first, as torch_npu requires)")
    if fmt is not None and (isinstance(fmt, bool) or not isinstance(fmt, int) or fmt not in ACL_FORMATS):
        known = ", ".join(f"{k} ({v})" for k, v in ACL_FORMATS.items())
        raise ValueError(f"torch_npu.{op}(): acl_format {fmt!r} is not an ACL format; known: {known}")
    return t


def npu_format_cast(self: torch.Tensor, acl_format: int) -> torch.Tensor:
    """torch_npu's format cast: ``self`` itself (pycann keeps every npu tensor in ND / NCHW; torch_npu
    returns the tensor unchanged when it is in the format already). ``acl_format``: an ``ACL_FORMAT_*``
    value (2 ND, 0 NCHW, 29 FRACTAL_NZ, 3 NC1HWC0, ...); ValueError for another number."""
    return _check("npu_format_cast", self, acl_format)


def npu_format_cast_(self: torch.Tensor, src: torch.Tensor | int) -> torch.Tensor:
    """In-place form (``src``: a format number or a tensor whose format to take): ``self``, unchanged."""
    if isinstance(src, torch.Tensor):
        _check("npu_format_cast_", src)
        return _check("npu_format_cast_", self)
    return _check("npu_format_cast_", self, src)


def get_npu_format(self: torch.Tensor) -> int:
    """The ACL format torch_npu gives a tensor in its base layout: NCHW (0) for 4-D, NCDHW (30) for
    5-D, ND (2) otherwise; a ``npu_format_cast`` to another format does not change it here."""
    _check("get_npu_format", self)
    return {4: 0, 5: 30}.get(self.dim(), 2)


def module_getattr(name: str) -> NoReturn:
    """A module ``__getattr__`` (PEP 562): called only for names the module lacks."""
    if name.startswith("npu_"):
        raise AttributeError(
            f"torch_npu.{name} is not provided by pycann: pycann's torch_npu provides the npu device, "
            f"torch.npu and only these npu ops: {', '.join(_PROVIDED)} (docs/torch.md, \"torch_npu "
            "ops\"); use the plain PyTorch equivalent, or guard the call with hasattr(torch_npu, "
            f"{name!r})", name=name)
    raise AttributeError(f"module 'pycann.torch' (torch_npu under pycann-run) has no attribute {name!r}", name=name)
