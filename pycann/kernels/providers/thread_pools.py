"""One thread pool at a time: whether a plan's kernels run on an OpenMP pool (torch's or libdnnl's)
and the context that holds numpy's OpenBLAS to one thread meanwhile.

Separate from kernel selection (``pycann.kernels.providers``): these answer the executor's question
about a plan's chosen algorithms, not which algorithm to choose. ``providers`` is read as a module
(``providers.available`` at call time) so this module does not import names from the package that
is still initialising, and a patched ``available`` answers here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from pycann.kernels import providers
from pycann.kernels.algorithm import Algorithm, Threads

_blas_limit: Any = None


def blas_single_thread() -> Any:
    """A context manager that keeps numpy's BLAS (OpenBLAS) at one thread while a plan that runs
    torch (oneDNN/OpenMP) kernels executes: on 2 cores the two pools' spinning workers otherwise
    fight (bench/RESULTS.md: PP-OCRv4 rec 40 -> 18 ms). numpy's wheel OpenBLAS is set directly
    (``blas_threads``); another BLAS through ``threadpoolctl`` (installed with the ``models`` extra,
    beside torch); without either, a no-op. ~1-6 us per use."""
    global _blas_limit
    if _blas_limit is None:
        from pycann.kernels.providers import blas_threads

        wheel = blas_threads.numpy_wheel_openblas()
        if wheel is not None:
            _blas_limit = lambda: blas_threads.OneThread(*wheel)  # noqa: E731
        else:
            try:
                from threadpoolctl import ThreadpoolController

                blas = ThreadpoolController().select(user_api="blas")
                _blas_limit = (lambda: blas.limit(limits=1)) if blas.lib_controllers else contextlib.nullcontext
            except Exception:  # threadpoolctl missing or unable to inspect: leave BLAS alone
                _blas_limit = contextlib.nullcontext
    return _blas_limit()


def uses_torch(algos: Iterable[Algorithm | None]) -> bool:
    """True when any recorded algorithm is a torch one."""
    return any(a is not None and a.provider == "torch" for a in algos)


def runtime_openmp(op_types: Any) -> bool:
    """True when nodes of these op types, with no algorithm recorded (a shape-generic plan picks
    per call), may run on an OpenMP pool: float MatMul/Gemm/Conv take oneDNN or torch from
    ``STATIC_TABLE`` whenever one is available."""
    return any(t in _RUNTIME_DISPATCH for t in op_types) and (providers.available("onednn") or providers.available("torch"))


_RUNTIME_DISPATCH = frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "Conv", "FusedConv", "ConvTranspose"})


def uses_openmp(algos: Iterable[Algorithm | None]) -> bool:
    """True when any recorded algorithm runs on an OpenMP pool (torch's or libdnnl's: both spin
    after a call, so numpy's OpenBLAS pool must stay at one thread meanwhile)."""
    return any(a is not None and a.threads is Threads.OPENMP for a in algos)
