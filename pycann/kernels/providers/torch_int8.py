"""INT8 convolutions through PyTorch's oneDNN quantized kernels (``torch.ops.onednn.qconv_prepack``
and ``qconv2d_pointwise``: the x86 int8 path of torch.compile's inductor), with uint8 activations,
int8 per-channel weights, int32 accumulation and a float32 result (bias and ReLU fused).

Exactness: on CPUs with VNNI (``avx512_vnni`` or ``avx_vnni``) the integer products accumulate
exactly. Without VNNI, x86 int8 kernels multiply with ``vpmaddubsw``, which adds two uint8 x int8
products in *saturating* int16: values above 127 can saturate and give silently wrong results
(ONNX Runtime's AVX2 kernel has the same property). So this provider is used only where it is exact:
VNNI, or activations proven to stay <= 127 (a 7-bit "reduce_range" quantisation: 2 * 127 * 128 fits
int16). ``usable()`` says which; ``PYCANN_INT8_KERNELS=off`` turns the provider off.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from pycann.ops.array_cache import ArrayCache


@functools.lru_cache(maxsize=1)
def cpu_has_vnni() -> bool:
    """True when the CPU advertises AVX512-VNNI or AVX-VNNI (Linux /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_vnni", "avx_vnni"} & flags)
    except OSError:
        pass
    return False


@functools.lru_cache(maxsize=1)
def _torch() -> Any:
    from pycann.config import ConfigError, int8_kernels

    if not int8_kernels():
        return None
    try:
        from pycann.config import apply_omp_wait_policy

        apply_omp_wait_policy()  # torch's bundled libgomp reads OMP_WAIT_POLICY when it loads
        import torch

        if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.onednn, "qconv2d_pointwise"):
            return None
        return torch
    except ConfigError:
        raise  # a bad PYCANN_OMP_WAIT_POLICY / PYCANN_NUM_THREADS is the user's to fix, not "no int8 kernel"
    except Exception:  # torch missing or built without oneDNN
        return None


def usable(seven_bit: bool) -> bool:
    """Whether the int8 kernel is available and exact for these activations."""
    return _torch() is not None and (seven_bit or cpu_has_vnni())


# prepacked weights, kept with their int8 weight arrays
_PACKED = ArrayCache()


def _packed(w: np.ndarray, w_scale: np.ndarray, x_scale: float, x_zp: int, stride: list[int], pads: list[int],
            dilation: list[int], group: int, x_shape: tuple[int, ...]) -> Any:
    """The oneDNN-prepacked weight, kept with the weight array (dropped when it goes)."""
    torch = _torch()
    key = (tuple(stride), tuple(pads), tuple(dilation), group, x_scale, x_zp, x_shape[1:])
    return _PACKED.get(w, key, lambda: torch.ops.onednn.qconv_prepack(
        torch.from_numpy(np.ascontiguousarray(w)), torch.from_numpy(np.ascontiguousarray(w_scale, np.float32)),
        float(x_scale), int(x_zp), stride, pads, dilation, group, list(x_shape)))


