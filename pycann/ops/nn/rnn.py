"""Recurrent ops: LSTM, GRU, RNN (ONNX spec, Operators.md#LSTM / #GRU / #RNN).

Every direction precomputes ``X @ W^T + biases`` for all time steps in one GEMM, then loops over
time with one small GEMM (``H_{t-1} @ R^T``) per step. Kernels always return every output (Y,
Y_h[, Y_c]); the executor drops the ones a node does not name.

``sequence_lens``: outputs past a sequence's length are zero and Y_h / Y_c hold the state at
the last valid step. The reverse direction processes each sequence from its own last valid
step, which we get by reversing every batch row within its valid prefix (an involution), so
both directions share the forward loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import InferContext, OpDef

Act = Callable[[np.ndarray], np.ndarray]

# Which activations read alpha/beta, and ONNX Runtime's defaults when the lists run out
# (rnn_helpers.cc: only LeakyRelu, HardSigmoid and Elu have non-zero defaults).
_ACT_ARGS: dict[str, tuple[bool, bool]] = {
    "affine": (True, True), "relu": (False, False), "leakyrelu": (True, False),
    "thresholdedrelu": (True, False), "tanh": (False, False), "scaledtanh": (True, True),
    "sigmoid": (False, False), "hardsigmoid": (True, True), "elu": (True, False),
    "softsign": (False, False), "softplus": (False, False),
}
_ACT_DEFAULTS: dict[str, tuple[float, float]] = {
    "leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0),
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 0.5 * tanh(x / 2) + 0.5 never overflows (exp(-x) does for x << 0) and is 4 in-place ufuncs.
    y = np.multiply(x, 0.5)
    np.tanh(y, out=y)
    y *= 0.5
    y += 0.5
    return y


_F32_MAX = float(np.finfo(np.float32).max)


def gate_clip(v: np.ndarray, bound: float | None, with_bias: bool) -> np.ndarray:
    """ONNX Runtime's clipping of gate pre-activations (deep_cpu LSTM/GRU), in place when it
    clips: with a bias input B, values are clipped to [-bound, bound] (``clip``, else the largest
    float32) and a NaN becomes +bound, so a NaN or inf input or state gives finite gates (sigmoid
    1, tanh 1) rather than NaN; without B, ``clip`` clips as np.clip does and NaN stays NaN.
    (Measured on ORT 1.2x; Silero VAD's LSTM depends on it for NaN/inf/1e30 inputs.)"""
    if with_bias:
        b = _F32_MAX if bound is None else bound
        np.fmin(v, b, out=v)  # fmin/fmax return the number when one operand is NaN
        np.fmax(v, -b, out=v)
        return v
    return v if bound is None else np.clip(v, -bound, bound)


def _make_act(name: str, alpha: float, beta: float) -> Act:
    """One activation of the ONNX RNN activation list (Operators.md#RNN, 'activations')."""
    a, b = alpha, beta
    if name == "sigmoid":
        return _sigmoid
    if name == "tanh":
        return np.tanh
    if name == "relu":
        return lambda x: np.maximum(x, 0)
    if name == "affine":
        return lambda x: x * a + b
    if name == "leakyrelu":
        return lambda x: np.where(x >= 0, x, x * a)
    if name == "thresholdedrelu":
        return lambda x: np.where(x > a, x, 0).astype(x.dtype)
    if name == "scaledtanh":
        return lambda x: np.tanh(x * b) * a
    if name == "hardsigmoid":
        return lambda x: np.clip(x * a + b, 0, 1)
    if name == "elu":
        return lambda x: np.where(x >= 0, x, (np.exp(np.minimum(x, 0)) - 1) * a)
    if name == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if name == "softplus":
        return lambda x: np.logaddexp(x, 0).astype(x.dtype)
    raise ValueError(f"unknown activation {name!r}")


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activations(attrs: Mapping[str, Any], defaults: Sequence[str], num_dir: int) -> list[list[tuple[str, Act]]]:
    """Per-direction activation functions; alpha/beta lists are consumed in activation order."""
    names = tuple(_text(n).lower() for n in (attrs.get("activations") or ()))
    alphas = tuple(float(a) for a in (attrs.get("activation_alpha") or ()))
    betas = tuple(float(b) for b in (attrs.get("activation_beta") or ()))
    return _activations_cached(names, alphas, betas, tuple(defaults), num_dir)


@functools.lru_cache(maxsize=256)
def _activations_cached(
    names: tuple[str, ...], alphas: tuple[float, ...], betas: tuple[float, ...],
    defaults: tuple[str, ...], num_dir: int,
) -> list[list[tuple[str, Act]]]:
    # Cached: kernels run once per inference, and parsing the list is most of a small LSTM's cost.
    per_dir = len(defaults)
    if not names:
        names = tuple(d.lower() for d in defaults) * num_dir
    elif len(names) == per_dir and num_dir == 2:
        names = names * 2
    if len(names) != per_dir * num_dir:
        raise ValueError(f"attribute 'activations' needs {per_dir * num_dir} entries, got {len(names)}")
    a_left, b_left = list(alphas), list(betas)
    funcs: list[tuple[str, Act]] = []
    for n in names:
        if n not in _ACT_ARGS:
            raise ValueError(f"activation {n!r} is not one of {sorted(_ACT_ARGS)}")
        use_a, use_b = _ACT_ARGS[n]
        da, db = _ACT_DEFAULTS.get(n, (0.0, 0.0))
        a = (a_left.pop(0) if a_left else da) if use_a else 0.0
        b = (b_left.pop(0) if b_left else db) if use_b else 0.0
        funcs.append((n, _make_act(n, a, b)))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_dir)]


