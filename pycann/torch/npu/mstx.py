"""torch_npu's ``torch.npu.mstx`` markers (msTX): ``mark``, ``range_start`` / ``range_end``,
``mstx_range``.

Each is reported to pycann's profiler (``pycann.profiler.hooks.record_api``, track ``"mstx"``):
a mark as an instant, a range as a span from ``range_start`` to ``range_end``. With no profiler
collecting they are not stored anywhere (as msTX markers without a profiler).
"""

from __future__ import annotations

import itertools
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from pycann.profiler import hooks

_ids = itertools.count(1)
_open: dict[int, tuple[str, int]] = {}
_lock = threading.Lock()


class mstx:  # noqa: N801 - torch_npu's name
    """torch_npu's msTX marker API (static methods)."""

    @staticmethod
    def mark(message: str = "", stream: Any = None, domain: str = "default") -> None:
        """An instant marker ``message``."""
        t = time.perf_counter_ns()
        hooks.record_api(str(message), t, t, track="mstx", args={"domain": domain, "kind": "mark"})

    @staticmethod
    def range_start(message: str, stream: Any = None, domain: str = "default") -> int:
        """Open a range; returns its id (0, with a warning, for an empty message, as torch_npu)."""
        if not message:
            warnings.warn("Invalid message for mstx.range_start func. Please input valid message string.",
                          stacklevel=2)
            return 0
        with _lock:
            rid = next(_ids)
            _open[rid] = (str(message), time.perf_counter_ns())
        return rid

    @staticmethod
    def range_end(range_id: int, domain: str = "default") -> None:
        """Close the range ``range_id`` (a warning for an id ``range_start`` did not return)."""
        with _lock:
            entry = _open.pop(range_id, None) if isinstance(range_id, int) else None
        if entry is None:
            warnings.warn(f"mstx.range_end: {range_id!r} is not an open range id from mstx.range_start",
                          stacklevel=2)
            return
        hooks.record_api(entry[0], entry[1], time.perf_counter_ns(), track="mstx",
                         args={"domain": domain, "kind": "range", "id": range_id})

    @staticmethod
    def mstx_range(message: str, stream: Any = None, domain: str = "default") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: each call of the function is a range named ``message``."""
        def wrapper(func: Callable[..., Any]) -> Callable[..., Any]:
            def inner(*args: Any, **kwargs: Any) -> Any:
                rid = mstx.range_start(message, stream, domain)
                try:
                    return func(*args, **kwargs)
                finally:
                    if rid:
                        mstx.range_end(rid, domain)
            return inner
        return wrapper
