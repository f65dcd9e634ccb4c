"""GE's ElementwiseChain as one oneDNN binary primitive with post-ops (multi-threaded, one pass).

A chain ``x op1 a -> op2 b -> unary ...`` (``ops/fused_chain.py`` ``_k_chain``: each step applies to the
running value) maps to oneDNN as: the first step is the binary primitive ``dst = x op1 a`` and
every later step is a post-op on ``dst`` (binary with its operand, or eltwise). oneDNN's binary
needs ``src0`` at the full result shape (``src1`` and post-op operands may broadcast, dims of 1)
and its binary post-ops compute ``dst op operand``, so a step whose running value is the *right*
operand is accepted only for commutative ops (Add, Mul).

Only ops whose oneDNN form keeps numpy's results, NaN and infinities included, are taken: Add, Sub,
Mul, Div (binary, IEEE), Sigmoid, Tanh (eltwise: oneDNN's vector approximations, within a few ulp).
Relu, Clip, Max, Min would turn NaN into the bound (``vmaxps``) and Exp turns NaN into +inf; those
chains stay on numpy.

Semantics: ONNX Add/Sub/Mul/Div/Sigmoid/Tanh with multidirectional broadcasting (Operators.md);
primitive: ``dnnl_binary_primitive_desc_create`` (oneDNN v3.2 dnnl.h), alg kinds from dnnl_types.h.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.native_args import same_view

# dnnl_alg_kind_t (dnnl_types.h, v3.2)
BINARY = {"Add": 0x1FFF0, "Mul": 0x1FFF1, "Div": 0x1FFF4, "Sub": 0x1FFF5}
COMMUTATIVE = frozenset({"Add", "Mul"})
# (no Exp: oneDNN's exp post-op turns NaN into +inf; tests/adversarial/test_onednn_chain_adversarial.py)
UNARY = {"Sigmoid": "logistic", "Tanh": "tanh"}
# Steps whose oneDNN eltwise maps NaN to a number (``vmaxps``/``vminps`` return the non-NaN
# operand): taken only with ``drop_nan=True``, from a caller that proved the value entering them
# finite (``kernels/guarded_chain.py``, the NaN guard). name -> (eltwise, alpha from p0/p1, beta).
DROPS_NAN = {"Relu": ("relu", lambda p0, p1: 0.0, lambda p0, p1: 0.0),
             "Clip": ("clip", lambda p0, p1: float(p0), lambda p0, p1: float(p1))}
ARG_SRC_0, ARG_SRC_1 = 1, 2
# Below this many result elements numpy's few passes beat a primitive call and an OpenMP fork/join.
MIN_ELEMENTS = 1 << 16
# A chain of two or more steps makes numpy pass over the tensor once a step: oneDNN's one pass wins
# from fewer elements (DenseNet's pre-activation Mul + Add + Relu in a loop: 25K elements 16 vs 20 us,
# 50K 16-17 vs 32-33 us, 100K 19 vs 67 us; bench/RESULTS.md).
CHAIN_MIN_ELEMENTS = 1 << 14


def min_elements(steps: Sequence[Sequence[Any]]) -> int:
    """The fewest result elements for which ``bound_chain`` binds a primitive for ``steps``."""
    return CHAIN_MIN_ELEMENTS if len(steps) > 1 else MIN_ELEMENTS

_F32 = np.dtype(np.float32)


def _binary_pd(alg: int, src0: capi.MemoryDesc, src1: capi.MemoryDesc, dst: capi.MemoryDesc,
               attr: capi_ops.Attr) -> capi.PrimitiveDesc:
    h = ctypes.c_void_p()
    capi.check(capi.load().dnnl_binary_primitive_desc_create(ctypes.byref(h), capi.engine(), alg, src0.handle,
                                                             src1.handle, dst.handle, attr.handle),
               "dnnl_binary_primitive_desc_create")
    return capi.PrimitiveDesc(h)


def bound_chain(steps: Sequence[Sequence[Any]], shapes: Sequence[tuple[int, ...] | None],
                channels_last: bool, drop_nan: bool = False) -> BoundKernel | None:
    """A bound primitive whose ``run(inputs, out=None) -> y`` computes ElementwiseChain ``steps`` over float32 inputs of
    static ``shapes`` (input 0 is the chain's input), or None when the chain is not expressible
    (see the module docstring), too small, or oneDNN declines. ``drop_nan``: also take the
    ``DROPS_NAN`` steps (Relu, Clip), whose results differ from numpy's only for a NaN reaching
    them; the caller must prove that cannot happen before each run. Full-shape operands are bound with
    the chain's layout (``channels_last``: NHWC strides, the layout GE chose); ``run`` returns None
    for arrays of other strides or dtypes (the caller's generic kernel computes those). Raises
    nothing."""
    x_shape = shapes[0]
    if x_shape is None or not steps or steps[0][0] not in BINARY:
        return None
    out_shape = tuple(x_shape)
    first_op, first_idx, first_right = steps[0][0], int(steps[0][1]), bool(steps[0][2])
    first_shape = shapes[first_idx] if 0 <= first_idx < len(shapes) else None
    if first_shape is None:
        return None
    try:
        out_shape = tuple(np.broadcast_shapes(out_shape, first_shape))
    except ValueError:
        return None
    # src0 / src1 of the binary primitive: the chain input and the first operand, swapped when the
    # operand is the full-shape one and the op commutes (oneDNN broadcasts src1 only)
    src0, src1 = 0, first_idx
    if first_right and first_op not in COMMUTATIVE:
        return None  # ``operand op x``: oneDNN computes ``src0 op src1`` with src0 full-size
    if tuple(x_shape) != out_shape:
        if first_op not in COMMUTATIVE or tuple(first_shape) != out_shape:
            return None
        src0, src1 = first_idx, 0
    post: list[tuple[Any, ...]] = []
    operands: list[int] = []
    for op, idx, right, p0, p1 in steps[1:]:
        if op in BINARY:
            s = shapes[int(idx)] if 0 <= int(idx) < len(shapes) else None
            if s is None or (bool(right) and op not in COMMUTATIVE) or len(s) > len(out_shape):
                return None
            try:
                if tuple(np.broadcast_shapes(out_shape, s)) != out_shape:
                    return None
            except ValueError:
                return None
            post.append(("binary", BINARY[op], int(idx)))
            operands.append(int(idx))
        elif op in UNARY:
            post.append(("eltwise", capi.ELTWISE[UNARY[op]], 0.0, 0.0))
        elif drop_nan and op in DROPS_NAN:
            name, alpha, beta = DROPS_NAN[op]
            post.append(("eltwise", capi.ELTWISE[name], alpha(p0, p1), beta(p0, p1)))
        else:
            return None
    if int(np.prod(out_shape, dtype=np.int64)) < min_elements(steps):
        return None

    def md(i: int) -> capi.MemoryDesc:
        s = tuple(int(d) for d in shapes[i])  # type: ignore[union-attr]
        s = (1,) * (len(out_shape) - len(s)) + s  # numpy broadcasting: leading 1s
        return capi.MemoryDesc.strided(s, capi.layout_strides(s, channels_last))

    try:
        mds = {i: md(i) for i in {src0, src1, *operands}}
        dst = capi.MemoryDesc.strided(out_shape, capi.layout_strides(out_shape, channels_last))
        attr_ops = [("binary", p[1], mds[p[2]]) if p[0] == "binary" else p for p in post]
        pd = _binary_pd(BINARY[first_op], mds[src0], mds[src1], dst, capi_ops.Attr(attr_ops))
        impl = pd.fast_impl()
        mems = {i: capi.Memory(m, 0) for i, m in mds.items()}
        dst_mem = capi.Memory(dst, 0)
        args = [(ARG_SRC_0, mems[src0]), (ARG_SRC_1, mems[src1]), (capi.ARG_DST, dst_mem)]
        args += [(capi.arg_post_op_src1(k), mems[p[2]]) for k, p in enumerate(post) if p[0] == "binary"]
        prim = capi.Primitive(pd, args)
    except capi.DnnlError:
        return None
    # per input index: (its logical shape with leading 1s, the element strides bound, in bytes)
    want = {i: (tuple(m.dims()), tuple(4 * st for st in capi.layout_strides(m.dims(), channels_last)))
            for i, m in mds.items()}
    y_strides = tuple(4 * st for st in capi.layout_strides(out_shape, channels_last))
    perm = tuple(np.argsort([-st for st in y_strides], kind="stable"))
    lock = omp_fork.fork_safe(threading.Lock())

    def usable_out(o: Any, inputs: Sequence[Any]) -> bool:
        # (the first source itself is fine: oneDNN's binary computes in place, dst == src0, when
        # both have one layout; an executor plans an output over its input that way)
        return isinstance(o, np.ndarray) and o.dtype == _F32 and o.shape == out_shape \
            and all(s == t or d == 1 for s, t, d in zip(o.strides, y_strides, out_shape)) \
            and not any(np.may_share_memory(o, inputs[i]) and not (i == src0 and same_view(o, inputs[i])) for i in want)

    def run(inputs: Sequence[Any], out: np.ndarray | None = None) -> np.ndarray | None:
        """The chain's result, written into ``out`` when it is a float32 array of the result's
        shape in the bound layout that overlaps no input (the executor's arena view), else into a
        new array; None (nothing computed) when an input has another dtype, shape or layout."""
        for i, (shape, strides) in want.items():
            a = inputs[i]
            if not isinstance(a, np.ndarray) or a.dtype != _F32:
                return None
            if a.shape != shape:
                if a.ndim >= len(shape) or a.shape != shape[len(shape) - a.ndim:]:
                    return None
                a = a.reshape(shape)
            if any(s != t and d != 1 for s, t, d in zip(a.strides, strides, shape)):
                return None
        if out is not None and usable_out(out, inputs):
            y = out
        else:  # the result in the bound layout: allocated in memory order, viewed back as NCHW-logical
            y = np.empty([out_shape[p] for p in perm], np.float32).transpose(np.argsort(perm))
        with lock:
            for i, m in mems.items():
                m.set(inputs[i].__array_interface__["data"][0])
            dst_mem.set(y.__array_interface__["data"][0])
            prim.execute()
        return y

    return BoundKernel(run, threads=Threads.OPENMP, keep=(mds, dst, prim), impl=impl)
