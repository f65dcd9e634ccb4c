"""The torch provider: PyTorch's CPU kernels (oneDNN convolutions, MKL GEMMs), optional.

``torch`` is imported on first use, never at pycann import; without it this provider is
simply unavailable. Arrays cross as zero-copy views (``torch.from_numpy``; ``from_dlpack`` for
read-only arrays such as weights mapped from an .om) and results come back with ``.numpy()``
(no copy) or are copied once, by torch's threads, into a preallocated output.

Threads: on first use pycann sets ``torch.set_num_threads(n)`` with ``n`` from
``PYCANN_NUM_THREADS`` when set, else caps torch's own default at the CPUs this process may
run on (``os.sched_getaffinity``); OpenBLAS (numpy) is left as it is. See docs/kernels.md for
why one model should not alternate between the two thread pools.

Shapes torch cannot express natively (asymmetric pads beyond what a crop fixes, ConvTranspose
offsets outside torch's ``output_padding`` range, more than 3 spatial dims, dtypes other than
float32) are delegated to the numpy provider, so every algorithm here is total.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import numpy as np

from pycann import config
from pycann.config import apply_omp_wait_policy
from pycann.kernels.algorithm import (
    TORCH_ADDMM,
    TORCH_CONV1D,
    TORCH_CONV2D,
    TORCH_CONV2D_NHWC,
    TORCH_CONV2D_PACKED,
    TORCH_CONV3D,
    TORCH_CONV_TRANSPOSE,
    TORCH_CONV_TRANSPOSE_NHWC,
    TORCH_MATMUL,
)
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import omp_fork
from pycann.kernels.providers.specs import ConvSpec, GemmSpec, Implementation
from pycann.ops.nn.spatial import Window

_torch: Any = None


def thread_budget() -> int:
    """Threads pycann gives torch: ``PYCANN_NUM_THREADS``, else the CPUs this process may use."""
    given = config.num_threads()
    if given is not None:
        return given
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def load() -> Any:
    """``import torch`` once and apply the thread policy; raises ImportError without torch, and in a
    forked child of a process that ran OpenMP (oneDNN's kernels) before torch was imported: torch
    imported there, beside the parent's libgomp state, aborted (double free) or hung in its first
    kernels, so the callers' other paths (oneDNN, numpy) serve the child. A torch the application
    imported itself is used as usual."""
    global _torch
    if _torch is None:
        if "torch" not in sys.modules and omp_fork.forked_after_openmp():
            raise ImportError("torch is not imported by pycann in a forked child of a process that ran OpenMP "
                              "(it aborted or hung there); import torch before forking, or use the spawn start method")
        apply_omp_wait_policy()  # torch's bundled libgomp reads OMP_WAIT_POLICY when it loads
        import torch

        n = thread_budget()
        if config.num_threads_set() or torch.get_num_threads() > n:
            torch.set_num_threads(n)
        _torch = torch
    return _torch


def importable() -> bool:
    """True when torch is installed (``find_spec``: nothing imported; ``available`` imports it)."""
    import importlib.util

    return _torch is not None or importlib.util.find_spec("torch") is not None


def available() -> bool:
    """True when ``import torch`` works."""
    try:
        load()
    except config.ConfigError:
        raise  # a bad PYCANN_OMP_WAIT_POLICY / PYCANN_NUM_THREADS is the user's to fix, not "torch missing"
    except Exception:
        return False
    return True


def tensor(a: np.ndarray) -> Any:
    """A torch view of ``a`` (no copy; negative strides are copied first)."""
    try:
        return _torch.from_numpy(a) if a.flags.writeable else _torch.from_dlpack(a)
    except (ValueError, RuntimeError, BufferError):
        return _torch.from_numpy(np.ascontiguousarray(a))


def _deliver(y: Any, out: np.ndarray | None, residual: np.ndarray | None, relu: bool) -> np.ndarray:
    """``y`` (+ residual) (relu) as numpy: written by torch into ``out`` when it fits."""
    if out is not None and out.dtype == np.float32 and out.flags.c_contiguous and out.size == y.numel():
        o = out.reshape(tuple(y.shape))
        to = tensor(o)
        if residual is not None:
            _torch.add(y, tensor(residual.astype(np.float32, copy=False)), out=to)
        else:
            to.copy_(y)
        if relu:
            to.relu_()
        return o
    if residual is not None:
        y.add_(tensor(residual.astype(np.float32, copy=False)))
    if relu:
        y.relu_()
    r = y.numpy()
    return r if r.flags.c_contiguous else np.ascontiguousarray(r)


def _post_numpy(y: np.ndarray, residual: np.ndarray | None, relu: bool) -> np.ndarray:
    if residual is not None:
        y += residual
    if relu:
        np.maximum(y, 0, out=y)
    return y


def _torch_pads(x_sizes: tuple[int, ...], win: Window) -> tuple[list[int], list[int] | None, bool]:
    """(symmetric padding for torch, explicit (begin, end) pad list for F.pad or None, crop?)."""
    pb, pe = win.pads_begin, win.pads_end
    if pb == pe:
        return list(pb), None, False
    # torch pads pb on both sides: enough when the end side needs no more than that
    fits = all(
        (x + 2 * b - w) // s + 1 >= o
        for x, b, s, o, w in zip(x_sizes, pb, win.strides, win.out, (win.span(i) for i in range(len(pb))))
    )
    if fits:
        return list(pb), None, True
    flat: list[int] = []
    for b, e in zip(reversed(pb), reversed(pe)):  # F.pad: last dim first
        flat += [b, e]
    return [0] * len(pb), flat, True


def _torch_conv(tx: Any, tw: Any, tb: Any, x_spatial: tuple[int, ...], group: int, win: Window) -> Any:
    """``torch.nn.functional.conv{1,2,3}d`` on torch tensors with ONNX's (possibly asymmetric)
    padding: symmetric pads go to torch, the rest through F.pad or a crop of the result."""
    torch = load()
    padding, explicit, crop = _torch_pads(x_spatial, win)
    if explicit is not None:
        tx = torch.nn.functional.pad(tx, explicit)
    fn = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[len(win.kernel) - 1]
    y = fn(tx, tw, tb, list(win.strides), padding, list(win.dilations), group)
    if crop:
        y = y[(slice(None), slice(None)) + tuple(slice(0, o) for o in win.out)]
    return y


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
         out: np.ndarray | None = None, *, residual: np.ndarray | None = None, relu: bool = False) -> np.ndarray:
    """Conv through ``torch.nn.functional.conv{1,2,3}d`` (oneDNN), bias fused into the call.

    ``residual`` (added) and ``relu`` are applied by torch while the result is copied out.
    """
    n = len(win.kernel)
    if n not in (1, 2, 3) or x.dtype != np.float32 or w.dtype != np.float32:
        return _post_numpy(nb.conv_im2col_gemm(x, w, b, group, win, out), residual, relu)
    tb = tensor(b.astype(np.float32, copy=False)) if b is not None else None
    y = _torch_conv(tensor(x), tensor(w), tb, tuple(x.shape[2:]), group, win)
    return _deliver(y, out, residual, relu)


# Prepacked (oneDNN-blocked) weights, keyed by the weight array's identity and the geometry;
# an entry is dropped when its weight array is garbage-collected (so an id is never reused).
_packed: dict[tuple[Any, ...], Any] = {}


def packing_supported() -> bool:
    """True when this torch exposes the (private) oneDNN weight-prepacking ops."""
    try:
        torch = load()
        return hasattr(torch._C._nn, "mkldnn_reorder_conv2d_weight") and hasattr(
            torch.ops.mkldnn, "_convolution_pointwise") and torch.backends.mkldnn.is_available()
    except Exception:
        return False


def _packed_weight(w: np.ndarray, padding: list[int], win: Window, group: int, x_shape: tuple[int, ...]) -> Any:
    key = (id(w), w.__array_interface__["data"][0], w.shape, tuple(padding), win.strides, win.dilations, group, x_shape)
    wp = _packed.get(key)
    if wp is None:
        torch = load()
        tw = tensor(np.ascontiguousarray(w)).to_mkldnn()
        wp = torch._C._nn.mkldnn_reorder_conv2d_weight(tw, padding, list(win.strides), list(win.dilations), group,
                                                       list(x_shape))
        weakref.finalize(w, _packed.pop, key, None)
        _packed[key] = wp
    return wp


def conv_packed(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                out: np.ndarray | None = None, *, residual: np.ndarray | None = None, relu: bool = False) -> np.ndarray:
    """2-D conv with the weight reordered once into oneDNN's blocked layout and cached.

    Pays off where weights dominate the memory traffic (late ResNet stages): the plain call
    reorders the weight on every run. Other shapes go through ``conv``.
    """
    if len(win.kernel) != 2 or x.dtype != np.float32 or w.dtype != np.float32 or win.pads_begin != win.pads_end \
            or not windows_read_input(tuple(x.shape[2:]), win) or not packing_supported():
        return conv(x, w, b, group, win, out, residual=residual, relu=relu)
    torch = load()
    padding = list(win.pads_begin)
    wp = _packed_weight(w, padding, win, group, tuple(x.shape))
    tb = tensor(b.astype(np.float32, copy=False)) if b is not None else None
    y = torch.ops.mkldnn._convolution_pointwise(tensor(x), wp, tb, padding, list(win.strides), list(win.dilations),
                                                group, "none", [], "")
    return _deliver(y, out, residual, relu)


# ONNX activation (as GE's FusedConv records it) -> oneDNN eltwise post-op of torch's
# ``mkldnn._convolution_pointwise``: (attr, scalars, algorithm). Exact same formulas.
def onednn_unary(act: str, alpha: float, beta: float) -> tuple[str, list[float], str] | None:
    """The oneDNN post-op computing activation ``act`` (with ONNX's alpha/beta), or None."""
    if act in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        return {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hardswish"}[act], [], ""
    if act == "HardSigmoid" and abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:  # torch's fixed slope
        return "hardsigmoid", [], ""
    if act == "LeakyRelu":
        return "leaky_relu", [float(alpha)], ""
    if act == "Clip" and np.isfinite(alpha) and np.isfinite(beta) and alpha <= beta:
        return "hardtanh", [float(alpha), float(beta)], ""
    if act == "Swish" and alpha == 1.0:
        return "swish", [], ""
    if act == "Gelu":
        return "gelu", [], "none"
    if act == "GeluTanh":
        return "gelu", [], "tanh"
    return None


def conv_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
              out: np.ndarray | None = None, *, residual: np.ndarray | None = None, relu: bool = False,
              unary: tuple[str, list[float], str] | None = None) -> np.ndarray:
    """2-D conv in the channels-last (NHWC) layout, weight prepacked once, bias/residual/relu as
    oneDNN post-ops.

    The result stays channels-last: a numpy array of the logical NCHW shape whose strides are
    NHWC's. The next conv of the chain then reads it without a reorder; numpy ops downstream see
    an ordinary strided array (same values), so the layout choice can never change a result.
    Depthwise convs gain most (oneDNN's NCHW depthwise path is ~10x slower on this CPU class).
    Shapes it cannot express (asymmetric pads, other ranks/dtypes) go through ``conv``.
    ``unary`` (from ``onednn_unary``) replaces ``relu`` as the activation post-op; callers
    passing it must not call it with shapes this function delegates (see ``native``).
    """
    if not native(x, w, win):
        y = conv(x, w, b, group, win, out, residual=residual, relu=relu)
        return y
    torch = load()
    padding = list(win.pads_begin)
    wp = _packed_weight(w, padding, win, group, tuple(x.shape))
    tb = tensor(b.astype(np.float32, copy=False)) if b is not None else None
    args = (padding, list(win.strides), list(win.dilations), group)
    attr, scalars, algo = unary if unary is not None else ("relu", [], "") if relu else ("none", [], "")
    if residual is not None and residual.dtype == np.float32 and residual.shape == (x.shape[0], w.shape[0]) + win.out:
        # the binary (sum) form takes only relu as a further post-op; others run after, in torch
        y = torch.ops.mkldnn._convolution_pointwise.binary(
            _nhwc(x), tensor(residual), wp, tb, *args, "add", None, "relu" if attr == "relu" else None, [], "")
        if attr not in ("none", "relu"):
            y = _torch_unary(y, attr, scalars, algo)
    elif residual is not None:  # broadcasting or another dtype: numpy semantics via torch, then the activation
        y = torch.ops.mkldnn._convolution_pointwise(_nhwc(x), wp, tb, *args, "none", [], "")
        y.add_(tensor(residual.astype(np.float32, copy=False)))
        if attr != "none":
            y = _torch_unary(y, attr, scalars, algo)
    else:
        y = torch.ops.mkldnn._convolution_pointwise(_nhwc(x), wp, tb, *args, attr, scalars, algo)
    if out is not None:
        return _deliver(y, out, None, False)
    return y.numpy()


def _nhwc(x: np.ndarray) -> Any:
    """``x`` as a channels-last torch tensor: a view when it already is one, else one explicit
    conversion, which is ~2x cheaper than letting the prepacked conv reorder an NCHW input
    itself (PP-OCR det's first conv: 0.49 against 0.92 ms)."""
    t = tensor(x)
    if x.ndim == 4 and x.shape[1] > 1 and not t.is_contiguous(memory_format=_torch.channels_last):
        t = t.contiguous(memory_format=_torch.channels_last)
    return t


def bound_conv_nhwc(w: np.ndarray, b: np.ndarray | None, group: int, win: Window, x_shape: tuple[int, ...],
                    unary: tuple[str, list[float], str], residual: bool) -> Any:
    """``conv_nhwc`` for one static signature as a plan kernel ``k(inputs, attrs) -> [y]``:
    weight packed and arguments built once (``inputs``: x, w, b[, residual]; float32)."""
    torch = load()
    padding = list(win.pads_begin)
    wp = _packed_weight(w, padding, win, group, x_shape)
    tb = tensor(b) if b is not None else None
    args = (padding, list(win.strides), list(win.dilations), group)
    attr, scalars, algo = unary
    op = torch.ops.mkldnn._convolution_pointwise
    if not residual:
        def kernel(x: Any, a: Any) -> list[np.ndarray]:
            return [op(_nhwc(x[0]), wp, tb, *args, attr, scalars, algo).numpy()]
        return kernel
    post = "relu" if attr == "relu" else None

    def kernel_sum(x: Any, a: Any) -> list[np.ndarray]:
        y = op.binary(_nhwc(x[0]), tensor(x[3]), wp, tb, *args, "add", None, post, [], "")
        if attr not in ("none", "relu"):
            y = _torch_unary(y, attr, scalars, algo)
        return [y.numpy()]
    return kernel_sum


def bound_max_pool2d(kernel_shape: list[int], strides: list[int], pads: list[int], dilations: list[int],
                     ceil_mode: bool, fallback: Any) -> Any:
    """MaxPool over a channels-last float32 input in oneDNN/ATen (multi-threaded, ~10x numpy's
    tap-by-tap maximum at ResNet-50 batch 8) as a plan kernel ``k(inputs, attrs) -> [y]``.

    ATen propagates NaN where ONNX Runtime skips it; a result with a NaN is recomputed by
    ``fallback`` (the numpy kernel), so values always match the spec's reference."""
    F = load().nn.functional

    def pool(x: Any, a: Any) -> list[np.ndarray]:
        y = F.max_pool2d(tensor(x[0]), kernel_shape, strides, pads, dilations, ceil_mode).numpy()
        if np.isnan(y).any():
            return fallback(x, a)  # type: ignore[no-any-return]
        return [y]
    return pool


def native(x: np.ndarray, w: np.ndarray, win: Window) -> bool:
    """True when ``conv_nhwc`` computes this call itself (2-D, float32, symmetric pads, every window
    reading the input, oneDNN)."""
    return len(win.kernel) == 2 and x.dtype == np.float32 and w.dtype == np.float32 \
        and win.pads_begin == win.pads_end and windows_read_input(tuple(x.shape[2:]), win) and packing_supported()


def windows_read_input(sizes: tuple[int, ...], win: Window) -> bool:
    """Whether every output position's window has a tap inside the input (``sizes``: the spatial dims).

    Why: torch 2.13's oneDNN crashed the process (SIGSEGV) running a conv on a weight prepacked by
    ``mkldnn_reorder_conv2d_weight`` whose output positions read only padding: a 1x1 kernel with
    dilation 2 on a width-1 input, stride 2 or 3 and pad 1 or 2 (a sweep of small geometries found
    no other). Such convs (degenerate: a result that is only the bias) take the unpacked path
    (``conv``). A window misses the input when it lies in the leading or trailing pad, or, with a
    dilation wider than the input, when its taps straddle it."""
    for n, k, s, d, p, o in zip(sizes, win.kernel, win.strides, win.dilations, win.pads_begin, win.out):
        if p > (k - 1) * d or (o - 1) * s - p >= n:
            return False
        if d > n and not all(any(0 <= i * s - p + j * d < n for j in range(k)) for i in range(o)):
            return False
    return True


def _torch_unary(y: Any, attr: str, scalars: list[float], algo: str) -> Any:
    F = load().nn.functional
    fns = {"relu": F.relu, "sigmoid": load().sigmoid, "tanh": load().tanh, "hardswish": F.hardswish,
           "hardsigmoid": F.hardsigmoid, "swish": F.silu, "gelu": F.gelu}
    if attr == "leaky_relu":
        return F.leaky_relu(y, scalars[0])
    if attr == "hardtanh":
        return F.hardtanh(y, scalars[0], scalars[1])
    return fns[attr](y)


def _transpose_native(x_sizes: tuple[int, ...], win: Window, out_sizes: tuple[int, ...]) -> list[int] | None:
    """torch's output_padding for this ConvTranspose geometry, or None when torch cannot express it."""
    ops = []
    for i, (size, pb, o) in enumerate(zip(x_sizes, win.pads_begin, out_sizes)):
        full = (size - 1) * win.strides[i] + win.span(i)
        op = o - full + 2 * pb
        if pb < 0 or not 0 <= op < max(win.strides[i], win.dilations[i]):
            return None
        ops.append(op)
    return ops


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                   out_sizes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """ConvTranspose through ``torch.nn.functional.conv_transpose{1,2,3}d`` (bias fused)."""
    n = len(win.kernel)
    opad = _transpose_native(tuple(x.shape[2:]), win, out_sizes) if n in (1, 2, 3) else None
    if opad is None or x.dtype != np.float32 or w.dtype != np.float32 or x.size == 0:
        return nb.conv_transpose(x, w, b, group, win, out_sizes, out)
    torch = load()
    F = torch.nn.functional
    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[n - 1]
    tb = tensor(b.astype(np.float32, copy=False)) if b is not None else None
    y = fn(tensor(x), tensor(w), tb, list(win.strides), list(win.pads_begin), opad, group, list(win.dilations))
    return _deliver(y, out, None, False)


def conv_transpose_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                        out_sizes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """2-D ConvTranspose on a channels-last input (converted if it is not), result left
    channels-last (NCHW shape, NHWC strides). oneDNN's NCHW path is ~20x slower on the PP-OCR
    detector's 2x2 stride-2 upsampling (bench/RESULTS.md). Other shapes go through ``conv_transpose``."""
    opad = _transpose_native(tuple(x.shape[2:]), win, out_sizes) if len(win.kernel) == 2 else None
    if opad is None or x.dtype != np.float32 or w.dtype != np.float32 or x.size == 0:
        return conv_transpose(x, w, b, group, win, out_sizes, out)
    torch = load()
    tx = tensor(x).contiguous(memory_format=torch.channels_last)
    tb = tensor(b.astype(np.float32, copy=False)) if b is not None else None
    y = torch.nn.functional.conv_transpose2d(tx, tensor(w), tb, list(win.strides), list(win.pads_begin), opad, group,
                                             list(win.dilations))
    if out is not None:
        return _deliver(y, out, None, False)
    return y.numpy()


def _mm_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...] | None:
    if a.ndim < 2 or b.ndim < 2:
        return None
    return tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + (a.shape[-2], b.shape[-1])


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``torch.matmul`` (MKL; numpy.matmul semantics), straight into ``out`` when it fits."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        return nb.matmul(a, b, out)
    torch = load()
    if out is not None and out.dtype == np.float32 and out.flags.c_contiguous and out.shape == _mm_shape(a, b):
        torch.matmul(tensor(a), tensor(b), out=tensor(out))
        return out
    return torch.matmul(tensor(a), tensor(b)).numpy()


def addmm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
          out: np.ndarray | None = None) -> np.ndarray:
    """Gemm as ``torch.addmm`` (MKL): alpha * a @ b + beta * c in one call."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim != 2 or b.ndim != 2:
        return nb.gemm(a, b, c, alpha, beta, out)
    torch = load()
    ta, tb = tensor(a), tensor(b)
    fits = out is not None and out.dtype == np.float32 and out.flags.writeable and out.flags.c_contiguous \
        and out.shape == (a.shape[0], b.shape[1])
    kw = {"out": tensor(out)} if fits and out is not None else {}
    if c is None or beta == 0.0:
        y = torch.mm(ta, tb, **kw)
        if alpha != 1.0:
            y.mul_(alpha)
    else:
        y = torch.addmm(tensor(c.astype(np.float32, copy=False)), ta, tb, beta=beta, alpha=alpha, **kw)
    return out if fits else y.numpy()  # type: ignore[return-value]


def _conv_n(n: int) -> Any:
    return lambda s: isinstance(s, ConvSpec) and s.op_type == "Conv" and s.dtype == "float32" \
        and s.n_spatial == n


def _transpose_ok(s: Any) -> bool:
    return (isinstance(s, ConvSpec) and s.op_type == "ConvTranspose" and s.dtype == "float32"
            and s.n_spatial in (1, 2, 3) and _transpose_native(s.x_shape[2:], s.win, s.out_sizes) is not None)


def _gemm_ok(op: str) -> Any:
    return lambda s: isinstance(s, GemmSpec) and s.op_type == op and s.dtype == "float32"


ALGORITHMS: list[Implementation] = [
    Implementation(TORCH_CONV2D, _conv_n(2), conv, "torch.nn.functional.conv2d (oneDNN), bias fused"),
    Implementation(TORCH_CONV2D_PACKED, lambda s: _conv_n(2)(s) and s.group == 1 and s.win.pads_begin == s.win.pads_end
                   and windows_read_input(tuple(s.x_shape[2:]), s.win) and packing_supported(),
              conv_packed, "oneDNN conv with the weight prepacked once (private torch.ops.mkldnn API)"),
    Implementation(TORCH_CONV2D_NHWC, lambda s: _conv_n(2)(s) and s.win.pads_begin == s.win.pads_end
                   and windows_read_input(tuple(s.x_shape[2:]), s.win) and packing_supported(),
              conv_nhwc, "oneDNN conv in channels-last layout, weight prepacked, result left NHWC"),
    Implementation(TORCH_CONV1D, _conv_n(1), conv, "torch.nn.functional.conv1d (oneDNN), bias fused"),
    Implementation(TORCH_CONV3D, _conv_n(3), conv, "torch.nn.functional.conv3d (oneDNN), bias fused"),
    Implementation(TORCH_CONV_TRANSPOSE, _transpose_ok, conv_transpose,
              "torch.nn.functional.conv_transpose{1,2,3}d, bias fused"),
    Implementation(TORCH_CONV_TRANSPOSE_NHWC, lambda s: _transpose_ok(s) and s.n_spatial == 2,
              conv_transpose_nhwc, "torch.nn.functional.conv_transpose2d on channels-last data, result left NHWC"),
    Implementation(TORCH_MATMUL, _gemm_ok("MatMul"), matmul, "torch.matmul (MKL)"),
    Implementation(TORCH_ADDMM, _gemm_ok("Gemm"), addmm, "torch.addmm (MKL), alpha/beta/C fused"),
]


# ------------------------------------------------------------------ bfloat16 (AVX512_BF16)

def _bf16_tensor(a: np.ndarray) -> Any:
    """A torch bfloat16 view of an ml_dtypes bfloat16 array (same bits, no copy)."""
    return tensor(np.ascontiguousarray(a).view(np.int16)).view(load().bfloat16)


def _bf16_conv_tensor(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window) -> Any:
    """The bf16 conv as a torch bfloat16 tensor, or None (unsupported rank / no torch)."""
    if len(win.kernel) not in (1, 2, 3) or not available():
        return None
    tb = _bf16_tensor(b.astype(x.dtype)) if b is not None else None
    return _torch_conv(_bf16_tensor(x), _bf16_tensor(w), tb, tuple(x.shape[2:]), group, win)


def bf16_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window) -> np.ndarray | None:
    """Conv of bfloat16 X and W in oneDNN's bf16 kernels (fp32 accumulation, bf16 result, as the
    NPU's cube unit under the bf16 precision modes); returns float32 numpy, or None when torch
    or the shape is not supported (the caller then computes in float32)."""
    y = _bf16_conv_tensor(x, w, b, group, win)
    return None if y is None else y.float().numpy()


def bf16_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """numpy-matmul semantics on bfloat16 operands in oneDNN/MKL bf16 kernels; float32 result
    (None when torch is unavailable)."""
    if not available() or a.ndim == 0 or b.ndim == 0:
        return None
    return load().matmul(_bf16_tensor(a), _bf16_tensor(b)).float().numpy()


def bf16_conv_fused(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                    residual: np.ndarray | None, relu: bool) -> np.ndarray | None:
    """bf16 conv + residual + relu entirely in torch; returns an ml_dtypes bfloat16 array (no
    float32 round trip between layers), or None when not supported."""
    y = _bf16_conv_tensor(x, w, b, group, win)
    if y is None:
        return None
    if residual is not None:
        y = y.add_(_bf16_tensor(residual.astype(x.dtype, copy=False)))
    if relu:
        y = y.relu_()
    return y.contiguous().view(load().int16).numpy().view(x.dtype)
