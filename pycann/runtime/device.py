"""Devices and contexts (cann-interfaces.md §1.3 ``set_device`` ... ``destroy_context``).

The CPU device computes for real; every device has its own memory pool, an implicit default
context (made by ``set_device``, destroyed when ``reset_device`` has balanced every
``set_device``) and the contexts created on it. Each thread has its own current context.
``Runtime`` ties the devices, the host memory pool and the address space together.
"""

from __future__ import annotations

import threading

from pycann import config
from pycann.runtime.errors import InvalidDevice, InvalidHandle, NoContext, TaskFailed
from pycann.runtime.event import Event
from pycann.runtime.memory import (
    AddressSpace,
    Allocation,
    MemKind,
    physical_memory,
    renewed_in_child,
)
from pycann.runtime.memory_pool import MemoryPool
from pycann.runtime.stream import Stream

DEFAULT_SOC = "Ascend310P3"


class Context:
    """A device context: owns streams (its default stream is created on first use)."""

    def __init__(self, device: Device, is_default: bool = False) -> None:
        self.device = device
        self.is_default = is_default
        self.streams: list[Stream] = []
        self._default_stream: Stream | None = None
        self.destroyed = False
        self._lock = threading.Lock()
        renewed_in_child(self)

    def check(self) -> Context:
        if self.destroyed:
            raise InvalidHandle("the context was destroyed")
        return self

    @property
    def default_stream(self) -> Stream:
        """The stream used when a call passes stream 0."""
        self.check()
        with self._lock:
            if self._default_stream is None:
                self._default_stream = Stream(self.device.id, f"dev{self.device.id}-default")
            return self._default_stream

    def create_stream(self, site: str = "") -> Stream:
        self.check()
        s = Stream(self.device.id, site=site)
        with self._lock:
            self.streams.append(s)
        return s

    def destroy_stream(self, stream: Stream) -> None:
        stream.refuse_on_worker(f"destroying {stream.name}")  # (before it leaves the context)
        with self._lock:
            if stream in self.streams:
                self.streams.remove(stream)
        stream.destroy()

    def all_streams(self) -> list[Stream]:
        with self._lock:
            extra = [self._default_stream] if self._default_stream is not None else []
            return extra + list(self.streams)

    def synchronize(self) -> None:
        """Wait for every stream of the context; raises the first ``TaskFailed``."""
        first: TaskFailed | None = None
        for s in self.all_streams():
            try:
                s.synchronize()
            except TaskFailed as e:
                first = first or e
        if first is not None:
            raise first

    def destroy(self, timeout: float | None = None) -> list[Stream]:
        """Destroy the context and its streams (each given ``timeout`` s to drain); returns the
        user-created streams that were still alive."""
        self.check()
        self.destroyed = True
        left = self.all_streams()
        for s in left:
            if not s.destroyed:  # (from a callback of one of them: that one is abandoned, not waited for)
                s.destroy(0 if s.on_worker() else timeout)
        return [s for s in left if s is not self._default_stream]


class Device:
    """One compute device: an id, a soc name, a memory pool and its contexts."""

    def __init__(self, device_id: int, memory_bytes: int, soc_name: str) -> None:
        self.id = device_id
        self.soc_name = soc_name
        self.pool = MemoryPool(f"device {device_id}", memory_bytes)
        self.refcount = 0
        self.default_context: Context | None = None
        self.contexts: list[Context] = []

    def synchronize(self) -> None:
        """Wait for every stream of every context on the device."""
        first: TaskFailed | None = None
        for c in list(self.contexts):
            try:
                c.synchronize()
            except TaskFailed as e:
                first = first or e
        if first is not None:
            raise first