_NUM_DIR = {"forward": 1, "reverse": 1, "bidirectional": 2}
# Default activation list per op, keyed by gate count (LSTM 4, GRU 3, RNN 1).
_DEFAULT_ACTS: dict[int, tuple[str, ...]] = {4: ("Sigmoid", "Tanh", "Tanh"), 3: ("Sigmoid", "Tanh"), 1: ("Tanh",)}


# ----------------------------------------------------------------------------------- infer


def _infer_rnn(ctx: InferContext, gates: int, n_out: int) -> list[TensorDesc]:
    x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
    direction = _text(ctx.attrs.get("direction", "forward"))
    if direction not in _NUM_DIR:
        raise ctx.fail(f"attribute 'direction' is {direction!r}; expected forward, reverse or bidirectional")
    num_dir = _NUM_DIR[direction]
    layout = int(ctx.attrs.get("layout", 0))
    if layout not in (0, 1):
        raise ctx.fail(f"attribute 'layout' is {layout}; expected 0 or 1")
    hidden = ctx.attrs.get("hidden_size")
    for name, d in (("W", w), ("R", r)):
        if d is not None and d.shape is not None:
            if len(d.shape) != 3:
                raise ctx.fail(f"input {name} has shape {d}; expected rank 3 [num_directions, {gates}*hidden, ...]")
            if isinstance(d.shape[0], int) and d.shape[0] != num_dir:
                raise ctx.fail(f"input {name} has {d.shape[0]} directions; direction={direction} needs {num_dir}")
            if isinstance(d.shape[1], int):
                if d.shape[1] % gates:
                    raise ctx.fail(f"input {name} dim 1 is {d.shape[1]}; expected a multiple of {gates}")
                if hidden is not None and d.shape[1] != gates * int(hidden):
                    raise ctx.fail(f"input {name} dim 1 is {d.shape[1]}; hidden_size={hidden} needs {gates * int(hidden)}")
                hidden = d.shape[1] // gates
    if hidden is None and r is not None and r.shape is not None and len(r.shape) == 3:
        hidden = r.shape[2]
    try:
        _activations(ctx.attrs, _DEFAULT_ACTS[gates], num_dir)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    dtype = x.dtype if x is not None else (w.dtype if w is not None else 1)
    if x is None or x.shape is None:
        seq = batch = None
    elif len(x.shape) != 3:
        raise ctx.fail(f"input X has shape {x}; expected rank 3")
    else:
        seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    # the operand shapes ONNX Runtime requires (it refuses any other: "Input B must have shape ...")
    in_size = x.shape[2] if x is not None and x.shape is not None else None
    h = hidden if isinstance(hidden, int) else None
    g = gates * h if h is not None else None
    state = (num_dir, batch, h) if layout == 0 else (batch, num_dir, h)
    _check_shape(ctx, 1, "W", (num_dir, g, in_size))
    _check_shape(ctx, 2, "R", (num_dir, g, h))
    _check_shape(ctx, 3, "B", (num_dir, 2 * g if g is not None else None))
    _check_shape(ctx, 5, "initial_h", state)
    if gates == 4:
        _check_shape(ctx, 6, "initial_c", state)
        _check_shape(ctx, 7, "P", (num_dir, 3 * h if h is not None else None))
    if layout == 0:
        y = TensorDesc(dtype, (seq, num_dir, batch, hidden))
        yh = TensorDesc(dtype, (num_dir, batch, hidden))
    else:
        y = TensorDesc(dtype, (batch, seq, num_dir, hidden))
        yh = TensorDesc(dtype, (batch, num_dir, hidden))
    return [y, yh, yh][:n_out]


