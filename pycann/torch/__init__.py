"""pycann's PyTorch adaptor: an ``npu`` device in PyTorch backed by pycann's CPU device.

``import pycann.torch`` (or ``import torch_npu`` under ``pycann-run``) registers the device through
PyTorch's out-of-tree mechanism, in pure Python:

* PrivateUse1 renamed ``npu`` (``torch.utils.rename_privateuse1_backend``), ``Tensor.npu()`` /
  ``is_npu`` and ``Module.npu()`` (``generate_methods_for_privateuse1_backend``), the device
  module ``torch.npu`` (``pycann.torch.npu``), and PyTorch's Python PrivateUse1 hooks and device
  guard (``torch._C._acc``, what ``torch.utils.backend_registration`` uses for Python backends);
* one boxed kernel for every ATen op on the npu (``_dispatch``; providers in ``optable``, CPU
  fallback warnings and the per-op report in ``fallback``);
* npu memory is host memory: npu tensors are views of host buffers (``_alias``), so moving a
  tensor between cpu and npu is a memcpy and a kernel reads the buffer in place.

``report()`` returns the per-op counts (``Report.format()`` prints them); ``torch.compile(model,
backend="npu")`` lowers FX graphs to GE (``pycann.torch.compile``; registered lazily).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from pycann import config as _config

# torch's bundled libgomp reads OMP_WAIT_POLICY once, when ``import torch`` loads it: set pycann's
# policy (PYCANN_OMP_WAIT_POLICY: brief spin then sleep by default) first. With libgomp's default (long spin) the
# pool's workers spin after each parallel region, and on a busy host they take the cores from the
# thread with work: torch.compile's GE plans ran 4x slower than ONNX Runtime beside one busy
# process, 0.4-1x with the passive policy (docs/torch.md). ``pycann-run`` sets it before the app
# starts; an app that imports torch before pycann.torch keeps torch's policy (OMP_POLICY_LATE).
_user_omp = _config.user_omp_wait_policy()
_torch_first = "torch" in sys.modules
OMP_POLICY_LATE: bool = _torch_first and not _user_omp and _config.apply_omp_wait_policy() is not None
"""True when torch (and its OpenMP runtime) was imported before pycann.torch could set the policy."""
if not _torch_first:
    _config.apply_omp_wait_policy()

import torch  # noqa: E402

from pycann.torch import (  # noqa: E402
    _accelerator,
    _autocast,
    _autograd,
    _ddp,
    _dispatch,
    _module_apply,
    _set_data,
    fallback,
)
from pycann.torch import npu as npu  # noqa: E402
from pycann.torch._npu_ops import get_npu_format, npu_format_cast, npu_format_cast_  # noqa: E402
from pycann.torch._npu_ops import module_getattr as __getattr__  # noqa: E402,F401 - other npu_* names: a clear error
from pycann.torch.fallback import FallbackDisabledError, Report, report, reset, warning_text  # noqa: E402
from pycann.torch.optable import Provider  # noqa: E402

__all__ = ["FallbackDisabledError", "Provider", "Report", "get_npu_format", "npu", "npu_format_cast",
           "npu_format_cast_", "report", "reset", "warning_text"]

BACKEND = "npu"


class _Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):  # type: ignore[misc]
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def _storage_to(orig: Any) -> Any:
    """``torch.storage``'s ``_to`` with npu targets allocated by the npu kernels: PyTorch's
    version calls ``torch.UntypedStorage(n, device=...)``, which needs a C++ allocator for the
    device (pycann registers none: memory comes from npu ops, see ``_alias``)."""

    def _to(self: Any, device: Any, non_blocking: bool = False) -> Any:
        device = torch.device(device)
        if device.type == BACKEND and self.device != device:
            dst = torch.empty(self.nbytes(), dtype=torch.uint8, device=device).untyped_storage()
            dst.copy_(self, non_blocking)
            return dst
        return orig(self, device, non_blocking)

    return _to


def _storage_clone(orig: Any) -> Any:
    """``UntypedStorage.clone`` (what ``copy.deepcopy`` of a tensor or module calls) with an npu
    storage's copy allocated by the npu kernels: PyTorch's version calls
    ``type(self)(n, device=...)``, which without a C++ allocator for the device crashed the
    process (segmentation fault)."""

    def clone(self: Any) -> Any:
        if self.device.type == BACKEND:
            dst = torch.empty(self.nbytes(), dtype=torch.uint8, device=self.device).untyped_storage()
            dst.copy_(self)
            return dst
        return orig(self)

    return clone


def _storage_new(orig: Any) -> Any:
    """``torch.UntypedStorage(n, device="npu")`` (and TypedStorage's, which builds one) made by
    the npu kernels: the C constructor needs a C++ allocator for the device, and without one it
    crashed the process (segmentation fault). Other devices and forms go to the constructor."""

    def __new__(cls: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == BACKEND:
            if len(args) > 1 or set(kwargs) - {"device"} or (args and not isinstance(args[0], int)):
                raise TypeError("pycann npu storages are made from a byte count: "
                                "torch.UntypedStorage(nbytes, device='npu'); copy other data with .npu()")
            nbytes = int(args[0]) if args else 0
            return torch.empty(nbytes, dtype=torch.uint8, device=device).untyped_storage()
        return orig(cls, *args, **kwargs)

    return __new__


def _storage_npu(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
    """``UntypedStorage.npu(device=None)``: a copy on the npu (``self`` if already there)."""
    index = npu._device_index(device)
    return self.to(device=torch.device(BACKEND, index), non_blocking=non_blocking)


def _pin_memory(orig: Any) -> Any:
    """``Tensor.pin_memory`` for the npu: pinned (page-locked) memory exists so that a device
    can DMA from host memory; pycann's npu computes *in* host memory, so "pinning" for it is a
    copy into a fresh host buffer (what pin_memory returns for any accelerator: a new tensor),
    which ``is_pinned()`` then reports as pinned (``_pinned``)."""
    from pycann.torch import _pinned

    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        if device is None or torch.device(device).type == BACKEND:
            return _pinned.pin(self)
        return orig(self, device)

    return pin_memory


def _record_stream(orig: Any) -> Any:
    """``Tensor.record_stream(stream)`` for npu tensors: a no-op, as the caching allocator's
    cross-stream bookkeeping has nothing to do here (npu ops are synchronous and an npu tensor's
    memory goes when its last tensor dies). It raised: "unknown parameter type" for a
    ``torch.npu.Stream`` (the data-prefetcher pattern ``x.record_stream(torch.npu.current_stream())``)
    and "Could not run 'aten::record_stream' ... 'CPU' backend" for a ``torch.Stream``."""

    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if self.device.type != BACKEND:
            return orig(self, stream)
        if not isinstance(stream, (npu.Stream, torch.Stream)):
            raise TypeError(f"record_stream(): argument 's' must be a Stream, not {type(stream).__name__}")
        return None

    return record_stream


def _register() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if name == BACKEND and hasattr(torch, BACKEND) and getattr(torch.Tensor, "is_npu", None) is not None:
        return  # registered already (e.g. imported under two names)
    if name != "privateuseone" and name != BACKEND:
        raise RuntimeError(f"pycann.torch: PyTorch's PrivateUse1 backend is already named {name!r} by another "
                           "extension; pycann's npu device cannot be registered beside it")
    if name != BACKEND:
        torch.utils.rename_privateuse1_backend(BACKEND)
    torch._register_device_module(BACKEND, npu)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False)
    # PyTorch's generated storage methods allocate through a C++ allocator pycann does not
    # register; these go through the npu kernels instead
    torch.UntypedStorage.npu = _storage_npu  # type: ignore[attr-defined]
    torch.UntypedStorage.is_npu = property(lambda self: self.device.type == BACKEND)  # type: ignore[attr-defined]
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _dispatch.install()
    _autocast.install()
    _autograd.install()
    _ddp.install()  # (after _autograd: wraps its engine entry)
    _set_data.install()
    _module_apply.install()
    _accelerator.install()
    from pycann.torch import _parallel_comm

    _parallel_comm.install()  # nn.DataParallel's scatter / gather on the npu
    from pycann.torch import _transformer

    _transformer.install()  # nn.TransformerEncoder without its NestedTensor path on the npu
    torch.storage._to = _storage_to(torch.storage._to)  # type: ignore[attr-defined]
    torch.UntypedStorage.clone = _storage_clone(torch.UntypedStorage.clone)  # type: ignore[method-assign]
    torch.UntypedStorage.__new__ = staticmethod(_storage_new(torch.UntypedStorage.__new__))  # type: ignore[assignment]
    torch.Tensor.pin_memory = _pin_memory(torch.Tensor.pin_memory)  # type: ignore[method-assign]
    from pycann.torch import _pinned

    torch.Tensor.is_pinned = _pinned.wrap_is_pinned(torch.Tensor.is_pinned)  # type: ignore[method-assign]
    torch.Tensor.record_stream = _record_stream(torch.Tensor.record_stream)  # type: ignore[method-assign]
    if npu.device_count() > 1:  # "npu" names the current device (torch.npu.set_device): _current_device
        from pycann.torch import _current_device

        _current_device.install()
    from pycann.torch import compile as _compile
    from pycann.torch_vision_hook import ensure_torchvision_importable

    _compile.register()
    # mse_loss & co. reach the npu as their .out overload with a result ATen itself made of shape
    # []; the CPU kernel then warns about resizing it (torch's deprecation, raised after the
    # kernel returns, so it is filtered where torch.nn.functional calls the op)
    warnings.filterwarnings("ignore", message="An output with one or more elements was resized",
                            module="torch.nn.functional")
    ensure_torchvision_importable()
    _register_hccl()


def _register_hccl() -> None:
    """As ``import torch_npu`` does, make the ``hccl`` backend of torch.distributed known when
    pycann's HCCL (``pycann.hccl``) is installed, and give it zero-copy host views of npu
    tensors (npu memory is host memory)."""
    try:
        import pycann.hccl as hccl  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return
    register_view = getattr(hccl, "register_host_view", None)
    if register_view is not None:
        register_view(BACKEND, _host_view)


def _host_view(t: torch.Tensor) -> torch.Tensor | None:
    """A CPU tensor over a contiguous npu tensor's memory (None otherwise: hccl copies)."""
    from pycann.torch._alias import to_cpu

    return to_cpu(t) if t.is_contiguous() else None


_register()
del fallback

from pycann import config as _config  # noqa: E402 - after the registration above, as the rest of the tail

if _config.transfer_to_npu():
    from pycann.torch import migrate as _migrate

    _migrate.apply()
