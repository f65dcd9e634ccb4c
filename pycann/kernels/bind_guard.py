"""The NaN/overflow guard and the bound propagation that wrap bound convs and matmuls
(``kernels/bind.py``'s static binders, ``kernels/bind_generic_conv.py``'s per-shape ones).

Each wrapper is made in two steps: a factory per node (``nan_guard_for``, ``passes_bound_for``,
``conv_guard``) holding what no input shape changes (the weight's bound, the fallback kernel, the
activation's output bound), and per bound kernel a closure that adds only its own ``run``. Why:
the shape-generic plan wraps a kernel per conv node and input shape, and the one-step closures
were ~15 objects each for the cyclic GC to walk (the fallback's lambda, eight cells, a second
closure for the output bound) and ~15 us of Python in the first call of every new shape; the
closures made here share the factory's cells.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pycann.kernels.bound import BoundKernel, bound

__all__ = ["act_out_bound", "conv_fallback", "conv_guard", "guard_conv", "nan_guard_for", "nan_guarded",
           "passes_bound", "passes_bound_for"]

Kernel = Callable[..., Any]
Wrap = Callable[[BoundKernel], BoundKernel]


def nan_guard_for(w_bound: float, fallback: Kernel, residual: int | None, out_bound: Any = None) -> Wrap:
    """``nan_guarded``'s wrapper for one node: ``wrap(k)`` is ``k`` preceded by the guard (the
    caller has checked that ``k``'s activation maps NaN to a number)."""
    from pycann.kernels.providers import nan_guard

    pre_bound, record, limit = nan_guard.pre_bound, nan_guard.record, nan_guard._F32_SAFE

    def wrap(k: BoundKernel) -> BoundKernel:
        run = k.run

        def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
            r = inputs[residual] if residual is not None and len(inputs) > residual else None
            bound = pre_bound(inputs[0], w_bound, r)
            if bound < limit:  # (kernels without ``writes_out`` take no ``out``)
                ys = run(inputs, attrs) if out is None else run(inputs, attrs, out)
                if out is not None and ys[0] is out[0]:
                    record(out[0], out_bound(bound) if out_bound is not None and bound > 0.0 else None)
                return ys  # type: ignore[no-any-return]
            with np.errstate(all="ignore"):  # NaN/inf in: numpy's "invalid value" warnings say nothing new
                y = fallback(inputs, attrs)[0]  # a new array: the residual may share the output's buffer
            if out is not None:
                record(out[0], None)
                out[0][...] = y
                return [out[0]]
            return [y]

        return replace(k, run=kernel, guarded=k)

    return wrap


def nan_guarded(k: BoundKernel | None, unary: Any, w_bound: float, fallback: Kernel, residual: int | None,
                out_bound: Any = None) -> BoundKernel | None:
    """``k`` (a bound conv/matmul whose fused activation ``unary`` maps NaN to a number:
    ``nan_guard.drops_nan``) preceded by the operand check ``nan_guard.pre_bound``; a call it cannot
    prove safe (a NaN or inf input, values that could overflow) runs ``fallback`` (the generic
    kernel on the numpy provider: activation in numpy, NaN kept, as ONNX Runtime does). Returns
    ``k`` itself when its activation keeps NaN. ``residual``: the input index of the residual.
    ``out_bound(pre_activation_bound) -> bound of the output`` (or None): recorded for the arena
    view the kernel wrote, so a guarded consumer of it needs no read of its own."""
    from pycann.kernels.providers import nan_guard

    if k is None or not nan_guard.drops_nan(unary):
        return k
    return nan_guard_for(w_bound, fallback, residual, out_bound)(k)