def _check_shape(ctx: InferContext, i: int, name: str, want: tuple[Any, ...]) -> None:
    """Input ``i`` (if present with a known shape) has rank len(want) and each known dim of ``want``."""
    d = ctx.input(i)
    if d is None or d.shape is None:
        return
    bad = len(d.shape) != len(want) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                           for a, b in zip(d.shape, want))
    if bad:
        shown = "[" + ", ".join("?" if v is None else str(v) for v in want) + "]"
        raise ctx.fail(f"input {name} has shape {list(d.shape)} but must be {shown} (num_directions, "
                       f"gates * hidden_size, ...); fix: give {name} that shape")


def _infer_lstm(ctx: InferContext) -> list[TensorDesc]:
    return _infer_rnn(ctx, 4, 3)


def _infer_gru(ctx: InferContext) -> list[TensorDesc]:
    return _infer_rnn(ctx, 3, 2)


def _infer_simple_rnn(ctx: InferContext) -> list[TensorDesc]:
    return _infer_rnn(ctx, 1, 2)


# ---------------------------------------------------------------------------- shared setup


class _Setup:
    """Inputs normalised to layout 0 and the compute dtype, plus per-batch reordering."""

    def __init__(self, x: Sequence[Any], attrs: Mapping[str, Any], gates: int, n_states: int) -> None:
        self.out_dtype = x[0].dtype
        # float16/bfloat16 accumulate in float32 (ORT upcasts too); float64 stays float64.
        self.dt = np.dtype(np.float64) if self.out_dtype == np.float64 else np.dtype(np.float32)
        self.layout = int(attrs.get("layout", 0))
        direction = _text(attrs.get("direction", "forward"))
        self.num_dir = _NUM_DIR[direction]
        self.reverse_only = direction == "reverse"
        X = x[0].astype(self.dt, copy=False)
        if self.layout:
            X = X.transpose(1, 0, 2)
        self.X = X
        self.seq, self.batch, _ = X.shape
        self.W = x[1].astype(self.dt, copy=False)
        self.R = x[2].astype(self.dt, copy=False)
        self.H = self.R.shape[2]
        self.gates = gates
        self.B = None if len(x) <= 3 or x[3] is None else x[3].astype(self.dt, copy=False)
        lens = None if len(x) <= 4 or x[4] is None else np.asarray(x[4]).astype(np.int64)
        if lens is not None and (lens.shape != (self.batch,) or np.any((lens < 0) | (lens > self.seq))):
            # (ONNX Runtime refuses these; a length past the sequence ran as a full one)
            raise ValueError(f"input sequence_lens {lens.tolist()} must hold {self.batch} lengths (one per batch "
                             f"row) in [0, {self.seq}], the sequence length of X")
        if lens is not None and np.all(lens >= self.seq):
            lens = None  # every sequence is full: skip masking
        self.lens = lens
        self.init: list[np.ndarray] = []
        for k in range(n_states):
            v = x[5 + k] if len(x) > 5 + k else None
            if v is None:
                v = np.zeros((self.num_dir, self.batch, self.H), self.dt)
            else:
                v = v.astype(self.dt, copy=False)
                if self.layout:
                    v = v.transpose(1, 0, 2)
            self.init.append(v)
        self.clip = attrs.get("clip")
        # Time index per (t, batch) for the reverse direction: each row reversed within its length.
        self.rev_idx: np.ndarray | None = None
        if self.lens is not None:
            t = np.arange(self.seq)[:, None]
            ln = np.minimum(self.lens, self.seq)[None, :]
            self.rev_idx = np.where(t < ln, ln - 1 - t, t)
            self.valid = t < ln  # [seq, batch]

    def direction_x(self, d: int) -> tuple[np.ndarray, bool]:
        """X for direction ``d`` in processing order, and whether it is reversed."""
        rev = self.reverse_only or d == 1
        if not rev:
            return self.X, False
        if self.rev_idx is None:
            return self.X[::-1], True
        return self.X[self.rev_idx, np.arange(self.batch)[None, :]], True

    def xw(self, d: int, bias: np.ndarray | None) -> tuple[np.ndarray, bool]:
        """``X @ W[d]^T (+ bias)`` for all steps at once: [seq, batch, gates*H]."""
        X, rev = self.direction_x(d)
        out = (X.reshape(-1, X.shape[2]) @ self.W[d].T).reshape(self.seq, self.batch, self.W.shape[1])
        if bias is not None:
            out += bias
        return out, rev

    def unreverse(self, y: np.ndarray, rev: bool) -> np.ndarray:
        """Put per-step outputs of a reversed pass back at their original time positions."""
        if not rev:
            return y
        if self.rev_idx is None:
            return y[::-1]
        return y[self.rev_idx, np.arange(self.batch)[None, :]]

    def finish(self, ys: list[np.ndarray], states: list[list[np.ndarray]]) -> list[np.ndarray]:
        if len(ys) == 1:  # one direction: views, no copies
            y = ys[0][:, None]
            finals = [st[0][None] for st in states]
        else:
            y = np.stack(ys, axis=1)
            finals = [np.stack(st, axis=0) for st in states]
        if self.seq == 0:  # the final states are still the (caller-owned) initial ones
            finals = [f.copy() for f in finals]
        if self.lens is not None and np.any(self.lens <= 0):
            # ORT reports zero final states for empty sequences (not the initial state).
            empty = (self.lens <= 0)[None, :, None]
            finals = [np.where(empty, 0, f).astype(f.dtype) for f in finals]
        if self.layout:
            y = np.ascontiguousarray(y.transpose(2, 0, 1, 3))
            finals = [np.ascontiguousarray(f.transpose(1, 0, 2)) for f in finals]
        return [a.astype(self.out_dtype, copy=False) for a in (y, *finals)]


