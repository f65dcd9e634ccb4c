"""ChannelShuffle bound to one static channels-last signature (``ops/channel_shuffle.py`` for the
semantics): each of the op's strided copies (an input's channel range into every ``group``-th channel
of an output) as one oneDNN reorder primitive.

Why: in a channels-last chain a shuffle copy writes every ``group``-th float of each pixel, which
numpy does element by element (ShuffleNet v2's 2 x 58-channel 28x28 shuffle: 49 us); oneDNN's jit
reorder does the same copy with two threads and vector gathers in 21 us for the four copies. The
reorders are made once per plan (the copies' geometry is static); a call re-points their data
handles at the inputs and the executor's arena views. A call with other shapes, dtypes or layouts
runs the reference kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.kernels.algorithm import Layout, Threads
from pycann.kernels.bind_base import Kernel
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork
from pycann.ops.channel_shuffle import _check, _out_shuffle, _plan

_F32 = np.dtype(np.float32)
# Below this many elements in all the inputs the reference's numpy copies are as fast as a primitive
# call per copy (each reorder costs ~3 us of ctypes and OpenMP fork before it moves a byte).
MIN_ELEMENTS = 1 << 12


def _cl_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Byte strides of a channels-last float32 array of logical NCHW ``shape``."""
    n, c, h, w = shape
    return (h * w * c * 4, 4, w * c * 4, c * 4)


def _fits(a: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return a.__class__ is np.ndarray and a.dtype == _F32 and a.shape == shape \
        and all(s == t or d == 1 for s, t, d in zip(a.strides, strides, shape))


def bound_channel_shuffle(in_shapes: Sequence[tuple[int, ...]], group: int, split: Sequence[int]) -> BoundKernel | None:
    """The kernel for float32 channels-last inputs of ``in_shapes`` (N, C_i, H, W) writing channels-last
    outputs: ``run(inputs, attrs, outs)``. None when oneDNN is missing or declines a copy."""
    from pycann.kernels.providers import available

    if not available("onednn"):
        return None
    from pycann.kernels.providers import onednn_capi as capi

    n, _, h, w = in_shapes[0]
    sizes = [int(s[1]) for s in in_shapes]
    parts = _check(sizes, group, list(split), "ChannelShuffle")
    out_shapes = [(n, p, h, w) for p in parts]
    pixels = n * h * w
    copies = []  # (input index, byte offset into it, output index, byte offset into it, primitive, src, dst)
    try:
        for o, plan in enumerate(_plan(sizes, group, parts)):
            for x, c0, count, k0 in plan:
                src_md = capi.MemoryDesc.strided((pixels, count), (sizes[x], 1))
                dst_md = capi.MemoryDesc.strided((pixels, count), (parts[o], group))
                pd = capi.reorder_pd(src_md, dst_md)
                pd.fast_impl()  # (only a jit reorder beats numpy's strided copy)
                src, dst = capi.Memory(src_md, 0), capi.Memory(dst_md, 0)
                copies.append((x, 4 * c0, o, 4 * k0, capi.Primitive(pd, [(capi.ARG_FROM, src), (capi.ARG_TO, dst)]),
                               src, dst))
    except capi.DnnlError:
        return None
    in_strides = [_cl_strides(s) for s in in_shapes]
    out_strides = [_cl_strides(s) for s in out_shapes]
    lock = omp_fork.fork_safe(threading.Lock())

    verified: set[tuple[int, ...]] = set()  # address tuples whose arrays passed the overlap check

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any],
               out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        xs = [x for x in inputs if x is not None]
        if out is not None and len(xs) == len(in_shapes) and len(out) == len(out_shapes) \
                and all(_fits(x, s, t) for x, s, t in zip(xs, in_shapes, in_strides)) \
                and all(_fits(y, s, t) for y, s, t in zip(out, out_shapes, out_strides)):
            ptrs = tuple(a.__array_interface__["data"][0] for a in (*xs, *out))
            if ptrs not in verified:  # (the executor hands the same arena views run after run)
                if any(np.may_share_memory(y, x) for y in out for x in xs):
                    _out_shuffle(inputs, attrs, out)  # (the reference copes with any overlap numpy does)
                    return list(out)
                if len(verified) >= 64:
                    verified.clear()
                verified.add(ptrs)
            with lock:
                for x, xo, o, yo, prim, src, dst in copies:
                    src.set(ptrs[x] + xo)
                    dst.set(ptrs[len(xs) + o] + yo)
                    prim.execute()
            return list(out)
        if out is None:
            from pycann.ops.channel_shuffle import _k_shuffle

            return _k_shuffle(inputs, attrs)
        _out_shuffle(inputs, attrs, out)  # (other layouts: the reference's strided copies)
        return list(out)

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, layout=Layout.NHWC, keep=copies,
                       impl="onednn:reorder")


def prepare_channel_shuffle(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None],
                            consts: Sequence[np.ndarray | None], outs: Sequence[TensorDesc | None]) -> Kernel | None:
    """The plan's kernel for a ChannelShuffle of static float32 inputs in a channels-last chain
    (``_layout == "NHWC"``), else None (the reference kernel runs)."""
    if attrs.get("_layout") != "NHWC" or not ins or any(d is None or d.dtype != 1 for d in ins):
        return None
    shapes: list[tuple[int, ...]] = []
    for d in ins:
        s = _static(d)
        if s is None or len(s) != 4 or 0 in s:
            return None
        shapes.append(s)
    if len({(s[0], s[2], s[3]) for s in shapes}) != 1:
        return None
    if sum(int(np.prod(s, dtype=np.int64)) for s in shapes) < MIN_ELEMENTS:
        return None
    try:
        return bound_channel_shuffle(shapes, int(attrs["group"]), [int(v) for v in attrs.get("split") or []])  # type: ignore[return-value]
    except ValueError:
        return None  # the reference kernel raises the error