def passes_bound_for(w_bound: float) -> Wrap:
    """``passes_bound``'s wrapper for one weight bound."""
    from pycann.kernels.providers import nan_guard

    pass_on, record = nan_guard.pass_on, nan_guard.record

    def through(b: float) -> float:
        return max(b, 1.0) * w_bound

    def wrap(k: BoundKernel) -> BoundKernel:
        run = k.run

        def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
            ys = run(inputs, attrs) if out is None else run(inputs, attrs, out)
            if out is not None:
                if ys[0] is out[0]:
                    pass_on(out[0], inputs[0], through)
                else:
                    record(out[0], None)
            return ys  # type: ignore[no-any-return]

        return replace(k, run=kernel)

    return wrap


def passes_bound(k: BoundKernel, w_bound: float) -> BoundKernel:
    """``k`` (a conv with no activation, writing into the arena) that passes the NaN guard's proven
    bound of its input on to its output: ``|conv(x)| <= max(X, 1) * w_bound`` with ``w_bound`` =
    ``nan_guard.weight_bound`` (max_m sum|w_m| + max|b|). So a guarded kernel further down
    (DenseNet: conv -> Concat -> BatchNormalization + Relu) needs no read of its own input. An
    input without a record forgets any earlier run's record of the output (every call updates it)."""
    return passes_bound_for(w_bound)(k)


def act_out_bound(attrs: Mapping[str, Any]) -> Any:
    """``pre-activation bound -> output bound`` for FusedConv/FusedMatMul's activation (None
    with a post scale/shift: not propagated)."""
    from pycann.ops import fused

    if fused.post_affine(attrs) is not None:
        return None
    act, al, be = fused._act(attrs)
    if act in ("HardSigmoid", "Sigmoid"):
        return lambda b: 1.0
    if act == "Clip":
        cap = max(abs(al), abs(be))
        return lambda b: min(b, cap) if al <= 0.0 <= be else cap
    if act == "Relu":
        return lambda b: b
    return None


def conv_fallback(attrs: Mapping[str, Any]) -> Kernel:
    """The (Fused)Conv reference kernel: numpy (the guard's unfused path)."""
    from pycann.ops import fused

    return lambda x, a: fused._k_fused_conv(x, attrs)


def conv_guard(unary: Any, attrs: Mapping[str, Any], w: np.ndarray, b: np.ndarray | None,
               residual: bool, arena: bool = True) -> Callable[[Any], BoundKernel | None]:
    """``guard_conv`` for one conv node, as ``wrap(k)``: a bound kernel of the node (any input shape)
    with the guard its activation needs. The weight's bound (a read of the whole weight the first
    time: ``nan_guard.weight_bound``) and the wrappers are made on the first kernel that needs them
    and shared by the later ones. ``arena=False``: the kernels are never given arena views (the
    shape-generic plan's per-shape tables), so ``passes_bound``, which acts on those only, is left
    out (it was four objects per conv and shape doing nothing)."""
    from pycann.kernels.providers import nan_guard
    from pycann.ops import fused

    passes = arena and unary is None and not residual and fused.post_affine(attrs) is None
    drops = nan_guard.drops_nan(unary)
    made: list[Wrap] = []  # the node's one wrapper, once made (a race makes it twice: same values)

    def wrap(k: Any) -> BoundKernel | None:
        k = bound(k)  # (torch's bound convs are plain functions)
        if k is None or not (drops or (passes and k.writes_out)):
            return k
        if not made:
            wb = nan_guard.weight_bound(w, b)
            made.append(passes_bound_for(wb) if passes else
                        nan_guard_for(wb, conv_fallback(attrs), 3 if residual else None, act_out_bound(attrs)))
        return made[0](k)

    return wrap


def guard_conv(k: Any, unary: Any, attrs: Mapping[str, Any], w: np.ndarray, b: np.ndarray | None,
               residual: bool) -> BoundKernel | None:
    """A bound conv ``k`` with the NaN guard its activation ``unary`` needs (``nan_guarded``), or,
    without an activation, residual or post scale/shift, passing its input's bound on
    (``passes_bound``); None when ``k`` is None."""
    return conv_guard(unary, attrs, w, b, residual)(k)
