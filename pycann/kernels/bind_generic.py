"""Shape-generic prepared kernels: bound once per model for the plan that serves every signature.

The shape-generic plan (``ge/run/executor.py``, docs/dynamic-shapes.md) resolves shapes per call,
so ``kernels/bind.py``'s static binders do not apply to it. A MatMul whose B is a constant still
has everything but its row count fixed; this module binds such nodes once:

* ``MatMul`` / ``FusedMatMul`` / ``Gemm`` with a constant 2-D float32 B (Gemm: ``transA`` 0,
  ``alpha`` 1, C a constant row of N values or absent): B is reordered **once** into oneDNN's
  brgemm layout (``onednn_packed``: one copy per weight, keyed by its memory and layout, shared by
  every row count and every plan), and each row count seen (A's leading dims folded into rows;
  a decode step of batch 4 is 4 rows) gets its own primitive over that packed copy, kept in a
  small per-node table. Bias, residual and activation are post-ops as in the static binder.
* It binds only where it was measured to win: oneDNN available, an AVX-512 CPU and oneDNN's
  choice for the packed weight is its brgemm kernel (``brg:*``). There, at 1-64 rows, the packed
  product runs at about a GEMV's cost per row block (GPT-2's 768 x 50257 LM head at 4 rows: 5 ms
  against 7.7 ms for oneDNN on the plain weight, which copies B into blocks on every call, and
  24 ms for OpenBLAS held to AVX2; bench/RESULTS.md "KV-cache decode, packed skinny GEMMs").
  Elsewhere (an AVX2 CPU: jit gemm, slower than OpenBLAS at these shapes) the node keeps the
  generic kernel: the ``STATIC_TABLE`` ``skinny`` row. A node fed one row at a time (batch-1
  decode) moves its weight to the layout oneDNN's gemv streams faster, one layout at a time
  (``weight_layouts.AdaptiveMatmul``).
* ``LayerNormalization`` (Y only, constant Scale / B, static normalised dims): oneDNN's layer
  normalization with a primitive per row count (numpy's passes cost ~30 us a decode row).
* A call it was not bound for (another dtype, a 1-D or non-float A, a residual that broadcasts,
  a product oneDNN declines) runs ``fallback``, the node's generic kernel, unchanged.

Semantics are ``numpy.matmul`` / ONNX Gemm (float32, fp32 accumulation; oneDNN's summation order
differs from OpenBLAS's by rounding only: tests compare with a tolerance, ``tests/kernels``).
The packed copy replaces the original in the resident set: once packed, pycann drops the mapped
.om pages of the original (``LoadedModel.from_file``), which no later call reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.kernels import algorithm, bind_generic_conv
from pycann.kernels.algorithm import ONEDNN_GEMM, ONEDNN_MATMUL, Packing, Threads
from pycann.kernels.bind_base import remember
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork
from pycann.kernels.weight_layouts import AdaptiveMatmul

__all__ = ["MAX_ROW_KERNELS", "PREPARE_GENERIC", "GenericPrepare", "packed_matmul"]

_F32 = np.dtype(np.float32)
_MISSING: Any = object()  # "no kernel made for this row count yet" (None records one that cannot be made)
MAX_ROW_KERNELS = 32  # row counts one node keeps a primitive for (decode: batch; prompt: batch x length)

Kernel = Callable[..., Any]
GenericPrepare = Callable[[Mapping[str, Any], Sequence[TensorDesc | None], Sequence[np.ndarray | None],
                           Sequence[TensorDesc | None], Kernel], BoundKernel | None]


def _eligible() -> bool:
    """oneDNN loads, is allowed (``PYCANN_PROVIDERS``) and the CPU has AVX-512 (brgemm)."""
    from pycann.kernels import providers
    from pycann.kernels.providers import choice_table

    return choice_table.has_avx512() and providers.available("onednn")


def packed_matmul(b: np.ndarray, bias: np.ndarray | None, unary: Any, residual: bool,
                  fallback: Kernel, epilogue: Callable[[np.ndarray], Any] | None = None) -> BoundKernel | None:
    """``act(A @ b + bias + residual)`` for any A of shape ``(..., K)`` (float32) with ``b`` a
    constant ``(K, N)`` float32 matrix packed once (``onednn_packed``), as a kernel
    ``k(inputs, attrs) -> [y]`` (inputs[0]: A; inputs[3]: the residual when ``residual``, of the
    result's shape ``(..., N)``). ``bias``: N float32 values or None; ``unary``: a oneDNN eltwise
    post-op (``onednn.onednn_unary``) or None; ``epilogue``: applied in place to the result after
    the post-ops (an activation run in numpy). Calls it cannot run go to ``fallback(inputs, attrs)``.
    None when oneDNN's implementation for the packed weight is not brgemm (no AVX-512) or the
    product is below ``onednn_matmul.SMALL_FLOPS`` at one row."""
    from pycann.kernels.providers import onednn_matmul

    if b.ndim != 2 or b.dtype != _F32 or b.size == 0:
        return None
    k, n = b.shape
    first = onednn_matmul.bound_matmul(b, bias, (1, k), unary, residual)  # packs b (shared by every row count)
    if first is None or not first.impl.startswith("brg"):
        return None
    # (the weight's layout follows the row counts: packed, or transposed for one-row calls)
    forms = AdaptiveMatmul(b, bias, unary, residual, first)
    row_kernel = forms.kernel_for

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        x = inputs[0]
        if x.__class__ is not np.ndarray or x.dtype != _F32 or x.ndim < 2 or x.shape[-1] != k:
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        rows = x.size // k
        y_shape = x.shape[:-1] + (n,)
        r = None
        if residual:
            r = inputs[3]
            if not isinstance(r, np.ndarray) or r.shape != y_shape:
                return fallback(inputs, attrs)  # type: ignore[no-any-return]
            r = r.reshape(rows, n)
        kb = row_kernel(rows) if rows else None
        if kb is None:
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        x2 = x.reshape(rows, k) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(rows, k)
        y = kb.run([x2, None, None, r], attrs)[0]
        if epilogue is not None:
            epilogue(y)
        return [y.reshape(y_shape)]

    return BoundKernel(kernel, threads=Threads.OPENMP, packing=Packing.PACKED, keep=(b, bias, forms), impl=first.impl)


def _unary(attrs: Mapping[str, Any]) -> tuple[bool, Any, Callable[[np.ndarray], Any] | None]:
    """(ok, oneDNN post-op, numpy epilogue) for the node's activation. oneDNN runs it as a post-op
    unless it would map NaN to a number (ReLU, Clip...: ONNX Runtime keeps NaN; the static binder
    guards those per call) or oneDNN lacks it: then numpy applies it after the product, as the
    generic kernel does. Not ok with a post scale/shift oneDNN cannot take."""
    from pycann.kernels.bind import _dnnl_post_ops
    from pycann.kernels.providers import nan_guard
    from pycann.ops import fused

    ok, unary = _dnnl_post_ops(attrs)
    if ok and not nan_guard.drops_nan(unary):
        return True, unary, None
    if fused.post_affine(attrs) is not None:
        return False, None, None
    name, al, be = fused._act(attrs)
    return True, None, lambda y: fused.apply_activation(y, name, al, be)


def _bias(ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None], i: int,
          n: int) -> tuple[bool, np.ndarray | None]:
    """(ok, bias) for optional input ``i``: absent, or a constant float32 row of ``n`` values."""
    if len(ins) <= i or ins[i] is None:
        return True, None
    c = consts[i] if len(consts) > i else None
    if c is not None and c.ndim == 0:  # a scalar C (Gemm's C broadcasts): a row when N is 1
        c = c.reshape(1)
    if c is None or c.dtype != _F32 or c.size != n or c.shape[-1] != n:
        return False, None
    return True, c


def _matmul(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
            outs: Sequence[TensorDesc | None], fallback: Kernel) -> BoundKernel | None:
    """MatMul / FusedMatMul (``ops/fused.py``: bias input 2, residual input 3, activation)."""
    b = consts[1] if len(consts) > 1 else None
    if algorithm.of(attrs) not in (None, ONEDNN_MATMUL) or b is None or ins[0] is None or ins[0].dtype != 1:
        return None
    if b.ndim > 2 and all(d == 1 for d in b.shape[:-2]):
        b = b.reshape(b.shape[-2:])
    if b.ndim != 2 or b.dtype != _F32 or not _eligible():
        return None
    ok, bias = _bias(ins, consts, 2, b.shape[1])
    act_ok, unary, epilogue = _unary(attrs)
    if not (ok and act_ok):
        return None
    return packed_matmul(b, bias, unary, len(ins) > 3 and ins[3] is not None, fallback, epilogue)


def _gemm(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
          outs: Sequence[TensorDesc | None], fallback: Kernel) -> BoundKernel | None:
    """Gemm with ``transA`` 0 and ``alpha`` 1: ``A @ op(B) + beta * C`` with C a constant row."""
    b = consts[1] if len(consts) > 1 else None
    if algorithm.of(attrs) not in (None, ONEDNN_GEMM) or b is None or b.ndim != 2 or b.dtype != _F32 \
            or ins[0] is None or ins[0].dtype != 1 or int(attrs.get("transA", 0)) or float(attrs.get("alpha", 1.0)) != 1.0:
        return None
    if not _eligible():
        return None
    bt = b.T if int(attrs.get("transB", 0)) else b  # a strided view: the one reorder reads it transposed
    ok, c = _bias(ins, consts, 2, bt.shape[1])
    if not ok:
        return None
    beta = float(attrs.get("beta", 1.0))
    bias = None if c is None or beta == 0.0 else c if beta == 1.0 else (c * np.float32(beta)).astype(_F32)

    return packed_matmul(bt, bias, None, False, fallback)  # A is 2-D (ONNX Gemm)


def _layer_norm(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
                outs: Sequence[TensorDesc | None], fallback: Kernel) -> BoundKernel | None:
    """LayerNormalization with Y only, float32 X whose normalised dims (``axis`` on) are static,
    ``stash_type`` float32 and constant float32 Scale / B: oneDNN's layer normalization
    (``onednn_norm.bound_layer_norm``), one primitive per row count, as the static binder uses
    for a fixed shape. Why: numpy's passes cost ~30 us on a decode step's 768-value row, oneDNN's
    ~4 us, and GPT-2 runs 13 a step. Other calls (another dtype or rank) run ``fallback``."""
    x = ins[0] if ins else None
    scale = consts[1] if len(consts) > 1 else None
    bias = consts[2] if len(consts) > 2 else None
    if x is None or x.dtype != 1 or x.shape is None or not x.shape or scale is None or scale.dtype != _F32:
        return None
    if len(ins) > 2 and ins[2] is not None and (bias is None or bias.dtype != _F32):
        return None
    if len([o for o in outs if o is not None]) != 1 or int(attrs.get("stash_type", 1)) != 1:
        return None
    rank, axis = len(x.shape), int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        return None  # the generic kernel raises the error
    tail = x.shape[axis % rank:]
    if not all(isinstance(d, int) for d in tail):
        return None
    n = int(np.prod([int(d) for d in tail], dtype=np.int64))  # type: ignore[arg-type]
    from pycann.kernels import providers

    if n == 0 or scale.size != n or (bias is not None and bias.size != n) or not providers.available("onednn"):
        return None
    from pycann.kernels.providers import onednn_norm

    eps = float(attrs.get("epsilon", 1e-5))
    table: dict[int, BoundKernel | None] = {}
    lock = omp_fork.fork_safe(threading.Lock())

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        x = inputs[0]
        if x.__class__ is not np.ndarray or x.dtype != _F32 or x.ndim != rank or x.size == 0 \
                or x.shape[axis % rank:] != tail:
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        rows = x.size // n
        kb = table.get(rows, _MISSING)  # one lookup: another thread may evict between two
        if kb is _MISSING:
            kb = onednn_norm.bound_layer_norm((rows, n), n, scale, bias, eps)
            remember(table, lock, rows, kb, MAX_ROW_KERNELS)
        if kb is None:
            return fallback(inputs, attrs)  # type: ignore[no-any-return]
        x2 = x.reshape(rows, n) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(rows, n)
        return [kb.run([x2], attrs)[0].reshape(x.shape)]

    return BoundKernel(kernel, threads=Threads.OPENMP, keep=(scale, bias, table), impl="onednn:layer_norm")


# (domain, op_type) -> prepare(attrs, in_descs, in_consts, out_descs, generic kernel) -> kernel | None
PREPARE_GENERIC: dict[tuple[str, str], GenericPrepare] = {
    ("", "MatMul"): _matmul,
    ("pycann", "FusedMatMul"): _matmul,
    ("", "Gemm"): _gemm,
    ("", "LayerNormalization"): _layer_norm,
    ("", "Conv"): bind_generic_conv.conv,
    ("pycann", "FusedConv"): bind_generic_conv.conv,
}
