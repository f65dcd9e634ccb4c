"""The explicit tables of kernel selection: ``PROVIDERS`` (which kernel libraries exist, in
preference order) and ``STATIC_TABLE`` (the default algorithms per op type and shape class), with
``shape_class``, the rule that picks a spec's row, and its thresholds.

Separate from the code that resolves a choice (``pycann.kernels.providers``: availability, lookup,
fallback) so that editing a preference or a threshold touches data, not logic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from pycann.kernels.algorithm import (
    NUMPY_COL2IM,
    NUMPY_DEPTHWISE,
    NUMPY_GEMM,
    NUMPY_GEMM_1X1,
    NUMPY_IM2COL_GEMM,
    NUMPY_MATMUL,
    ONEDNN_CONV_NHWC,
    ONEDNN_CONV_TRANSPOSE_NHWC,
    ONEDNN_CONV_WINOGRAD,
    ONEDNN_GEMM,
    ONEDNN_MATMUL,
    TORCH_ADDMM,
    TORCH_CONV1D,
    TORCH_CONV2D,
    TORCH_CONV2D_NHWC,
    TORCH_CONV2D_PACKED,
    TORCH_CONV3D,
    TORCH_CONV_TRANSPOSE,
    TORCH_CONV_TRANSPOSE_NHWC,
    TORCH_MATMUL,
    Algorithm,
)
from pycann.kernels.providers.specs import ConvSpec, GemmSpec, OpSpec


@dataclass(frozen=True)
class Provider:
    """A kernel library: ``module`` defines ``available() -> bool`` and ``ALGORITHMS`` (its
    ``Implementation`` list)."""

    name: str
    module: str
    doc: str


# The registry: explicit, in preference order for ties. Adding a provider = one line here
# plus a module with ``available()`` and ``ALGORITHMS``.
PROVIDERS: dict[str, Provider] = {
    "numpy": Provider("numpy", "pycann.kernels.providers.numpy_blas", "numpy's BLAS (OpenBLAS in the wheels); always there"),
    "onednn": Provider("onednn", "pycann.kernels.providers.onednn",
                       "oneDNN's C API (onednn-cpu-gomp wheel) via ctypes: conv, deconv, matmul, ...; optional, "
                       "~14 MB; its Winograd conv also needs oneDNN v2's library (scripts/fetch_onednn2.py)"),
    "torch": Provider("torch", "pycann.kernels.providers.torch_onednn", "PyTorch CPU: oneDNN conv, MKL GEMM; optional"),
}

# Default choice per (op type, shape class): first available algorithm that supports the
# spec wins; then any other available one; the numpy general algorithm always remains.
# Measured on Zen 5 (2 cores, AVX-512) with the ResNet-50 and PP-OCRv4 det shapes: see docs/kernels.md.
STATIC_TABLE: dict[tuple[str, str], tuple[Algorithm, ...]] = {
    # Tiny convs (Silero VAD, PP-OCR cls): a torch call costs ~20-200 us of dispatch and
    # thread-pool wake-up, more than the arithmetic; numpy's single call wins.
    ("Conv", "tiny"): (NUMPY_GEMM_1X1, NUMPY_DEPTHWISE, NUMPY_IM2COL_GEMM),
    # Winograd first where it applies (3x3 stride 1, channels in 16s; onednn_wino.eligible): ~1.5-2x
    # faster than the direct conv on ResNet-50's 3x3 layers; only when approximate kernels are allowed.
    ("Conv", "weight_bound"): (ONEDNN_CONV_WINOGRAD, ONEDNN_CONV_NHWC, TORCH_CONV2D_NHWC, TORCH_CONV2D_PACKED, TORCH_CONV2D, NUMPY_IM2COL_GEMM),
    ("Conv", "pointwise"): (ONEDNN_CONV_NHWC, TORCH_CONV2D_NHWC, TORCH_CONV2D, TORCH_CONV1D, TORCH_CONV3D, NUMPY_GEMM_1X1),
    ("Conv", "depthwise"): (ONEDNN_CONV_NHWC, TORCH_CONV2D_NHWC, TORCH_CONV2D, TORCH_CONV1D, TORCH_CONV3D, NUMPY_DEPTHWISE),
    ("Conv", "grouped"): (ONEDNN_CONV_NHWC, TORCH_CONV2D_NHWC, TORCH_CONV2D, TORCH_CONV1D, TORCH_CONV3D, NUMPY_IM2COL_GEMM),
    ("Conv", "regular"): (ONEDNN_CONV_WINOGRAD, ONEDNN_CONV_NHWC, TORCH_CONV2D_NHWC, TORCH_CONV2D, TORCH_CONV1D, TORCH_CONV3D, NUMPY_IM2COL_GEMM),
    ("ConvTranspose", "any"): (ONEDNN_CONV_TRANSPOSE_NHWC, TORCH_CONV_TRANSPOSE_NHWC, TORCH_CONV_TRANSPOSE, NUMPY_COL2IM),
    # oneDNN's AVX-512 brgemm matmul: ~2x OpenBLAS held to AVX2 (docs/kernels.md); it hands
    # products under 1 MFLOP to numpy itself.
    ("MatMul", "any"): (ONEDNN_MATMUL, NUMPY_MATMUL, TORCH_MATMUL),
    # Under GEMM_TINY_FLOPS oneDNN would hand the product to numpy anyway: asking for it first
    # would load libdnnl (~40 MB of RSS) into a model that never runs it (PP-OCR cls's classifier).
    ("MatMul", "tiny"): (NUMPY_MATMUL, ONEDNN_MATMUL, TORCH_MATMUL),
    ("Gemm", "tiny"): (NUMPY_GEMM, ONEDNN_GEMM, TORCH_ADDMM),
    # 2-64 rows against a 2-D weight (decode steps of a small batch) on a CPU without AVX-512:
    # oneDNN has no brgemm there and its jit gemm runs 1.2-2.5x slower than OpenBLAS (GPT-2
    # shapes, one thread; docs/dynamic-shapes.md). One row (a GEMV) stays on oneDNN: as fast per
    # thread, and its OpenMP pool waits passively. With AVX-512 these take the "any" row.
    ("MatMul", "skinny"): (NUMPY_MATMUL, ONEDNN_MATMUL, TORCH_MATMUL),
    ("Gemm", "skinny"): (NUMPY_GEMM, ONEDNN_GEMM, TORCH_ADDMM),
    ("Gemm", "any"): (ONEDNN_GEMM, NUMPY_GEMM, TORCH_ADDMM),
}


def weight_bound(spec: ConvSpec) -> bool:
    """A 2-D float32 conv with >= 256 KiB of weights that outweigh its input (x2), or a spatial
    kernel with >= 512 KiB of weights: prepacking the weight once wins there (ResNet-50's late
    layers); below 256 KiB the packed call's fixed cost (~15 us) loses."""
    if spec.op_type != "Conv" or spec.group != 1 or spec.n_spatial != 2 or spec.dtype != "float32":
        return False
    w_bytes = int(math.prod(spec.w_shape)) * 4
    x_bytes = int(math.prod(spec.x_shape)) * 4
    if w_bytes < 256 << 10:
        return False
    return w_bytes >= 2 * x_bytes or (int(math.prod(spec.win.kernel)) > 1 and w_bytes >= 512 << 10)


