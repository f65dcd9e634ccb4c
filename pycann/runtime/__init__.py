"""The runtime: devices, contexts, memory (caching pools + pointer registry), streams, events.

Layer rule (docs/architecture.md): the runtime never imports ``ge``, ``ops`` or ``acl``; the
pyACL facade (``pycann.acl``) maps its faults (``pycann.runtime.errors``) to ``aclError`` codes.

The names below load on first access (PEP 562): a process that only runs models through GE
(``InferSession``, which needs ``runtime.host_allocator`` alone) does not import the device,
stream and event machinery (issue 23 item 5: a fresh process's import).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (static types for the lazy names)
    from pycann.runtime.device import Context, Device, Runtime
    from pycann.runtime.event import Event, elapsed_ms
    from pycann.runtime.memory import AddressSpace, Allocation, CopyKind, MemKind
    from pycann.runtime.memory_pool import MemoryPool
    from pycann.runtime.stream import Stream, Task

# name -> the submodule that defines it
_WHERE = {
    "Context": "device", "Device": "device", "Runtime": "device",
    "Event": "event", "elapsed_ms": "event",
    "AddressSpace": "memory", "Allocation": "memory", "CopyKind": "memory", "MemKind": "memory", "MemoryPool": "memory_pool",
    "Stream": "stream", "Task": "stream",
}

__all__ = [
    "AddressSpace", "Allocation", "Context", "CopyKind", "Device", "Event", "MemKind", "MemoryPool",
    "Runtime", "Stream", "Task", "elapsed_ms",
]


# its submodules, attributes of the package once imported (as a plain import made them before)
_SUBMODULES = ("device", "errors", "event", "host_allocator", "memory", "memory_pool", "stream")


def __getattr__(name: str) -> object:
    """A runtime class or function, imported from its submodule on first access (or a submodule)."""
    where = _WHERE.get(name)
    if where is None and name not in _SUBMODULES:
        raise AttributeError(f"module 'pycann.runtime' has no attribute {name!r}")
    mod = importlib.import_module(f"pycann.runtime.{where or name}")
    value = mod if where is None else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
