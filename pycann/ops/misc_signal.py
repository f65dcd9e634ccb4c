"""Signal-processing ops (ONNX spec, Operators.md): DFT (17, 20), STFT, Hann/Hamming/Blackman
windows and MelWeightMatrix. Part of the ``pycann.ops.misc`` family.

Complex tensors use ONNX's real layout: a trailing dim of 2 (real, imaginary) or 1 (real).
Transforms run through ``numpy.fft`` (pocketfft), which keeps float32 in single precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc, to_numpy
from pycann.ops.opdef import InferContext, OpDef


def _scalar(v: np.ndarray | None) -> int | None:
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


def _compute_dtype(dt: np.dtype) -> np.dtype:
    # float16 / bfloat16 transform in float32; float32 / float64 keep their precision.
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def _to_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] real or [..., 2] (re, im) -> complex or real array without the last dim."""
    c = x.astype(_compute_dtype(x.dtype), copy=False)
    if x.shape[-1] == 1:
        return c[..., 0]
    return c[..., 0] + 1j * c[..., 1]


def _to_pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _norm_axis(axis: int, rank: int) -> int:
    """DFT axis: accepted range [-r, -2] U [0, r-2] (the last dim holds re/im)."""
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ValueError(f"axis {axis} is out of range [-{rank}, -2] U [0, {rank - 2}] for rank {rank}")
    return axis % rank