TINY_FLOPS = 2_000_000  # below this a conv is dispatch-bound (measured on Silero VAD's 1-D convs)
# 2-D convs: a bound oneDNN conv costs ~6-10 us a call (Python, OpenMP fork/join), and beats numpy
# from ~0.2 MFLOP on (PP-OCR cls: depthwise 5x5 100-145 us in numpy vs 19-26 us; docs/kernels.md)
TINY_FLOPS_2D = 200_000
GEMM_TINY_FLOPS = 1 << 20  # = onednn_matmul.SMALL_FLOPS: below this a product stays on numpy


SKINNY_ROWS = 64  # 2..this many rows (batch x M against a 2-D B): the "skinny" GEMM row


@lru_cache(maxsize=1)
def has_avx512() -> bool:
    """True when the CPU advertises AVX-512F (Linux /proc/cpuinfo; elsewhere assumed True, the
    tuning of STATIC_TABLE)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return True


def shape_class(spec: OpSpec) -> str:
    """The ``STATIC_TABLE`` row of a spec."""
    if isinstance(spec, GemmSpec):
        if spec.flops < GEMM_TINY_FLOPS:
            return "tiny"
        batch, m, _, _ = spec.mkn
        b_2d = len(spec.b_shape) == 2
        return "skinny" if b_2d and 2 <= batch * m <= SKINNY_ROWS and not has_avx512() else "any"
    if spec.op_type == "ConvTranspose":
        return "any"
    if spec.flops < (TINY_FLOPS_2D if spec.n_spatial == 2 else TINY_FLOPS):
        return "tiny"
    if spec.depthwise:
        return "depthwise"
    if spec.group > 1:
        return "grouped"
    if weight_bound(spec):
        return "weight_bound"
    if spec.pointwise:
        return "pointwise"
    return "regular"
