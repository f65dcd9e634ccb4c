"""The runtime: devices, contexts, memory (caching pools + pointer registry), streams, events.

Layer rule (docs/architecture.md): the runtime never imports ``ge``, ``ops`` or ``acl``; the
pyACL facade (``pycann.acl``) maps its faults (``pycann.runtime.errors``) to ``aclError`` codes.
"""

from pycann.runtime.device import Context, Device, Runtime
from pycann.runtime.event import Event, elapsed_ms
from pycann.runtime.memory import AddressSpace, Allocation, CopyKind, MemKind, MemoryPool
from pycann.runtime.stream import Stream, Task

__all__ = [
    "AddressSpace", "Allocation", "Context", "CopyKind", "Device", "Event", "MemKind", "MemoryPool",
    "Runtime", "Stream", "Task", "elapsed_ms",
]
