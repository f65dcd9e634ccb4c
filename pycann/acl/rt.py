"""``acl.rt``: devices, contexts, streams, memory, events (cann-interfaces.md §1.3).

A facade over ``pycann.runtime``: it turns handle ints into runtime objects, checks argument
values and maps runtime faults to ``aclError`` codes (table in ``pycann.acl.errors``).
Stream handle 0 means the current context's default stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.errors import ArgTypeError, CallbackRaised, fault
from pycann.runtime import Context, CopyKind, Event, Stream, elapsed_ms
from pycann.runtime.memory import DEVICE_KINDS, MemKind

_POLICIES = range(0, 8)


# ---------------------------------------------------------------- devices
@api()
def set_device(device_id: int) -> int:
    """``ret = acl.rt.set_device(id)``: open the device; its default context becomes current."""
    require_init().set_device(as_int(device_id, "device_id"))
    return C.ACL_SUCCESS


@api()
def reset_device(device_id: int) -> int:
    """Balances one ``set_device``; the last one destroys the default context and its streams.
    A device that is not set (never, or reset as often as set) is ``ACL_ERROR_RT_INVALID_DEVICEID``."""
    rt, d = require_init(), as_int(device_id, "device_id")
    if rt.device(d).refcount == 0:  # rt.device raises InvalidDevice (107001) for an unknown id
        raise fault(C.ACL_ERROR_RT_INVALID_DEVICEID,
                    f"device {d} is not set: reset_device balances one set_device (reset twice?)")
    rt.reset_device(d)
    return C.ACL_SUCCESS


@api()
def reset_device_force(device_id: int) -> int:
    """Releases the device (its default context and streams) whatever the number of ``set_device``
    calls, as ``aclrtResetDeviceForce``: ``set_device(0); set_device(0); reset_device_force(0)``.
    A device that is not set (or already released) is ``ACL_ERROR_RT_INVALID_DEVICEID``."""
    rt, d = require_init(), as_int(device_id, "device_id")
    if rt.device(d).refcount == 0:
        raise fault(C.ACL_ERROR_RT_INVALID_DEVICEID,
                    f"device {d} is not set (reset_device_force releases it once, whatever set_device's count)")
    rt.reset_device(d, force=True)
    return C.ACL_SUCCESS


@api(out=(-1,))
def get_device() -> tuple[int, int]:
    """``device_id, ret``: the device of the current context."""
    return require_init().require_context().device.id, C.ACL_SUCCESS


@api(out=(0,))
def get_device_count() -> tuple[int, int]:
    """``count, ret`` (``PYCANN_DEVICE_COUNT``, default 1)."""
    return len(require_init().devices), C.ACL_SUCCESS


def get_run_mode() -> tuple[int, int]:
    """``run_mode, ret``: always ``ACL_HOST`` — the application runs on the host and must copy
    data to and from device memory (which is what keeps an app portable to real NPUs)."""
    return C.ACL_HOST, C.ACL_SUCCESS


@api()
def synchronize_device() -> int:
    """Wait for every stream of the current device."""
    require_init().require_context().device.synchronize()
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- contexts
def _context(h: int) -> Context:
    ctx: Context = handles.get("context", h, "context")
    return ctx.check()


def _context_handle(ctx: Context) -> int:
    return handles.handle_of(ctx) or handles.add("context", ctx)


@api(out=(0,))
def create_context(device_id: int) -> tuple[int, int]:
    """``context, ret``: a new context, current for this thread."""
    ctx = require_init().create_context(as_int(device_id, "device_id"))
    return handles.add("context", ctx), C.ACL_SUCCESS


@api()
def destroy_context(context: int) -> int:
    ctx = _context(context)
    require_init().destroy_context(ctx)
    handles.pop("context", context)
    return C.ACL_SUCCESS


@api()
def set_context(context: int) -> int:
    """Make ``context`` current for this thread."""
    require_init().set_current(_context(context))
    return C.ACL_SUCCESS


@api(out=(0,))
def get_context() -> tuple[int, int]:
    """``context, ret``: this thread's current context (the default one after ``set_device``)."""
    return _context_handle(require_init().require_context()), C.ACL_SUCCESS


set_current_context = set_context
get_current_context = get_context


