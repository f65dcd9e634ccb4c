"""``from torch_npu.contrib import transfer_to_npu``: run CUDA-style code on the npu device.

Importing this module applies ``pycann.torch.migrate.apply()`` (idempotent); see that module for
what is mapped. As in torch_npu, ``TORCH_TRANSFER_TO_NPU=1`` set before importing
``pycann.torch`` applies it too.
"""

from pycann.torch.migrate import apply

apply()
