"""torch.npu.ExternalStream / ExternalEvent / SyncLaunchStream (torch_npu's and torch.cuda's shapes).

npu ops run synchronously on the calling thread (see ``streams``), so a stream made elsewhere
(an ``acl.rt.create_stream`` handle, another library's stream pointer) orders nothing more than
pycann's own streams do: these wrap the handle, keep it (``stream_ptr`` / ``event_ptr``) and
behave as ``Stream`` / ``Event``. pycann does not dereference the handle.
"""

from __future__ import annotations

import torch

from pycann.torch.npu.streams import Event, Stream


def _handle(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"torch.npu.{what}: the handle must be an int (a stream/event pointer), "
                        f"not {type(value).__name__}")
    return value


class ExternalStream(Stream):
    """``ExternalStream(stream_ptr, device=None)``: a stream allocated outside torch (its handle,
    an int, is kept as ``stream_ptr``). Work on it is complete when each call returns, as on any
    npu stream."""

    def __init__(self, stream_ptr: int, device: int | str | torch.device | None = None) -> None:
        super().__init__(device)
        self.stream_ptr = _handle(stream_ptr, "ExternalStream")

    def __repr__(self) -> str:
        return f"<torch.npu.ExternalStream device=npu:{self.device_index} stream_ptr={self.stream_ptr:#x}>"


class SyncLaunchStream(Stream):
    """``SyncLaunchStream(device=None, priority=0)``: torch_npu's stream that launches each task
    synchronously (no task queue). Every pycann npu stream launches synchronously, so this is a
    ``Stream`` with ``is_sync_launch`` True."""

    is_sync_launch = True

    def __repr__(self) -> str:
        return f"<torch.npu.SyncLaunchStream device=npu:{self.device_index} priority={self.priority}>"


class ExternalEvent(Event):
    """``ExternalEvent(event_ptr)``: an event created outside torch (its handle, an int, is kept as
    ``event_ptr``). ``record`` stamps the host clock as ``Event.record`` does; ``elapsed_time``
    needs timing like any event, so an external event gives no timings."""

    def __init__(self, event_ptr: int) -> None:
        super().__init__()
        self.event_ptr = _handle(event_ptr, "ExternalEvent")

    def __repr__(self) -> str:
        return f"<torch.npu.ExternalEvent event_ptr={self.event_ptr:#x}>"