# ---------------------------------------------------------------- streams
def stream_of(h: Any) -> Stream:
    """The stream of handle ``h`` (0 = the current context's default stream)."""
    rt = require_init()
    if as_int(h, "stream") == 0:
        return rt.stream(None)
    s: Stream = handles.get("stream", h, "stream")
    return rt.stream(s)


@api(out=(0,))
def create_stream() -> tuple[int, int]:
    """``stream, ret``: a new stream in the current context."""
    s = require_init().require_context().create_stream(_state.user_site())
    return handles.add("stream", s), C.ACL_SUCCESS


@api()
def destroy_stream(stream: int) -> int:
    """Runs what is queued, then destroys the stream."""
    s: Stream = handles.get("stream", stream, "stream")
    require_init().destroy_stream(s)
    handles.pop("stream", stream)
    return C.ACL_SUCCESS


destroy_stream_force = destroy_stream


@api()
def synchronize_stream(stream: int) -> int:
    """Wait for the stream; returns the code of the first queued task that failed, if any."""
    stream_of(stream).synchronize()
    return C.ACL_SUCCESS


@api()
def synchronize_stream_with_timeout(stream: int, timeout: int) -> int:
    """``timeout`` in ms (-1 = forever); ``ACL_ERROR_RT_WAIT_TIMEOUT`` when it expires."""
    t = as_int(timeout, "timeout")
    stream_of(stream).synchronize(None if t < 0 else t / 1e3)
    return C.ACL_SUCCESS


@api(out=(C.ACL_EVENT_STATUS_NOT_READY,))
def stream_query(stream: int) -> tuple[int, int]:
    """``status, ret``: 0 when every queued task has run, 1 otherwise."""
    return (0 if stream_of(stream).query() else 1), C.ACL_SUCCESS


@api()
def stream_wait_event(stream: int, event: int) -> int:
    """Later work on ``stream`` waits for ``event``'s latest record."""
    stream_of(stream).wait_event(_event(event))
    return C.ACL_SUCCESS


@api()
def launch_callback(fn: Callable[[Any], Any], user_data: Any, block_type: int, stream: int) -> int:
    """Queue ``fn(user_data)`` on the stream. pycann runs it on the stream's worker, with the context
    current in the calling thread (the stream waits for it whatever ``block_type``);
    ``subscribe_report`` / ``process_report`` are not needed."""
    if not callable(fn):
        raise ArgTypeError("fn must be callable")
    if as_int(block_type, "block_type") not in (C.ACL_CALLBACK_NO_BLOCK, C.ACL_CALLBACK_BLOCK):
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"invalid block type {block_type}")
    rt = require_init()
    # CANN runs the callback in the thread subscribed with subscribe_report, which has set its context;
    # the worker has none, so the samples' D2H memcpy in a callback failed with ACL_ERROR_RT_CONTEXT_NULL
    # (and the app read an unwritten buffer): the callback runs in the launching thread's context
    ctx = rt.current
    name = getattr(fn, "__qualname__", None) or repr(fn)

    def callback() -> None:
        if ctx is not None and not ctx.destroyed:
            rt.set_current(ctx)
        try:
            fn(user_data)
        except Exception as e:
            # the application's bug, not pycann's: its traceback goes to the log now (synchronize_stream
            # reports it later, from another thread, where the traceback would be lost)
            _state.log.error("acl.rt.launch_callback: the callback %s raised %s: %s", name, type(e).__name__, e,
                             exc_info=True)
            raise CallbackRaised(f"the application's callback {name} (acl.rt.launch_callback) raised "
                                 f"{type(e).__name__}: {e} (traceback in the 'pycann.acl' log)") from e

    stream_of(stream).submit(callback, "callback")
    return C.ACL_SUCCESS


@api()
def subscribe_report(thread_id: int, stream: int) -> int:
    """Accepted (callbacks run on the stream worker; see ``launch_callback``)."""
    stream_of(stream)
    return C.ACL_SUCCESS


@api()
def unsubscribe_report(thread_id: int, stream: int) -> int:
    stream_of(stream)
    return C.ACL_SUCCESS


@api()
def process_report(timeout: int) -> int:
    """Nothing to process: callbacks already ran on the stream workers."""
    require_init()
    return C.ACL_SUCCESS


