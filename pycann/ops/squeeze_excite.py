"""GE's SqueezeExcite: a squeeze-and-excitation block as one op.

``pycann.SqueezeExcite(X, W1, B1, W2, B2; act1, act1_alpha, act1_beta, act2, act2_alpha, act2_beta) -> Y``
with X of shape (N, C, H, W), W1 (R, C, 1, 1), B1 (R) or absent, W2 (C, R, 1, 1), B2 (C) or absent:

    s[n, c] = mean over (h, w) of X[n, c, h, w]                      (GlobalAveragePool)
    z[n, r] = act1(sum_c W1[r, c] s[n, c] + B1[r])                   (1x1 Conv, activation)
    g[n, c] = act2(sum_r W2[c, r] z[n, r] + B2[c])                   (1x1 Conv, gate: Sigmoid, HardSigmoid)
    Y[n, c, h, w] = X[n, c, h, w] * g[n, c]                          (Mul)

(Hu et al., "Squeeze-and-Excitation Networks", 2018; the blocks of EfficientNet, MobileNetV3,
RegNetY, PP-LCNet.) The activations are FusedConv's (``ops/fused.py``, ``apply_activation``:
name, alpha, beta). GE's SqueezeExciteFusion (ge/compile/passes/fuse_squeeze_excite.py) forms it
from GlobalAveragePool -> [Fused]Conv -> [Fused]Conv -> Mul.

Why: unfused, the block is four kernel calls of which three work on a few hundred numbers (an
average pool, two 1x1 convs on a 1x1 image, each a oneDNN primitive with its OpenMP fork), and
the pool runs oneDNN's pooling loop. Fused, the tiny middle is a few numpy calls and the pool one
matrix-vector product (``kernels/squeeze_excite.py``). The values are the same computation in
float32 (summation order aside).

``pycann.SqueezeExciteProject(X, W1, B1, W2, B2, Wp, Bp, Z; the same attributes) -> Y`` is the block
and the 1x1 projection conv after it (MobileNetV3's and EfficientNet's linear bottleneck), Wp
(M, C, 1, 1), Bp (M) or absent, Z (N, M, H, W) a residual or absent, no activation:

    Y[n, m, h, w] = sum_c Wp[m, c] (X[n, c, h, w] g[n, c]) + Bp[m] + Z[n, m, h, w]

GE's SqueezeExciteProjectFusion (ge/compile/passes/fuse_se_project.py) forms it. Why: the gated X is
written and read back once more than the projection needs: the bound kernel
(``kernels/squeeze_excite_project.py``) scales the projection's weights by the gate instead
(``Wp[m, c] g[n, c]``, M x C numbers per image rather than C x H x W) and reads X once. That product
is rounded in another order (``x (w g)`` against ``(x g) w``): within float32 rounding, and a gated
value that overflows float32 where the scaled weight does not (or the reverse) differs.

This module's kernels are the reference: any strides (the output is laid out like X, channels-last
in, channels-last out, as ChannelShuffle does), float32 arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.fused import ACTIVATIONS, apply_activation
from pycann.ops.opdef import InferContext, OpDef

DOMAIN = "pycann"
ATTRS: dict[str, Any] = {"act1": "", "act1_alpha": 0.0, "act1_beta": 0.0,
                         "act2": "", "act2_alpha": 0.0, "act2_beta": 0.0}


def activations(attrs: Mapping[str, Any]) -> tuple[tuple[str, float, float], tuple[str, float, float]]:
    """The two activations as (name, alpha, beta), checked against FusedConv's vocabulary."""
    acts = tuple((str(attrs.get(f"act{i}", "")), float(attrs.get(f"act{i}_alpha", 0.0)),
                  float(attrs.get(f"act{i}_beta", 0.0))) for i in (1, 2))
    for name, _, _ in acts:
        if name not in ACTIVATIONS:
            raise ValueError(f"SqueezeExcite: unknown activation {name!r} (expected one of {ACTIVATIONS[1:]})")
    return acts  # type: ignore[return-value]


