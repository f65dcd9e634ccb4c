"""The kernel table: for each op whose computation goes through a kernel provider, the kernels
a plan runs instead of the op's numpy reference (``OpDef.kernel`` in ``pycann.ops``).

Ops not listed run their reference kernel. The same op semantics serve both: the provider kernels
here are ``ops``' kernels handed the providers' products (``kernels/gemm.py``, ``fused.py``,
``quant.py``), or for Conv/ConvTranspose the provider epilogues (``kernels/conv.py``). Which
provider algorithm a node runs is chosen per node at compile time (``providers.select``, GE's
KernelSelection) or, without a choice, per call from ``providers.STATIC_TABLE``; plan-time binding
of a static signature is ``bind.BINDERS``.

Every place that runs a node asks here (``run_kernel`` / ``into_kernel``): the executor's plans,
constant folding, single-op calls and the PyTorch adaptor's eager ops.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from pycann.kernels import conv, fused, gemm, kv_cache
from pycann.ops.opdef import Kernel, OpDef, OutKernel, ScopedKernel


@dataclass(frozen=True)
class OpKernels:
    """The provider kernels of one op: ``run(inputs, attrs) -> outputs`` and, where the op can
    write into preallocated outputs (the executor's arena), ``into(inputs, attrs, outs)``."""

    run: Kernel
    into: OutKernel | None = None


# (domain, op type) -> its provider kernels, in the order of docs/kernels.md
KERNELS: Mapping[tuple[str, str], OpKernels] = {
    ("", "Conv"): OpKernels(conv.k_conv, conv.out_conv),
    ("", "ConvTranspose"): OpKernels(conv.k_conv_transpose, conv.out_conv_transpose),
    ("", "MatMul"): OpKernels(gemm.k_matmul, gemm.out_matmul),
    ("", "Gemm"): OpKernels(gemm.k_gemm, gemm.out_gemm),
    ("pycann", "FusedConv"): OpKernels(fused.k_fused_conv, fused.out_fused_conv),
    ("pycann", "FusedConvTranspose"): OpKernels(fused.k_fused_conv_transpose),
    ("pycann", "FusedMatMul"): OpKernels(fused.k_fused_matmul, fused.out_fused_matmul),
    ("pycann", "FusedAttention"): OpKernels(fused.k_attention),
    # a KV cache appended in place (a view of its buffer): no ``into``, its output is never an arena view
    ("pycann", "CacheAppend"): OpKernels(kv_cache.k_cache_append),
}
# Kernels whose module loads when a plan first asks for them (``run_kernel``, at plan build, not per
# call): the int8 kernels (kernels/quant.py, the oneDNN and PyTorch int8 providers, the quantized
# ops), which a float model never imports. (domain, op type) -> (module, run function's name)
LAZY_KERNELS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("pycann", "QuantConv"): ("pycann.kernels.quant", "k_quant_conv"),
    ("pycann", "QuantMatMul"): ("pycann.kernels.quant", "k_quant_matmul"),
}


def _kernels(op: OpDef) -> OpKernels | None:
    key = (op.domain, op.op_type)
    lazy = LAZY_KERNELS.get(key)
    if lazy is not None:
        return OpKernels(getattr(importlib.import_module(lazy[0]), lazy[1]))
    return KERNELS.get(key)


def run_kernel(op: OpDef) -> Kernel | ScopedKernel:
    """The kernel that computes ``op`` in a plan: its provider kernel, else its reference."""
    k = _kernels(op)
    return op.kernel if k is None else k.run


def into_kernel(op: OpDef) -> OutKernel | None:
    """The kernel that computes ``op`` into preallocated outputs, or None. An op listed in
    ``KERNELS`` without ``into`` has none (its reference ``out_kernel`` would bypass the providers)."""
    k = _kernels(op)
    return op.out_kernel if k is None else k.into
