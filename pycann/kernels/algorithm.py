"""What a kernel algorithm is, as data: ``Algorithm`` and the table of every algorithm pycann has.

An *algorithm* is one way a provider (a kernel library: numpy's BLAS, oneDNN, PyTorch) computes
one op family. Its properties are fields, read by the passes and the executor without importing
the provider:

* ``layout``: the layout of its result (``NHWC``: channels-last strides under the logical NCHW
  shape; GE's LayoutSelection chains such convs);
* ``packing``: what it does to a constant weight once (``PACKED``: reordered into the library's
  blocked layout and cached per weight array; ``TRANSFORMED``: Winograd-transformed);
* ``threads``: the thread pool it runs on (``OPENMP`` pools spin after a call, so a plan running
  one holds numpy's OpenBLAS to one thread: ``providers.thread_pools.blas_single_thread``);
* ``writes_out``: it computes into a given output buffer (else binding it to the executor's arena
  costs a copy per call);
* ``exact``: it sums like the direct product up to reordering (Winograd does not; only
  ``--op_select_implmode high_performance`` records one).

The node attribute ``_algo`` holds an ``Algorithm`` inside the process. Its text form
``"<provider>:<name>"`` (``key``) exists only at the boundaries: the .om manifest (``ge/om/serialize.py``),
the AOE knowledge bank, logs and reports; ``parse`` turns it back.

The implementations (``supports(spec)``, ``fn``) are in the provider modules
(``providers/numpy_blas.py``, ``onednn*.py``, ``torch_onednn.py``), which import these constants.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

log = logging.getLogger("pycann.kernels")


class Layout(Enum):
    """Memory layout of an algorithm's rank-4 result (the logical shape is NCHW either way)."""

    NCHW = "NCHW"
    NHWC = "NHWC"


class Packing(Enum):
    """What an algorithm does to a constant weight before the first call."""

    NONE = "none"
    PACKED = "packed"  # reordered once into the library's layout, cached per weight array
    TRANSFORMED = "transformed"  # Winograd-transformed once (plan_bytes of the bound kernel)


class Threads(Enum):
    """The thread pool an algorithm runs on."""

    BLAS = "blas"  # numpy's BLAS (OpenBLAS threads in the wheels)
    OPENMP = "openmp"  # oneDNN's / torch's OpenMP pool (spins after each call)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of one provider for one op family (hashable; compared by value)."""

    provider: str
    name: str
    op_type: str  # Conv, ConvTranspose, MatMul or Gemm
    layout: Layout = Layout.NCHW
    packing: Packing = Packing.NONE
    threads: Threads = Threads.BLAS
    writes_out: bool = True
    exact: bool = True

    @property
    def key(self) -> str:
        """``"<provider>:<name>"``: the text form written to .om files, banks and reports."""
        return f"{self.provider}:{self.name}"

    def __str__(self) -> str:
        return self.key


_NHWC, _PACKED, _OMP = Layout.NHWC, Packing.PACKED, Threads.OPENMP

# ---- numpy: pycann's own kernels (ops/nn/im2col.py, ops/matmul.py); always there
NUMPY_GEMM_1X1 = Algorithm("numpy", "gemm_1x1", "Conv")
NUMPY_DEPTHWISE = Algorithm("numpy", "depthwise", "Conv")
NUMPY_IM2COL_GEMM = Algorithm("numpy", "im2col_gemm", "Conv")
NUMPY_COL2IM = Algorithm("numpy", "col2im", "ConvTranspose", writes_out=False)
NUMPY_MATMUL = Algorithm("numpy", "matmul", "MatMul")
NUMPY_GEMM = Algorithm("numpy", "gemm", "Gemm")
# ---- onednn: oneDNN's C API through ctypes (providers/onednn*.py)
ONEDNN_CONV_NHWC = Algorithm("onednn", "conv_nhwc", "Conv", _NHWC, _PACKED, _OMP)
ONEDNN_CONV_WINOGRAD = Algorithm("onednn", "conv_winograd", "Conv", _NHWC, Packing.TRANSFORMED, _OMP, exact=False)
ONEDNN_CONV_TRANSPOSE_NHWC = Algorithm("onednn", "conv_transpose_nhwc", "ConvTranspose", _NHWC, _PACKED, _OMP)
ONEDNN_MATMUL = Algorithm("onednn", "matmul", "MatMul", threads=_OMP)
ONEDNN_GEMM = Algorithm("onednn", "gemm", "Gemm", threads=_OMP)
# native bfloat16 kernels (providers/onednn_bf16.py) for the bf16 precision modes' matrix ops
ONEDNN_CONV_BF16 = Algorithm("onednn", "conv_bf16", "Conv", _NHWC, threads=_OMP)
ONEDNN_MATMUL_BF16 = Algorithm("onednn", "matmul_bf16", "MatMul", threads=_OMP)
ONEDNN_MATMUL_BF16_PACKED = Algorithm("onednn", "matmul_bf16_packed", "MatMul", threads=_OMP)  # constant B
# ---- torch: PyTorch's oneDNN convolutions and MKL GEMMs (providers/torch_onednn.py); results in
# torch's own buffers (writes_out False)
TORCH_CONV2D = Algorithm("torch", "conv2d", "Conv", threads=_OMP, writes_out=False)
TORCH_CONV2D_PACKED = Algorithm("torch", "conv2d_packed", "Conv", packing=_PACKED, threads=_OMP, writes_out=False)
TORCH_CONV2D_NHWC = Algorithm("torch", "conv2d_nhwc", "Conv", _NHWC, _PACKED, _OMP, writes_out=False)
TORCH_CONV1D = Algorithm("torch", "conv1d", "Conv", threads=_OMP, writes_out=False)
TORCH_CONV3D = Algorithm("torch", "conv3d", "Conv", threads=_OMP, writes_out=False)
TORCH_CONV_TRANSPOSE = Algorithm("torch", "conv_transpose", "ConvTranspose", threads=_OMP, writes_out=False)
TORCH_CONV_TRANSPOSE_NHWC = Algorithm("torch", "conv_transpose_nhwc", "ConvTranspose", _NHWC, _PACKED, _OMP,
                                      writes_out=False)
