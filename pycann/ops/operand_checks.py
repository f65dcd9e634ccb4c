"""Operand checks shared by shape inference and kernels: the per-channel vectors of an op (a
Conv's bias, a normalisation's scale and B, a quantised conv's per-channel scales) and the
operands that must broadcast into an output (Gemm's C, PRelu's slope).

Why one place: a oneDNN primitive reads exactly the lengths its descriptor names, so a bias
shorter than the output channels is an out-of-bounds read and a longer one is silently
ignored. ONNX Runtime refuses both; pycann refuses them at compile time (``check_vector``,
called by the infer functions, so ``atc`` stops with a one-line ``ShapeError``) and again at
run time (``require_vector``, for dims that were symbolic at compile time and for the
single-op API). Messages name the input, both shapes and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc
from pycann.errors import OperandError
from pycann.ops.opdef import InferContext

__all__ = ["check_broadcast_to", "check_vector", "require_broadcast_to", "require_vector", "vector_problem"]


def _dims(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def vector_problem(name: str, shape: Sequence[Dim], length: Dim, role: str, allow_scalar: bool = False) -> str | None:
    """Why a tensor of ``shape`` cannot be input ``name``, a 1-D tensor of ``length`` elements
    (``role``: what one element is, e.g. "one per output channel"); None when it can (unknown
    dims pass: the run-time check sees them). ``allow_scalar``: a 0-D or 1-element tensor also
    fits (a per-tensor quantisation scale)."""
    if allow_scalar and (len(shape) == 0 or (len(shape) == 1 and shape[0] == 1)):
        return None
    if len(shape) != 1:
        return f"input {name} has shape {_dims(shape)} but must be 1-D with {length} elements ({role})"
    if isinstance(shape[0], int) and isinstance(length, int) and shape[0] != length:
        more = "too few: the kernel would read past its end" if shape[0] < length else "too many"
        return (f"input {name} has {shape[0]} elements but must have {length} ({role}; {more}); "
                f"fix: give {name} shape [{length}]")
    return None


def check_vector(ctx: InferContext, i: int, name: str, length: Dim, role: str, allow_scalar: bool = False) -> None:
    """Infer time: input ``i`` (if present with a known shape) is 1-D with ``length`` elements;
    else ``raise ctx.fail(...)`` naming node, op, input, both shapes and the fix."""
    d = ctx.input(i)
    if d is None or d.shape is None or d.kind != "tensor":
        return
    why = vector_problem(name, d.shape, length, role, allow_scalar)
    if why:
        raise ctx.fail(why)


def _broadcast_problem(name: str, shape: Sequence[Dim], target: Sequence[Dim]) -> str | None:
    if len(shape) > len(target):
        return f"input {name} {_dims(shape)} has more dims than the {_dims(target)} it must broadcast to"
    for s, t in zip(reversed(shape), reversed(target)):
        if isinstance(s, int) and isinstance(t, int) and s not in (1, t):
            return (f"input {name} {_dims(shape)} does not broadcast unidirectionally to {_dims(target)} "
                    f"(each dim must be 1 or equal to the target dim; ONNX Broadcasting.md)")
    return None


def check_broadcast_to(ctx: InferContext, i: int, name: str, target: Sequence[Dim] | None) -> None:
    """Infer time: input ``i`` broadcasts unidirectionally to ``target`` (ONNX Broadcasting.md:
    Gemm's C, PRelu's slope); unknown dims pass."""
    d = ctx.input(i)
    if d is None or d.shape is None or target is None or d.kind != "tensor":
        return
    why = _broadcast_problem(name, d.shape, target)
    if why:
        raise ctx.fail(why)


def require_vector(op: str, name: str, a: np.ndarray | None, length: int, role: str,
                   allow_scalar: bool = False) -> None:
    """Run time: ``a`` (if given) is 1-D with ``length`` elements, else ``OperandError``."""
    if a is None:
        return
    why = vector_problem(name, a.shape, length, role, allow_scalar)
    if why:
        raise OperandError(f"{op}: {why}")


def require_broadcast_to(op: str, name: str, a: np.ndarray | None, target: Sequence[int]) -> None:
    """Run time: ``a`` (if given) broadcasts unidirectionally to ``target``, else ``OperandError``."""
    if a is None:
        return
    why = _broadcast_problem(name, a.shape, target)
    if why:
        raise OperandError(f"{op}: {why}")


def desc_shape(d: TensorDesc | None) -> tuple[Dim, ...] | None:
    """The shape of a desc, or None when absent or unknown."""
    return None if d is None else d.shape
