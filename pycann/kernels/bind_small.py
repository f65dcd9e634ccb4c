"""Prepared kernels for tiny static signatures (Silero VAD: 37 steps of 1-20 us each), where a
call's cost is the number of numpy calls and the Python around them, not arithmetic.

Each kernel is an exact specialisation of the generic kernel (or of the prepared kernel it
replaced): the same ufuncs on the same operands in the same order, so results are
bit-identical; only the per-call decisions (axes, broadcasting, in-place eligibility, weight
layouts) move to plan time. ``PREPARE_SMALL`` is merged into ``prepared.PREPARE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, to_numpy
from pycann.kernels.bind_base import Kernel, Prepare
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bound import BoundKernel
from pycann.kernels.guarded_chain import bound_map
from pycann.kernels.providers import nan_guard
from pycann.ops.elementwise import power

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))



def _float_dtype(d: TensorDesc | None) -> np.dtype | None:
    """float32/float64 of a desc, else None (16-bit floats and integers keep the generic kernels)."""
    try:
        dt = to_numpy(d.dtype) if d is not None else None  # type: ignore[union-attr]
    except (TypeError, KeyError, ValueError):
        return None
    return dt if dt in _FLOATS else None


def _same_float(d: TensorDesc | None, dt: np.dtype) -> bool:
    """Whether ``d`` is of the float dtype ``dt`` (not ``!=``: ``np.dtype(None)`` is float64)."""
    other = _float_dtype(d)
    return other is not None and other == dt


# --------------------------------------------------------------------------- ReduceMean / ReduceSum


def _reduce(mean: bool) -> Prepare:
    """ReduceMean/ReduceSum of a float32/float64 tensor over trailing axes with constant axes:
    the generic kernel's ``einsum('ij->i')`` path (reduce.py ``_rsum``) with the row length,
    divisor and result shape fixed (~9 -> ~2 us on Silero VAD's final mean)."""

    def prepare(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
                outs: Sequence[TensorDesc | None]) -> Kernel | None:
        from pycann.ops.reduce import _reduce_axes

        xs, dt = _static(ins[0]), _float_dtype(ins[0])
        has_axes = len(ins) > 1 and ins[1] is not None
        axes = consts[1] if has_axes else None
        if xs is None or dt is None or (has_axes and axes is None) or 0 in xs:
            return None
        try:
            ax = _reduce_axes(np.empty(xs, np.bool_), axes, int(attrs["noop_with_empty_axes"]))
        except ValueError:
            return None  # the generic kernel reports it
        nd, na = len(xs), len(ax)
        if not ax:
            return lambda x, a: [x[0]]  # the generic kernel's identity (nothing to reduce)
        if sorted(ax) != list(range(nd - na, nd)):
            return None  # leading/inner axes: np.sum in the generic kernel
        k = int(np.prod(xs[nd - na:], dtype=np.int64))
        out = xs[: nd - na] + ((1,) * na if attrs["keepdims"] else ())
        want = _static(outs[0]) if outs else None
        if want is not None and want != out:
            return None
        generic = _generic("ReduceMean" if mean else "ReduceSum")
        div = dt.type(k) if mean and k != 1 else None  # x / 1 is x exactly: skip it

        def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
            v = x[0]
            if not v.flags.c_contiguous or v.dtype != dt:
                return generic(x, a)  # the generic kernel sums a strided input in another order
            r = np.einsum("ij->i", v.reshape(-1, k))
            if div is not None:
                r /= div
            return [r.reshape(out)]

        return kernel

    return prepare


def _generic(op_type: str, domain: str = "") -> Kernel:
    from pycann.ops.registry import lookup

    return lookup(op_type, domain, 18).kernel  # type: ignore[return-value]


# --------------------------------------------------------------------------- Pow / ElementwiseChain


def _pow(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
         outs: Sequence[TensorDesc | None]) -> Kernel | None:
    """Pow of two same-dtype float32/float64 tensors: the generic kernel's first branch, without
    its dtype dispatch."""
    dt = _float_dtype(ins[0])
    if dt is None or len(ins) < 2 or not _same_float(ins[1], dt):
        return None

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            r = power(x[0], x[1])
        return [r if isinstance(r, np.ndarray) else np.asarray(r)]

    return kernel


def _chain(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], consts: Sequence[np.ndarray | None],
           outs: Sequence[TensorDesc | None]) -> Kernel | None:
    """ElementwiseChain over float32/float64 operands of one dtype with static shapes: which steps
    write a fresh buffer and which update it in place (fused_chain.py ``_k_chain``'s broadcast and
    dtype tests) is decided once, so a call is just the ufuncs (~6 -> ~2 us on Silero's STFT)."""
    from pycann.ops import fused_chain

    dt = _float_dtype(ins[0])
    shape = _static(ins[0])
    if dt is None or shape is None:
        return None
    # (binary ufunc or None, unary in-place fn or None, operand index, chain is right operand, write in place, params)
    plan: list[tuple[Any, Any, int, bool, bool, tuple[float, float]]] = []
    have_buf = False
    for op, idx, right, p0, p1 in attrs["steps"]:
        if op in fused_chain.BINARY:
            d = ins[idx] if 0 <= idx < len(ins) else None
            other = _static(d)
            if other is None or not _same_float(d, dt):
                return None
            try:
                wide = tuple(np.broadcast_shapes(shape, other))
            except ValueError:
                return None
            inplace = have_buf and len(other) <= len(shape) and wide == shape
            plan.append((fused_chain.BINARY[op], None, int(idx), bool(right), inplace, (0.0, 0.0)))
            shape, have_buf = wide, True
        elif op in fused_chain.UNARY_IN_PLACE:
            plan.append((None, fused_chain.UNARY_IN_PLACE[op], 0, False, have_buf, (p0, p1)))
            have_buf = True
        else:
            return None
    want = _static(outs[0]) if outs else None
    if not have_buf or (want is not None and want != shape):
        return None
    steps = tuple(plan)
    # with an arena view to write, the first step writes there when every later step is in place
    direct = all(st[4] for st in steps[1:])
    # the NaN guard's bound of the input carried to the output (kernels/guarded_chain.py), so a
    # guarded conv after a small pre-activation chain (DenseNet's 7x7 and 14x14 blocks) reads nothing
    through = bound_map(attrs["steps"], consts) if dt == np.float32 else None
    pass_on = nan_guard.pass_on

    def kernel(x: Sequence[Any], a: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        buf = x[0]  # never written: the first step makes a fresh buffer (or fills ``out``)
        into = out[0] if out is not None and direct else None
        with np.errstate(all="ignore"):
            for fn, unary, idx, right, inplace, p in steps:
                if fn is None:
                    if not inplace:
                        if into is not None:
                            np.copyto(into, buf)
                            buf = into
                        else:
                            buf = buf.copy()
                    unary(buf, p)
                elif inplace:
                    if right:
                        fn(x[idx], buf, out=buf)
                    else:
                        fn(buf, x[idx], out=buf)
                elif into is not None:
                    buf = fn(x[idx], buf, out=into) if right else fn(buf, x[idx], out=into)
                else:
                    r = fn(x[idx], buf) if right else fn(buf, x[idx])
                    buf = r if isinstance(r, np.ndarray) else np.asarray(r)
        if out is not None and buf is not out[0]:
            out[0][...] = buf
            buf = out[0]
        if out is not None and through is not None:
            pass_on(buf, x[0], through)
        return [buf]

    return BoundKernel(kernel, writes_out=True)


# --------------------------------------------------------------------------- LSTM


def _lstm(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """A forward, layout-0 LSTM with constant W/R/B, default activations, no peepholes, clip,
    input_forget or sequence lengths (Silero VAD's decoder): transposed weights and the summed
    bias are fixed at plan time, so a call is one input GEMM and per step one GEMM plus the gate
    math of the generic kernel (ops/nn/rnn.py), bit for bit, in fewer and cheaper numpy calls:
    one scaled tanh over all four gates (sigmoid(x) = 0.5 * tanh(x / 2) + 0.5 on i, o, f; the
    cell candidate is scaled by 1 and shifted by -0.0, which change no value), products written
    into buffers the step owns, and batch 1 on 1-D rows (a ufunc on equal-shape 1-D operands
    costs about half of one that broadcasts)."""
    from pycann.ops.nn.rnn import _text

    xs = _static(ins[0])
    w = consts[1] if len(consts) > 1 else None
    r = consts[2] if len(consts) > 2 else None
    has = [i < len(ins) and ins[i] is not None for i in range(8)]
    if xs is None or len(xs) != 3 or w is None or r is None or ins[0].dtype != 1 or w.dtype != np.float32:
        return None
    if _text(attrs.get("direction", "forward")) != "forward" or int(attrs.get("layout", 0)) or attrs.get("clip") \
            or int(attrs.get("input_forget", 0)) or attrs.get("activations") or has[4]:
        return None
    b = consts[3] if has[3] else None
    p = consts[7] if has[7] else None
    if (has[3] and b is None) or (has[7] and (p is None or np.any(p))):
        return None
    if any(has[i] and (ins[i].dtype != 1) for i in (5, 6)):
        return None
    seq, batch, _ = xs
    hidden = r.shape[2]
    g4 = 4 * hidden
    wt = np.ascontiguousarray(w[0].T.astype(np.float32))
    rt = np.ascontiguousarray(r[0].T.astype(np.float32))
    bias = None if b is None else (b[0, :g4] + b[0, g4:]).astype(np.float32)
    f32 = np.float32
    f32_max = f32(np.finfo(f32).max)
    scale = np.concatenate([np.full(3 * hidden, 0.5, f32), np.ones(hidden, f32)])
    shift = np.concatenate([np.full(3 * hidden, 0.5, f32), np.full(hidden, -0.0, f32)])
    row = (hidden,) if batch == 1 else (batch, hidden)  # one batch row: 1-D operands
    gshape = (seq,) + row[:-1] + (g4,)
    i_, o_, f_, c_ = (slice(k * hidden, (k + 1) * hidden) for k in range(4))

    def lstm(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        xw = (x[0].reshape(-1, x[0].shape[2]) @ wt).reshape(gshape)
        if bias is not None:
            xw += bias
        h = x[5][0].reshape(row) if has[5] else np.zeros(row, f32)
        c = x[6][0].reshape(row) if has[6] else np.zeros(row, f32)
        y = np.empty((seq, 1, batch, hidden), f32)
        for t in range(seq):
            gates = np.matmul(h, rt)
            gates += xw[t]
            if bias is not None:  # ORT's gate clipping with a bias: NaN -> +max (rnn.gate_clip)
                np.fmin(gates, f32_max, out=gates)
                np.fmax(gates, -f32_max, out=gates)
            gates *= scale
            np.tanh(gates, out=gates)
            gates *= scale
            gates += shift  # [..., :3H] = sigmoid(i, o, f), [..., 3H:] = tanh(c~)
            c = gates[..., f_] * c
            ct = gates[..., c_]
            np.multiply(gates[..., i_], ct, out=ct)
            c += ct
            h = np.tanh(c)
            h *= gates[..., o_]
            y[t, 0] = h
        if seq == 0:
            h, c = h.copy(), c.copy()
        return [y, h.reshape(1, batch, hidden), c.reshape(1, batch, hidden)]

    return lstm


# --------------------------------------------------------------------------- small im2col convs


# Above this many patch-matrix elements a ``take`` through precomputed indices (8-byte index per
# element) is slower than the generic kernel's two copies (PP-OCR cls depthwise: 345K, 0.55 -> 0.15 ms).
TAKE_MAX_ELEMENTS = 1 << 14


def conv_im2col(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None], w: np.ndarray, b: np.ndarray | None,
                xs: tuple[int, ...], win: Any) -> Kernel | None:
    """A small float32 conv with constant weights as im2col + one matmul (Silero VAD, PP-OCR cls),
    with everything but the data fixed at plan time. The patch matrix holds the same values in
    the same layout as the generic kernel's, so the matmul, and the result, are bit-identical;
    only the way it is built is cheaper: a plain reshape of the input (1x1 kernels), the strided
    window view the matmul reads in place (no copy to make), or one ``take`` with precomputed
    indices where a copy is needed (the padding reads a zero slot past the input, held in a
    pooled buffer; ~3 -> ~1.5 us). Bias and Relu use operands of the result's own shape
    (same values; a ufunc that broadcasts costs ~0.7 us more)."""
    from pycann.ops import fused

    group = int(attrs.get("group", 1))
    n, c = xs[:2]
    m = w.shape[0]
    kdim = (c // group) * int(np.prod(win.kernel))
    l_out = int(np.prod(win.out))
    flat2d = n == 1 and group == 1  # one GEMM: 2-D operands (the same BLAS call as the 4-D matmul's one slice)
    wg = np.ascontiguousarray(w.reshape(m, kdim) if flat2d else w.reshape(group, m // group, kdim))
    ymm = (m, l_out) if flat2d else (n, group, m // group, l_out)
    bias = None if b is None else np.ascontiguousarray(np.broadcast_to(
        b.astype(np.float32).reshape((m, 1) if flat2d else (1, group, m // group, 1)), ymm))
    padded = xs[:2] + tuple(s + pb + pe for s, pb, pe in zip(xs[2:], win.pads_begin, win.pads_end))
    inner = (slice(None), slice(None)) + tuple(slice(pb, pb + s) for pb, s in zip(win.pads_begin, xs[2:]))
    vshape = padded[:2] + tuple(win.kernel) + tuple(win.out)
    out_shape = (n, m) + tuple(win.out)
    colshape = (kdim, l_out) if flat2d else (n, group, kdim, l_out)

    def windows(buf: np.ndarray, copy: bool | None = None) -> np.ndarray:
        """The generic kernel's window view of a padded buffer and its (n, group, kdim, L) reshape
        (``copy=False``: ValueError where that reshape needs a copy)."""
        st = [buf.itemsize]
        for d in reversed(padded[1:]):
            st.insert(0, st[0] * d)
        k_st = tuple(st[2 + i] * win.dilations[i] for i in range(len(win.kernel)))
        o_st = tuple(st[2 + i] * win.strides[i] for i in range(len(win.kernel)))
        view = np.ndarray(vshape, buf.dtype, buffer=buf, strides=tuple(st[:2]) + k_st + o_st)
        return np.reshape(np.reshape(view, (n, group, kdim, l_out), copy=copy), colshape, copy=copy)

    size = int(np.prod(xs))
    if size == 0:
        return None
    # The matmul must see the generic kernel's operand layout: a copied patch matrix is C-ordered,
    # and so is a view whose strides are those of a C-ordered array; any other view is kept.
    # (Probed without materialising the patch matrix: it can be tens of MB for a plan-time test.)
    try:
        col_strides: tuple[int, ...] | None = windows(np.zeros(padded, np.float32), copy=False).strides
    except ValueError:
        col_strides = None  # the reshape copies: C-ordered
    col_size = int(np.prod(colshape))
    identity_possible = not win.padded and all(k == 1 for k in win.kernel) and all(t == 1 for t in win.strides)
    take_idx = np.empty(0, np.intp)  # only the take mode keeps indices: 8 bytes per patch element
    if col_strides is not None and np.empty(colshape, np.float32).strides != col_strides:
        mode = "view"
    elif identity_possible and np.array_equal(windows(np.arange(size).reshape(padded)).reshape(-1), np.arange(size)):
        mode = "reshape"  # the patch matrix is the input itself (1x1 kernels)
    elif col_size > TAKE_MAX_ELEMENTS:
        mode = "copy"  # big patch matrices: the padded copy + strided reshape copy beats a gather
    else:
        mode = "take"
        idx = np.full(padded, size, np.intp)  # ``size``: the zero slot past the input
        idx[inner] = np.arange(size).reshape(xs)
        take_idx = np.ascontiguousarray(windows(idx))
    pool: list[tuple[np.ndarray, np.ndarray]] = []  # (input + zero slot, its input part): one per concurrent run
    act, al, be = fused._act(attrs)
    zeros = np.zeros(ymm, np.float32) if act == "Relu" else None
    residual = len(ins) > 3 and ins[3] is not None

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        xin = x[0]
        if mode == "reshape":
            col = xin.reshape(colshape)
        elif mode == "view":
            if win.padded:
                buf = np.zeros(padded, np.float32)
                buf[inner] = xin
            else:
                buf = np.ascontiguousarray(xin)
            col = np.ndarray(colshape, np.float32, buffer=buf, strides=col_strides)
        elif mode == "copy":
            if win.padded:
                buf = np.zeros(padded, np.float32)
                buf[inner] = xin
            else:
                buf = np.ascontiguousarray(xin, dtype=np.float32)
            col = windows(buf)  # the reshape copies into the generic kernel's C-ordered patch matrix
        elif win.padded:
            try:
                ext, body = pool.pop()
            except IndexError:
                ext = np.zeros(size + 1, np.float32)
                body = ext[:size].reshape(xs)
            body[...] = xin
            col = ext.take(take_idx)
            pool.append((ext, body))
        else:
            col = xin.reshape(-1).take(take_idx)
        y = np.matmul(wg, col)
        if bias is not None:
            np.add(y, bias, out=y)
        yo = y.reshape(out_shape)
        if residual:
            yo += x[3]
        if zeros is not None:
            np.maximum(y, zeros, out=y)
        elif act:
            fused.apply_activation(yo, act, al, be)
        return [yo]

    return kernel


PREPARE_SMALL: dict[tuple[str, str], Prepare] = {
    ("", "ReduceMean"): _reduce(mean=True),
    ("", "ReduceSum"): _reduce(mean=False),
    ("", "Pow"): _pow,
    ("pycann", "ElementwiseChain"): _chain,
    ("", "LSTM"): _lstm,
}
