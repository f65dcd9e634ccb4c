"""pycann.ElementwiseChain: a run of elementwise ONNX ops on one tensor (``ge/compile/passes/fuse_elementwise.py``)
computed in one buffer, updated in place step after step, with each step's ONNX semantics (Add,
Sub, Mul, Div, Pow, Max, Min against another input; Relu, Sigmoid, Tanh, Exp, ... on the chain).
The numpy reference kernel; ``kernels/bind_small.py`` and ``bind_onednn.py`` bind faster ones from
these tables."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops import erf_gelu
from pycann.ops.elementwise import power
from pycann.ops.fused import DOMAIN, _narrow, _sigmoid_inplace, apply_activation
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import broadcast_shapes

# binary op -> its numpy ufunc, called as fn(a, b[, out=buf]) (the chain's buffer updated in place when the
# broadcast and dtype allow)
BINARY: dict[str, Callable[..., Any]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.true_divide, "Pow": power,
    "Max": np.maximum, "Min": np.minimum,
}
UNARY_IN_PLACE: dict[str, Callable[[np.ndarray, tuple[float, float]], Any]] = {
    "Relu": lambda b, p: np.maximum(b, 0, out=b),
    "Sigmoid": lambda b, p: _sigmoid_inplace(b),
    "Tanh": lambda b, p: np.tanh(b, out=b),
    "Exp": lambda b, p: np.exp(b, out=b),
    "Log": lambda b, p: np.log(b, out=b),
    "Sqrt": lambda b, p: np.sqrt(b, out=b),
    "Neg": lambda b, p: np.negative(b, out=b),
    "Abs": lambda b, p: np.abs(b, out=b),
    "Reciprocal": lambda b, p: np.reciprocal(b, out=b),
    "Floor": lambda b, p: np.floor(b, out=b),
    "Ceil": lambda b, p: np.ceil(b, out=b),
    "Erf": lambda b, p: np.copyto(b, erf_gelu.erf(b)),
    "Clip": lambda b, p: np.clip(b, p[0], p[1], out=b),
    "HardSigmoid": lambda b, p: apply_activation(b, "HardSigmoid", p[0], p[1]),
    "HardSwish": lambda b, p: apply_activation(b, "HardSwish", 0, 0),
    "LeakyRelu": lambda b, p: apply_activation(b, "LeakyRelu", p[0], 0),
}
CHAIN_BINARY = frozenset(BINARY)
CHAIN_UNARY = frozenset(UNARY_IN_PLACE)


def _k_chain(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Run ``steps``: each ``[op, operand index or -1, chain-is-right-operand (0/1), p0, p1]``.

    ``inputs[0]`` is the chain's input (never modified); the first step writes a fresh buffer,
    later steps update it in place whenever shape and dtype allow (else a new buffer).
    float16/bfloat16 chains run in float32 and round after every step: each step's result is what
    the unfused op would have stored (and a step such as Sigmoid cannot overflow midway).
    """
    narrow = inputs[0].dtype if _narrow(inputs[0].dtype) else None
    if narrow is not None:
        inputs = [a.astype(np.float32) if a is not None and _narrow(a.dtype) else a for a in inputs]
    buf: np.ndarray | None = None
    x = inputs[0]
    with np.errstate(all="ignore"):
        for op, idx, right, p0, p1 in attrs["steps"]:
            cur = x if buf is None else buf
            if op in BINARY:
                other = inputs[idx]
                fn = BINARY[op]
                a, b = (other, cur) if right else (cur, other)
                if buf is not None and other.ndim <= buf.ndim and np.broadcast_shapes(buf.shape, other.shape) == buf.shape \
                        and np.result_type(buf, other) == buf.dtype:
                    fn(a, b, out=buf)
                else:
                    buf = np.asarray(fn(a, b))
                    base = np.asarray(a).dtype
                    if op == "Pow" and buf.dtype != base:  # (Pow has the base's type: an int64 or float64
                        buf = buf.astype(base)  # exponent promoted a float32 chain to float64)
            else:
                if buf is None:
                    buf = x.copy()
                UNARY_IN_PLACE[op](buf, (p0, p1))
            if narrow is not None:
                buf[...] = buf.astype(narrow)
    assert buf is not None
    return [buf.astype(narrow) if narrow is not None else buf]


def _out_chain(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """``_k_chain`` into the executor's arena view (the prepared kernels write there directly)."""
    outs[0][...] = _k_chain(inputs, attrs)[0]


def _infer_chain(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None:
        return [TensorDesc(0, None)]
    shape = x.shape
    for op, idx, _, _, _ in ctx.attrs["steps"]:
        if op in BINARY:
            other = ctx.input(idx)
            try:
                shape = broadcast_shapes(shape, None if other is None else other.shape)
            except ValueError as e:
                raise ctx.fail(f"step {op} does not broadcast: {e}") from None
    return [TensorDesc(x.dtype, shape)]


OPS: list[OpDef] = [
    OpDef("ElementwiseChain", _infer_chain, _k_chain, domain=DOMAIN, attrs={"steps": []}, out_kernel=_out_chain),
]
