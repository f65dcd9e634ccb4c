"""oneDNN eltwise post-ops for ONNX activations: the (algorithm, alpha, beta) triple of each
activation pycann fuses into a oneDNN conv or matmul, and the same formulas in numpy for the
paths that do not reach oneDNN (``onednn.conv_nhwc``'s fallback).

Semantics: ``pycann.ops.fused.apply_activation`` (ONNX operator definitions); oneDNN's
``dnnl_alg_kind_t`` values come from ``onednn_capi.ELTWISE`` (dnnl_types.h, v3.2).
"""

from __future__ import annotations

import math

import numpy as np

from pycann.kernels.providers import onednn_capi as capi

# A oneDNN eltwise post-op: (dnnl_alg_kind_t value, alpha, beta).
Unary = tuple[int, float, float]
# A chain of them (activation, then e.g. ``linear`` for a scale/shift after it), applied in order.
Unaries = tuple[Unary, ...]
E = capi.ELTWISE
RELU: Unary = (E["relu"], 0.0, 0.0)

def onednn_unary(act: str, alpha: float, beta: float) -> Unary | None:
    """The eltwise post-op computing ONNX activation ``act`` (with FusedConv's alpha/beta), or None.

    Same formulas as ``pycann.ops.fused.apply_activation``: HardSigmoid max(0, min(1, a*x + b)),
    HardSwish x * hardsigmoid(x; 1/6, 1/2), Swish x * sigmoid(a*x), Gelu the erf form, GeluTanh the tanh form,
    Clip(min=alpha, max=beta), LeakyRelu slope alpha."""
    simple = {"Relu": "relu", "Sigmoid": "logistic", "Tanh": "tanh", "Gelu": "gelu_erf", "GeluTanh": "gelu_tanh"}
    if act in simple:
        return E[simple[act]], 0.0, 0.0
    if act == "HardSwish":
        return E["hardswish"], 1.0 / 6.0, 0.5
    if act == "HardSigmoid":
        return E["hardsigmoid"], float(alpha), float(beta)
    if act == "LeakyRelu":
        return E["relu"], float(alpha), 0.0
    if act == "Elu":
        return E["elu"], float(alpha), 0.0
    if act == "Swish":
        return E["swish"], float(alpha), 0.0
    if act == "Clip" and alpha <= beta:
        if alpha == 0.0 and beta == math.inf:
            return RELU
        if math.isfinite(alpha) and math.isfinite(beta):
            return E["clip"], float(alpha), float(beta)
    return None


def _chain(unary: Unary | Unaries | None) -> Unaries:
    """``unary`` as a tuple of eltwise post-ops (a single one, a chain, or none)."""
    if unary is None:
        return ()
    return unary if isinstance(unary[0], tuple) else (unary,)  # type: ignore[return-value]


def _numpy_unary(y: np.ndarray, u: Unary | Unaries) -> np.ndarray:
    """``u`` applied in numpy, in place (the fallback path for shapes oneDNN is not given)."""
    from pycann.ops.erf_gelu import gelu_erf_, gelu_tanh_

    if isinstance(u[0], tuple):
        for one in u:
            _numpy_unary(y, one)  # type: ignore[arg-type]
        return y
    alg, a, b = u  # type: ignore[misc]
    with np.errstate(over="ignore"):
        if alg == E["relu"] and a == 0.0:  # (y * 0 would turn -inf into NaN; maximum keeps NaN, as ORT)
            np.maximum(y, 0, out=y)
        elif alg == E["relu"]:
            np.copyto(y, np.where(y > 0, y, y * np.float32(a)))
        elif alg == E["tanh"]:
            np.tanh(y, out=y)
        elif alg == E["elu"]:
            np.copyto(y, np.where(y > 0, y, np.float32(a) * np.expm1(np.minimum(y, 0))))
        elif alg == E["logistic"]:  # 1 / (1 + exp(-y)) in place: no temporaries (a 1.6 MB map: 0.33 -> 0.24 ms)
            np.negative(y, out=y)
            np.exp(y, out=y)
            y += 1
            np.reciprocal(y, out=y)
        elif alg == E["swish"]:
            s = 1.0 / (1.0 + np.exp(-y * a))
            np.copyto(y, y * s)
        elif alg in (E["hardsigmoid"], E["hardswish"]):
            h = np.clip(y * np.float32(a) + np.float32(b), 0, 1)
            np.copyto(y, y * h if alg == E["hardswish"] else h)
        elif alg == E["clip"]:
            np.clip(y, a, b, out=y)
        elif alg == E["gelu_erf"]:
            gelu_erf_(y)
        elif alg == E["gelu_tanh"]:
            gelu_tanh_(y)
        elif alg == E["linear"]:
            y *= np.float32(a)
            y += np.float32(b)
        else:
            raise ValueError(f"no numpy form for oneDNN eltwise {alg:#x}")
    return y
