"""Pointwise convolutions (1x1 kernel, stride 1, no padding, one group) of any input size as one
oneDNN matmul whose row count is a run-time dimension (``RUNTIME_DIM``).

A channels-last activation of logical shape (N, C, *spatial) is, in memory, the row-major matrix
(N * prod(spatial), C), and a pointwise conv is that matrix times the weight's transpose (C, M):
ONNX Conv-11/22 with kernel 1 is exactly ``Y[n, m, p] = sum_c X[n, c, p] W[m, c] + B[m]``. The
per-shape convolution primitive (``onednn_conv_plan._Plan``) costs a descriptor, JIT code and a first
execution for every new image size, which is what the first call of a new shape pays on the
shape-generic plan (PP-OCRv4 det has 42 pointwise convs of 64, rec 21 of 38; issue 15 item 3).
This primitive is made once per weight (and OpenMP team) and serves every size: a call only wraps
the input and output in memories of its row count. oneDNN keeps the generic GEMM kernels of a
run-time-dims matmul (``gemm:jit``) process-wide and bounded, so new sizes add no code either.

A ConvTranspose whose kernel equals its stride (2-D, no padding, one group: the upsampling of
DB / FPN / U-Net heads) is the same product scattered into patches: every input pixel writes its
own kh x kw output patch, ``Y[n, m, h*kh + i, w*kw + j] = sum_c X[n, c, h, w] W[c, m, i, j] + B[m]``
(ConvTranspose-11/22 with nothing overlapping), so ``PatchDeconv`` runs one run-time-dims batched
matmul per kernel row ``i`` straight into the strided rows of the channels-last output. Its
descriptor alone would otherwise cost 1.5-8.5 ms for each new size (PP-OCRv4 det's two).

Post-ops as the conv's: bias, then the residual (the ``sum`` post-op over an output pre-filled
with it: a binary post-op takes no run-time dims), then the activation chain, i.e.
``act(x @ W.T + b + residual)``. Used by ``onednn.conv_nhwc`` (convs not bound to one shape);
the specialised plans keep their per-shape primitives (``bound_conv_nhwc``).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from pycann.errors import OperandError
from pycann.kernels.providers import omp_fork, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.native_args import address
from pycann.kernels.providers.onednn_conv_plan import _cl_strides, _fits, empty_channels_last
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary, _chain, _numpy_unary
from pycann.kernels.providers.specs import patch_geometry
from pycann.ops.nn.spatial import Window

__all__ = ["PatchDeconv", "Pointwise", "patch_deconv", "patch_plan", "plan", "pointwise", "warm"]


def pointwise(w: np.ndarray, group: int, win: Window) -> bool:
    """True for a conv this module computes: one group, every kernel dim, stride 1 and pad 0, and
    a float32 weight (M, C, 1, ...)."""
    return group == 1 and all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) \
        and not any(win.pads_begin) and not any(win.pads_end) and w.dtype == np.float32 and w.ndim >= 3


def _operands(x: np.ndarray, y_shape: tuple[int, ...], out: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[int, ...]]:
    """(``x`` channels-last, copied when it is not; the output: ``out`` when it is a writable
    channels-last float32 array of ``y_shape`` apart from ``x``, else new; their byte strides)."""
    x_strides, y_strides = _cl_strides(x.shape), _cl_strides(y_shape)
    if not _fits(x, x_strides):
        xc = empty_channels_last(x.shape)
        np.copyto(xc, x)
        x = xc
    fits = out is not None and out.dtype == np.float32 and out.flags.writeable and out.shape == y_shape and \
        _fits(out, y_strides) and not np.may_share_memory(out, x)
    y = out if fits and out is not None else empty_channels_last(y_shape)
    return x, y, x_strides, y_strides


def _prefill(y: np.ndarray, residual: np.ndarray | None) -> None:
    """The residual copied into the output, which the "sum" post-op adds to; ``OperandError`` when
    it is missing or does not broadcast to the output."""
    if residual is None:
        raise OperandError("pointwise conv bound with a residual but none was given")
    try:
        np.copyto(y, residual)
    except ValueError as e:
        raise OperandError(f"conv residual {list(residual.shape)} does not broadcast to the output "
                           f"{list(y.shape)}: {e}") from None


class Pointwise:
    """The run-time-rows matmul of one pointwise weight (M, C, 1, ...), its bias / residual /
    activation post-ops fixed."""

    def __init__(self, w: np.ndarray, with_bias: bool, unary: Unary | Unaries | None, residual: bool) -> None:
        m, c = int(w.shape[0]), int(w.shape[1])
        rt = capi_ops.RUNTIME_DIM
        ops: list[tuple[Any, ...]] = [("sum", 1.0)] if residual else []
        ops += [("eltwise", *u) for u in _chain(unary)]
        # the weight's transpose (C, M), an own copy: the model's array must stay collectable (the
        # plan table drops this plan when it goes), and a row-major B is gemm's plain layout.
        # np.array(copy=True), not ascontiguousarray: with M == 1, C == 1 or a Fortran-order weight
        # the transpose is already C-contiguous, and a view would keep the model's weight alive
        self.wt = np.array(w.reshape(m, c).T, dtype=np.float32, order="C", copy=True)
        wei = capi.MemoryDesc.strided((c, m), (m, 1))
        self.bias_md = capi.MemoryDesc.strided((1, m), (m, 1)) if with_bias else None
        pd = capi_ops.matmul_pd(capi.MemoryDesc.strided((rt, c), (c, 1)), wei, self.bias_md,
                            capi.MemoryDesc.strided((rt, m), (m, 1)), capi_ops.Attr(ops))
        self.impl = pd.fast_impl()
        self.prim = capi.Primitive(pd, [])
        self.m, self.c, self.residual = m, c, residual
        self.wei = capi.Memory(wei, capi.ptr(self.wt))
        self._bias_mems: dict[int, capi.Memory] = {}  # bias address -> a memory over it (``bias_memory``)

    def bias_memory(self, b: np.ndarray) -> capi.Memory:
        """A memory over the bias ``b`` (M float32 values, checked; kept alive by the caller) for
        runners that never re-point it, shared by those of every input shape: it holds the address
        only, which whatever array lives there is read at, so the memory of a freed bias serves the
        one at its address after it (``OperandError`` for a bias that does not fit)."""
        ptr = address("conv bias B", b, (self.m,))
        mem = self._bias_mems.get(ptr)
        if mem is None:
            assert self.bias_md is not None
            if len(self._bias_mems) >= 16:
                self._bias_mems.clear()  # bounded: runners keep the memories they hold
            mem = self._bias_mems[ptr] = capi.Memory(self.bias_md, ptr, keep_md=False)
        return mem

    def run(self, x: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None,
            out: np.ndarray | None = None) -> np.ndarray:
        """The conv of float32 ``x`` (N, C, *spatial), any layout, as a channels-last array: ``out``
        when it is one of the right shape and layout, else new. ``OperandError`` when ``x`` has
        another channel count or the bias / residual do not fit."""
        if x.ndim < 3 or x.shape[1] != self.c:
            raise OperandError(f"pointwise conv bound for {self.c} input channels; got X {list(x.shape)}")
        y_shape = (x.shape[0], self.m, *x.shape[2:])
        x, y, x_strides, y_strides = _operands(x, y_shape, out)
        if self.residual:
            _prefill(y, residual)
        rows = math.prod(int(d) for d in y_shape) // self.m
        xp = address("conv input X", x, tuple(x.shape), strides=x_strides)
        yp = address("conv output Y", y, y_shape, strides=y_strides)
        args = [(capi.ARG_SRC, capi.Memory(capi.MemoryDesc.strided((rows, self.c), (self.c, 1)), xp)),
                (capi.ARG_WEIGHTS, self.wei),
                (capi.ARG_DST, capi.Memory(capi.MemoryDesc.strided((rows, self.m), (self.m, 1)), yp))]
        if self.bias_md is not None:
            if b is None:
                raise OperandError("pointwise conv bound with a bias but none was given")
            args.append((capi.ARG_BIAS, capi.Memory(self.bias_md, address("conv bias B", b, (self.m,)))))
        self.prim.execute_on(args)
        return y

    def sized(self, x_shape: tuple[int, ...], b: np.ndarray | None) -> _SizedRun:
        """``run`` for float32 inputs of one shape ``x_shape`` and the bias ``b`` (M float32
        values, kept alive by the caller), as ``f(x, residual) -> y``: the memories of its row count
        are made once, so a call re-points two handles instead of making three memories (the
        shape-generic plan's per-shape conv table, ``kernels/bind_generic_conv.py``).
        ``OperandError`` for another channel count here, or another shape or a misfit residual
        in a call."""
        x_shape = tuple(int(d) for d in x_shape)
        if len(x_shape) < 3 or x_shape[1] != self.c:
            raise OperandError(f"pointwise conv bound for {self.c} input channels; got X {list(x_shape)}")
        if (self.bias_md is None) != (b is None):
            raise OperandError(f"pointwise conv bound {'with' if self.bias_md is not None else 'without'} a bias")
        return _SizedRun(self, x_shape, b)


class _SizedRun:
    """``Pointwise.sized``'s runner for one input shape: its row count's two memories and the
    primitive's argument array made once, the memories re-pointed per call. A class with slots,
    not a closure: a closure over these values was a dozen more objects per shape and node for the
    cyclic GC to walk; likewise it keeps no descriptor (oneDNN copied them into the memories) and
    no argument tuples (the array is made once: ``execute_array``), and the bias memory is the
    plan's for that bias (``Pointwise.bias_memory``)."""

    __slots__ = ("x_shape", "y_shape", "rows", "src", "dst", "bias", "args", "lock", "residual", "plan")

    def __init__(self, pw: Pointwise, x_shape: tuple[int, ...], b: np.ndarray | None) -> None:
        # the Pointwise kept alive: its weight memory points into ``pw.wt``, which a runner outliving
        # it (the plan table starting over, a caller keeping only the runner) read after it was freed
        self.plan = pw
        self.x_shape = x_shape
        self.y_shape = y_shape = (x_shape[0], pw.m, *x_shape[2:])
        self.rows = rows = math.prod(y_shape) // pw.m
        self.src = capi.Memory(capi.MemoryDesc.strided((rows, pw.c), (pw.c, 1)), 0, keep_md=False)  # (pointed per call)
        self.dst = capi.Memory(capi.MemoryDesc.strided((rows, pw.m), (pw.m, 1)), 0, keep_md=False)
        self.bias = pw.bias_memory(b) if pw.bias_md is not None and b is not None else None
        self.args = capi.exec_args(self._args(self.src, self.dst))
        self.lock = omp_fork.fork_safe(threading.Lock())  # the two memories are shared by concurrent runs of the plan
        self.residual = pw.residual

    def _args(self, src: Any, dst: Any) -> list[tuple[int, Any]]:
        args = [(capi.ARG_SRC, src), (capi.ARG_WEIGHTS, self.plan.wei), (capi.ARG_DST, dst)]
        if self.bias is not None:
            args.append((capi.ARG_BIAS, self.bias))
        return args

    def kernel(self, inputs: Sequence[Any], attrs: Any, out: Any = None) -> list[np.ndarray]:
        """The plan kernel ``k(inputs, attrs, out=None) -> [y]`` (inputs: x, w, b[, residual]): this
        bound method is one object per shape and node where a closure over the runner was three."""
        return [self.run(inputs[0], inputs[3] if self.residual else None)]

    def run(self, x: np.ndarray, r: np.ndarray | None) -> np.ndarray:
        """The conv of ``x`` (of the runner's shape) with the residual ``r`` (when it has one)."""
        x_shape, y_shape = self.x_shape, self.y_shape
        if x.shape != x_shape:
            raise OperandError(f"pointwise conv bound for X {list(x_shape)}; got {list(x.shape)}")
        x, y, xs, ys = _operands(x, y_shape, None)
        if self.residual:
            _prefill(y, r)
        xp = address("conv input X", x, x_shape, strides=xs)
        yp = address("conv output Y", y, y_shape, strides=ys)
        # Never wait for the lock: a thread of the parent that was running this shape at an
        # os.fork does not exist in the child, so there the lock stays taken for ever (the
        # child's first call of the shape hung). A held lock (that, or a concurrent run) costs
        # this call its own two memories instead, as ``run`` makes them.
        lock = self.lock
        if not lock.acquire(blocking=False):
            pw, rows = self.plan, self.rows
            self.plan.prim.execute_on(self._args(capi.Memory(capi.MemoryDesc.strided((rows, pw.c), (pw.c, 1)), xp),
                                                 capi.Memory(capi.MemoryDesc.strided((rows, pw.m), (pw.m, 1)), yp)))
            return y
        try:
            self.src.set(xp)
            self.dst.set(yp)
            self.plan.prim.execute_array(self.args)
        finally:
            lock.release()
        return y

    __call__ = run


def patch_deconv(w: np.ndarray, group: int, win: Window, x_shape: tuple[int, ...],
                 out_sizes: tuple[int, ...]) -> bool:
    """True for a ConvTranspose ``PatchDeconv`` computes (``win`` from ``conv_transpose_geometry``):
    2-D, one group, kernel == stride, no dilation, no output offset, output = input x stride
    (``specs.patch_geometry``), float32 weight."""
    return w.dtype == np.float32 and patch_geometry(w.shape, group, win, x_shape, out_sizes)


class PatchDeconv:
    """The patch-scattering ConvTranspose of one weight (C, M, kh, kw), activation fixed."""

    def __init__(self, w: np.ndarray, with_bias: bool, unary: Unary | Unaries | None) -> None:
        c, m, kh, kw = (int(d) for d in w.shape)
        cols = kw * m
        # kernel row i as a (C, kw * M) matrix: column j * M + o holds W[c, o, i, j]
        # (an own copy, as Pointwise's: for a 1x1 kernel, or C == M == 1, the transposed weight is
        # already C-contiguous and ascontiguousarray would return a view keeping the model's array alive)
        self.rows = np.array(w.transpose(2, 0, 3, 1).reshape(kh, c, cols), dtype=np.float32, order="C", copy=True)
        self.wei_md = capi.MemoryDesc.strided((1, c, cols), (c * cols, cols, 1))
        self.bias_md = capi.MemoryDesc.strided((1, 1, cols), (cols, cols, 1)) if with_bias else None
        self.attr_ops = [("eltwise", *u) for u in _chain(unary)]
        self.c, self.m, self.kh, self.kw, self.cols = c, m, kh, kw, cols
        self.weights = [capi.Memory(self.wei_md, capi.ptr(self.rows[i])) for i in range(kh)]
        # A narrow patch row (kw * M <= NARROW_COLUMNS: a DB head's 1-channel probability map) is
        # one dense product (C, kh * kw * M) in numpy, then its activation, then a copy into the
        # patches: oneDNN's batched form runs N * H products of kw * M columns each, ~6x slower
        # (PP-OCRv4 det at 640 x 640: 3.2 ms for its 24 -> 1 channel deconv; dense ~0.6 ms)
        self.unary = unary
        self.dense = np.array(w.transpose(0, 2, 3, 1).reshape(c, kh * cols), dtype=np.float32, order="C",
                              copy=True) if dense_patches(w) else None
        # oneDNN takes no run-time batch count beside a broadcast weight: one primitive per N * H
        # (a generic GEMM's descriptor, ~0.1-1 ms, no JIT code of its own), run-time W and strides
        self._prims: dict[int, capi.Primitive] = {}
        self._lock = omp_fork.fork_safe(threading.Lock())
        pd = self._primitive(1).pd
        assert pd is not None  # (made with its descriptor kept)
        self.impl = pd.fast_impl()

    def _primitive(self, batch: int) -> capi.Primitive:
        with self._lock:
            prim = self._prims.get(batch)
            if prim is None:
                rt = capi_ops.RUNTIME_DIM
                pd = capi_ops.matmul_pd(capi.MemoryDesc.strided((batch, rt, self.c), (rt, self.c, 1)), self.wei_md,
                                    self.bias_md, capi.MemoryDesc.strided((batch, rt, self.cols), (rt, self.cols, 1)),
                                    capi_ops.Attr(self.attr_ops))
                pd.fast_impl()
                if len(self._prims) >= _MAX_BATCHES:
                    self._prims.clear()
                prim = self._prims[batch] = capi.Primitive(pd, [])
            return prim

    def run(self, x: np.ndarray, b: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        """The ConvTranspose of float32 ``x`` (N, C, H, W), any layout, as a channels-last array
        (``out`` when it is one of the right shape and layout). ``OperandError`` when ``x`` has
        another channel count or the bias does not fit; ``DnnlError`` when oneDNN rejects it."""
        if x.ndim != 4 or x.shape[1] != self.c:
            raise OperandError(f"ConvTranspose bound for {self.c} input channels; got X {list(x.shape)}")
        n, _, h, wd = (int(d) for d in x.shape)
        y_shape = (n, self.m, h * self.kh, wd * self.kw)
        x, y, x_strides, y_strides = _operands(x, y_shape, out)
        bias = None
        if self.bias_md is not None:
            if b is None:
                raise OperandError("ConvTranspose bound with a bias but none was given")
            address("ConvTranspose bias B", b, (self.m,))  # (checked: float32, M values)
            tiled = np.tile(b, self.kw)  # the bias of columns j * M + o
            bias = (capi.ARG_BIAS, capi.Memory(self.bias_md, capi.ptr(tiled)))
        if self.dense is not None:
            return self._run_dense(x, b, y)
        prim = self._primitive(n * h)
        xp = address("ConvTranspose input X", x, tuple(x.shape), strides=x_strides)
        yp = address("ConvTranspose output Y", y, y_shape, strides=y_strides)
        src = capi.Memory(capi.MemoryDesc.strided((n * h, wd, self.c), (wd * self.c, self.c, 1)), xp)
        # output row h * kh + i of image n is batch n * H + h of kernel row i's product
        dst_md = capi.MemoryDesc.strided((n * h, wd, self.cols), (self.kh * wd * self.cols, self.cols, 1))
        for i in range(self.kh):
            args = [(capi.ARG_SRC, src), (capi.ARG_WEIGHTS, self.weights[i]),
                    (capi.ARG_DST, capi.Memory(dst_md, yp + i * wd * self.cols * 4))]
            if bias is not None:
                args.append(bias)
            prim.execute_on(args)
        return y


    def _run_dense(self, x: np.ndarray, b: np.ndarray | None, y: np.ndarray) -> np.ndarray:
        """The narrow form of ``run``: ``x`` and ``y`` channels-last (``_operands``), ``b`` checked."""
        n, _, h, wd = x.shape
        assert self.dense is not None
        t = np.matmul(x.transpose(0, 2, 3, 1).reshape(n * h * wd, self.c), self.dense)  # (pixels, (i, j, o))
        if b is not None:  # (a scalar add for one channel: an inner broadcast of 1-4 values is ~8x slower)
            if self.m == 1:
                t += b[0]
            else:
                t.reshape(-1, self.m)[...] += b
        if self.unary is not None:
            _numpy_unary(t, self.unary)
        # pixel (n, h, w)'s patch row i lands in output row h * kh + i, columns w * kw .. (j, o)
        src = t.reshape(n, h, wd, self.kh, self.cols).transpose(0, 1, 3, 2, 4)
        dst = y.transpose(0, 2, 3, 1).reshape(n, h, self.kh, wd, self.cols)  # (a view: y is channels-last)
        if self.cols % 2 == 0 and capi.ptr(y) % 8 == 0:  # pairs of floats as one 8-byte item: ~14x faster
            np.copyto(dst.view(np.uint64), src.view(np.uint64))
        else:
            np.copyto(dst, src)
        return y


NARROW_COLUMNS = 8  # kw * M at most for PatchDeconv's dense numpy form


def dense_patches(w: np.ndarray) -> bool:
    """``PatchDeconv`` of weight ``w`` (C, M, kh, kw) takes its dense numpy form (activation in numpy)."""
    return w.ndim == 4 and int(w.shape[3]) * int(w.shape[1]) <= NARROW_COLUMNS
_MAX_BATCHES = 64  # primitives per PatchDeconv (distinct N * H seen), then it starts over


_patch_plans: dict[tuple[Any, ...], PatchDeconv | None] = {}


def patch_plan(w: np.ndarray, with_bias: bool, unary: Unary | Unaries | None) -> PatchDeconv | None:
    """The ``PatchDeconv`` of weight ``w`` (made on first use, dropped with ``w``), or None when
    oneDNN does not offer it."""
    return _cached(_patch_plans, w, (with_bias, unary), lambda: PatchDeconv(w, with_bias, unary))


_warm_lock = omp_fork.fork_safe(threading.Lock())
_warmed = False


def warm() -> None:
    """Run one tiny ``Pointwise`` once per process: oneDNN generates its shared GEMM kernels on
    their first use (~35 ms on AVX-512), which a model's load can pay instead of its first call.
    Best effort: a oneDNN error leaves the first real call to pay it."""
    global _warmed
    with _warm_lock:
        if _warmed:
            return
        _warmed = True
    try:
        w = np.ones((2, 2, 1, 1), np.float32)
        Pointwise(w, False, None, False).run(np.ones((1, 2, 2, 2), np.float32), None, None)
    except capi.DnnlError:
        pass


# By (weight identity, bias, activation, residual, team); None: oneDNN has no (non-reference)
# implementation, the caller keeps its per-shape primitive.
_plans: dict[tuple[Any, ...], Pointwise | None] = {}
_MAX_PLANS = 512


def plan(w: np.ndarray, with_bias: bool, unary: Unary | Unaries | None, residual: bool) -> Pointwise | None:
    """The ``Pointwise`` of weight ``w`` with these post-ops (made on first use, dropped with ``w``),
    or None when oneDNN does not offer it."""
    return _cached(_plans, w, (with_bias, unary, residual), lambda: Pointwise(w, with_bias, unary, residual))


T = TypeVar("T")


def _cached(table: dict[tuple[Any, ...], T | None], w: np.ndarray, post: tuple[Any, ...],
            make: Callable[[], T]) -> T | None:
    """``table``'s entry for weight ``w`` (identity, address, layout), post-ops ``post`` and this
    OpenMP team, made by ``make`` on first use (None: oneDNN rejected it) and dropped with ``w``;
    the table starts over at ``_MAX_PLANS`` entries."""
    key = (id(w), capi.ptr(w), w.shape, w.strides, *post, openmp.team())
    if key in table:
        return table[key]
    if len(table) >= _MAX_PLANS:
        table.clear()
    try:
        p: T | None = make()
    except capi.DnnlError:
        p = None
    weakref.finalize(w, table.pop, key, None)
    table[key] = p
    return p
