"""MatMul and Gemm computed by the kernel providers: ``ops/matmul.py``'s kernels (one copy of the
semantics) with the float product taken from the algorithm GE's KernelSelection pass recorded in
the node attribute ``_algo`` (e.g. ``onednn:matmul``), or without one (shapes unknown at compile
time) the static table's choice for the concrete shapes (float32; float64 takes numpy's BLAS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.kernels import algorithm
from pycann.kernels.algorithm import ONEDNN_MATMUL_BF16_PACKED
from pycann.kernels.providers import GemmSpec, onednn_bf16, resolve
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers.torch_onednn import bf16_matmul as _torch_bf16_matmul
from pycann.ops import matmul as ref


def float_matmul(a: np.ndarray, b: np.ndarray, acc: np.dtype, attrs: Mapping[str, Any],
                 out: np.ndarray | None) -> np.ndarray:
    """a @ b in the float dtype ``acc`` by the recorded provider algorithm (``ops.matmul.FloatMatMul``)."""
    a, b = a.astype(acc, copy=False), b.astype(acc, copy=False)
    algo = algorithm.of(attrs)
    if algo is None and acc != np.float32:
        return nb.matmul(a, b, out)
    # no ``_algo`` (shapes unknown at compile time): the static choice for these shapes
    return resolve(algo, lambda: GemmSpec("MatMul", a.shape, b.shape, acc.name)).fn(a, b, out)


def float_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
               attrs: Mapping[str, Any], out: np.ndarray | None) -> np.ndarray:
    """Gemm's float product by the recorded provider algorithm (``ops.matmul.FloatGemm``)."""
    algo = algorithm.of(attrs)
    if algo is None and a.dtype != np.float32:
        return nb.gemm(a, b, c, alpha, beta, out)
    return resolve(algo, lambda: GemmSpec("Gemm", a.shape, b.shape, a.dtype.name)).fn(a, b, c, alpha, beta, out)


def bf16_matmul(a: np.ndarray, b: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """bf16 GEMM with fp32 accumulation and an fp32 result unless the node's recorded algorithm is
    numpy's: oneDNN's native bf16 matmul (``onednn_bf16``) where the CPU has it, else torch's."""
    if algorithm.is_numpy(attrs):
        return None
    y = onednn_bf16.matmul(a, b, packed=algorithm.of(attrs) == ONEDNN_MATMUL_BF16_PACKED)
    if y is not None:
        return y
    return _torch_bf16_matmul(a, b)  # type: ignore[no-any-return]


def k_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MatMul (``ops.matmul``) on the providers."""
    return ref._k_matmul(inputs, attrs, float_matmul, bf16_matmul)


def out_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """MatMul into the arena on the providers."""
    ref._out_matmul(inputs, attrs, outs, float_matmul, bf16_matmul)


def k_gemm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Gemm (``ops.matmul``) on the providers."""
    return ref._k_gemm(inputs, attrs, float_gemm)


def out_gemm(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """Gemm into the arena on the providers."""
    ref._out_gemm(inputs, attrs, outs, float_gemm)