def dft(x: np.ndarray, dft_length: int | None, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """DFT per Operators.md#DFT (opset 20 text): FFT, IFFT (1/n), RFFT and IRFFT variants."""
    a = _norm_axis(axis, x.ndim)
    sig = _to_complex(x)
    n = dft_length
    if n is None:
        n = 2 * (x.shape[a] - 1) if inverse and onesided else x.shape[a]
    if n < 1:
        raise ValueError(f"dft_length must be positive, got {n}")
    if inverse and onesided:
        return np.fft.irfft(sig, n, axis=a)[..., None].astype(x.dtype)
    if inverse:
        out = np.fft.ifft(sig, n, axis=a)
    elif onesided and not np.iscomplexobj(sig):
        out = np.fft.rfft(sig, n, axis=a)
    else:
        out = np.fft.fft(sig, n, axis=a)
        if onesided:
            out = np.take(out, np.arange(n // 2 + 1), axis=a)
    return _to_pairs(out, x.dtype)


def _infer_dft_shape(
    ctx: InferContext, axis: int | None, n: int | None, inverse: bool, onesided: bool,
) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x else 1, None)]
    r = len(x.shape)
    if r < 2:
        raise ctx.fail(f"input has shape {x}; expected rank >= 2 ([..., signal, 1 or 2])")
    last = x.shape[-1]
    if isinstance(last, int) and last not in (1, 2):
        raise ctx.fail(f"input's last dim is {last}; expected 1 (real) or 2 (complex)")
    dims: list[Dim] = list(x.shape)
    if axis is None:
        return [TensorDesc(x.dtype, (None,) * (r - 1) + ((1 if inverse and onesided else 2),))]
    try:
        a = _norm_axis(axis, r)
    except ValueError as e:
        raise ctx.fail(f"'axis': {e}") from None
    sig_dim = dims[a]
    if n is None and isinstance(sig_dim, int):
        n = 2 * (sig_dim - 1) if inverse and onesided else sig_dim
    if n is not None and n < 1:
        raise ctx.fail(f"dft_length is {n}; expected a positive length")
    if n is None:
        dims[a] = None
    else:
        dims[a] = n // 2 + 1 if onesided and not inverse else n
    dims[-1] = 1 if inverse and onesided else 2
    return [TensorDesc(x.dtype, tuple(dims))]


def _infer_dft17(ctx: InferContext) -> list[TensorDesc]:
    return _infer_dft_shape(ctx, int(ctx.attrs["axis"]), _scalar(ctx.value(1)),
                            bool(ctx.attrs["inverse"]), bool(ctx.attrs["onesided"]))


def _infer_dft20(ctx: InferContext) -> list[TensorDesc]:
    axis: int | None = -2
    if ctx.input(2) is not None:
        axis = _scalar(ctx.value(2))
    return _infer_dft_shape(ctx, axis, _scalar(ctx.value(1)),
                            bool(ctx.attrs["inverse"]), bool(ctx.attrs["onesided"]))


def _k_dft17(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """DFT-17: ``axis`` is an attribute (default 1)."""
    n = _scalar(x[1]) if len(x) > 1 else None
    return [dft(x[0], n, int(a["axis"]), bool(a["inverse"]), bool(a["onesided"]))]


def _k_dft20(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """DFT-20: ``axis`` is an optional scalar input (default -2)."""
    n = _scalar(x[1]) if len(x) > 1 else None
    axis = _scalar(x[2]) if len(x) > 2 else None  # absent or empty input: default -2
    return [dft(x[0], n, -2 if axis is None else axis, bool(a["inverse"]), bool(a["onesided"]))]


# ------------------------------------------------------------------------------------ STFT


def _stft_params(sig_len: Dim, step: int | None, window: TensorDesc | None, flen: int | None) -> tuple:
    if flen is None:
        if window is not None and window.shape is not None:
            flen = window.shape[0] if isinstance(window.shape[0], int) else None
        elif window is None and isinstance(sig_len, int):
            flen = sig_len
    frames = None
    if flen is not None and step is not None and isinstance(sig_len, int):
        frames = (sig_len - flen) // step + 1
    return flen, frames


def _infer_stft(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x else 1, (None, None, None, 2))]
    if len(x.shape) != 3:
        raise ctx.fail(f"input signal has shape {x}; expected [batch, signal_length, 1 or 2]")
    step = _scalar(ctx.value(1))
    if step is not None and step < 1:
        raise ctx.fail(f"frame_step is {step}; expected >= 1")
    flen, frames = _stft_params(x.shape[1], step, ctx.input(2), _scalar(ctx.value(3)))
    if frames is not None and frames < 1:
        raise ctx.fail(f"frame_length {flen} is longer than the signal ({x.shape[1]})")
    complex_in = x.shape[2] == 2
    bins = None if flen is None else (flen // 2 + 1 if ctx.attrs["onesided"] and not complex_in else flen)
    return [TensorDesc(x.dtype, (x.shape[0], frames, bins, 2))]


def _k_stft(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """STFT (Operators.md#STFT): frames of ``frame_length`` every ``frame_step`` samples,
    multiplied by ``window``, each transformed by a DFT (RFFT when onesided and real)."""
    sig = _to_complex(x[0])
    step = _scalar(x[1])
    window = x[2] if len(x) > 2 else None
    flen = _scalar(x[3]) if len(x) > 3 and x[3] is not None else None
    if flen is None:
        flen = window.shape[0] if window is not None else sig.shape[1]
    if window is not None and window.shape[0] != flen:
        raise ValueError(f"window has {window.shape[0]} samples but frame_length is {flen}")
    if step is None or step < 1 or flen > sig.shape[1]:
        raise ValueError(f"invalid frame_step {step} / frame_length {flen} for signal length {sig.shape[1]}")
    frames = np.lib.stride_tricks.sliding_window_view(sig, flen, axis=1)[:, ::step]
    if window is not None:
        frames = frames * _to_complex(window[:, None])
    if a["onesided"] and not np.iscomplexobj(frames):
        out = np.fft.rfft(frames, flen, axis=-1)
    else:
        out = np.fft.fft(frames, flen, axis=-1)
    return [_to_pairs(out, x[0].dtype)]


# ---------------------------------------------------------------------------------- windows


def _window(kind: str, size: int, periodic: bool) -> np.ndarray:
    """Hann / Hamming / Blackman (Operators.md#HannWindow etc.), computed in float64."""
    n = np.arange(size, dtype=np.float64)
    denom = size if periodic else size - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        t = n / denom  # a symmetric window of size 1 is 0/0 = NaN, as in the formula and ORT
    if kind == "hann":
        return np.sin(np.pi * t) ** 2
    if kind == "hamming":
        alpha = 25.0 / 46.0  # the spec's (and ORT's) exact Hamming coefficients
        return alpha - (1 - alpha) * np.cos(2 * np.pi * t)
    return 0.42 - 0.5 * np.cos(2 * np.pi * t) + 0.08 * np.cos(4 * np.pi * t)


def _out_dtype(ctx_or_attrs: Mapping[str, Any]) -> int:
    return int(ctx_or_attrs.get("output_datatype", 1))


def _infer_window(ctx: InferContext) -> list[TensorDesc]:
    dt = _out_dtype(ctx.attrs)
    try:
        to_numpy(dt)
    except TypeError:
        raise ctx.fail(f"attribute 'output_datatype' {dt} is not a tensor dtype") from None
    size = _scalar(ctx.value(0))
    if size is not None and size < 0:
        raise ctx.fail(f"input 'size' is {size}; expected >= 0")
    return [TensorDesc(dt, (size,))]


def _window_kernel(kind: str) -> Any:
    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        size = _scalar(x[0])
        assert size is not None
        w = _window(kind, size, bool(a["periodic"]))
        return [w.astype(to_numpy(_out_dtype(a)))]

    kernel.__doc__ = f"{kind.capitalize()}Window (Operators.md#{kind.capitalize()}Window)."
    return kernel


# ------------------------------------------------------------------------------------- mel


def mel_weight_matrix(num_mel: int, dft_length: int, sample_rate: int, lower: float, upper: float) -> np.ndarray:
    """Triangular mel filterbank [dft_length // 2 + 1, num_mel] (Operators.md#MelWeightMatrix),
    bin edges on the spectrogram's integer bins as ONNX Runtime computes them."""
    n_spec = dft_length // 2 + 1
    lo_mel = 2595 * np.log10(1 + lower / 700)
    hi_mel = 2595 * np.log10(1 + upper / 700)
    step = (hi_mel - lo_mel) / (num_mel + 2)
    mels = np.arange(num_mel + 2) * step + lo_mel
    hz = 700 * (10 ** (mels / 2595) - 1)
    edges = np.floor((dft_length + 1) * hz / sample_rate).astype(np.int64)
    out = np.zeros((n_spec, num_mel))
    j = np.arange(n_spec)[:, None]
    left, center, right = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    up = np.where(center > left, (j - left) / np.maximum(center - left, 1), 0.0)
    down = np.where(right > center, (right - j) / np.maximum(right - center, 1), 0.0)
    out = np.where((j >= left) & (j <= center) & (center > left), up, out)
    out = np.where((j >= center) & (j < right), down, out)
    out = np.where((j == center) & (center == left), 1.0, out)
    return out


def _infer_mel(ctx: InferContext) -> list[TensorDesc]:
    dt = _out_dtype(ctx.attrs)
    n_mel, n_dft = _scalar(ctx.value(0)), _scalar(ctx.value(1))
    return [TensorDesc(dt, (None if n_dft is None else n_dft // 2 + 1, n_mel))]


def _k_mel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """MelWeightMatrix (Operators.md#MelWeightMatrix)."""
    vals = [np.asarray(v).reshape(-1)[0] for v in x[:5]]
    m = mel_weight_matrix(int(vals[0]), int(vals[1]), int(vals[2]), float(vals[3]), float(vals[4]))
    return [m.astype(to_numpy(_out_dtype(a)))]


OPS: list[OpDef] = [
    OpDef("DFT", _infer_dft17, _k_dft17, since=17, attrs={"axis": 1, "inverse": 0, "onesided": 0}),
    OpDef("DFT", _infer_dft20, _k_dft20, since=20, attrs={"inverse": 0, "onesided": 0}),
    OpDef("STFT", _infer_stft, _k_stft, since=17, attrs={"onesided": 1}),
    OpDef("HannWindow", _infer_window, _window_kernel("hann"), since=17,
          attrs={"periodic": 1, "output_datatype": 1}),
    OpDef("HammingWindow", _infer_window, _window_kernel("hamming"), since=17,
          attrs={"periodic": 1, "output_datatype": 1}),
    OpDef("BlackmanWindow", _infer_window, _window_kernel("blackman"), since=17,
          attrs={"periodic": 1, "output_datatype": 1}),
    OpDef("MelWeightMatrix", _infer_mel, _k_mel, since=17, attrs={"output_datatype": 1}),
]