# ---------------------------------------------------------------- memory
@api(out=(0,))
def malloc(size: int, policy: int) -> tuple[int, int]:
    """``ptr, ret``: device memory of the current context's device, from its caching pool."""
    n, p = as_int(size, "size"), as_int(policy, "policy")
    if n <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"size must be > 0, not {n}")
    if (p & 0xFF) not in _POLICIES:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"unknown malloc policy {p}")
    a = require_init().malloc(n, _state.user_site())
    return a.base, C.ACL_SUCCESS


malloc_cached = malloc


@api(out=(0,))
def malloc_host(size: int) -> tuple[int, int]:
    """``ptr, ret``: host memory (pycann's host pool)."""
    n = as_int(size, "size")
    if n <= 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"size must be > 0, not {n}")
    a = require_init().malloc_host(n, _state.user_site())
    return a.base, C.ACL_SUCCESS


@api()
def free(dev_ptr: int) -> int:
    """Free device memory. Double free: ``ACL_ERROR_RT_MEMORY_FREE``; a host or interior
    pointer: ``ACL_ERROR_INVALID_PARAM``; no current context: ``ACL_ERROR_RT_CONTEXT_NULL``."""
    rt = require_init()
    rt.require_context()
    rt.space.free(as_int(dev_ptr, "dev_ptr"), DEVICE_KINDS)
    return C.ACL_SUCCESS


@api()
def free_host(host_ptr: int) -> int:
    """Free ``malloc_host`` memory."""
    require_init().space.free(as_int(host_ptr, "host_ptr"), frozenset({MemKind.HOST}))
    return C.ACL_SUCCESS


def _kind(kind: Any) -> CopyKind:
    k = as_int(kind, "kind")
    try:
        return CopyKind(k)
    except ValueError:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"unknown memcpy kind {k}") from None


@api()
def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
    """``ret = acl.rt.memcpy(dst, dest_max, src, count, kind)``: copies now. Both sides are
    checked: live, in bounds, ``count <= dest_max``, memory kinds as ``kind`` says."""
    args = (as_int(dst, "dst"), as_int(dest_max, "dest_max"), as_int(src, "src"), as_int(count, "count"))
    rt = require_init()
    rt.require_context()  # memory calls need the thread's context, as in CANN (docs/acl.md)
    rt.space.copy(args[0], args[1], args[2], args[3], _kind(kind))
    return C.ACL_SUCCESS


@api()
def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int) -> int:
    """Checked now, copied when the stream reaches it (checked again then)."""
    d, m, s, n, k = as_int(dst, "dst"), as_int(dest_max, "dest_max"), as_int(src, "src"), as_int(count, "count"), _kind(kind)
    rt = require_init()
    st = stream_of(stream)
    rt.space.check_copy(d, m, s, n, k)
    st.submit(lambda: rt.space.copy(d, m, s, n, k), "memcpy_async")
    return C.ACL_SUCCESS


@api()
def memset(dev_ptr: int, max_size: int, value: int, count: int) -> int:
    """Set ``count`` bytes (``<= max_size``) to ``value``'s low byte."""
    args = (as_int(dev_ptr, "dev_ptr"), as_int(max_size, "max_size"), as_int(value, "value"), as_int(count, "count"))
    require_init().space.fill(*args)
    return C.ACL_SUCCESS


@api()
def memset_async(dev_ptr: int, max_size: int, value: int, count: int, stream: int) -> int:
    p, m, v, n = as_int(dev_ptr, "dev_ptr"), as_int(max_size, "max_size"), as_int(value, "value"), as_int(count, "count")
    rt = require_init()
    st = stream_of(stream)
    rt.space.check_fill(p, m, n)
    st.submit(lambda: rt.space.fill(p, m, v, n), "memset_async")
    return C.ACL_SUCCESS


@api(out=(0, 0))
def get_mem_info(attr: int) -> tuple[int, int, int]:
    """``free, total, ret`` of the current device's memory pool (every attr reads the same pool)."""
    a = as_int(attr, "attr")
    if not C.ACL_DDR_MEM <= a <= C.ACL_HBM_MEM_P2P_HUGE1G:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"unknown memory attribute {a}")
    pool = require_init().require_context().device.pool
    return pool.free_bytes, pool.capacity, C.ACL_SUCCESS


