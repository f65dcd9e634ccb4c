"""The parts of a oneDNN (de)convolution's descriptors that no input shape changes: the weight's
user and ``any`` descriptors, the bias descriptor, and the post-op attributes without a residual
operand (``onednn_conv_plan._Plan``).

Why a class: the shape-generic plan (``kernels/bind_generic_conv.py``) binds a ``_Plan`` per conv
node and input shape, and each made these anew (four oneDNN calls, ~20 us of a new shape's first
call per conv); one ``ConvDescs`` per node serves every shape's plan. oneDNN copies what it reads
from a descriptor or an attribute when it makes a primitive descriptor, so sharing them between
plans (and threads: the calls take them const) changes nothing in the primitives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.native_args import address
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary, _chain

__all__ = ["ConvDescs"]


class ConvDescs:
    """The shape-independent descriptors of the (de)convolution of weight ``w`` (ONNX layout:
    Conv (M, C/G, *k), ConvTranspose (C, M/G, *k)); ``c``: the input channels (ConvTranspose's
    weight descriptor has them)."""

    __slots__ = ("w_in", "w", "with_bias", "group", "transpose", "unary", "c", "w_user", "w_any", "bias", "eltwise",
                 "_attrs", "_keep", "_bias_mem")

    def __init__(self, w: np.ndarray, with_bias: bool, group: int, transpose: bool, unary: Unary | Unaries | None,
                 c: int) -> None:
        self.w_in, self.with_bias, self.group, self.transpose, self.unary, self.c = w, with_bias, group, transpose, unary, c
        w = w if w.flags.c_contiguous else np.ascontiguousarray(w)
        self.w = w  # (what the packing reads)
        m = w.shape[1] * group if transpose else w.shape[0]
        ws = [s // 4 for s in w.strides]
        k = list(w.shape[2:])
        if transpose:  # ONNX (C, M/G, *k) -> oneDNN (G, M/G, C/G, *k), by strides
            wdims = [group, m // group, c // group] + k
            wstr = [c // group * ws[0], ws[1], ws[0]] + ws[2:]
        else:  # ONNX (M, C/G, *k) -> oneDNN (G, M/G, C/G, *k)
            wdims = [group, m // group, w.shape[1]] + k
            wstr = [m // group * ws[0]] + ws
        if group == 1:
            wdims, wstr = wdims[1:], wstr[1:]
        self.w_user = capi.MemoryDesc.strided(wdims, wstr)
        self.w_any = capi.MemoryDesc.any(wdims)
        self.bias = capi.MemoryDesc.strided((m,), (1,)) if with_bias else None
        self.eltwise = tuple(("eltwise", *u) for u in _chain(unary))
        self._attrs: list[Any] = [None, None]  # [no residual, "sum" residual], made on first use
        self._keep: tuple[Any, ...] = ()
        self._bias_mem: tuple[int, Any] | None = None  # (address, a memory over it): ``bias_memory``

    def bias_memory(self, b: np.ndarray) -> tuple[int, capi.Memory]:
        """(address, a memory over it) of the bias ``b`` (M float32 values, checked: ``OperandError``;
        kept alive by the caller) for plans that never re-point it, the same memory for every plan of
        that address: a memory is its descriptor and the address, which whatever array lives there
        is read at."""
        ptr = address("conv bias B", b, (self.w.shape[1] * self.group if self.transpose else self.w.shape[0],))
        held = self._bias_mem
        if held is None or held[0] != ptr:
            assert self.bias is not None
            held = self._bias_mem = (ptr, capi.Memory(self.bias, ptr, keep_md=False))
        return held  # type: ignore[return-value]

    def keep(self, *arrays: Any) -> tuple[Any, ...]:
        """``arrays`` as a tuple, the same one for every plan that keeps the same arrays (a bound
        kernel's ``keep``: one tuple per node, not per shape)."""
        k = self._keep
        if len(k) != len(arrays) or any(a is not b for a, b in zip(k, arrays)):
            k = self._keep = arrays
        return k

    def serves(self, w: np.ndarray, with_bias: bool, group: int, transpose: bool, unary: Unary | Unaries | None,
               c: int) -> bool:
        """These descriptors are the ones a plan of these arguments would make."""
        return self.w_in is w and self.with_bias == with_bias and self.group == group \
            and self.transpose == transpose and self.unary == unary and (not transpose or self.c == c)

    def attr(self, sum_residual: bool) -> capi_ops.Attr:
        """The post-ops without a residual operand: the activation chain, after the "sum" post-op
        when ``sum_residual`` (the residual pre-filled in the destination)."""
        a = self._attrs[sum_residual]
        if a is None:  # (two threads may both make it: equal attributes, one kept)
            a = self._attrs[sum_residual] = capi_ops.Attr([("sum", 1.0), *self.eltwise] if sum_residual else self.eltwise)
        return a  # type: ignore[no-any-return]
