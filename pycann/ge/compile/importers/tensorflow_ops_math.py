"""TensorFlow elementwise, comparison, reduction and cast ops -> ONNX ops.

Semantics: tf.raw_ops. Elementwise ops on an NHWC value with an NCHW twin (tensorflow_emit.py)
run on the twin when the other operand is a twin too, a scalar or a per-channel vector.
Where TensorFlow and ONNX differ: ``FloorDiv``/``FloorMod`` (floor semantics, built from ONNX
ops), reductions over an empty axis list (no-op in TF: ``noop_with_empty_axes=1``), ``Div`` of
integers (TF truncates like ONNX Div; documented in docs/importers.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.dtypes import DType, to_numpy
from pycann.ge.compile.importers.tensorflow_emit import TO_NCHW, Emitter

Converter = Callable[[Emitter], list[str]]
NHWC_TO_NCHW_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}


def _unary(onnx_op: str, **attrs: Any) -> Converter:
    def conv(e: Emitter) -> list[str]:
        x = e.input(0)
        t = e.twin.get(x)
        if t is not None:
            return [e.from_nchw(e.add(onnx_op, [t], **attrs), e.out())]
        return [e.add(onnx_op, [x], e.out(), **attrs)]

    return conv


def _chain(*ops: tuple[str, dict[str, Any]]) -> Callable[[Emitter, str, str | None], str]:
    def run(e: Emitter, x: str, out: str | None) -> str:
        for k, (op, attrs) in enumerate(ops):
            x = e.add(op, [x], out if k == len(ops) - 1 else None, **attrs)
        return x

    return run


def _composite(build: Callable[[Emitter, str, str | None], str]) -> Converter:
    """A unary op built from several ONNX ops, twin-aware like ``_unary``."""
    def conv(e: Emitter) -> list[str]:
        x = e.input(0)
        t = e.twin.get(x)
        if t is not None:
            return [e.from_nchw(build(e, t, None), e.out())]
        return [build(e, x, e.out())]

    return conv


def _leaky_relu(e: Emitter, x: str, out: str | None) -> str:
    return e.add("LeakyRelu", [x], out, alpha=float(e.attr("alpha", 0.2)))


def _relu6(e: Emitter, x: str, out: str | None) -> str:
    dt = to_numpy(e.dtype())  # TF's Relu6 takes integer and half types too: the bounds share x's dtype
    return e.add("Clip", [x, e.constant(np.array(0, dt), "lo"), e.constant(np.array(6, dt), "hi")], out)


def _square(e: Emitter, x: str, out: str | None) -> str:
    return e.add("Mul", [x, x], out)


def _twin_operand(e: Emitter, v: str) -> str | None:
    """``v`` in NCHW without a Transpose: its twin, or a constant reshaped to broadcast over NCHW."""
    t = e.twin.get(v)
    if t is not None:
        return t
    c = e.root.initializers.get(v)
    if c is None:
        return None
    if c.size == 1:
        return v
    if c.ndim == 1 or (c.ndim == 4 and c.shape[:3] == (1, 1, 1)):
        return e.constant(c.reshape(-1, 1, 1), "nchw")
    if c.ndim == 4:
        return e.constant(np.ascontiguousarray(c.transpose(TO_NCHW)), "nchw")
    return None


def _binary(onnx_op: str, post: str | None = None) -> Converter:
    def conv(e: Emitter) -> list[str]:
        a, b = e.input(0), e.input(1)
        if e.op == "BiasAdd" and not e.nhwc():
            b = e.add("Unsqueeze", [b, e.constant(np.array([1, 2], np.int64), "axes")])
        if a in e.twin or b in e.twin:
            ta, tb = _twin_operand(e, a), _twin_operand(e, b)
            if ta is not None and tb is not None:
                y = e.add(onnx_op, [ta, tb])
                if post:
                    y = e.add(post, [y])
                return [e.from_nchw(y, e.out())]
        if post:
            return [e.add(post, [e.add(onnx_op, [a, b])], e.out())]
        return [e.add(onnx_op, [a, b], e.out())]

    return conv


def squared_difference(e: Emitter) -> list[str]:
    d = e.add("Sub", [e.input(0), e.input(1)])
    return [e.add("Mul", [d, d], e.out())]


def floor_div(e: Emitter) -> list[str]:
    a, b = e.input(0), e.input(1)
    if e.dtype() in (DType.FLOAT, DType.DOUBLE, DType.FLOAT16, DType.BFLOAT16):
        return [e.add("Floor", [e.add("Div", [a, b])], e.out())]
    # integers: (a - floor_mod(a, b)) / b divides exactly, so ONNX's truncating Div is exact
    return [e.add("Div", [e.add("Sub", [a, e.add("Mod", [a, b], fmod=0)]), b], e.out())]


def floor_mod(e: Emitter) -> list[str]:
    a, b = e.input(0), e.input(1)
    dt = e.dtype()
    if dt in (DType.FLOAT, DType.DOUBLE, DType.FLOAT16, DType.BFLOAT16):
        # TF's own formula: r = fmod(a, b) (exact), moved into b's sign when the signs differ.
        # a - floor(a / b) * b loses the remainder once a / b rounds (1e8 mod 3 gave 0, not 1)
        r = e.add("Mod", [a, b], fmod=1)
        zero = e.constant(np.array(0, to_numpy(dt)), "zero")
        fix = e.add("And", [e.add("Not", [e.add("Equal", [r, zero])]),
                            e.add("Xor", [e.add("Less", [r, zero]), e.add("Less", [b, zero])])])
        return [e.add("Where", [fix, e.add("Add", [r, b]), r], e.out())]
    return [e.add("Mod", [a, b], e.out(), fmod=0)]


def not_equal(e: Emitter) -> list[str]:
    return [e.add("Not", [e.add("Equal", [e.input(0), e.input(1)])], e.out())]


def add_n(e: Emitter) -> list[str]:
    return [e.add("Sum", e.inputs(), e.out())]


def clip_by_value(e: Emitter) -> list[str]:
    return [e.add("Max", [e.add("Min", [e.input(0), e.input(2)]), e.input(1)], e.out())]


def select(e: Emitter) -> list[str]:
    cond = e.input(0)
    if e.op == "Select":
        # Select (v1) takes a vector condition choosing rows of x: cond's shape gains trailing 1s up to
        # x's rank ([N] -> [N, 1, ...]; an equal-rank condition keeps its shape), then Where broadcasts
        rank_x, rank_c = (e.add("Size", [e.add("Shape", [v])]) for v in (e.input(1), cond))
        diff = e.add("Reshape", [e.add("Sub", [rank_x, rank_c]), e.constant(np.array([1], np.int64), "shape")])
        ones = e.add("ConstantOfShape", [diff], value=np.array([1], np.int64))
        cond = e.add("Reshape", [cond, e.add("Concat", [e.add("Shape", [cond]), ones], axis=0)])
    return [e.add("Where", [cond, e.input(1), e.input(2)], e.out())]


def cast(e: Emitter) -> list[str]:
    return [e.add("Cast", [e.input(0)], e.out(), to=int(e.dtype("DstT")))]


def _reduce(onnx_op: str, boolean: bool = False) -> Converter:
    def conv(e: Emitter) -> list[str]:
        x, keep = e.input(0), int(bool(e.attr("keep_dims", False)))
        axes_c = e.const(1)
        t = e.twin.get(x)
        if t is not None and axes_c is not None:
            axes = np.array(sorted(NHWC_TO_NCHW_AXIS[int(a) % 4] for a in np.ravel(axes_c)), np.int64)
            y = e.add(onnx_op, [t, e.constant(axes, "axes")], keepdims=keep, noop_with_empty_axes=1)
            if keep:
                return [e.from_nchw(y, e.out())]
            # without keep_dims the NCHW and NHWC results agree unless C and H or W are both kept
            kept = {a for a in range(4) if NHWC_TO_NCHW_AXIS[a] not in axes}
            if not (3 in kept and kept & {1, 2}):
                return [e.add("Identity", [y], e.out())]
        axes_v = e.int64(e.input(1))
        if axes_c is not None and axes_c.ndim == 0:
            axes_v = e.constant(axes_c.reshape(1).astype(np.int64), "axes")
        src = e.add("Cast", [x], to=int(DType.INT32)) if boolean else x
        y = e.add(onnx_op, [src, axes_v], None if boolean else e.out(), keepdims=keep, noop_with_empty_axes=1)
        return [e.add("Cast", [y], e.out(), to=int(DType.BOOL))] if boolean else [y]

    return conv


def _arg(onnx_op: str) -> Converter:
    def conv(e: Emitter) -> list[str]:
        axis = int(np.ravel(e.need_const(1, "dimension"))[0])
        out_type = e.dtype("output_type") if "output_type" in e.node.attr else DType.INT64
        y = e.add(onnx_op, [e.input(0)], None if out_type != DType.INT64 else e.out(), axis=axis, keepdims=0)
        return [y] if out_type == DType.INT64 else [e.add("Cast", [y], e.out(), to=int(out_type))]

    return conv


MATH_OPS: dict[str, Converter] = {
    # activations
    "Relu": _unary("Relu"), "Relu6": _composite(_relu6), "LeakyRelu": _composite(_leaky_relu), "Elu": _unary("Elu", alpha=1.0), "Selu": _unary("Selu"),
    "Sigmoid": _unary("Sigmoid"), "Tanh": _unary("Tanh"), "Softplus": _unary("Softplus"),
    "Softsign": _unary("Softsign"),
    # unary math
    "Neg": _unary("Neg"), "Abs": _unary("Abs"), "Exp": _unary("Exp"), "Log": _unary("Log"),
    "Sqrt": _unary("Sqrt"), "Rsqrt": _composite(_chain(("Sqrt", {}), ("Reciprocal", {}))),
    "Square": _composite(_square), "Reciprocal": _unary("Reciprocal"), "Inv": _unary("Reciprocal"),
    "Erf": _unary("Erf"), "Floor": _unary("Floor"), "Ceil": _unary("Ceil"), "Round": _unary("Round"),
    "Sign": _unary("Sign"), "Sin": _unary("Sin"), "Cos": _unary("Cos"), "Tan": _unary("Tan"),
    "Asin": _unary("Asin"), "Acos": _unary("Acos"), "Atan": _unary("Atan"), "Sinh": _unary("Sinh"),
    "Cosh": _unary("Cosh"), "IsNan": _unary("IsNaN"), "LogicalNot": _unary("Not"),
    # binary
    "Add": _binary("Add"), "AddV2": _binary("Add"), "BiasAdd": _binary("Add"), "Sub": _binary("Sub"),
    "Mul": _binary("Mul"), "RealDiv": _binary("Div"), "Div": _binary("Div"), "Maximum": _binary("Max"),
    "Minimum": _binary("Min"), "Pow": _binary("Pow"), "SquaredDifference": squared_difference,
    "FloorDiv": floor_div, "FloorMod": floor_mod,
    "Less": _binary("Less"), "Greater": _binary("Greater"), "LessEqual": _binary("LessOrEqual"),
    "GreaterEqual": _binary("GreaterOrEqual"), "Equal": _binary("Equal"), "NotEqual": not_equal,
    "LogicalAnd": _binary("And"), "LogicalOr": _binary("Or"),
    "AddN": add_n, "ClipByValue": clip_by_value, "Select": select, "SelectV2": select, "Cast": cast,
    # reductions
    "Mean": _reduce("ReduceMean"), "Sum": _reduce("ReduceSum"), "Max": _reduce("ReduceMax"),
    "Min": _reduce("ReduceMin"), "Prod": _reduce("ReduceProd"), "All": _reduce("ReduceMin", True),
    "Any": _reduce("ReduceMax", True), "ArgMax": _arg("ArgMax"), "ArgMin": _arg("ArgMin"),
}


def _log1p(e: Emitter) -> list[str]:
    """log1p(x) to a few ulps: for |x| < 0.5, ``log(u) * x / (u - 1)`` with u = 1 + x (x itself where
    u rounds to 1: Goldberg's correction of the rounding in 1 + x), elsewhere ``log(u)``. ``Log(1 + x)``
    alone gave 0 for x = 1e-8 in float32 (TensorFlow: 1e-8) and ~5% off at 1e-6."""
    x = e.input(0)
    np_dt = to_numpy(e.dtype())  # x's dtype (half, float, double)
    one = e.constant(np.array(1, np_dt), "one")
    u = e.add("Add", [x, one])
    log_u = e.add("Log", [u])
    um1 = e.add("Sub", [u, one])
    exact = e.add("Equal", [um1, e.constant(np.array(0, np_dt), "zero")])
    safe = e.add("Where", [exact, one, um1])  # no 0/0 where the corrected value is not used
    corrected = e.add("Where", [exact, x, e.add("Mul", [log_u, e.add("Div", [x, safe])])])
    small = e.add("Less", [e.add("Abs", [x]), e.constant(np.array(0.5, np_dt), "half")])
    return [e.add("Where", [small, corrected, log_u], e.out())]


# Numerical Recipes' erfcc: erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x/2), relative error < 1.2e-7 for x >= 0
_ERFC_POLY = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
              1.48851587, -0.82215223, 0.17087277)


def _erfc(e: Emitter) -> list[str]:
    """erfc(x): ``1 - Erf(x)`` where that keeps its precision (x below 0.5; below 4 for double), else
    the erfcc approximation, computed in float32 at least. ``1 - Erf(x)`` alone cancels: in float32
    erfc(3.5) came out 4% low and erfc(4.5) as 0 (TensorFlow: 1.97e-10)."""
    dt = e.dtype()
    x = e.input(0)
    np_dt = to_numpy(dt)
    calc = DType.DOUBLE if dt == DType.DOUBLE else DType.FLOAT
    cnp = to_numpy(calc)
    near = e.add("Sub", [e.constant(np.array(1, np_dt), "one"), e.add("Erf", [x])])
    xc = x if calc == dt else e.add("Cast", [x], to=int(calc))
    t = e.add("Reciprocal", [e.add("Add", [e.constant(np.array(1, cnp), "one"),
                                           e.add("Mul", [e.add("Abs", [xc]), e.constant(np.array(0.5, cnp), "half")])])])
    poly = e.constant(np.array(_ERFC_POLY[-1], cnp), "c")
    for c in reversed(_ERFC_POLY[:-1]):
        poly = e.add("Add", [e.constant(np.array(c, cnp), "c"), e.add("Mul", [t, poly])])
    far = e.add("Mul", [t, e.add("Exp", [e.add("Sub", [poly, e.add("Mul", [xc, xc])])])])
    if calc != dt:
        far = e.add("Cast", [far], to=int(dt))
    limit = e.constant(np.array(4.0 if dt == DType.DOUBLE else 0.5, np_dt), "limit")
    return [e.add("Where", [e.add("Less", [x, limit]), near, far], e.out())]


MATH_OPS["Log1p"] = _log1p
MATH_OPS["Erfc"] = _erfc
