"""The CPU twin's launcher: ICPU_RUN_KF, SetKernelMode, run_kernel (reference 1.18).

A launch runs the kernel function once per block (core), in block order, each with fresh
on-chip memories; GM buffers are shared. After each core the end-of-kernel checks run (leaked
tensors, unpaired SetFlag); a core whose device twin would hang or fault stops at that point and
the others still run. ``ICPU_RUN_KF`` raises ``KernelCheckError`` when any error was found.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pycann.ascendc import core as _core
from pycann.ascendc import pipe as _pipe
from pycann.ascendc import sync as _sync
from pycann.ascendc.diagnostics import Finding, KernelAbort, KernelCheckError, Rule, Severity
from pycann.ascendc.enums import KernelMode
from pycann.ascendc.gm import GmAddr
from pycann.ascendc.soc import get_soc
from pycann.ascendc.trace import TraceHook

DEFAULT_SOC = "Ascend910B1"
_MODE: list[KernelMode] = [KernelMode.AIV_MODE]
_TILING_KEY: list[int | None] = [None]


def SetKernelMode(mode: KernelMode) -> None:
    """Which core type the next launches simulate (AIV_MODE: vector, AIC_MODE: cube, MIX_MODE: both)."""
    if not isinstance(mode, KernelMode):
        raise TypeError(f"SetKernelMode expects a KernelMode, got {mode!r}")
    _MODE[0] = mode


def ICPU_SET_TILING_KEY(key: int) -> None:
    """The TilingKey the next launch's kernel sees through ``TILING_KEY_IS``."""
    _TILING_KEY[0] = int(key)


def TILING_KEY_IS(key: int) -> bool:
    """Inside a kernel: whether the launch's tiling key is ``key``."""
    return _TILING_KEY[0] == int(key)


class Kernel:
    """A kernel function (``extern "C" __global__ __aicore__``): callable only through a launch."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        self.name = fn.__name__
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> None:
        if _core._CURRENT.get() is None:
            raise RuntimeError(f"kernel {self.name} runs on the twin's cores: call "
                               f"AscendC.ICPU_RUN_KF({self.name}, blockDim, *args)")
        self.fn(*args)


def kernel(fn: Callable[..., None]) -> Kernel:
    """Decorator marking a kernel function (the Python stand-in for ``__global__ __aicore__``)."""
    return Kernel(fn)


@dataclass
class TwinResult:
    """What a launch found: every finding, and the cores that stopped early."""

    soc: str
    block_dim: int
    findings: list[Finding] = field(default_factory=list)
    aborted_cores: list[int] = field(default_factory=list)
    logs: dict[int, list[str]] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def rules(self) -> set[Rule]:
        return {f.rule for f in self.findings}


def _one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """The twin is single-threaded: its many small Mmad products thrash a multi-threaded BLAS pool."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional (the 'kernels' extra); results are identical without it
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def run_kernel(fn: Kernel | Callable[..., None], block_dim: int, args: tuple[Any, ...] = (),
               soc_version: str = DEFAULT_SOC, mode: KernelMode | None = None,
               trace: TraceHook | None = None) -> TwinResult:
    """Run ``fn(*args)`` on ``block_dim`` simulated cores of ``soc_version`` and return the findings."""
    soc = get_soc(soc_version)
    if not 1 <= int(block_dim) <= 65535:
        raise ValueError(f"blockDim {block_dim} outside [1, 65535]")
    run = _core.RunState(soc, int(block_dim), mode if mode is not None else _MODE[0], trace=trace)
    for a in args:
        if isinstance(a, GmAddr):
            if a.buf.freed:
                raise ValueError(f"kernel argument {a!r} was GmFree'd")
            a.buf.writer[:] = -1
    body = fn.fn if isinstance(fn, Kernel) else fn
    result = TwinResult(soc.name, run.block_dim)
    with _one_blas_thread():
        _run_cores(run, body, args, result)
    result.findings = run.findings
    return result


def _run_cores(run: _core.RunState, body: Callable[..., None], args: tuple[Any, ...], result: TwinResult) -> None:
    for i in range(run.block_dim):
        c = _core.CoreState(run, i)
        tok = _core.enter(c)
        try:
            body(*args)
            _pipe.end_of_core_checks(c)
            _sync.end_of_core_checks(c)
        except KernelAbort:
            result.aborted_cores.append(i)
        finally:
            _core.leave(tok)
        if c.log:
            result.logs[i] = c.log


def ICPU_RUN_KF(fn: Kernel | Callable[..., None], blockDim: int, *args: Any,
                soc_version: str = DEFAULT_SOC, trace: TraceHook | None = None) -> TwinResult:
    """CANN's CPU-debug launch: run the kernel, print warnings, raise ``KernelCheckError`` on errors."""
    res = run_kernel(fn, blockDim, args, soc_version=soc_version, trace=trace)
    for f in res.findings:
        if f.severity == Severity.WARNING:
            print(f"[ascendc twin] warning: {f}", file=sys.stderr)
    if res.errors:
        raise KernelCheckError(res.errors)
    return res


def printf(fmt: str, *args: Any) -> None:
    """``AscendC::printf`` / ``PRINTF``: C-style format, printed with the core index."""
    c = _core.current()
    text = (fmt % args) if args else fmt
    line = f"[core {c.idx}] {text}"
    c.log.append(line)
    print(line, end="" if text.endswith("\n") else "\n")


PRINTF = printf


def DumpTensor(tensor: Any, desc: int, dumpSize: int) -> None:
    """``DumpTensor``: print the first ``dumpSize`` elements of a LocalTensor with the core index."""
    vals = tensor.view(0, min(int(dumpSize), tensor.size))
    printf("DumpTensor desc=%d %s %s", desc, tensor, vals)
