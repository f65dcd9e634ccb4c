"""``torch.npu``: the device module of pycann's npu device (torch_npu's ``torch_npu.npu`` names).

Registered with ``torch._register_device_module("npu", ...)`` by ``pycann.torch``. The npu device
is pycann's CPU device: it is always available, needs no CANN and no NPU, and its memory is host
memory. ``PYCANN_DEVICE_COUNT`` (default 1, or torchrun's ``LOCAL_WORLD_SIZE``, as for pycann's runtime) sets ``device_count()``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pycann import config as _pycann_config
from pycann.torch.npu import amp
from pycann.torch.npu.allocator import (
    MemPool,
    NPUPluggableAllocator,
    caching_allocator_alloc,
    caching_allocator_delete,
    change_current_allocator,
    memory_snapshot,
    memory_stats_as_nested_dict,
    use_mem_pool,
)
from pycann.torch.npu.amp import (
    get_autocast_dtype,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from pycann.torch.npu.debug import (
    clear_npu_overflow_flag,
    finalize_dump,
    get_npu_overflow_flag,
    init_dump,
    is_support_inf_nan,
    npu_check_overflow,
    set_dump,
    stress_detect,
)
from pycann.torch.npu.graphs import (
    NPUGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from pycann.torch.npu.memory import (
    empty_cache,
    get_allocator_backend,
    get_per_process_memory_fraction,
    ipc_collect,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from pycann.torch.npu.mstx import mstx
from pycann.torch.npu.options import (
    get_mm_bmm_format_nd,
    get_sync_debug_mode,
    set_aoe,
    set_mm_bmm_format_nd,
    set_option,
    set_sync_debug_mode,
)
from pycann.torch.npu.random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from pycann.torch.npu.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from pycann.torch.npu.streams_ext import ExternalEvent, ExternalStream, SyncLaunchStream
from pycann.torch.npu.tensors import (
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)

__all__ = [
    "Event", "Stream", "StreamContext", "amp", "can_device_access_peer", "config", "current_device",
    "current_stream", "conv", "default_stream", "device", "device_count", "device_of", "empty_cache", "get_amp_supported_dtype",
    "get_device_capability", "get_device_name", "get_device_properties", "get_rng_state",
    "get_rng_state_all", "get_soc_version", "init", "initial_seed", "is_available", "is_bf16_supported",
    "is_initialized", "is_jit_compile_false", "manual_seed", "matmul", "manual_seed_all", "max_memory_allocated",
    "max_memory_cached", "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached",
    "memory_reserved", "memory_stats", "memory_summary", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_peak_memory_stats", "seed", "seed_all", "set_compile_mode",
    "set_device", "set_per_process_memory_fraction", "set_rng_state", "set_rng_state_all", "set_stream",
    "stream", "synchronize", "utilization",
    "get_autocast_dtype", "is_autocast_enabled", "set_autocast_dtype", "set_autocast_enabled",
    "get_allocator_backend", "get_per_process_memory_fraction", "ipc_collect", "is_current_stream_capturing",
    "reset_max_memory_cached",
    # streams_ext, options, debug, allocator, graphs, mstx, tensors
    "ExternalEvent", "ExternalStream", "SyncLaunchStream", "get_mm_bmm_format_nd", "get_sync_debug_mode",
    "set_aoe", "set_mm_bmm_format_nd", "set_option", "set_sync_debug_mode", "clear_npu_overflow_flag",
    "finalize_dump", "get_npu_overflow_flag", "init_dump", "is_support_inf_nan", "npu_check_overflow",
    "set_dump", "stress_detect", "MemPool", "NPUPluggableAllocator", "caching_allocator_alloc",
    "caching_allocator_delete", "change_current_allocator", "memory_snapshot", "memory_stats_as_nested_dict",
    "use_mem_pool", "NPUGraph", "graph", "graph_pool_handle", "make_graphed_callables", "mstx",
    "BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor", "HalfTensor",
    "IntTensor", "LongTensor", "ShortTensor",
]

_tls = threading.local()


def device_count() -> int:
    """Number of npu devices: ``PYCANN_DEVICE_COUNT``, else the launcher's ``LOCAL_WORLD_SIZE``,
    else 1 (``pycann.config.device_count``)."""
    from pycann import config

    return config.device_count()


def is_available() -> bool:
    """Always True: the npu device is pycann's CPU device."""
    return True


