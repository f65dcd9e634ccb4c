"""The torch provider's elementwise kernels: ReLU, Add of two same-shaped tensors (a residual) and
the per-channel affine ``x * s + t`` that an inference BatchNormalization folds to, on PyTorch's
own CPU kernels and thread pool.

Why: in the PyTorch adaptor's eager mode (``pycann.torch``) every convolution runs on the torch
provider (``torch:conv2d_nhwc``, torch's OpenMP pool). A BatchNormalization or ReLU between two
of them on pycann's oneDNN primitives (the system libgomp's pool) or numpy (one thread) makes the
model alternate between two thread pools, each waking its sleeping workers (~60-100 us on a VM)
for every op: ResNet-50 eager at 2 threads spent 7.3 ms in 53 batch norms (138 us each, no faster
than at one thread) and 4.5 ms in 49 ReLUs (bench/RESULTS.md). docs/kernels.md, "Threads".

Semantics: ONNX Add without broadcasting; ONNX Relu (``max(x, 0)``; NaN stays NaN:
``torch.clamp_min`` propagates it as ``np.maximum`` does); BatchNormalization in inference mode as
GE folds it (``scale / sqrt(var + eps)`` and ``bias - mean * s`` computed once in float64 by the
caller), ``x * s + t`` in float32 in one pass (``torch.addcmul``: the product, then the sum, as the
folded graph's Mul and Add; an FMA, where ATen's vector code contracts them, differs by at most
one rounding of the product). Arrays cross as zero-copy views; results keep ``x``'s strides
(channels-last stays channels-last). float32 only: the caller keeps its own kernel otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pycann.kernels.providers import torch_onednn

__all__ = ["MIN_ELEMENTS", "add_into", "bound_affine", "bound_batch_norm", "relu_into"]

#: Below this many elements numpy's one pass beats a torch op's fixed cost (~5 us).
MIN_ELEMENTS = 1 << 14


def relu_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = max(x, 0)`` (float32 arrays of one shape; ``out`` may be ``x`` itself, as for
    ``relu_``). Raises ``ValueError`` for other dtypes or shapes (the caller checks first)."""
    if x.dtype != np.float32 or out.dtype != np.float32 or x.shape != out.shape:
        raise ValueError(f"relu_into: float32 arrays of one shape expected, got {x.dtype}{list(x.shape)} "
                         f"and {out.dtype}{list(out.shape)}")
    torch = torch_onednn.load()  # (the provider's one import of torch, with its thread policy)
    torch.clamp_min(torch.from_numpy(x), 0.0, out=torch.from_numpy(out))


def add_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a + b`` (float32 arrays of one shape, any strides; ``out`` may be ``a`` itself, as
    for ``add_``: a residual connection). Raises ``ValueError`` for other dtypes or shapes."""
    if not (a.dtype == b.dtype == out.dtype == np.float32) or not (a.shape == b.shape == out.shape):
        raise ValueError(f"add_into: float32 arrays of one shape expected, got {a.dtype}{list(a.shape)}, "
                         f"{b.dtype}{list(b.shape)} and {out.dtype}{list(out.shape)}")
    torch = torch_onednn.load()  # (the provider's one import of torch, with its thread policy)
    torch.add(torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(out))


def bound_affine(s: np.ndarray, t: np.ndarray, x_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``x -> x * s + t`` for float32 ``x`` of ``x_shape``: a new float32 array with ``x``'s strides.
    ``s`` and ``t`` (float32, shaped to broadcast against ``x``: a batch norm's per-channel
    ``(C, 1, 1)``) are checked and wrapped once, here, not per call. Raises ``ValueError`` here
    for other dtypes or shapes that do not broadcast to ``x_shape``, and per call for another ``x``."""
    if s.dtype != np.float32 or t.dtype != np.float32 or np.broadcast_shapes(x_shape, s.shape, t.shape) != x_shape:
        raise ValueError(f"affine: float32 s, t broadcasting to x{list(x_shape)} expected, got "
                         f"{s.dtype}{list(s.shape)}, {t.dtype}{list(t.shape)}")
    torch = torch_onednn.load()  # (the provider's one import of torch, with its thread policy)
    st, tt = torch.from_numpy(s), torch.from_numpy(t)
    addcmul, from_numpy, empty_like = torch.addcmul, torch.from_numpy, torch.empty_like

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float32 or x.shape != x_shape:
            raise ValueError(f"affine: float32 x{list(x_shape)} expected, got {x.dtype}{list(x.shape)}")
        xt = from_numpy(x)
        y = empty_like(xt)  # (preserve_format: x's strides when they are dense, channels-last included)
        # one pass (t + x * s) instead of a multiply and an add over the whole tensor
        addcmul(tt, xt, st, out=y)
        return y.numpy()  # type: ignore[no-any-return]

    return run


def bound_batch_norm(scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float,
                     x_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """``x -> (x - mean) / sqrt(var + eps) * scale + bias`` for a contiguous (NCHW) float32 ``x`` of
    ``x_shape``, per channel (dim 1), by ATen's inference batch-norm kernel: a vectorized pass per
    channel, where ``bound_affine``'s broadcast over the spatial dims runs 1.7-5x slower than it does
    over a channels-last tensor's innermost channels (a 1x2048x7x7 tensor: 66 against 25 us). The
    statistics are read from their arrays at each call (float32 vectors of ``x_shape[1]``). Returns a
    new contiguous float32 array; raises ``ValueError`` for other shapes or dtypes."""
    c = x_shape[1] if len(x_shape) > 1 else 0
    if any(a.dtype != np.float32 or a.shape != (c,) for a in (scale, bias, mean, var)):
        raise ValueError(f"batch_norm: float32 vectors of {c} expected")
    torch = torch_onednn.load()  # (the provider's one import of torch, with its thread policy)
    w, b, m, v = (torch.from_numpy(a) for a in (scale, bias, mean, var))
    op, from_numpy = torch.ops.aten._native_batch_norm_legit_no_training, torch.from_numpy

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float32 or x.shape != x_shape:
            raise ValueError(f"batch_norm: float32 x{list(x_shape)} expected, got {x.dtype}{list(x.shape)}")
        return op(from_numpy(x), w, b, m, v, 0.0, eps)[0].numpy()  # type: ignore[no-any-return]

    return run