def _keep(valid_t: np.ndarray | None, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Freeze the state of batch rows whose sequence has ended."""
    return new if valid_t is None else np.where(valid_t[:, None], new, old)


# ------------------------------------------------------------------------------------ LSTM


def _k_lstm(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """LSTM (Operators.md#LSTM): gate order iofc, peepholes iof, outputs Y, Y_h, Y_c."""
    s = _Setup(x, attrs, 4, 2)
    H = s.H
    P = None if len(x) <= 7 or x[7] is None else x[7].astype(s.dt, copy=False)
    acts = _activations(attrs, _DEFAULT_ACTS[4], s.num_dir)
    clip = s.clip
    input_forget = bool(attrs.get("input_forget", 0))
    ys, hs, cs = [], [], []
    for d in range(s.num_dir):
        bias = None if s.B is None else s.B[d, :4 * H] + s.B[d, 4 * H:]
        xw, rev = s.xw(d, bias)
        r_t = s.R[d].T
        (_, f), (_, g), (_, h_act) = acts[d]
        pi = po = pf = None
        if P is not None and np.any(P[d]):
            pi, po, pf = P[d, :H], P[d, H:2 * H], P[d, 2 * H:]
        # Fast path: sigmoid on the contiguous [i, o, f] block at once (no peephole on o).
        fused = pi is None and clip is None and not input_forget
        h, c = s.init[0][d], s.init[1][d]
        y = np.empty((s.seq, s.batch, H), s.dt)
        for t in range(s.seq):
            gates = h @ r_t
            gates += xw[t]
            if fused:
                if s.B is not None:
                    gate_clip(gates, None, True)
                iof = f(gates[:, :3 * H])
                it, ot, ft = iof[:, :H], iof[:, H:2 * H], iof[:, 2 * H:]
                ct = g(gates[:, 3 * H:])
                c_new = ft * c
                c_new += it * ct
            else:
                gi, go, gf, gc = (gates[:, k * H:(k + 1) * H] for k in range(4))
                if pi is not None:
                    gi = gi + pi * c
                    gf = gf + pf * c
                if clip is not None or s.B is not None:
                    gi, gf, gc = (gate_clip(v.copy(), clip, s.B is not None) for v in (gi, gf, gc))
                it = f(gi)
                ft = 1 - it if input_forget else f(gf)
                c_new = ft * c + it * g(gc)
                if po is not None:
                    go = go + po * c_new
                if clip is not None or s.B is not None:
                    go = gate_clip(go.copy(), clip, s.B is not None)
                ot = f(go)
            h_new = ot * h_act(c_new)
            if s.lens is not None:
                vt = s.valid[t]
                c = _keep(vt, c_new, c)
                h = _keep(vt, h_new, h)
                y[t] = np.where(vt[:, None], h_new, 0)
            else:
                c, h = c_new, h_new
                y[t] = h_new
        ys.append(s.unreverse(y, rev))
        hs.append(h)
        cs.append(c)
    return s.finish(ys, [hs, cs])


# ------------------------------------------------------------------------------------- GRU


def _k_gru(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GRU (Operators.md#GRU): gate order zrh, ``linear_before_reset`` variants, outputs Y, Y_h."""
    s = _Setup(x, attrs, 3, 1)
    H = s.H
    acts = _activations(attrs, _DEFAULT_ACTS[3], s.num_dir)
    clip = s.clip
    lbr = bool(attrs.get("linear_before_reset", 0))
    ys, hs = [], []
    for d in range(s.num_dir):
        rb_h = None
        if s.B is None:
            bias = None
        else:
            wb, rb = s.B[d, :3 * H], s.B[d, 3 * H:]
            bias = wb.copy()
            bias[:2 * H] += rb[:2 * H]
            if lbr:
                rb_h = rb[2 * H:]  # stays inside r * (H R_h^T + Rb_h)
            else:
                bias[2 * H:] += rb[2 * H:]
        xw, rev = s.xw(d, bias)
        R = s.R[d]
        r_all_t, r_zr_t, r_h_t = R.T, R[:2 * H].T, R[2 * H:].T
        (_, f), (_, g) = acts[d]
        h = s.init[0][d]
        y = np.empty((s.seq, s.batch, H), s.dt)
        for t in range(s.seq):
            xt = xw[t]
            if lbr:
                hr = h @ r_all_t
                zr = hr[:, :2 * H] + xt[:, :2 * H]
                hh = hr[:, 2 * H:]
                if rb_h is not None:
                    hh = hh + rb_h
            else:
                zr = h @ r_zr_t
                zr += xt[:, :2 * H]
            if clip is not None or s.B is not None:
                zr = gate_clip(zr, clip, s.B is not None)
            zr = f(zr)
            z, r = zr[:, :H], zr[:, H:]
            if lbr:
                pre = xt[:, 2 * H:] + r * hh
            else:
                pre = (r * h) @ r_h_t
                pre += xt[:, 2 * H:]
            if clip is not None or s.B is not None:
                pre = gate_clip(pre, clip, s.B is not None)
            ht = g(pre)
            h_new = ht + z * (h - ht)  # (1 - z) * ht + z * h
            if s.lens is not None:
                vt = s.valid[t]
                h = _keep(vt, h_new, h)
                y[t] = np.where(vt[:, None], h_new, 0)
            else:
                h = h_new
                y[t] = h_new
        ys.append(s.unreverse(y, rev))
        hs.append(h)
    return s.finish(ys, [hs])


# ------------------------------------------------------------------------------------- RNN


def _k_rnn(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Simple RNN (Operators.md#RNN): ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``."""
    s = _Setup(x, attrs, 1, 1)
    H = s.H
    acts = _activations(attrs, _DEFAULT_ACTS[1], s.num_dir)
    clip = s.clip
    ys, hs = [], []
    for d in range(s.num_dir):
        bias = None if s.B is None else s.B[d, :H] + s.B[d, H:]
        xw, rev = s.xw(d, bias)
        r_t = s.R[d].T
        f = acts[d][0][1]
        h = s.init[0][d]
        y = np.empty((s.seq, s.batch, H), s.dt)
        for t in range(s.seq):
            pre = h @ r_t
            pre += xw[t]
            if clip is not None:
                pre = np.clip(pre, -clip, clip)
            h_new = f(pre)
            if s.lens is not None:
                vt = s.valid[t]
                h = _keep(vt, h_new, h)
                y[t] = np.where(vt[:, None], h_new, 0)
            else:
                h = h_new
                y[t] = h_new
        ys.append(s.unreverse(y, rev))
        hs.append(h)
    return s.finish(ys, [hs])


_COMMON = {
    "activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
    "direction": "forward", "hidden_size": None, "layout": 0,
}

OPS: list[OpDef] = [
    # Opset 1 differs only by the output_sequence attribute (Y always produced here) and opset 14
    # added layout (default 0), so one definition serves every version.
    OpDef("LSTM", _infer_lstm, _k_lstm, since=1, attrs={**_COMMON, "input_forget": 0}),
    OpDef("GRU", _infer_gru, _k_gru, since=1, attrs={**_COMMON, "linear_before_reset": 0}),
    OpDef("RNN", _infer_simple_rnn, _k_rnn, since=1, attrs=dict(_COMMON)),
]
