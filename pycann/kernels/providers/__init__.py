"""Kernel providers: interchangeable implementations of the innermost heavy kernels.

A *provider* is a library that can compute some ops (numpy + its BLAS, PyTorch's oneDNN, ...);
an *algorithm* (``pycann.kernels.algorithm.Algorithm``: provider, name, layout, packing, threads,
...) is one way a provider computes one op family, and an ``Implementation`` is its code here
(``supports(spec)``, ``fn``). Every algorithm is *total*: given any valid
input of its op it returns the right answer (a specialised algorithm handed a shape it was not
made for delegates to the general one), so a recorded choice can never produce a wrong result.

Selection (see docs/kernels.md):

* ``choose(op_type, shapes, attrs)`` picks once per node, from ``STATIC_TABLE`` (measured on
  the real models' shapes) or, in ``"measure"`` mode, by timing every candidate on the shape.
  GE's ``KernelSelection`` pass records the pick in the node attribute ``_algo`` (saved in the .om).
* At run time the kernel calls ``resolve(algorithm.of(attrs), spec)``; an algorithm whose provider
  is missing here falls back to the static choice among available providers (logged once).

Heavy providers stay optional: ``torch`` is imported only when first asked about, and
``PYCANN_PROVIDERS=numpy`` (comma-separated names) restricts the set in a process.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from pycann import config
from pycann.kernels.algorithm import (
    FALLBACK,
    INTERIM_CONV_TRANSPOSE,
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
    Threads,
    parse,
)
from pycann.ops.nn.spatial import Window, compute_dtype, plan_window

log = logging.getLogger("pycann.kernels.providers")

CONV_OPS = ("Conv", "ConvTranspose")
GEMM_OPS = ("MatMul", "Gemm")


@dataclass(frozen=True)
class ConvSpec:
    """One Conv/ConvTranspose call, as far as choosing a kernel goes (all ints, hashable).

    For ConvTranspose, ``win.pads_begin`` are the output offsets of ``conv_transpose_geometry``
    and ``out_sizes`` the output spatial sizes; for Conv ``out_sizes == win.out``.
    """

    op_type: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    group: int
    win: Window
    out_sizes: tuple[int, ...]
    dtype: str = "float32"  # the compute dtype (``compute_name``): float16 inputs run in float32

    @property
    def n_spatial(self) -> int:
        return len(self.x_shape) - 2

    @property
    def depthwise(self) -> bool:
        """group == C_in == C_out > 1 (one filter per channel)."""
        return self.op_type == "Conv" and self.group > 1 and self.group == self.x_shape[1] == self.w_shape[0]

    @property
    def pointwise(self) -> bool:
        """1x1 kernel without padding (a GEMM on the (C, H*W) view)."""
        return self.op_type == "Conv" and all(k == 1 for k in self.win.kernel) and not self.win.padded

    @property
    def patches(self) -> bool:
        """A 2-D ConvTranspose whose kernel equals its stride (one group, no dilation, no output offset,
        output = input x stride): every input pixel writes its own output patch, one GEMM with no
        per-size primitive (``onednn_pointwise.PatchDeconv``)."""
        return self.op_type == "ConvTranspose" and patch_geometry(self.w_shape, self.group, self.win, self.x_shape,
                                                                  self.out_sizes)

    @property
    def flops(self) -> int:
        """2 * multiply-adds."""
        if self.op_type == "Conv":
            return 2 * self.x_shape[0] * self.w_shape[0] * int(math.prod(self.out_sizes)) * int(math.prod(self.w_shape[1:]))
        return 2 * int(math.prod(self.x_shape)) * int(math.prod(self.w_shape[1:]))


def patch_geometry(w_shape: Sequence[int], group: int, win: Window, x_shape: Sequence[int],
                   out_sizes: Sequence[int]) -> bool:
    """``ConvSpec.patches`` from the parts (``win`` from ``conv_transpose_geometry``; ConvTranspose-11/22)."""
    k = tuple(int(d) for d in w_shape[2:])
    return group == 1 and len(k) == 2 and len(x_shape) == 4 and tuple(win.kernel) == k \
        and tuple(win.strides) == k and all(d == 1 for d in win.dilations) and not any(win.pads_begin) \
        and tuple(out_sizes) == (x_shape[2] * k[0], x_shape[3] * k[1])


@dataclass(frozen=True)
class GemmSpec:
    """One MatMul/Gemm call: operand shapes as given (before ``transA``/``transB``)."""

    op_type: str
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    dtype: str = "float32"
    trans_a: bool = False
    trans_b: bool = False

    @property
    def mkn(self) -> tuple[int, int, int, int]:
        """(batch, M, K, N) of the product."""
        a = self.a_shape[::-1] if self.trans_a else self.a_shape
        b = self.b_shape[::-1] if self.trans_b else self.b_shape
        m = a[-2] if len(a) > 1 else 1
        k = a[-1]
        n = b[-1] if len(b) > 1 else 1
        batch = max(math.prod(a[:-2]), math.prod(b[:-2])) if len(a) > 2 or len(b) > 2 else 1  # not np.prod: ~5 us a call
        return batch, m, k, n

    @property
    def flops(self) -> int:
        batch, m, k, n = self.mkn
        return 2 * batch * m * k * n


OpSpec = ConvSpec | GemmSpec


@dataclass(frozen=True)
class Implementation:
    """The code of one ``Algorithm`` in its provider module.

    ``fn`` signatures (arrays already in the compute dtype; ``out`` optional, used when its
    dtype and layout fit; the result may be a view of ``out``):

    * Conv: ``fn(x, w, b, group, win, out) -> y`` with the bias added.
    * ConvTranspose: ``fn(x, w, b, group, win, out_sizes, out) -> y`` with the bias added.
    * MatMul: ``fn(a, b, out) -> y`` (numpy.matmul semantics).
    * Gemm: ``fn(a, b, c, alpha, beta, out) -> y`` (``a``, ``b`` already transposed, ``c``
      broadcast to (M, N) or None).
    """

    algo: Algorithm
    supports: Callable[[Any], bool]
    fn: Callable[..., np.ndarray]
    doc: str = ""

    @property
    def provider(self) -> str:
        return self.algo.provider

    @property
    def op_type(self) -> str:
        return self.algo.op_type

    @property
    def key(self) -> str:
        """``"<provider>:<name>"`` (reports, logs, the bank)."""
        return self.algo.key

    @property
    def exact(self) -> bool:
        return self.algo.exact

    @property
    def writes_out(self) -> bool:
        return self.algo.writes_out


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


# ------------------------------------------------------------------ availability and lookup

_available: dict[str, bool] = {}
_implementations: dict[Algorithm, Implementation] = {}
_warned: set[Algorithm] = set()


def _allowed() -> set[str] | None:
    return config.providers_allowed()


def available(provider: str) -> bool:
    """True when ``provider`` is registered, allowed (``PYCANN_PROVIDERS``) and importable."""
    if provider not in PROVIDERS:
        return False
    allowed = _allowed()
    if allowed is not None and provider not in allowed:
        return False
    if provider not in _available:
        try:
            mod = importlib.import_module(PROVIDERS[provider].module)
            ok = bool(mod.available())
        except config.ConfigError:
            raise  # a bad knob (PYCANN_OMP_WAIT_POLICY, PYCANN_NUM_THREADS) is the user's to fix: not "unavailable"
        except Exception as e:  # a broken optional install must not break pycann
            log.info("kernel provider %s unavailable: %s", provider, e)
            ok = False
        _available[provider] = ok
    return _available[provider]


def provider_algorithms(provider: str) -> list[Implementation]:
    """All implementations a provider declares (whether or not it is available)."""
    return list(importlib.import_module(PROVIDERS[provider].module).ALGORITHMS)


def algorithm(algo: Algorithm | str) -> Implementation | None:
    """The implementation of ``algo`` if its provider is available here, else None. A
    ``"provider:name"`` key (the AOE bank's text form) is parsed first."""
    if isinstance(algo, str):
        parsed = parse(algo)
        if parsed is None:
            return None
        algo = parsed
    impl = _implementations.get(algo)
    if impl is not None:
        return impl
    if not available(algo.provider):
        return None
    for i in provider_algorithms(algo.provider):
        _implementations[i.algo] = i
    return _implementations.get(algo)


def loaded(provider: str) -> bool:
    """Whether ``provider``'s availability has been decided in this process (its library loaded or
    found missing): asking it anything more costs nothing."""
    return provider in _available


def declared(algo: Algorithm | str) -> Implementation | None:
    """The implementation of ``algo`` when its provider is registered, allowed and *can* load,
    without loading it: a provider module may define ``importable()`` (a cheap check, e.g.
    ``find_spec``), so reading a choice from the knowledge bank does not ``import torch`` (seconds)
    before a torch kernel runs; the run-time lookup (``resolve``) loads it, or falls back to the
    static choice if loading fails. Providers without ``importable`` are checked with ``available``."""
    if isinstance(algo, str):
        parsed = parse(algo)
        if parsed is None:
            return None
        algo = parsed
    if algo in _implementations:
        return _implementations[algo]
    provider = algo.provider
    if provider not in PROVIDERS or provider in _available:
        return algorithm(algo)
    allowed = _allowed()
    if allowed is not None and provider not in allowed:
        return None
    try:
        mod = importlib.import_module(PROVIDERS[provider].module)
        check = getattr(mod, "importable", None)
        if check is None:
            return algorithm(algo)
        if not check():
            return None
    except Exception:  # a broken optional install must not break pycann
        return None
    return next((i for i in mod.ALGORITHMS if i.algo == algo), None)


def arena_ok(algo: Algorithm | None) -> bool:
    """Whether a node whose recorded algorithm is ``algo`` should get an arena output.

    False for algorithms that compute into their own buffer (torch's convolutions,
    ``Algorithm.writes_out``): binding them to the arena adds a full copy of the output per call
    (measured: PP-OCRv4 det 640x640 about 10% slower). None: True."""
    return algo is None or algo.writes_out


def reset() -> None:
    """Forget cached availability and choices (after changing ``PYCANN_PROVIDERS``; tests)."""
    _available.clear()
    _implementations.clear()
    _warned.clear()
    _static_choice.cache_clear()


def candidates(spec: OpSpec, only: set[str] | None = None, approx: bool = False) -> list[Implementation]:
    """Available implementations supporting ``spec``: the static preference first, then the rest.

    ``only``: look at these providers alone (others are not even probed, so asking for an
    alternative on the numpy or onednn provider never imports torch). ``approx``: include
    algorithms that are not ``exact`` (op_select_implmode high_performance)."""
    algos = [a for a in STATIC_TABLE.get((spec.op_type, shape_class(spec)), ()) if only is None or a.provider in only]
    for p in PROVIDERS:
        if (only is None or p in only) and available(p):
            algos += [i.algo for i in provider_algorithms(p) if i.op_type == spec.op_type]
    out: list[Implementation] = []
    for a in dict.fromkeys(algos):
        i = algorithm(a)
        if i is not None and i.op_type == spec.op_type and (approx or i.exact) and i.supports(spec):
            out.append(i)
    fallback = algorithm(FALLBACK[spec.op_type])
    if fallback is not None and fallback not in out:
        out.append(fallback)  # total: computes any valid input, supported or not
    return out


# Below these FLOPs the interim plan (a new signature's calls while its plan builds) computes with
# numpy: creating the oneDNN primitive for the shape costs more than numpy's slower product.
# Measured on an AVX-512 host: a deconvolution primitive (brgemm, channels-last) takes 2-8 ms to
# create and 0.04-0.6 ms to run at PP-OCRv4 det's 2x2-stride-2 shapes; numpy's col2im takes
# 0.06 ms at 1 MFLOP, 0.55 ms at 6, 5 ms at 24. (Convolutions are not listed: their primitives
# are created in 0.3-0.7 ms, about numpy's run, and numpy's made PP-OCRv4 rec's first calls slower.)
# Kernel-equals-stride deconvolutions (det's) need no per-size primitive (``ConvSpec.patches``) and
# keep oneDNN.
INTERIM_NUMPY_FLOPS: dict[str, int] = {"ConvTranspose": 16_000_000}


@lru_cache(maxsize=4096)
def _interim_choice(spec: OpSpec) -> Implementation:
    """numpy's implementation for ``spec`` below ``INTERIM_NUMPY_FLOPS``, else the static choice
    (always for a patch-scattering ConvTranspose: oneDNN's runs it with no per-size primitive)."""
    if spec.flops < INTERIM_NUMPY_FLOPS.get(spec.op_type, 0) and not (isinstance(spec, ConvSpec) and spec.patches):
        return candidates(spec, only={"numpy"})[0]
    return _static_choice(spec)


@lru_cache(maxsize=4096)
def _static_choice(spec: OpSpec, approx: bool = False) -> Implementation:
    # Walk the table's row first: a row that starts with numpy (tiny convs, MatMul) must not
    # import an optional provider (torch costs ~190 MB and ~1 s at first use).
    for a in STATIC_TABLE.get((spec.op_type, shape_class(spec)), ()):
        i = algorithm(a)
        if i is not None and i.op_type == spec.op_type and (approx or i.exact) and i.supports(spec):
            return i
    return candidates(spec, approx=approx)[0]


def select(spec: OpSpec, mode: str = "static", weight: np.ndarray | None = None,
           approx: bool = False) -> Implementation:
    """The implementation for ``spec``: the static table's pick, or in ``"measure"`` mode the
    fastest candidate timed on this shape (``weight``: the real weight/B operand if constant).
    ``approx``: algorithms that are not ``exact`` may win (Winograd; op_select_implmode
    high_performance); run-time choices without a recorded one never pass it."""
    if mode == "measure":
        cands = candidates(spec, approx=approx)
        return cands[0] if len(cands) == 1 else measure(spec, cands, weight)[0]
    return _static_choice(spec, approx)


def accept(spec: OpSpec, algo: Algorithm | str, approx: bool = False) -> Implementation | None:
    """A choice made elsewhere (a knowledge-bank record, written ``"provider:name"``) if it can
    serve ``spec`` here: its provider able to load (``declared``: torch is not imported for it),
    its op family, exact unless ``approx``, and ``supports(spec)`` once the provider is loaded;
    else None (the caller takes ``select``'s)."""
    impl = declared(algo)
    if impl is None or impl.op_type != spec.op_type or not (approx or impl.exact):
        return None
    # ``supports`` may load the provider (torch's prepacked convs ask torch what it can do). A provider not
    # loaded yet is trusted: the record was measured for exactly this spec with this kit on this machine (the
    # key), and the run-time lookup falls back to the static choice if the provider does not load after all.
    if loaded(impl.provider) and not impl.supports(spec):
        return None
    return impl


def resolve(algo: Algorithm | None, spec: Callable[[], OpSpec], remember: bool = True) -> Implementation:
    """Run-time lookup of a recorded choice; ``spec()`` builds the spec for the fallback.

    A missing or unavailable ``algo`` falls back to the static choice (logged once per algorithm).
    ``remember=False``: that choice is made without entering the cache of choices, for a caller that
    keeps what it binds for the spec (the shape-generic plan's per-shape conv tables): an entry
    there costs the same as the choice (~2.5 us) and is three objects for the cyclic GC per conv and
    input shape, up to the cache's 4096 entries.
    """
    if algo is not None:
        if algo is INTERIM_CONV_TRANSPOSE:  # set only at run time, by the interim plan (ge/run/plan.py)
            return _interim_choice(spec())
        impl = _implementations.get(algo) or algorithm(algo)
        if impl is not None:
            return impl
        if algo not in _warned:
            _warned.add(algo)
            log.info("kernel %s recorded in the model is not available here; using the default", algo.key)
    return _static_choice(spec()) if remember else _static_choice.__wrapped__(spec())  # type: ignore[attr-defined]


# ------------------------------------------------------------------ specs from shapes + attrs


def compute_name(dtype: Any) -> str:
    """Name of the dtype a kernel computes in: narrow floats widen to float32, others stay."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return str(dtype)
    if dt.kind == "f" or dt.name == "bfloat16":
        return compute_dtype(dt).name
    return dt.name


def conv_spec(op_type: str, x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any],
              dtype: str = "float32") -> ConvSpec:
    """The spec of a Conv/ConvTranspose with static shapes and ONNX attributes."""
    xs, ws = tuple(int(d) for d in x_shape), tuple(int(d) for d in w_shape)
    ks = attrs.get("kernel_shape") or []
    kernel = tuple(int(k) for k in ks) if ks else ws[2:]
    group = int(attrs.get("group", 1) or 1)
    if op_type == "ConvTranspose":
        from pycann.ops.nn.conv import conv_transpose_geometry  # conv imports this package

        win, outs = conv_transpose_geometry(xs[2:], kernel, attrs)
        return ConvSpec(op_type, xs, ws, group, win, tuple(outs), compute_name(dtype))
    win = plan_window(xs[2:], kernel, attrs)
    return ConvSpec(op_type, xs, ws, group, win, win.out, compute_name(dtype))


def make_spec(op_type: str, shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any],
              dtype: str = "float32") -> OpSpec:
    """The spec of a Conv/ConvTranspose/MatMul/Gemm from its first two input shapes."""
    if op_type in CONV_OPS:
        return conv_spec(op_type, shapes[0], shapes[1], attrs, dtype)
    if op_type in GEMM_OPS:
        return GemmSpec(op_type, tuple(int(d) for d in shapes[0]), tuple(int(d) for d in shapes[1]), compute_name(dtype),
                        bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)))
    raise ValueError(f"no kernel providers for op {op_type}")


def choose(op_type: str, shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any], dtype: str = "float32",
           mode: str = "static", weight: np.ndarray | None = None) -> Algorithm:
    """The algorithm for one node from its input shapes and attributes."""
    return select(make_spec(op_type, shapes, attrs, dtype), mode, weight).algo


# ------------------------------------------------------------------ measured selection

_measured: dict[OpSpec, list[tuple[float, Algorithm]]] = {}


def _random_inputs(spec: OpSpec, weight: np.ndarray | None) -> list[Any]:
    rng = np.random.default_rng(0)
    cd = np.dtype(spec.dtype)

    def r(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(cd)

    if isinstance(spec, ConvSpec):
        w = weight.astype(cd, copy=False) if weight is not None else r(spec.w_shape)
        m = spec.w_shape[0] if spec.op_type == "Conv" else spec.w_shape[1] * spec.group
        args: list[Any] = [r(spec.x_shape), w, r((m,)), spec.group, spec.win]
        return args + ([spec.out_sizes] if spec.op_type == "ConvTranspose" else []) + [None]
    b = weight.astype(cd, copy=False) if weight is not None else r(spec.b_shape)
    a = r(spec.a_shape)
    if spec.op_type == "MatMul":
        return [a, b, None]
    a = a.T if spec.trans_a else a
    b = b.T if spec.trans_b else b
    return [a, b, None, 1.0, 1.0, None]


def measure(spec: OpSpec, cands: Sequence[Implementation], weight: np.ndarray | None = None,
            budget_s: float = 0.05) -> tuple[Implementation, list[tuple[float, Algorithm]]]:
    """Time each candidate on ``spec`` (best of a few runs after a warm-up); the fastest wins.

    Results are cached per spec for the process. A candidate that raises is skipped.
    """
    if spec not in _measured:
        args = _random_inputs(spec, weight)
        times: list[tuple[float, Algorithm]] = []
        for a in cands:
            try:
                a.fn(*args)
                best, t_end, runs = float("inf"), time.perf_counter() + budget_s, 0
                while runs < 3 or (time.perf_counter() < t_end and runs < 20):
                    t0 = time.perf_counter()
                    a.fn(*args)
                    best = min(best, time.perf_counter() - t0)
                    runs += 1
                times.append((best, a.algo))
            except Exception as e:  # pragma: no cover - a provider bug must not break compilation
                log.info("kernel %s failed on %s: %s", a.key, spec, e)
        _measured[spec] = sorted(times, key=lambda t: t[0])
    by_algo = {a.algo: a for a in cands}
    for _, n in _measured[spec]:
        if n in by_algo:
            return by_algo[n], _measured[spec]
    return cands[0], _measured[spec]


__all__ = [
    "FALLBACK", "Algorithm", "ConvSpec", "GemmSpec", "Implementation", "OpSpec", "PROVIDERS", "Provider", "STATIC_TABLE", "TINY_FLOPS", "TINY_FLOPS_2D",
    "accept", "algorithm", "arena_ok", "available", "candidates", "choose", "compute_name", "conv_spec", "declared",
    "loaded", "make_spec", "measure",
    "reset", "resolve", "select", "shape_class", "uses_openmp",
]


# ------------------------------------------------------------------ one thread pool at a time

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
    return any(t in _RUNTIME_DISPATCH for t in op_types) and (available("onednn") or available("torch"))


_RUNTIME_DISPATCH = frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "Conv", "FusedConv", "ConvTranspose"})


def uses_openmp(algos: Iterable[Algorithm | None]) -> bool:
    """True when any recorded algorithm runs on an OpenMP pool (torch's or libdnnl's: both spin
    after a call, so numpy's OpenBLAS pool must stay at one thread meanwhile)."""
    return any(a is not None and a.threads is Threads.OPENMP for a in algos)
