"""Runtime faults. Each class is one reason a runtime call can fail; ``pycann.acl`` maps them to
pyACL's ``aclError`` codes (cann-interfaces.md §1.8). The runtime itself knows no error numbers.
"""

from __future__ import annotations

from pycann.errors import PycannError


class RtError(PycannError):
    """Base class of runtime faults (bad pointers, handles, devices, memory, streams)."""


class InvalidPointer(RtError):
    """The pointer is 0 or lies in no allocation the runtime knows."""


class UseAfterFree(RtError):
    """The pointer lies in an allocation that was freed."""


class DoubleFree(RtError):
    """``free`` of an allocation that was already freed."""


class OutOfBounds(RtError):
    """A size exceeds the buffer (count > destMax, or past the end of the allocation)."""


class KindMismatch(RtError):
    """A pointer is of the wrong memory kind (host vs device) for the call or memcpy kind."""


class ReadOnly(RtError):
    """A write into a read-only host buffer (e.g. a ``bytes`` object)."""


class OutOfMemory(RtError):
    """The device's memory pool cannot satisfy the request."""


class InvalidDevice(RtError):
    """No such device id."""


class InvalidHandle(RtError):
    """A stream, event or context that does not exist or was destroyed."""


class NoContext(RtError):
    """The calling thread has no current context (call set_device or set_context first)."""


class NotReady(RtError):
    """An event was never recorded or has not completed (``event_elapsed_time``)."""


class WaitTimeout(RtError):
    """A synchronisation did not finish within its timeout."""


class WaitOnOwnWorker(RtError):
    """A stream task (a callback) waits for its own stream, or an event only its stream can reach:
    the stream's worker is busy running the task, so the wait could never end."""


class LostInFork(RtError):
    """A stream task that was queued or running when the process forked: the child never runs it."""


class TaskFailed(RtError):
    """A task queued on a stream raised; ``cause`` is the original exception."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
