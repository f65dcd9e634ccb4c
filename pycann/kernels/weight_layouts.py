"""A shape-generic MatMul's constant weight, held in the layout its calls need: one layout at a time.

``bind_generic.packed_matmul`` binds a MatMul / Gemm with a constant (K, N) B once per model, and
its row count changes per call (a prompt of 32 rows, then one row per decode step, or four at
batch 4). oneDNN's brgemm kernel over B packed in its blocks wins from a few rows on, but a
one-row product (a GEMV) streams those blocks at ~19-23 GB/s on this kind of Xeon, where oneDNN's
``gemm:jit`` gemv kernel streams B^T stored N x K at ~24-27 (``bench/gemv_layouts.py``, weights
cold; GPT-2's 768 x 50257 LM head 11.3 vs 5.4 ms). Where a model's weights stay in a large L3 both
stream at ~30 GB/s: GPT-2 6L decode b1 gains 1.6-6 % per token on this Xeon (480 MB L3; bench/RESULTS.md,
twenty-ninth session); larger models, or CPUs with a smaller L3, read from memory. Holding both
layouts would double the weights' memory
(issue 15 caps decode RSS at 1.2x ONNX Runtime's), so a node holds one:

* **packed** (at bind): every row count runs brgemm over the packed B, as before;
* after ``GEMV_AFTER`` one-row calls in a row, B^T is read back from the packed copy by one
  reorder (not from the original B, whose mapped .om pages the loader dropped from memory), the
  packing is forgotten (freed when the last kernel bound to it goes) and one-row calls run
  ``gemm:jit`` over B^T (**gemv**); calls of 2 or 3 rows run there too;
* a call of ``REPACK_ROWS`` rows or more packs B again, read from B^T, and drops B^T.

A switch costs one pass over the weight (about one GEMV) per node. The two layouts' results
differ by float32 rounding only (oneDNN sums in another order). A switch that cannot be made
(oneDNN declines gemm:jit, a reorder fails) leaves the node packed for good. Thread-safe: a call
racing a switch runs on the layout it found, or on the node's generic kernel.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from pycann.kernels.bind_base import remember
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork

GEMV_AFTER = 16  # one-row calls in a row before the node moves its weight to the gemv layout
REPACK_ROWS = 4  # a call of this many rows or more moves it back (brgemm wins clearly from 4 rows)
MAX_ROW_KERNELS = 32  # row counts a layout keeps a primitive for

# B^T per weight memory (address, shape, strides, dtype), while a node holds it: nodes sharing one
# weight initializer (ALBERT's layers, tied projections) share one B^T as they shared one packing
# (each made its own: N copies of the weight where the packed layout held one). A node keeps its
# ``b`` alive with its B^T, so a live entry's address is that weight's.
_transposed: weakref.WeakValueDictionary[tuple[Any, ...], np.ndarray] = weakref.WeakValueDictionary()
_transposed_lock = omp_fork.fork_safe(threading.Lock())


class AdaptiveMatmul:
    """``act(A @ B + bias + residual)`` kernels per row count over B in the layout of ``layout``.

    ``b``: the (K, N) float32 weight; ``first``: ``onednn_matmul.bound_matmul(b, ...)`` at one row
    (it packed b); ``bias``, ``unary``, ``residual`` as ``bound_matmul`` takes them."""

    def __init__(self, b: np.ndarray, bias: np.ndarray | None, unary: Any, residual: bool, first: BoundKernel) -> None:
        self.b, self.bias, self.unary, self.residual = b, bias, unary, residual
        self.k, self.n = b.shape
        self.packed: dict[int, BoundKernel | None] | None = {1: first}
        self.gemv: dict[int, BoundKernel | None] | None = None
        self.bt: np.ndarray | None = None  # B^T (N x K) while the layout is gemv
        self.streak = 0  # one-row calls in a row (packed layout); -1: never switch
        self.switches = 0
        self._table_lock = omp_fork.fork_safe(threading.Lock())
        self._switch_lock = omp_fork.fork_safe(threading.Lock())

    @property
    def layout(self) -> str:
        """``packed`` or ``gemv``."""
        return "packed" if self.gemv is None else "gemv"

    def kernel_for(self, rows: int) -> BoundKernel | None:
        """The kernel for A of ``rows`` rows (>= 1), switching layouts as the module docstring says;
        None when none can be made (the caller runs its generic kernel)."""
        gemv = self.gemv
        if gemv is None:
            if rows == 1 and self.streak >= 0:
                self.streak += 1
                if self.streak >= GEMV_AFTER:
                    self._to_gemv()
                    gemv = self.gemv
            elif rows != 1 and self.streak > 0:
                self.streak = 0
        elif rows >= REPACK_ROWS:
            self._to_packed()
            gemv = self.gemv
        if gemv is not None:
            return self._kernel(gemv, rows, True)
        packed = self.packed
        return self._kernel(packed, rows, False) if packed is not None else None

    def _kernel(self, table: dict[int, BoundKernel | None], rows: int, gemv: bool) -> BoundKernel | None:
        from pycann.kernels.providers import onednn_matmul

        kb = table.get(rows, False)
        if kb is not False:
            return kb  # type: ignore[return-value]
        if table is not (self.gemv if gemv else self.packed):
            return None  # a switch detached this table meanwhile: no new primitive over a dropped layout
        bt = self.bt
        if gemv:
            if bt is None:
                return None
            kb = onednn_matmul.bound_matmul_gemv(bt, self.bias, (rows, self.k), self.unary, self.residual)
        else:  # reuses the packed B (a row count whose layout differs packs again, from b)
            kb = onednn_matmul.bound_matmul(self.b, self.bias, (rows, self.k), self.unary, self.residual)
        remember(table, self._table_lock, rows, kb, MAX_ROW_KERNELS, keep=1)  # (1 made the layout)
        return kb

    def _to_gemv(self) -> None:
        from pycann.kernels.providers import onednn_matmul, onednn_packed

        if not self._switch_lock.acquire(blocking=False):
            return  # another thread switches now (or one held it at a fork): this call stays packed
        try:
            packed = self.packed
            first = packed.get(1) if packed is not None else None
            if self.gemv is not None or first is None:
                return
            key = onednn_packed.weight_key(self.b)
            with _transposed_lock:
                bt = _transposed.get(key)
            if bt is None:
                bt = onednn_matmul.transposed_weight(first)
                if bt is not None:
                    with _transposed_lock:
                        bt = _transposed.setdefault(key, bt)
            kb = None if bt is None else onednn_matmul.bound_matmul_gemv(bt, self.bias, (1, self.k), self.unary,
                                                                         self.residual)
            if kb is None:
                self.streak = -1  # (not offered here: stay packed, and stop counting)
                return
            self.bt, self.gemv, self.packed = bt, {1: kb}, None
            onednn_packed.forget(self.b)
            self.switches += 1
        except Exception:  # noqa: BLE001 - a failed switch keeps the working layout
            self.streak = -1
        finally:
            self._switch_lock.release()

    def _to_packed(self) -> None:
        from pycann.kernels.providers import onednn_matmul

        if not self._switch_lock.acquire(blocking=False):
            return
        try:
            bt = self.bt
            if self.gemv is None or bt is None:
                return
            first = onednn_matmul.bound_matmul(self.b, self.bias, (1, self.k), self.unary, self.residual, source_t=bt)
            if first is None:
                return
            self.packed, self.gemv, self.bt, self.streak = {1: first}, None, None, 0
            self.switches += 1
        finally:
            self._switch_lock.release()
