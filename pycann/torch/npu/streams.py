"""torch.npu.Stream / Event (torch.cuda's shapes, torch_npu's names).

npu ops run synchronously on the calling thread (the CPU device computes as it is called), so
work on any stream is complete when the call returns: ``query`` is True, ``synchronize`` and
``wait_*`` order nothing that is not already ordered. An ``Event`` records the host clock when
it is recorded; ``elapsed_time`` is the time between two records in milliseconds (torch's unit),
which is the time the work between them took.
"""

from __future__ import annotations

import time

import torch


class Stream:
    """An npu stream: ``Stream(device=None, priority=0)``."""

    def __init__(self, device: int | str | torch.device | None = None, priority: int = 0) -> None:
        from pycann.torch.npu import _device_index

        self.device_index = _device_index(device)
        self.priority = int(priority)

    @property
    def device(self) -> torch.device:
        return torch.device("npu", self.device_index)

    def wait_event(self, event: Event) -> None:
        """Make later work wait for ``event`` (already complete: eager ops are synchronous)."""
        event.synchronize()

    def wait_stream(self, stream: Stream) -> None:
        """Make later work wait for ``stream``'s work so far (complete already)."""
        stream.synchronize()

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream; returns it."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """Whether all work is done: always True (synchronous execution)."""
        return True

    def synchronize(self) -> None:
        """Wait for the stream's work: returns at once (synchronous execution)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other is self

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:{self.device_index} priority={self.priority}>"


class Event:
    """An npu event: ``Event(enable_timing=False, blocking=False, interprocess=False)``."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        if interprocess:
            raise NotImplementedError("torch.npu.Event(interprocess=True): pycann's npu device has no IPC; "
                                      "share tensors with torch.multiprocessing instead")
        self._t: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (the current stream if None)."""
        self._t = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` wait for the event (complete already)."""

    def query(self) -> bool:
        """Whether the recorded work is complete: True (synchronous execution)."""
        return True

    def synchronize(self) -> None:
        """Wait for the event: returns at once."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s. Raises ``RuntimeError`` if
        either was created without ``enable_timing=True`` or not recorded (torch's rules)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1e3

    def ipc_handle(self) -> bytes:
        """Not supported (no IPC): raises ``NotImplementedError``."""
        raise NotImplementedError("torch.npu.Event.ipc_handle: pycann's npu device has no IPC")

    def __repr__(self) -> str:
        return f"<torch.npu.Event timing={self.enable_timing} recorded={self._t is not None}>"


_default: dict[int, Stream] = {}
_current: dict[int, Stream] = {}


def default_stream(device: int | str | torch.device | None = None) -> Stream:
    """The default stream of ``device``."""
    from pycann.torch.npu import _device_index

    i = _device_index(device)
    s = _default.get(i)
    if s is None:
        s = _default.setdefault(i, Stream(i))
    return s


def current_stream(device: int | str | torch.device | None = None) -> Stream:
    """The stream set by ``set_stream`` / ``stream(...)``, else the default stream."""
    from pycann.torch.npu import _device_index

    i = _device_index(device)
    return _current.get(i) or default_stream(i)


def set_stream(stream: Stream) -> None:
    """Make ``stream`` current on its device."""
    _current[stream.device_index] = stream


class StreamContext:
    """``with torch.npu.StreamContext(s):`` makes ``s`` current inside the block (None: no change).

    A class, as ``torch.cuda.StreamContext`` is: after the CUDA migration ``torch.cuda.StreamContext``
    is this, and Dynamo tests ``isinstance(value, torch.cuda.StreamContext)`` while tracing (a
    function there failed every ``torch.compile`` of a module with a TypeError)."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self._prev: Stream | None = None

    def __enter__(self) -> Stream | None:
        s = self.stream
        if s is not None:
            self._prev = _current.get(s.device_index)
            _current[s.device_index] = s
        return s

    def __exit__(self, *exc: object) -> None:
        s = self.stream
        if s is None:
            return
        if self._prev is None:
            _current.pop(s.device_index, None)
        else:
            _current[s.device_index] = self._prev


def stream(s: Stream | None) -> StreamContext:
    """``with torch.npu.stream(s):`` makes ``s`` current inside the block (None: no change)."""
    return StreamContext(s)
