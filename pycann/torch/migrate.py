"""CUDA -> npu migration (torch_npu's ``transfer_to_npu``), with the traps handled.

``apply()`` patches, once per process:

* ``torch.cuda.<name>`` -> ``torch.npu.<name>`` for every name of ``torch.npu.__all__``
  (``is_available``, ``device_count``, ``Stream``, ``Event``, memory, RNG, ...), ``torch.cuda.random.<name>``
  -> the npu RNG functions, and
  ``torch.cuda.amp.autocast`` / ``GradScaler`` / ``custom_fwd`` / ``custom_bwd`` -> the npu ones;
* device arguments: a ``"cuda"`` / ``"cuda:N"`` string, a ``torch.device("cuda", N)`` and a bare
  integer device (``.to(0)``, ``.cuda(1)``) become ``npu:N`` in the tensor
  factories (``torch.zeros(..., device=...)`` ...), ``Tensor.to / cuda / new_*`` and
  ``Module.to / cuda``; ``Tensor.is_cuda`` is true for npu tensors;
* ``torch.nn.parallel.DistributedDataParallel``'s ``device_ids`` / ``output_device``;
* ``torch.distributed.init_process_group`` / ``new_group``: backend ``"nccl"`` -> ``"hccl"``
  (also inside ``"cpu:gloo,cuda:nccl"``), importing ``pycann.hccl`` when it provides the backend;
* ``torch.autocast("cuda")`` / ``torch.amp.autocast("cuda")`` -> ``"npu"``.

Unlike torch_npu, ``torch.jit.script`` is left working: ``torch.device`` stays PyTorch's own
type and the mapping happens where a device is *used* (``.to``, factories, ``.cuda``), so
``torch.device("cuda:1")`` is a plain device object until a tensor goes there (then ``npu:1``).
Inside TorchScript the Python wrappers do not run: a scripted function that itself names
``"cuda"`` is not remapped (docs/torch.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import torch

_applied = False
_CUDA = re.compile(r"^cuda(?=$|:)")


def map_device(d: Any) -> Any:
    """``"cuda[:N]"`` / ``torch.device("cuda", N)`` -> the npu device; other values unchanged."""
    if isinstance(d, str) and _CUDA.match(d):
        return torch.device(_CUDA.sub("npu", d))
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("npu", d.index) if d.index is not None else torch.device("npu")
    return d


def map_backend(backend: Any) -> Any:
    """``"nccl"`` -> ``"hccl"``, ``"cpu:gloo,cuda:nccl"`` -> ``"cpu:gloo,npu:hccl"``."""
    if not isinstance(backend, str):
        return backend
    if backend.lower() == "nccl":
        return "hccl"
    pairs = [p.split(":", 1) if ":" in p else ["", p] for p in backend.split(",")]
    out = []
    for dev, name in pairs:
        dev = "npu" if dev == "cuda" else dev
        name = "hccl" if name.lower() == "nccl" else name
        out.append(f"{dev}:{name}" if dev else name)
    return ",".join(out)


def _device_kw(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapper


def _to_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``.to(...)``'s arguments with cuda devices and bare integer devices mapped to npu."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, bool):
            out.append(a)
        elif isinstance(a, int):
            out.append(torch.device("npu", a))
        else:
            out.append(map_device(a))
    if "device" in kwargs:
        d = kwargs["device"]
        kwargs["device"] = torch.device("npu", d) if isinstance(d, int) and not isinstance(d, bool) else map_device(d)
    return tuple(out), kwargs


def _wrap_to(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _to_args(args, kwargs)
        return fn(self, *args, **kwargs)

    return to


def _npu() -> Any:
    from pycann.torch import npu

    return npu


def _cuda_as_npu(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("npu", device)
    dev = map_device(device) if device is not None else torch.device("npu", _npu().current_device())
    if isinstance(self, torch.nn.Module):
        return self.to(dev)
    return self.to(dev, non_blocking=non_blocking, **kwargs)


def _storage_cuda_as_npu(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    """``UntypedStorage.cuda(device)`` (``torch.load``'s ``map_location=lambda s, l: s.cuda()``,
    TypedStorage's ``.cuda``): a copy on the npu device the cuda one maps to."""
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("npu", device)
    return self.npu(map_device(device) if device is not None else None, non_blocking)


_FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "tril_indices", "triu_indices",
    "scalar_tensor", "normal",
)
_NEW = ("new_tensor", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided")


def _patch_cuda_module() -> None:
    from pycann.torch import npu

    for name in npu.__all__:
        if name != "amp":
            setattr(torch.cuda, name, getattr(npu, name))
    torch.cuda.current_device = npu.current_device  # type: ignore[assignment]
    torch.cuda._lazy_init = lambda: None  # type: ignore[attr-defined]
    import torch.cuda.amp as cuda_amp

    cuda_amp.autocast = npu.amp.autocast  # type: ignore[misc, assignment]
    cuda_amp.GradScaler = npu.amp.GradScaler  # type: ignore[misc, assignment]
    cuda_amp.custom_fwd = npu.amp.custom_fwd  # type: ignore[assignment]
    cuda_amp.custom_bwd = npu.amp.custom_bwd  # type: ignore[assignment]
    import torch.cuda.random as cuda_random

    for name in cuda_random.__all__:  # torch.cuda.random.manual_seed & co. (torch_npu patches the module too)
        setattr(cuda_random, name, getattr(npu, name))


def _patch_autocast() -> None:
    orig_init = torch.amp.autocast_mode.autocast.__init__

    def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        orig_init(self, "npu" if device_type == "cuda" else device_type, *args, **kwargs)

    torch.amp.autocast_mode.autocast.__init__ = __init__  # type: ignore[method-assign]
    orig_scaler = torch.amp.GradScaler.__init__

    def scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        orig_scaler(self, "npu" if device == "cuda" else device, *args, **kwargs)

    torch.amp.GradScaler.__init__ = scaler_init  # type: ignore[method-assign]


def _patch_distributed() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    try:  # pycann.hccl (another part of pycann) registers the "hccl" backend when present
        import pycann.hccl  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    for name in ("init_process_group", "new_group"):
        orig = getattr(dist, name)

        def wrapper(*args: Any, __orig: Callable[..., Any] = orig, __name: str = name, **kwargs: Any) -> Any:
            if args and __name == "init_process_group":
                args = (map_backend(args[0]),) + args[1:]
            if "backend" in kwargs:
                kwargs["backend"] = map_backend(kwargs["backend"])
            return __orig(*args, **kwargs)

        setattr(dist, name, functools.wraps(orig)(wrapper))
    ddp = torch.nn.parallel.DistributedDataParallel
    orig_init = ddp.__init__

    def ddp_init(self: Any, module: Any, device_ids: Any = None, output_device: Any = None,
                 *args: Any, **kwargs: Any) -> None:
        if device_ids is not None:
            device_ids = [map_device(d) for d in device_ids]
        output_device = map_device(output_device)
        orig_init(self, module, device_ids, output_device, *args, **kwargs)

    ddp.__init__ = ddp_init  # type: ignore[method-assign]


def _patch_data_parallel() -> None:
    """``nn.DataParallel`` asks ``torch._utils._get_available_device_type()``, which says "cuda" once
    ``torch.cuda.is_available`` is the npu's: its module would then live on "cuda:0" (the npu after
    ``.to``) and forward refused its own npu parameters. Its module's copy of the function names the
    npu instead, as torch_npu's migration does for DataParallel."""
    import importlib

    # (the module: ``torch.nn.parallel.data_parallel`` as an attribute is the function of that name)
    data_parallel: Any = importlib.import_module("torch.nn.parallel.data_parallel")
    orig = data_parallel._get_available_device_type

    def device_type() -> Any:
        t = orig()
        return "npu" if t == "cuda" else t

    data_parallel._get_available_device_type = device_type


def apply() -> None:
    """Apply the migration (idempotent)."""
    global _applied
    if _applied:
        return
    import pycann.torch  # noqa: F401 - the npu device must exist

    _patch_cuda_module()
    for name in _FACTORIES:
        if hasattr(torch, name):
            setattr(torch, name, _device_kw(getattr(torch, name)))
    for name in _NEW:
        setattr(torch.Tensor, name, _device_kw(getattr(torch.Tensor, name)))
    torch.Tensor.to = _wrap_to(torch.Tensor.to)  # type: ignore[method-assign]
    torch.nn.Module.to = _wrap_to(torch.nn.Module.to)  # type: ignore[method-assign]
    torch.Tensor.cuda = _cuda_as_npu  # type: ignore[method-assign, assignment]
    torch.UntypedStorage.cuda = _storage_cuda_as_npu  # type: ignore[method-assign, assignment]
    storage_to = torch.storage._to  # type: ignore[attr-defined]
    # ``storage.to(device="cuda:0")``: torch.load's restore for a "cuda" map_location
    torch.storage._to = lambda self, device, non_blocking=False: storage_to(  # type: ignore[attr-defined]
        self, map_device(device), non_blocking)
    torch.nn.Module.cuda = _cuda_as_npu  # type: ignore[method-assign, assignment]
    torch.Tensor.is_cuda = property(lambda self: self.device.type in ("npu", "cuda"))  # type: ignore[assignment, method-assign]
    _patch_autocast()
    _patch_distributed()
    _patch_data_parallel()
    _applied = True