_initialized = True
"""As ``torch.cuda._initialized``: ``torch.utils.checkpoint`` saves and restores the device's RNG
state only when its module says it is initialized (without it, a checkpointed dropout drew a new
mask when recomputed in backward: wrong gradients)."""


def is_initialized() -> bool:
    """True (nothing to initialise lazily)."""
    return True


def init() -> None:
    """Nothing to do (kept for torch_npu code that calls it)."""


def _is_in_bad_fork() -> bool:
    return False


def current_device() -> int:
    """The index set by ``set_device`` for this thread (0 by default)."""
    return int(getattr(_tls, "index", 0))


def _device_index(device: int | str | torch.device | None, optional: bool = True) -> int:
    """The index ``device`` names (None / "npu" / npu device without index: the current one).
    Raises ``ValueError`` for a non-npu device or an index outside 0..device_count()-1."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"expected an npu device, got {device}")
        idx = current_device() if device.index is None else device.index
    else:
        idx = int(device)
    if not 0 <= idx < device_count():
        raise ValueError(f"npu device {idx} does not exist: there are {device_count()} npu device(s) "
                         "(set PYCANN_DEVICE_COUNT for more)")
    return idx


def _set_index(idx: int) -> None:
    if idx:
        from pycann.torch import _current_device  # "npu" means npu:idx from now on (its module doc)

        _current_device.install()
    _tls.index = idx


def set_device(device: int | str | torch.device) -> None:
    """Make ``device`` this thread's current npu device: ``"npu"`` without an index (``t.to("npu")``,
    ``torch.zeros(..., device="npu")``) then names it, as ``"cuda"`` names CUDA's current device."""
    _set_index(_device_index(device))


class device:  # noqa: N801 - torch.cuda.device's name and shape
    """``with torch.npu.device(i):`` makes npu ``i`` current inside the block. A class, as
    ``torch.cuda.device`` is: PyTorch code tests ``isinstance(x, torch.cuda.device)`` (its
    ``_get_device_index``, reached by ``torch.load(map_location="cuda:0")`` after the CUDA
    migration), and ``idx`` is the index (-1 for None)."""

    def __init__(self, device: int | str | torch.device | None) -> None:
        self.idx = -1 if device is None else _device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = current_device()
        if self.idx >= 0:
            _set_index(self.idx)

    def __exit__(self, *exc: object) -> None:
        _tls.index = self.prev_idx


