"""Events: markers recorded on streams (cann-interfaces.md §1.3 ``record_event``,
``stream_wait_event``, ``event_elapsed_time``).

``record(stream)`` queues a marker task; the event completes when the stream reaches it, and
the time the marker ran is the event's timestamp, so ``elapsed_ms`` measures real wall time
between two points of stream execution.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pycann.runtime.errors import InvalidHandle, NotReady, WaitTimeout
from pycann.runtime.memory import renewed_in_child
from pycann.runtime.stream import Stream, Task

if TYPE_CHECKING:
    from pycann.runtime.device import Context


def _noop() -> None:
    return None


class Event:
    """A recordable stream marker. ``flags`` is kept as given (``ACL_EVENT_*``). ``context``: the
    context it was created in (``Runtime.new_event``); once that is destroyed the event is unusable
    (``InvalidHandle``) but for ``destroy``, as the context's streams are."""

    def __init__(self, flags: int = 0, context: Context | None = None) -> None:
        self.flags = flags
        self.context = context
        self.marker: Task | None = None
        self.destroyed = False
        self._lock = threading.Lock()
        renewed_in_child(self)

    def _check(self) -> None:
        if self.destroyed:
            raise InvalidHandle("the event was destroyed")
        if self.context is not None and self.context.destroyed:
            raise InvalidHandle("the event's context was destroyed (destroy_context, or reset_device for a device's "
                                "default context): destroy the event and create one in a live context")

    def check(self) -> Event:
        """This event, if usable. Raises ``InvalidHandle`` (destroyed, or its context destroyed)."""
        self._check()
        return self

    def record(self, stream: Stream) -> None:
        """Queue a marker on ``stream``; the event completes when the stream reaches it."""
        self._check()
        task = stream.submit(_noop, "record_event")
        with self._lock:
            self.marker = task

    def reset(self) -> None:
        """Forget the latest record (the event counts as complete again)."""
        self._check()
        with self._lock:
            self.marker = None

    def query(self) -> bool:
        """True if never recorded or its latest record has run."""
        self._check()
        m = self.marker
        return m is None or m.done.is_set()

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until the latest record has run. Raises ``WaitTimeout``."""
        self._check()
        m = self.marker
        if m is not None and not m.done.is_set() and m.stream is not None:
            m.stream.refuse_on_worker("waiting for an event recorded behind the calling task")
        if m is not None and not m.done.wait(timeout):
            raise WaitTimeout(f"the event did not complete within {timeout} s")

    @property
    def timestamp(self) -> float:
        """``time.perf_counter()`` when the latest record ran. Raises ``NotReady``."""
        self._check()
        m = self.marker
        if m is None:
            raise NotReady("the event was never recorded")
        if not m.done.is_set():
            raise NotReady("the event has not completed yet; synchronize the stream or event first")
        return m.end

    def destroy(self) -> None:
        """Release the event (also once its context is destroyed). Raises ``InvalidHandle`` the second time."""
        if self.destroyed:
            raise InvalidHandle("the event was destroyed")
        self.destroyed = True


def elapsed_ms(start: Event, end: Event) -> float:
    """Milliseconds between two completed events. Raises ``NotReady``."""
    return (end.timestamp - start.timestamp) * 1e3
