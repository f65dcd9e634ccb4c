"""Cost model for the profiler's extra op_summary columns: FLOPs and bytes moved per node.

msprof's op_summary (cann-interfaces.md §4.3) reports PMU ratios that a CPU has no equivalent
for; pycann adds ``FLOPs``, ``Bytes``, achieved ``GFLOP/s`` and ``GB/s`` computed from these
formulas (multiply-add = 2 FLOPs), which the roofline verdict (``report.verdict``) compares with
the machine's peaks:

* Conv / FusedConv: ``2 * out_elements * Cin/group * prod(kernel)`` (+ bias, residual, activation)
* ConvTranspose: ``2 * in_elements * Cout/group * prod(kernel)``
* MatMul / FusedMatMul / Gemm: ``2 * out_elements * K`` (+ bias, residual and activation per element)
* FusedAttention: ``2*B*S*T*(D + Dv) + 5*B*S*T`` (two GEMMs + scale/mask/softmax)
* RNN / GRU / LSTM: ``2 * seq * batch * dirs * gates*H * (I + H)``
* pools: ``out_elements * prod(kernel)``; global pools and reductions: input elements
* Softmax ~5, LayerNormalization / InstanceNormalization / GroupNormalization ~8,
  BatchNormalization 2 FLOPs per element
* elementwise ops: one FLOP per output element (ElementwiseChain: one per step and element)
* data movement (Reshape, Transpose, Concat, Gather, Slice, ...): 0

Bytes moved = the bytes of all inputs plus all outputs (what a kernel must at least read and
write; a view-returning Reshape is counted too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

# (shape, dtype name, nbytes) of one input/output, or None (omitted / not a tensor)
Meta = tuple[tuple[int, ...], str, int] | None

ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Mod", "Relu", "Sigmoid", "Tanh", "Exp",
    "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Round", "Erf", "Clip", "HardSigmoid",
    "HardSwish", "LeakyRelu", "Gelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "PRelu", "ThresholdedRelu",
    "Mish", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Sign",
    "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "IsNaN", "IsInf", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Cast", "CastLike",
    "QuantizeLinear", "DequantizeLinear", "Swish", "Resize", "Upsample",
})
REDUCE = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool",
    "GlobalMaxPool", "GlobalLpPool", "CumSum", "TopK",
})
PER_ELEMENT = {"Softmax": 5, "LogSoftmax": 6, "LayerNormalization": 8, "InstanceNormalization": 8,
               "GroupNormalization": 8, "BatchNormalization": 2, "LpNormalization": 3,
               "MeanVarianceNormalization": 8, "Hardmax": 2}
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
CONV = frozenset({"Conv", "FusedConv", "ConvInteger", "QLinearConv"})
MATMUL = frozenset({"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul"})
RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _shape(metas: Sequence[Meta], i: int) -> tuple[int, ...] | None:
    m = metas[i] if i < len(metas) else None
    return m[0] if m is not None else None


def _n(shape: tuple[int, ...] | None) -> int:
    return prod(shape) if shape is not None else 0


def count_bytes(inputs: Sequence[Meta], outputs: Sequence[Meta]) -> int:
    """Bytes read plus bytes written (all tensor inputs and outputs)."""
    return sum(m[2] for m in inputs if m is not None) + sum(m[2] for m in outputs if m is not None)


def count_flops(op_type: str, attrs: Mapping[str, Any], inputs: Sequence[Meta], outputs: Sequence[Meta]) -> int:
    """Approximate floating-point operations of one node execution (see the module docstring)."""
    out = _shape(outputs, 0)
    n_out = _n(out)
    if op_type in CONV:
        w = _shape(inputs, 3 if op_type == "QLinearConv" else 1)
        if w is None or len(w) < 2:
            return 0
        extra = n_out * (int(_shape(inputs, 2) is not None) + int(bool(attrs.get("activation")))
                         + int(op_type == "FusedConv" and _shape(inputs, 3) is not None))  # residual add
        return 2 * n_out * prod(w[1:]) + extra
    if op_type == "ConvTranspose":
        w = _shape(inputs, 1)
        return 2 * _n(_shape(inputs, 0)) * prod(w[1:]) if w is not None and len(w) >= 2 else 0
    if op_type in MATMUL:
        a = _shape(inputs, 3 if op_type == "QLinearMatMul" else 0)
        k = (a[-1] if a else 1) if a is not None else 0
        extra = n_out * (int(_shape(inputs, 2) is not None and op_type == "FusedMatMul")
                         + int(_shape(inputs, 3) is not None and op_type == "FusedMatMul")  # residual add
                         + int(bool(attrs.get("activation"))))
        return 2 * n_out * k + extra
    if op_type == "Gemm":
        a = _shape(inputs, 0)
        if a is None or len(a) != 2:
            return 0
        k = a[0] if attrs.get("transA", 0) else a[1]
        return 2 * n_out * k + (n_out if _shape(inputs, 2) is not None else 0)
    if op_type == "FusedAttention":
        q, kt, v = _shape(inputs, 0), _shape(inputs, 1), _shape(inputs, 2)
        if q is None or kt is None or v is None or len(q) < 2 or len(kt) < 2:
            return 0
        s, d, t, dv = q[-2], q[-1], kt[-1], v[-1]
        b = prod(out[:-2]) if out is not None and len(out) >= 2 else 1
        return 2 * b * s * t * (d + dv) + 5 * b * s * t
    if op_type in RNN_GATES:
        x, r = _shape(inputs, 0), _shape(inputs, 2)
        if x is None or r is None or len(x) != 3 or len(r) != 3:
            return 0
        seq, batch = (x[1], x[0]) if attrs.get("layout", 0) else (x[0], x[1])
        dirs, gh, h = r
        return 2 * seq * batch * dirs * gh * (x[2] + h)
    if op_type in POOLS:
        kernel = list(attrs.get("kernel_shape") or [])
        return n_out * prod(int(v) for v in kernel) if kernel else _n(_shape(inputs, 0))
    if op_type in REDUCE:
        return _n(_shape(inputs, 0))
    if op_type in PER_ELEMENT:
        return PER_ELEMENT[op_type] * max(n_out, _n(_shape(inputs, 0)))
    if op_type == "ElementwiseChain":
        return len(attrs.get("steps", ())) * n_out
    if op_type in ELEMENTWISE:
        return n_out
    return 0
