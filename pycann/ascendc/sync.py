"""SetFlag/WaitFlag/PipeBarrier: synchronisation between a core's pipes (reference 1.13, 3.10).

``SetFlag(HardEvent.MTE2_V, id)`` is Ascend C's ``SetFlag<HardEvent::MTE2_V>(id)``: it fires when
all earlier MTE2 work is done; ``WaitFlag`` stalls PIPE_V until then and clears the flag. The
twin executes in program order, so it tracks, per (source, destination) pipe pair, how much of
the source's work the destination has waited for (``CoreState.horizon``).
"""

from __future__ import annotations

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule, user_location
from pycann.ascendc.dtypes import ElemType, elem
from pycann.ascendc.enums import HardEvent, Pipe


def _check(c: _core.CoreState, event: HardEvent, eid: int, api: str) -> None:
    if not isinstance(event, HardEvent):
        raise TypeError(f"{api}: expected a HardEvent (e.g. AscendC.HardEvent.MTE2_V), got {event!r}")
    if not 0 <= int(eid) < c.soc.event_ids:
        c.report(Rule.EVENT_ID_LIMIT, api, f"event id {eid} outside [0, {c.soc.event_ids}) of {c.soc.name}",
                 abort=True)
    for p in event.pipes:
        c.check_pipe(p, f"{api}<{event.name}>")


def SetFlag(event: HardEvent, eventId: int = 0) -> None:
    """``SetFlag<event>(eventId)``."""
    c = _core.current()
    _check(c, event, eventId, "SetFlag")
    key = (event, int(eventId))
    if key in c.flags:
        c.report(Rule.DUPLICATE_EVENT, "SetFlag", f"{event.name} event {eventId} set again before its "
                 f"WaitFlag (first set at {c.flags[key][1]})")
    src, _dst = event.pipes
    seq = c.issue(src, "SetFlag", None, params=(("event_id", int(eventId)), ("src", int(src)), ("dst", int(_dst))))
    c.flags[key] = (seq, user_location())


def WaitFlag(event: HardEvent, eventId: int = 0) -> None:
    """``WaitFlag<event>(eventId)``; a flag nobody set is a deadlock (the device hangs)."""
    c = _core.current()
    _check(c, event, eventId, "WaitFlag")
    key = (event, int(eventId))
    got = c.flags.pop(key, None)
    if got is None:
        c.report(Rule.DEADLOCK, "WaitFlag", f"{event.pipes[1].name} waits on {event.name} event {eventId} "
                 f"that no earlier SetFlag<{event.name}>({eventId}) sets: the pipe hangs", abort=True)
        return
    src, dst = event.pipes
    c.issue(dst, "WaitFlag", None, params=(("event_id", int(eventId)), ("src", int(src)), ("dst", int(dst))))
    if c.horizon[int(src), int(dst)] < got[0]:
        c.horizon[int(src), int(dst)] = got[0]


def PipeBarrier(pipe: Pipe) -> None:
    """``PipeBarrier<pipe>()``: orders one pipe; ``PIPE_ALL`` waits for every pipe."""
    c = _core.current()
    if pipe == Pipe.PIPE_S:
        c.report(Rule.BAD_PARAM, "PipeBarrier", "PipeBarrier<PIPE_S> is not allowed (scalar code is in order)")
    seq = c.issue(pipe, "PipeBarrier", None)
    if pipe == Pipe.PIPE_ALL:
        c.horizon[:, :] = seq


def end_of_core_checks(c: _core.CoreState) -> None:
    """Every SetFlag must have been waited on."""
    for (event, eid), (_seq, where) in c.flags.items():
        c.report(Rule.UNPAIRED_FLAG, "SetFlag", f"{event.name} event {eid} set but never waited on "
                 f"(WaitFlag<{event.name}>({eid}) missing)", where=where)
    c.flags.clear()


def SetAtomicAdd(dtype: ElemType | type) -> None:
    """``SetAtomicAdd<T>()``: following UB->GM copies add into GM instead of overwriting."""
    _core.current().atomic = elem(dtype)


def SetAtomicNone() -> None:
    """End atomic-add mode."""
    _core.current().atomic = None