def memory_stats(device_id: int = 0) -> dict[str, int]:
    """pycann extension: the device memory pool's statistics (for the profiler)."""
    return require_init().device(device_id).pool.stats()


# ---------------------------------------------------------------- events
def _event(h: Any) -> Event:
    ev: Event = handles.get("event", h, "event")
    return ev


@api(out=(0,))
def create_event() -> tuple[int, int]:
    """``event, ret``."""
    return handles.add("event", require_init().new_event()), C.ACL_SUCCESS


# aclrtCreateEventWithFlag's documented flags (cann-interfaces.md §1.7), combinable with bitwise OR
_EVENT_FLAGS = (C.ACL_EVENT_SYNC | C.ACL_EVENT_CAPTURE_STREAM_PROGRESS | C.ACL_EVENT_TIME_LINE
                | C.ACL_EVENT_EXTERNAL)


@api(out=(0,))
def create_event_with_flag(flag: int) -> tuple[int, int]:
    """``event, ret``: ``flag`` is ``ACL_EVENT_SYNC`` (0x1), ``ACL_EVENT_CAPTURE_STREAM_PROGRESS`` (0x2),
    ``ACL_EVENT_TIME_LINE`` (0x8), ``ACL_EVENT_EXTERNAL`` (0x20) or an OR of them; any other value
    (0, unknown bits) is ``ACL_ERROR_INVALID_PARAM`` with event 0. Flags are kept, not interpreted."""
    f = as_int(flag, "flag")
    if f <= 0 or f & ~_EVENT_FLAGS:
        raise fault(C.ACL_ERROR_INVALID_PARAM,
                    f"invalid event flag {f:#x}: use ACL_EVENT_SYNC (0x1), ACL_EVENT_CAPTURE_STREAM_PROGRESS (0x2), "
                    "ACL_EVENT_TIME_LINE (0x8), ACL_EVENT_EXTERNAL (0x20) or an OR of them "
                    "(acl.rt.create_event for a plain event)")
    return handles.add("event", require_init().new_event(f)), C.ACL_SUCCESS


create_event_ex_with_flag = create_event_with_flag


@api()
def record_event(event: int, stream: int) -> int:
    """Queue the event on the stream (0 = default stream)."""
    _event(event).record(stream_of(stream))
    return C.ACL_SUCCESS


@api()
def reset_event(event: int, stream: int) -> int:
    stream_of(stream)
    _event(event).reset()
    return C.ACL_SUCCESS


@api()
def synchronize_event(event: int) -> int:
    """Block until the event's latest record has run."""
    _event(event).synchronize()
    return C.ACL_SUCCESS


@api(out=(C.ACL_EVENT_RECORDED_STATUS_NOT_READY,))
def query_event_status(event: int) -> tuple[int, int]:
    """``status, ret`` (``aclrtQueryEventStatus``, ``aclrtEventRecordedStatus``):
    ``ACL_EVENT_RECORDED_STATUS_COMPLETE`` (1) once a record of the event has run,
    ``ACL_EVENT_RECORDED_STATUS_NOT_READY`` (0) while it has not, or if it was never recorded."""
    ev = _event(event)
    done = ev.query() and ev.marker is not None
    return (C.ACL_EVENT_RECORDED_STATUS_COMPLETE if done else C.ACL_EVENT_RECORDED_STATUS_NOT_READY), C.ACL_SUCCESS


@api(out=(C.ACL_EVENT_STATUS_NOT_READY,))
def query_event(event: int) -> tuple[int, int]:
    """``status, ret`` (``aclrtQueryEvent``, ``aclrtEventStatus``): ``ACL_EVENT_STATUS_COMPLETE`` (0)
    or ``ACL_EVENT_STATUS_NOT_READY`` (1); an event never recorded counts as complete."""
    done = _event(event).query()
    return (C.ACL_EVENT_STATUS_COMPLETE if done else C.ACL_EVENT_STATUS_NOT_READY), C.ACL_SUCCESS


@api()
def destroy_event(event: int) -> int:
    _event(event).destroy()
    handles.pop("event", event)
    return C.ACL_SUCCESS


@api(out=(0.0,))
def event_elapsed_time(start: int, end: int) -> tuple[float, int]:
    """``ms, ret``: wall-clock milliseconds between two completed records."""
    return elapsed_ms(_event(start), _event(end)), C.ACL_SUCCESS
