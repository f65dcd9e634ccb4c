"""pycann.tbe: a TBE-style DSL (``tvm.placeholder``, ``tbe.dsl.vadd`` ..., ``auto_schedule``, ``build``).

    from pycann.tbe import tvm, dsl
    x = tvm.placeholder((64, 128), name="x", dtype="float16")
    res = dsl.vexp(dsl.vmuls(x, 0.5))
    with tvm.target.cce():
        sch = dsl.auto_schedule(res)
    kernel = dsl.build(sch, {"name": "exp_half", "tensor_list": [x, res]})
    y = kernel(x_np)                      # runs the lowered Ascend C kernel on the CPU twin

Graphs are lowered onto pycann.ascendc, so every twin check applies (docs/ascendc.md).
"""

from __future__ import annotations

from pycann.tbe import dsl, tvm
from pycann.tbe.expr import TbeError, Tensor
from pycann.tbe.lower import BuiltKernel

__all__ = ["BuiltKernel", "Tensor", "TbeError", "dsl", "tvm"]