def matrices(w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray, b2: np.ndarray | None,
             c: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
    """(W1 as C x R, B1, W2 as R x C, B2), float32 and C-contiguous, after checking the shapes
    against X's ``c`` channels. Raises ValueError naming the operand that does not fit."""
    w1, w2 = np.asarray(w1), np.asarray(w2)
    if w1.ndim != 4 or w1.shape[1] != c or w1.shape[2:] != (1, 1):
        raise ValueError(f"SqueezeExcite: W1 has shape {list(w1.shape)}; expected [R, {c}, 1, 1]")
    r = w1.shape[0]
    if w2.shape != (c, r, 1, 1):
        raise ValueError(f"SqueezeExcite: W2 has shape {list(w2.shape)}; expected [{c}, {r}, 1, 1]")
    bs = []
    for name, b, n in (("B1", b1, r), ("B2", b2, c)):
        if b is not None:
            b = np.asarray(b)
            if b.shape != (n,):
                raise ValueError(f"SqueezeExcite: {name} has shape {list(b.shape)}; expected [{n}]")
            b = np.ascontiguousarray(b, dtype=np.float32)
        bs.append(b)
    w1t = np.ascontiguousarray(w1.reshape(r, c).T, dtype=np.float32)
    w2t = np.ascontiguousarray(w2.reshape(c, r).T, dtype=np.float32)
    return w1t, bs[0], w2t, bs[1]


def gate(s: np.ndarray, w1t: np.ndarray, b1: np.ndarray | None, w2t: np.ndarray, b2: np.ndarray | None,
         acts: tuple[tuple[str, float, float], tuple[str, float, float]]) -> np.ndarray:
    """g (N x C, float32) from the channel means ``s`` (N x C): the two 1x1 convs and activations."""
    z = s @ w1t
    if b1 is not None:
        z += b1
    apply_activation(z, *acts[0])
    g = z @ w2t
    if b2 is not None:
        g += b2
    return apply_activation(g, *acts[1])


def _operands(inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
    ins = list(inputs) + [None] * (5 - len(inputs))
    x = np.asarray(ins[0])
    if x.ndim != 4:
        raise ValueError(f"SqueezeExcite: X has shape {list(x.shape)}; expected rank 4 (N, C, H, W)")
    if ins[1] is None or ins[3] is None:
        raise ValueError("SqueezeExcite: W1 and W2 are required")
    return x, ins[1], ins[2], ins[3], ins[4]


def _compute(inputs: Sequence[Any], attrs: Mapping[str, Any], y: np.ndarray | None) -> np.ndarray:
    x, w1, b1, w2, b2 = _operands(inputs)
    n, c = x.shape[:2]
    w1t, b1, w2t, b2 = matrices(w1, b1, w2, b2, c)
    xf = x.astype(np.float32, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):  # empty spatial dims: NaN means, as numpy
        s = np.mean(xf, axis=(2, 3), dtype=np.float32) if x.size else np.full((n, c), np.nan, np.float32)
    g = gate(np.ascontiguousarray(s, dtype=np.float32), w1t, b1, w2t, b2, activations(attrs))
    if y is None:
        if x.strides[1] == x.itemsize and c > 1 and x.strides[3] > x.itemsize:  # channels-last in: out too
            y = np.empty((n, x.shape[2], x.shape[3], c), x.dtype).transpose(0, 3, 1, 2)
        else:
            y = np.empty(x.shape, x.dtype)
    np.multiply(xf, g.reshape(n, c, 1, 1), out=y, casting="unsafe")
    return y


def _k_squeeze_excite(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return [_compute(inputs, attrs, None)]


def _out_squeeze_excite(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    _compute(inputs, attrs, outs[0])


def _infer(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.inputs[0] if ctx.inputs else None
    if x is None or len(ctx.inputs) < 4 or ctx.inputs[1] is None or ctx.inputs[3] is None:
        raise ctx.fail("needs X, W1 and W2")
    if x.shape is not None and len(x.shape) != 4:
        raise ctx.fail(f"X {x} must be rank 4 (N, C, H, W)")
    try:
        activations(ctx.attrs)
    except ValueError as e:
        raise ctx.fail(str(e).split(": ", 1)[1]) from None
    return [TensorDesc(x.dtype, x.shape)]


def _project(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """SqueezeExciteProject's reference: the block, then the 1x1 conv of its output (float32)."""
    ins = list(inputs) + [None] * (8 - len(inputs))
    y = _compute(ins[:5], attrs, None)
    wp, bp, z = ins[5], ins[6], ins[7]
    if wp is None:
        raise ValueError("SqueezeExciteProject: Wp is required")
    wp = np.asarray(wp)
    n, c, h, w = y.shape
    if wp.ndim != 4 or wp.shape[1:] != (c, 1, 1):
        raise ValueError(f"SqueezeExciteProject: Wp has shape {list(wp.shape)}; expected [M, {c}, 1, 1]")
    m = wp.shape[0]
    rows = y.transpose(0, 2, 3, 1).astype(np.float32, copy=False).reshape(n * h * w, c)
    out = rows @ wp.reshape(m, c).T.astype(np.float32)
    if bp is not None:
        out += np.asarray(bp, np.float32).reshape(m)
    out = out.reshape(n, h, w, m).transpose(0, 3, 1, 2)  # channels-last, as the projection in a chain
    if z is not None:
        out += np.asarray(z, np.float32)
    if not (y.strides[1] == y.itemsize and c > 1 and y.strides[3] > y.itemsize):  # X C-contiguous: Y too
        out = np.ascontiguousarray(out)
    return [out]


def _out_project(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    outs[0][...] = _project(inputs, attrs)[0]


def _infer_project(ctx: InferContext) -> list[TensorDesc]:
    x = _infer(ctx)[0]
    wp = ctx.inputs[5] if len(ctx.inputs) > 5 else None
    if wp is None:
        raise ctx.fail("needs Wp (the projection's weight)")
    if wp.shape is not None and len(wp.shape) != 4:
        raise ctx.fail(f"Wp {wp} must be rank 4 (M, C, 1, 1)")
    shape = None
    if x.shape is not None and wp.shape is not None:
        shape = (x.shape[0], wp.shape[0], *x.shape[2:])
    return [TensorDesc(x.dtype, shape)]


OPS: list[OpDef] = [
    OpDef("SqueezeExcite", _infer, _k_squeeze_excite, domain=DOMAIN, attrs=ATTRS, out_kernel=_out_squeeze_excite,
          doc="GE: GlobalAveragePool -> 1x1 Conv -> 1x1 Conv -> Mul (squeeze-and-excitation) as one op"),
    OpDef("SqueezeExciteProject", _infer_project, _project, domain=DOMAIN, attrs=ATTRS, out_kernel=_out_project,
          doc="GE: SqueezeExcite and the 1x1 projection conv after it (the conv's weights scaled by the gate)"),
]
