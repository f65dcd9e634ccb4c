"""What the twin reports: a rule broken, where (the kernel's file:line), by which API, on which core.

The rule codes follow CANN's CPU "npu check" classes (ErrorRead/ErrorWrite/ErrorSync/ErrorLeak/
ErrorFree/ErrorBuffer, ascendc-davinci.md 1.18) plus the API-parameter checks of its api_check
mode and the cross-core GM-write check.
"""

from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass

from pycann.errors import KernelError

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class Rule(enum.Enum):
    """A check of the twin; ``value`` is (code, npu-check class, one-line meaning)."""

    CAPACITY = ("capacity", "ErrorBuffer", "buffers exceed the position's on-chip capacity")
    ALIGN_ADDR = ("align-addr", "ErrorRead4/ErrorWrite4", "on-chip address not aligned")
    ALIGN_LEN = ("align-len", "api_check", "DataCopy length not a multiple of 32 bytes (device rounds down)")
    ALIGN_GM = ("align-gm", "api_check", "GM address not aligned to sizeof(T)")
    READ_UNINIT = ("read-uninit", "ErrorRead2", "read of never-written data")
    USE_FREED = ("use-freed", "ErrorRead1/ErrorWrite1", "use of a freed or unallocated buffer")
    OUT_OF_BOUNDS = ("out-of-bounds", "ErrorRead3/ErrorWrite2", "access past a tensor's bounds")
    DEQUE_EMPTY = ("deque-empty", "ErrorBuffer2", "DeQue on a queue with nothing EnQue'd (hangs on device)")
    DOUBLE_FREE = ("double-free", "ErrorFree", "FreeTensor on a buffer already free")
    LEAK = ("leak", "ErrorLeak", "tensor allocated and never freed at kernel end")
    DEPTH_EXCEEDED = ("depth-exceeded", "ErrorBuffer2", "more EnQue than the queue depth without DeQue")
    ALLOC_EXHAUSTED = ("alloc-exhausted", "ErrorBuffer2", "AllocTensor with every buffer in use (hangs on device)")
    WRONG_POSITION = ("wrong-position", "ErrorBuffer1", "tensor used at a position or queue it does not belong to")
    NO_INIT_BUFFER = ("no-init-buffer", "ErrorBuffer0", "queue or buffer used before InitBuffer")
    MISSING_SYNC = ("missing-sync", "ErrorSync1", "data crosses pipes without SetFlag/WaitFlag or a queue")
    UNPAIRED_FLAG = ("unpaired-flag", "ErrorSync2", "SetFlag without a matching WaitFlag")
    DEADLOCK = ("deadlock", "ErrorSync2", "WaitFlag on an event no earlier SetFlag sets (hangs on device)")
    DUPLICATE_EVENT = ("duplicate-event", "ErrorSync3", "SetFlag twice on one event id before its WaitFlag")
    EVENT_ID_LIMIT = ("event-id-limit", "ErrorSync4", "event id or buffer count past the SoC's hardware events")
    CROSS_CORE_OVERLAP = ("cross-core-overlap", "npu check (GM)", "two cores write the same GM bytes without atomics")
    UNSUPPORTED = ("unsupported", "api_check", "instruction, dtype or pipe the SoC / kernel mode lacks")
    BAD_PARAM = ("bad-param", "api_check", "parameter outside the API's range")

    @property
    def code(self) -> str:
        return self.value[0]


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One report: ``where`` is 'path/to/kernel.py:LINE' of the kernel statement that broke ``rule``."""

    rule: Rule
    api: str
    where: str
    core: int
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        return f"{self.where}: [core {self.core}] {self.api}: {self.rule.code}: {self.message}"


class KernelCheckError(KernelError):
    """The twin found rule violations; ``findings`` lists them (first per rule and place)."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        lines = [str(f) for f in findings[:20]]
        more = f"\n... and {len(findings) - 20} more" if len(findings) > 20 else ""
        super().__init__(f"Ascend C twin: {len(findings)} check(s) failed:\n" + "\n".join(lines) + more)


class KernelAbort(Exception):
    """Raised inside a core when the device would hang or fault; the twin stops that core."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(str(finding))
        self.finding = finding


# the kit's own modules (not its samples/, whose lines are kernel code)
_SKIP = frozenset({_PKG_DIR, os.path.join(_PKG_DIR, "opdev")})


_IS_KIT: dict[str, bool] = {}  # co_filename -> whether it is one of the kit's modules


def _is_kit(filename: str) -> bool:
    v = _IS_KIT.get(filename)
    if v is None:
        v = _IS_KIT[filename] = os.path.dirname(os.path.abspath(filename)) in _SKIP
    return v


def user_location() -> str:
    """file:line of the innermost frame outside the kit's modules (the kernel statement)."""
    f = sys._getframe(1)
    while f is not None and _is_kit(f.f_code.co_filename):
        f = f.f_back  # type: ignore[assignment]
    if f is None:
        return "<unknown>:0"
    return f"{f.f_code.co_filename}:{f.f_lineno}"
