"""``BoundKernel``: a kernel bound at plan time to one static signature, with what the executor
must know about it as typed fields (before, attributes set on closures and read with getattr).

A binder (``bind.BINDERS``) or a provider's ``bound_*`` function fixes everything but the data
(a Reshape's target shape, a oneDNN primitive with its packed weight and post-ops) and returns one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Layout, Packing, Threads


@dataclass(frozen=True, eq=False)
class BoundKernel:
    """One node's kernel for one static signature.

    * ``run(inputs, attrs) -> outputs``, or with ``writes_out`` ``run(inputs, attrs, outs)``
      writing into the executor's arena views ``outs`` (it may still return other arrays; the
      executor's hand-off takes what it returns);
    * ``inplace``: output 0 may be planned over the buffer of the input the memory plan names
      (``ge/planning/candidates.INPLACE``): the kernel reads that input before writing;
    * ``threads``: ``OPENMP`` when it runs on oneDNN's / torch's pool (the executor then holds
      numpy's OpenBLAS to one thread while the plan runs);
    * ``layout``, ``packing``: the layout of its rank-4 output and what it did to the weight;
    * ``plan_bytes``: memory it owns beyond the model (counted against the plan cache's bound);
    * ``keep``: native objects ``run`` addresses by pointer (primitives, packed weights, memory
      descriptors): they live as long as the kernel;
    * ``impl``: the library's implementation name (oneDNN's ``brg:avx512_core``...), for reports;
    * ``guarded``: for a kernel wrapped by a NaN/overflow guard, the unguarded one.
    """

    run: Callable[..., Any]
    writes_out: bool = False
    inplace: bool = False
    threads: Threads = Threads.BLAS
    layout: Layout = Layout.NCHW
    packing: Packing = Packing.NONE
    plan_bytes: int = 0
    keep: Any = None
    impl: str = ""
    guarded: BoundKernel | None = None

    def __call__(self, *args: Any) -> list[np.ndarray]:
        """``run(*args)`` (tests and direct callers; the executor calls ``run`` itself)."""
        return self.run(*args)  # type: ignore[no-any-return]

    @property
    def openmp(self) -> bool:
        """Runs on an OpenMP pool (``threads is Threads.OPENMP``)."""
        return self.threads is Threads.OPENMP


def bound(kernel: Callable[..., Any] | BoundKernel | None) -> BoundKernel | None:
    """``kernel`` as a ``BoundKernel`` (a plain function: one that writes no arena view)."""
    if kernel is None or isinstance(kernel, BoundKernel):
        return kernel
    return BoundKernel(kernel)