def qconv2d(xq: np.ndarray, x_scale: float, x_zp: int, w: np.ndarray, w_scale: np.ndarray,
            bias: np.ndarray | None, stride: list[int], pads: list[int], dilation: list[int], group: int,
            relu: bool) -> np.ndarray:
    """float32 ``act(conv((xq - x_zp) * x_scale, w * w_scale) + bias)`` for uint8 ``xq`` (N, C, H, W),
    int8 ``w`` (M, C/group, kh, kw) and per-channel ``w_scale`` (M,). ``pads`` are symmetric
    [pad_h, pad_w]. Returns an (N, M, H', W') array laid out NHWC in memory (oneDNN's int8 layout):
    numpy's elementwise ops keep that layout, so the next QuantConv reads it without a transpose."""
    torch = _torch()
    if xq.dtype != np.uint8 or w.dtype != np.int8 or xq.ndim != 4 or w.ndim != 4:
        raise ValueError(f"qconv2d: uint8 NCHW x and int8 OIHW w expected, got {xq.dtype}{xq.shape}, {w.dtype}{w.shape}")
    if w_scale.shape != (w.shape[0],):
        raise ValueError(f"qconv2d: w_scale has shape {w_scale.shape}, the weight {w.shape[0]} output channels")
    if bias is not None and bias.shape != (w.shape[0],):
        raise ValueError(f"qconv2d: bias has shape {bias.shape}, the weight {w.shape[0]} output channels")
    if xq.shape[1] != w.shape[1] * group:
        raise ValueError(f"qconv2d: x has {xq.shape[1]} channels, w {w.shape} with group {group}")
    packed = _packed(w, w_scale, x_scale, x_zp, stride, pads, dilation, group, tuple(xq.shape))
    tx = torch.from_numpy(xq)
    if not tx.is_contiguous(memory_format=torch.channels_last):
        tx = tx.contiguous(memory_format=torch.channels_last)
    tb = None if bias is None else torch.from_numpy(np.ascontiguousarray(bias, np.float32))
    zeros = torch.zeros(w.shape[0], dtype=torch.int64)
    y = torch.ops.onednn.qconv2d_pointwise(tx, float(x_scale), int(x_zp), packed,
                                           torch.from_numpy(np.ascontiguousarray(w_scale, np.float32)), zeros, tb,
                                           stride, pads, dilation, group, 1.0, 0, torch.float32,
                                           "relu" if relu else "none", [], "")
    return y.numpy()


def _packed_linear(w_nk: np.ndarray, k_rows: int) -> Any:
    """oneDNN-prepacked (N, K) int8 weight, kept with the weight array."""
    torch = _torch()
    return _PACKED.get(w_nk, ("linear",), lambda: torch.ops.onednn.qlinear_prepack(
        torch.from_numpy(np.ascontiguousarray(w_nk)), [k_rows, w_nk.shape[1]]))


def qlinear(xq: np.ndarray, x_scale: float, x_zp: int, w_nk: np.ndarray, w_scale: np.ndarray,
            bias: np.ndarray | None, relu: bool) -> np.ndarray:
    """float32 ``act(((xq - x_zp) * x_scale) @ (w_nk * w_scale[:, None]).T + bias)`` for uint8 ``xq``
    (..., K), int8 ``w_nk`` (N, K) and per-output ``w_scale`` (N,). Returns (..., N)."""
    torch = _torch()
    if xq.dtype != np.uint8 or w_nk.dtype != np.int8 or w_nk.ndim != 2 or xq.shape[-1] != w_nk.shape[1]:
        raise ValueError(f"qlinear: uint8 x (..., K) and int8 w (N, K) expected, got {xq.dtype}{xq.shape}, "
                         f"{w_nk.dtype}{w_nk.shape}")
    n = w_nk.shape[0]
    if w_scale.shape != (n,) or (bias is not None and bias.shape != (n,)):
        raise ValueError(f"qlinear: w_scale {w_scale.shape} / bias {None if bias is None else bias.shape} "
                         f"must have {n} values")
    x2 = np.ascontiguousarray(xq).reshape(-1, xq.shape[-1])
    packed = _packed_linear(w_nk, x2.shape[0])
    tb = None if bias is None else torch.from_numpy(np.ascontiguousarray(bias, np.float32))
    y = torch.ops.onednn.qlinear_pointwise(torch.from_numpy(x2), float(x_scale), int(x_zp), packed,
                                           torch.from_numpy(np.ascontiguousarray(w_scale, np.float32)),
                                           torch.zeros(n, dtype=torch.int64), tb, 1.0, 0, torch.float32,
                                           "relu" if relu else "none", [], "")
    return y.numpy().reshape(*xq.shape[:-1], n)
