"""torch_npu.contrib: ``from torch_npu.contrib import transfer_to_npu`` migrates CUDA code."""