@contextlib.contextmanager
def device_of(obj: torch.Tensor) -> Iterator[None]:
    """``device(obj.device)`` for an npu tensor, no change otherwise."""
    with device(obj.device.index if obj.device.type == "npu" else None):
        yield


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Wait for all npu work: returns at once (eager npu ops are synchronous)."""
    _device_index(device)


def get_soc_version() -> str:
    """The SoC pycann models (``PYCANN_SOC_VERSION``, default pycann's)."""
    from pycann.runtime.device import DEFAULT_SOC

    return _pycann_config.soc_version(DEFAULT_SOC)


def get_device_name(device: int | str | torch.device | None = None) -> str:
    """The SoC name, as torch_npu reports it (e.g. "Ascend310P3")."""
    _device_index(device)
    return get_soc_version()


@dataclass(frozen=True)
class _DeviceProperties:
    """torch_npu's ``_NPUDeviceProperties`` fields (name, total_memory, cube_core_num,
    vector_core_num, L2_cache_size) plus the ones PyTorch's device-generic code reads from
    ``torch.cuda.get_device_properties`` (``nn.DataParallel``'s balance check reads
    ``total_memory`` and ``multi_processor_count``; Inductor and libraries read ``major`` /
    ``minor``), so that code runs unchanged after ``transfer_to_npu``."""

    name: str
    total_memory: int
    cube_core_num: int = 0
    vector_core_num: int = 0
    L2_cache_size: int = 0  # bytes
    multi_processor_count: int = 1  # the SoC's AI Cores (cube cores): what runs an op's blocks, as SMs do
    major: int = 0  # no CUDA compute capability (get_device_capability() is None, as in torch_npu)
    minor: int = 0


def get_device_properties(device: int | str | torch.device | None = None) -> _DeviceProperties:
    """The npu device's properties: the configured SoC's name and core counts (``pycann.ascendc.soc``;
    a SoC pycann has no spec for reports the host's CPU count as its cores), its L2 size
    (``pycann.costmodel.socs``, 0 when unknown) and the host RAM as ``total_memory``."""
    import os

    from pycann.ascendc.soc import SOCS
    from pycann.costmodel.socs import COST_SOCS
    from pycann.runtime.memory import physical_memory

    name = get_device_name(device)
    spec = SOCS.get(name)
    cost = COST_SOCS.get(name)
    cube = spec.aic_num if spec is not None else (os.cpu_count() or 1)
    vector = spec.aiv_num if spec is not None else cube
    l2 = cost.l2_mib << 20 if cost is not None else 0
    return _DeviceProperties(name, physical_memory(), cube_core_num=cube, vector_core_num=vector,
                             L2_cache_size=l2, multi_processor_count=cube)


def get_device_capability(device: int | str | torch.device | None = None) -> Any:
    """None, as torch_npu returns (no CUDA compute capability)."""
    _device_index(device)
    return None


def can_device_access_peer(device: int, peer_device: int) -> bool:
    """True: all npu devices share host memory."""
    _device_index(device)
    _device_index(peer_device)
    return True


def utilization(device: int | str | torch.device | None = None) -> int:
    """0 (no busy-ness to sample on a synchronous device)."""
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the SoC this session models (``get_soc_version()``: ``PYCANN_SOC_VERSION``, default
    Ascend310P3) has bfloat16, as torch_npu answers for the real chip: True on Atlas A2/A3
    (Ascend910B*, Ascend910_93*), 310B and pycann's own ``CPU`` target, False on Ascend310P3 and
    Ascend910A, where ``atc`` refuses the bf16 precision modes too (the same table:
    ``pycann.ge.compile.precision_config``). torch's CPU kernels would compute bfloat16 on any SoC, but
    code that picks bf16 by this answer should pick what the modelled chip can run.
    ``including_emulation`` (``torch.cuda.is_bf16_supported``'s, reached after ``transfer_to_npu``)
    changes nothing: there is no emulation to include."""
    from pycann.ge.compile.precision_config import _BF16_SOC_PREFIXES

    return get_soc_version().startswith(_BF16_SOC_PREFIXES)


def set_compile_mode(jit_compile: bool = True) -> None:
    """torch_npu's switch between online operator compilation (``jit_compile=True``) and CANN's
    precompiled binary kernels, which most Ascend training scripts set to False first thing. Nothing
    is compiled per operator here; the choice is kept for ``is_jit_compile_false``."""
    _compile_mode["jit_compile"] = bool(jit_compile)


def is_jit_compile_false() -> bool:
    """True after ``set_compile_mode(jit_compile=False)``."""
    return not _compile_mode["jit_compile"]


_compile_mode: dict[str, bool] = {"jit_compile": True}


class _HF32Switch:
    """torch_npu's ``torch.npu.matmul`` / ``torch.npu.conv``: ``allow_hf32`` lets CANN compute
    float32 matmuls / convolutions in HF32. Training scripts set it first thing
    (``torch.npu.matmul.allow_hf32 = True``); pycann computes float32 in float32, so the value is
    kept and changes nothing. Other attributes are refused, as torch_npu's ``Unknown attribute``."""

    __slots__ = ("_what", "allow_hf32")

    def __init__(self, what: str, default: bool) -> None:
        self._what = what
        self.allow_hf32 = default

    def __repr__(self) -> str:
        return f"torch.npu.{self._what}(allow_hf32={self.allow_hf32})"


matmul = _HF32Switch("matmul", False)  # (torch_npu's defaults: matmul off, conv on)
conv = _HF32Switch("conv", True)


class _NpuConfig:
    """torch_npu's ``torch.npu.config``: ``allow_internal_format`` lets CANN keep tensors in its private
    formats (NC1HWC0, FRACTAL_NZ) between ops; scripts set it (``torch.npu.config.allow_internal_format =
    False``) to keep ND. pycann's npu tensors are always ND, so the value is kept and changes nothing.
    Other attributes are refused (this was pycann's own config module, which took any attribute)."""

    __slots__ = ("allow_internal_format",)

    def __init__(self) -> None:
        self.allow_internal_format = False

    def __repr__(self) -> str:
        return f"torch.npu.config(allow_internal_format={self.allow_internal_format})"


config = _NpuConfig()


def get_amp_supported_dtype() -> list[torch.dtype]:
    """dtypes ``torch.autocast("npu")`` may cast to (PyTorch asks the device module)."""
    return [torch.float16, torch.bfloat16]


def _get_device_index(device: Any, optional: bool = False) -> int:
    return _device_index(device)