class Runtime:
    """Devices, host memory, the address space and each thread's current context. Thread-safe."""

    def __init__(self, device_count: int | None = None, memory_bytes: int | None = None,
                 soc_name: str | None = None, space: AddressSpace | None = None) -> None:
        count = device_count if device_count is not None else config.device_count()
        mem = memory_bytes if memory_bytes is not None else physical_memory()
        soc = soc_name or config.soc_version(DEFAULT_SOC)
        self.devices = [Device(i, mem, soc) for i in range(max(1, count))]
        self.host_pool = MemoryPool("host", mem)
        self.space = space if space is not None else AddressSpace()
        self._tls = threading.local()
        self._lock = threading.RLock()
        renewed_in_child(self, threading.RLock)

    # ------------------------------------------------------------------ devices and contexts
    def device(self, device_id: int) -> Device:
        if not isinstance(device_id, int) or not 0 <= device_id < len(self.devices):
            raise InvalidDevice(f"device {device_id} does not exist: there are {len(self.devices)} "
                                f"device(s), ids 0..{len(self.devices) - 1}")
        return self.devices[device_id]

    def set_device(self, device_id: int) -> Context:
        """Open the device (counted) and make its default context current for this thread."""
        dev = self.device(device_id)
        with self._lock:
            dev.refcount += 1
            if dev.default_context is None or dev.default_context.destroyed:
                dev.default_context = Context(dev, is_default=True)
                dev.contexts.append(dev.default_context)
            ctx = dev.default_context
        self._tls.context = ctx
        return ctx

    def reset_device(self, device_id: int, force: bool = False) -> list[Stream]:
        """Balance one ``set_device``; the last one destroys the default context (returns its
        streams that were still alive). ``force``: release it whatever the count (as
        ``aclrtResetDeviceForce``). Resetting a device never set is a no-op."""
        dev = self.device(device_id)
        with self._lock:
            if dev.refcount == 0:
                return []
            dev.refcount = 0 if force else dev.refcount - 1
            if dev.refcount:
                return []
            ctx, dev.default_context = dev.default_context, None
        if ctx is None:
            return []
        dev.contexts.remove(ctx)
        left = ctx.destroy()
        if getattr(self._tls, "context", None) is ctx:
            self._tls.context = None
        return left

    def create_context(self, device_id: int) -> Context:
        """A new context on the device, made current for this thread."""
        dev = self.device(device_id)
        ctx = Context(dev)
        with self._lock:
            dev.contexts.append(ctx)
        self._tls.context = ctx
        return ctx

    def destroy_context(self, ctx: Context) -> list[Stream]:
        """Destroy a context made by ``create_context`` (returns its streams still alive)."""
        ctx.check()
        if ctx.is_default:
            raise InvalidHandle("the default context of a device is destroyed by reset_device, not destroy_context")
        with self._lock:
            if ctx in ctx.device.contexts:
                ctx.device.contexts.remove(ctx)
        left = ctx.destroy()
        if getattr(self._tls, "context", None) is ctx:
            self._tls.context = None
        return left

    @property
    def current(self) -> Context | None:
        """This thread's current context (``None`` if unset or destroyed)."""
        ctx = getattr(self._tls, "context", None)
        return None if ctx is None or ctx.destroyed else ctx

    def set_current(self, ctx: Context) -> None:
        self._tls.context = ctx.check()

    def destroy_stream(self, stream: Stream) -> None:
        """Run what is queued on ``stream``, then destroy it. Raises ``InvalidHandle``."""
        for dev in self.devices:
            for ctx in list(dev.contexts):
                if stream in ctx.streams:
                    ctx.destroy_stream(stream)
                    return
        stream.destroy()

    def require_context(self) -> Context:
        """The current context. Raises ``NoContext``."""
        ctx = self.current
        if ctx is None:
            raise NoContext("this thread has no current context: call acl.rt.set_device(id) "
                            "or acl.rt.set_context(context) first")
        return ctx

    def stream(self, stream: Stream | None) -> Stream:
        """``stream``, or the current context's default stream for ``None``."""
        if stream is None:
            return self.require_context().default_stream
        if stream.destroyed:
            raise InvalidHandle(f"{stream.name} was destroyed")
        return stream

    # ------------------------------------------------------------------ memory
    def malloc(self, nbytes: int, site: str = "") -> Allocation:
        """Device memory on the current context's device."""
        dev = self.require_context().device
        return self.space.allocate(dev.pool, nbytes, MemKind.DEVICE, dev.id, site)

    def malloc_host(self, nbytes: int, site: str = "") -> Allocation:
        return self.space.allocate(self.host_pool, nbytes, MemKind.HOST, -1, site)

    def new_event(self, flags: int = 0) -> Event:
        """An event of the current context (unusable once that is destroyed). Raises ``NoContext``."""
        return Event(flags, self.require_context())

    # ------------------------------------------------------------------ teardown
    def shutdown(self, timeout: float | None = 30.0) -> tuple[list[Allocation], list[Stream]]:
        """Stop every stream (each given ``timeout`` s to drain), destroy every context and free
        all memory. Returns the device/host allocations and the user-created streams that were
        still alive (leaks)."""
        streams: list[Stream] = []
        for dev in self.devices:
            for ctx in list(dev.contexts):
                if not ctx.destroyed:
                    streams += ctx.destroy(timeout)
            dev.contexts.clear()
            dev.default_context = None
            dev.refcount = 0
        leaked = self.space.release_all()
        for pool in [self.host_pool] + [d.pool for d in self.devices]:
            pool.empty_cache()
        self._tls = threading.local()
        return leaked, streams
