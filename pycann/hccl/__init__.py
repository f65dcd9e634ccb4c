"""pycann's HCCL: collectives over torch.distributed's gloo (cann-interfaces.md §8; docs/hccl.md).

* ``register()``: the ``hccl`` backend of torch.distributed (``init_process_group("hccl")``).
  Importing ``pycann.hccl`` registers it, as importing ``torch_npu`` does in CANN.
* The C-style API with HCCL's names and return codes: ``pycann.hccl.api`` (re-exported here).
* Rank tables: ``pycann.hccl.ranktable``; environment: ``pycann.hccl.env``.

Layer rule: beside ``runtime``; never imports ``ge``, ``ops`` or ``tools``.
"""

from pycann.hccl.constants import Collective, HcclDataType, HcclReduceOp, HcclResult
from pycann.hccl.errors import HcclError, HcclMismatch, HcclRemoteError, HcclTimeout
from pycann.hccl.torch_backend import ProcessGroupHCCL, register, register_host_view

__all__ = [
    "Collective", "HcclDataType", "HcclError", "HcclMismatch", "HcclReduceOp", "HcclRemoteError", "HcclResult",
    "HcclTimeout", "ProcessGroupHCCL", "register", "register_host_view",
]

register()  # as ``import torch_npu`` makes "hccl" known to torch.distributed