TORCH_MATMUL = Algorithm("torch", "matmul", "MatMul", threads=_OMP)
TORCH_ADDMM = Algorithm("torch", "addmm", "Gemm", threads=_OMP)

# Run time only, never recorded in an .om: the choice of the interim plan, which serves a new
# signature's calls while its own plan is built (``ge/run/plan.INTERIM_ALGOS``): numpy's kernel
# where creating a oneDNN primitive for the shape would cost more than numpy's run
# (``providers.INTERIM_NUMPY_FLOPS``), else the static choice.
INTERIM_CONV_TRANSPOSE = Algorithm("numpy", "interim", "ConvTranspose", writes_out=False)

# Every algorithm, per provider then op family (the preference order per shape is
# ``providers.STATIC_TABLE``).
ALGORITHMS: tuple[Algorithm, ...] = (
    NUMPY_GEMM_1X1, NUMPY_DEPTHWISE, NUMPY_IM2COL_GEMM, NUMPY_COL2IM, NUMPY_MATMUL, NUMPY_GEMM,
    ONEDNN_CONV_NHWC, ONEDNN_CONV_WINOGRAD, ONEDNN_CONV_TRANSPOSE_NHWC, ONEDNN_MATMUL, ONEDNN_GEMM,
    ONEDNN_CONV_BF16, ONEDNN_MATMUL_BF16, ONEDNN_MATMUL_BF16_PACKED,
    TORCH_CONV2D, TORCH_CONV2D_PACKED, TORCH_CONV2D_NHWC, TORCH_CONV1D, TORCH_CONV3D, TORCH_CONV_TRANSPOSE,
    TORCH_CONV_TRANSPOSE_NHWC, TORCH_MATMUL, TORCH_ADDMM,
)
BY_KEY: dict[str, Algorithm] = {a.key: a for a in ALGORITHMS}
# (domain, op type) -> the op family whose algorithms compute it (KernelSelection's targets; an .om
# node whose recorded algorithm is of another family drops it when read: ge/om/serialize.py)
FAMILIES: dict[tuple[str, str], str] = {
    ("", "Conv"): "Conv",
    ("", "ConvTranspose"): "ConvTranspose",
    ("", "MatMul"): "MatMul",
    ("", "Gemm"): "Gemm",
    ("pycann", "FusedConv"): "Conv",
    ("pycann", "FusedConvTranspose"): "ConvTranspose",
    ("pycann", "FusedMatMul"): "MatMul",
}
# The general algorithm of each op family (computes every valid input): the last resort.
FALLBACK: dict[str, Algorithm] = {"Conv": NUMPY_IM2COL_GEMM, "ConvTranspose": NUMPY_COL2IM,
                                  "MatMul": NUMPY_MATMUL, "Gemm": NUMPY_GEMM}
# The same provider's NCHW algorithm of a channels-last one (LayoutSelection's way back for a
# chain that stays NCHW); the onednn provider has none (its convolutions write channels-last only).
NCHW_TWIN: dict[Algorithm, Algorithm] = {TORCH_CONV2D_NHWC: TORCH_CONV2D_PACKED,
                                         TORCH_CONV_TRANSPOSE_NHWC: TORCH_CONV_TRANSPOSE}

_unknown: set[str] = set()


def parse(key: str) -> Algorithm | None:
    """The algorithm written as ``key`` (``"onednn:conv_nhwc"``), or None for a name this pycann
    does not know (a file from a newer version): logged once; the node then takes the static choice."""
    algo = BY_KEY.get(key)
    if algo is None and key not in _unknown:
        _unknown.add(key)
        log.info("kernel algorithm %r is unknown to this pycann; the node takes the default choice", key)
    return algo


def of(attrs: Mapping[str, Any]) -> Algorithm | None:
    """The algorithm recorded in a node's attributes (``attrs["_algo"]``), or None.

    Raises TypeError for anything else there (a ``"provider:name"`` string belongs to the .om
    boundary: ``parse`` it)."""
    algo = attrs.get("_algo")
    if algo is None or isinstance(algo, Algorithm):
        return algo
    raise TypeError(f"node attribute _algo is {type(algo).__name__} {algo!r:.40}; expected a "
                    "pycann.kernels.algorithm.Algorithm (algorithm.parse turns a 'provider:name' key into one)")


def is_numpy(attrs: Mapping[str, Any]) -> bool:
    """The node's recorded algorithm is one of the numpy provider's (the reference kernels)."""
    algo = of(attrs)
    return algo is not None and algo.provider == "numpy"
