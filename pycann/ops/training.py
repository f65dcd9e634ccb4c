"""Optimizer ops of the ``ai.onnx.preview.training`` domain (ONNX spec, Operators.md, preview
training ops, opset 1): Momentum, Adagrad, Adam.

Each takes the learning rate R, the step count T, then n tensors of each kind (X..., G...,
then the optimizer state) and returns the n updated X followed by the updated state tensors.
The arithmetic is done in float64 and cast back to each tensor's dtype. ``Gradient`` is not
provided: it needs automatic differentiation of the graph, not a kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

TRAINING = "ai.onnx.preview.training"
Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


def _groups(inputs: Inputs, k: int, op: str) -> tuple[float, int, list[list[np.ndarray]]]:
    """(R, T, [X..., G..., state...]) split into ``k`` groups of n tensors."""
    rest = list(inputs[2:])
    if not rest or len(rest) % k:
        raise ValueError(f"{op}: expected R, T and {k} groups of equally many tensors, got {len(inputs)} inputs")
    n = len(rest) // k
    r = float(np.asarray(inputs[0]).reshape(-1)[0])
    t = int(np.asarray(inputs[1]).reshape(-1)[0])
    return r, t, [[np.asarray(v) for v in rest[i * n : (i + 1) * n]] for i in range(k)]


def _k_adagrad(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Adagrad: r = R / (1 + T * decay_factor); G' = norm_coefficient * X + G; H' = H + G'^2;
    X' = X - r * G' / (sqrt(H') + epsilon)."""
    r, t, (xs, gs, hs) = _groups(inputs, 3, "Adagrad")
    lr = r / (1 + t * attrs["decay_factor"])
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g2 = attrs["norm_coefficient"] * x.astype(np.float64) + g
        hn = h + g2 * g2
        new_x.append((x - lr * g2 / (np.sqrt(hn) + attrs["epsilon"])).astype(x.dtype))
        new_h.append(hn.astype(h.dtype))
    return new_x + new_h


def _k_momentum(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Momentum: G' = norm_coefficient * X + G; V' = alpha * V + (T > 0 ? beta : 1) * G';
    standard X' = X - R * V', nesterov X' = X - R * (G' + alpha * V')."""
    r, t, (xs, gs, vs) = _groups(inputs, 3, "Momentum")
    alpha, mode = attrs["alpha"], attrs["mode"]
    beta = attrs["beta"] if t > 0 else 1.0
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum: mode must be 'standard' or 'nesterov', got {mode!r}")
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g2 = attrs["norm_coefficient"] * x.astype(np.float64) + g
        vn = alpha * v.astype(np.float64) + beta * g2
        step = vn if mode == "standard" else g2 + alpha * vn
        new_x.append((x - r * step).astype(x.dtype))
        new_v.append(vn.astype(v.dtype))
    return new_x + new_v


def _k_adam(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Adam: V' = alpha V + (1-alpha) G'; H' = beta H + (1-beta) G'^2; bias-corrected rate for T > 0;
    X' = (1 - norm_coefficient_post) * (X - R_adj * V' / (sqrt(H') + epsilon))."""
    r, t, (xs, gs, vs, hs) = _groups(inputs, 4, "Adam")
    a, b = attrs["alpha"], attrs["beta"]
    lr = r * np.sqrt(1 - b**t) / (1 - a**t) if t > 0 else r
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g2 = attrs["norm_coefficient"] * x.astype(np.float64) + g
        vn = a * v.astype(np.float64) + (1 - a) * g2
        hn = b * h.astype(np.float64) + (1 - b) * g2 * g2
        xn = x - lr * (vn / (np.sqrt(hn) + attrs["epsilon"]))
        new_x.append(((1 - attrs["norm_coefficient_post"]) * xn).astype(x.dtype))
        new_v.append(vn.astype(v.dtype))
        new_h.append(hn.astype(h.dtype))
    return new_x + new_v + new_h


def _infer(k: int):  # noqa: ANN202 - returns an InferFn
    def infer(ctx: InferContext) -> list[TensorDesc]:
        rest = list(ctx.inputs[2:])
        if not rest or len(rest) % k:
            raise ctx.fail(f"expected R, T and {k} groups of equally many tensors, got {len(ctx.inputs)} inputs")
        n = len(rest) // k
        for i in range(n):
            group = [rest[j * n + i] for j in range(k)]
            shapes = {d.shape for d in group if d is not None and d.is_static}
            if len(shapes) > 1:
                raise ctx.fail(f"tensor {i} and its gradient/state differ in shape: {sorted(map(str, shapes))}")
        # outputs: X'... then each state group, shaped like the matching inputs
        order = [rest[i] for i in range(n)] + [rest[j * n + i] for j in range(2, k) for i in range(n)]
        return [TensorDesc(d.dtype, d.shape) if d is not None else TensorDesc(0, None) for d in order]

    return infer


OPS: list[OpDef] = [
    OpDef("Adagrad", _infer(3), _k_adagrad, domain=TRAINING, since=1,
          attrs={"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}),
    OpDef("Momentum", _infer(3), _k_momentum, domain=TRAINING, since=1,
          attrs={"alpha": REQUIRED, "beta": REQUIRED, "mode": REQUIRED, "norm_coefficient": REQUIRED}),
    OpDef("Adam", _infer(4), _k_adam, domain=TRAINING, since=1,
          attrs={"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0,
                 "norm_coefficient_post": 0.0}),
]
