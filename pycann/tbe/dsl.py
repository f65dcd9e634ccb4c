"""``tbe.dsl`` compute functions (names from tbe/dsl/api.py, ascendc-davinci.md section 2), ``auto_schedule`` and ``build``.

Elementwise ops need equal shapes (use ``broadcast`` first, as TBE does); reductions run over the
last axis. ``build`` lowers the graph onto pycann.ascendc (see pycann.tbe.lower), so the kernel
runs on the CPU twin with all its checks.
"""

from __future__ import annotations

from typing import Any

from pycann.tbe.expr import DTYPES, TbeError, Tensor, dsl_location


def _node(op: str, inputs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: str, **attrs: Any) -> Tensor:
    return Tensor(op, shape, dtype, inputs, attrs, name=op, where=dsl_location())


def _same(op: str, a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape:
        big = a.shape if len(a.shape) >= len(b.shape) else b.shape
        raise TbeError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} differ; broadcast one with "
                       f"tbe.dsl.broadcast(x, {list(big)}) first")
    if a.dtype != b.dtype:
        raise TbeError(f"{op}: dtypes {a.dtype} and {b.dtype} differ; cast one with tbe.dsl.cast_to")


def _binary(op: str):
    def f(lhs: Tensor, rhs: Tensor) -> Tensor:
        _same(op, lhs, rhs)
        return _node(op, (lhs, rhs), lhs.shape, lhs.dtype)
    f.__name__ = op
    f.__doc__ = f"``{op}(lhs, rhs)``: elementwise, equal shapes and dtypes."
    return f


def _unary(op: str):
    def f(raw_tensor: Tensor) -> Tensor:
        return _node(op, (raw_tensor,), raw_tensor.shape, raw_tensor.dtype)
    f.__name__ = op
    f.__doc__ = f"``{op}(x)``: elementwise."
    return f


def _scalar(op: str):
    def f(raw_tensor: Tensor, scalar: float) -> Tensor:
        if isinstance(scalar, Tensor):
            raise TbeError(f"{op}: the second argument is a Python scalar (use the v{op[1:-1]} form for tensors)")
        return _node(op, (raw_tensor,), raw_tensor.shape, raw_tensor.dtype, scalar=float(scalar))
    f.__name__ = op
    f.__doc__ = f"``{op}(x, scalar)``: tensor-scalar."
    return f


vadd, vsub, vmul, vdiv, vmax, vmin = (_binary(n) for n in ("vadd", "vsub", "vmul", "vdiv", "vmax", "vmin"))
vexp, vlog, vabs, vsqrt, vrsqrt, vrec, vrelu = (_unary(n) for n in ("vexp", "vlog", "vabs", "vsqrt", "vrsqrt",
                                                                     "vrec", "vrelu"))
vadds, vmuls, vmaxs, vmins = (_scalar(n) for n in ("vadds", "vmuls", "vmaxs", "vmins"))


def vlrelu(raw_tensor: Tensor, alpha: float = 0.0) -> Tensor:
    """Leaky ReLU: x if x >= 0 else alpha * x."""
    return _node("vlrelu", (raw_tensor,), raw_tensor.shape, raw_tensor.dtype, scalar=float(alpha))


def cast_to(data: Tensor, dtype: str, f1628IntegerFlag: bool = True) -> Tensor:
    """Convert to ``dtype`` ('float16', 'float32', 'int32', ...); float -> int truncates, as TBE's default."""
    if dtype not in DTYPES:
        raise TbeError(f"cast_to: dtype {dtype!r} not one of {', '.join(DTYPES)}")
    return _node("cast_to", (data,), data.shape, dtype)


def _axis(op: str, x: Tensor, axis: int | list[int] | tuple[int, ...] | None) -> None:
    axes = [axis] if isinstance(axis, int) else list(axis) if axis is not None else list(range(len(x.shape)))
    axes = [a % len(x.shape) for a in axes]
    if axes != [len(x.shape) - 1]:
        raise TbeError(f"{op}: the twin's reduce schedule reduces the last axis only (got axis={axis} of "
                       f"shape {list(x.shape)}); transpose the data or reduce in steps")


def _reduce(op: str):
    def f(raw_tensor: Tensor, axis: int | list[int] | None = -1, keepdims: bool = False) -> Tensor:
        _axis(op, raw_tensor, axis)
        shape = raw_tensor.shape[:-1] + ((1,) if keepdims else ())
        return _node(op, (raw_tensor,), shape or (1,), raw_tensor.dtype, keepdims=keepdims)
    f.__name__ = op
    f.__doc__ = f"``{op}(x, axis=-1, keepdims=False)``: reduction over the last axis."
    return f


reduce_sum, reduce_max, reduce_min = (_reduce(n) for n in ("reduce_sum", "reduce_max", "reduce_min"))


def broadcast(var: Tensor | float, shape: tuple[int, ...] | list[int], output_dtype: str | None = None) -> Tensor:
    """``broadcast(x, shape)``: x of shape (..., 1) per row, (1, ..., W) shared, a 1-element tensor or a scalar."""
    shp = tuple(int(d) for d in shape)
    if not isinstance(var, Tensor):
        return _node("broadcast_scalar", (), shp, output_dtype or "float16", scalar=float(var))
    src = var.shape
    padded = (1,) * (len(shp) - len(src)) + src
    if len(padded) != len(shp) or any(a not in (1, b) for a, b in zip(padded, shp)):
        raise TbeError(f"broadcast: shape {list(src)} cannot broadcast to {list(shp)}")
    return _node("broadcast", (var,), shp, var.dtype)


class Schedule:
    """What auto_schedule returns: the output tensors and the pattern chosen."""

    def __init__(self, outs: list[Tensor], pattern: str) -> None:
        self.outs, self.pattern = outs, pattern


def auto_schedule(outs: Tensor | list[Tensor]) -> Schedule:
    """Pick the schedule template by compute pattern: 'elewise' (flattened tiles) or 'norm' (row tiles)."""
    from pycann.tbe.expr import topo

    lst = [outs] if isinstance(outs, Tensor) else list(outs)
    if len(lst) != 1:
        raise TbeError("auto_schedule: the twin's lowering builds single-output kernels")
    nodes = topo(lst[0])
    pattern = "norm" if any(n.op.startswith("reduce") or n.op == "broadcast" for n in nodes) else "elewise"
    return Schedule(lst, pattern)


def build(sch: Schedule, config: dict[str, Any]) -> Any:
    """``build(sch, {"name": kernel_name, "tensor_list": [inputs..., output]})``: a twin-runnable kernel."""
    from pycann.tbe.lower import BuiltKernel

    name = config.get("name") or config.get("kernel_name")
    tl = config.get("tensor_list")
    if not name or not tl:
        raise TbeError('build: config needs "name" and "tensor_list" ([inputs..., output])')
    if tl[-1] is not sch.outs[0]:
        raise TbeError("build: the last tensor of tensor_list must be the scheduled output")
    return BuiltKernel(str(name), list(tl[:-1]), sch.outs[0], sch.pattern)
