"""Prepared kernels that bind a oneDNN primitive at plan time (``onednn`` provider):
LayerNormalization, FusedAttention, Softmax over the last axis, MaxPool / AveragePool /
GlobalAveragePool, Gemm with a constant B. The primitive, its constant operands (LayerNormalization's scale and bias)
and its geometry are fixed when the executor builds its plan, so a call only re-points data
handles and executes. Each kernel sets ``openmp`` (the executor then holds OpenBLAS to one
thread: two spinning pools on two cores fight).

``PREPARE_ONEDNN`` is merged into ``prepared.PREPARE`` (the executor's table); each prepare
returns None (keep the generic kernel) when the library is missing, the signature is not
static float32, or oneDNN does not implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, to_numpy
from pycann.kernels import algorithm
from pycann.kernels.algorithm import ONEDNN_GEMM, Layout, Threads
from pycann.kernels.bind_base import Kernel, Prepare
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bound import BoundKernel
from pycann.ops.fused_chain import CHAIN_UNARY, UNARY_IN_PLACE
from pycann.ops.nn.pool import _k_average_pool, _k_global_average_pool, _k_max_pool


def _f32(*ds: TensorDesc | None) -> bool:
    return all(d is not None and d.dtype == 1 for d in ds)  # TensorProto.FLOAT


def _usable() -> bool:
    """The ``onednn`` provider is installed, passes its self-check and is allowed (``PYCANN_PROVIDERS``)."""
    from pycann.kernels.providers import available

    return available("onednn")


def _layer_norm(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """LayerNormalization with Y only, float32 X of static shape, stash_type float32 and
    constant Scale / B: ``onednn_norm.bound_layer_norm`` (Mean / InvStdDev outputs, other types
    and run-time Scale keep the generic kernel)."""
    xs = _static(ins[0])
    scale = consts[1] if len(consts) > 1 else None
    bias = consts[2] if len(consts) > 2 else None
    if xs is None or not xs or not _f32(ins[0]) or scale is None or len([o for o in outs if o is not None]) != 1:
        return None
    if len(ins) > 2 and ins[2] is not None and bias is None:
        return None
    if int(attrs.get("stash_type", 1)) != 1 or not _usable():
        return None
    axis = int(attrs.get("axis", -1))
    if not -len(xs) <= axis < len(xs):
        return None  # the generic kernel raises the error
    n = int(np.prod(xs[axis % len(xs):], dtype=np.int64))
    if scale.dtype != np.float32 or (bias is not None and bias.dtype != np.float32):
        return None
    from pycann.kernels.providers import onednn_norm

    return onednn_norm.bound_layer_norm(xs, n, scale, bias, float(attrs.get("epsilon", 1e-5)))  # type: ignore[no-any-return]


def _attention(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """FusedAttention over float32 operands of static shapes: ``onednn_attention.bound_attention``
    (two matmuls and a softmax in oneDNN, scale and mask as post-ops)."""
    q, kt, v = (_static(d) for d in ins[:3])
    has_mask = len(ins) > 3 and ins[3] is not None
    mask = _static(ins[3]) if has_mask else None
    if q is None or kt is None or v is None or not _f32(*ins[:3]) \
            or (has_mask and (mask is None or not _f32(ins[3]))) or not _usable() or attrs.get("nan_to_zero", 0) \
            or attrs.get("masked_rows_zero", 0):
        return None  # (nan_to_zero: the generic kernel zeroes NaN rows of P between oneDNN's two products)
    from pycann.kernels.providers import onednn_attention

    k = onednn_attention.bound_attention(q, kt, v, mask, float(attrs.get("scale", 1.0)))
    return k  # type: ignore[no-any-return]


# Below this many input elements numpy's pooling wins (PP-OCR cls: 38K elements, ~20 us in numpy);
# it also keeps small numpy-only plans off oneDNN's OpenMP pool (OpenBLAS keeps its threads).
POOL_MIN_ELEMENTS = 1 << 16
# Inside a channels-last conv chain the plan runs on OpenMP anyway, and numpy's pooling of a strided
# array with overlapping windows is slow (GoogLeNet's 3x3/1 MaxPools of 1x832x7x7: 110-170 us;
# oneDNN 9-16 us): there only the tiniest stay on numpy.
POOL_MIN_ELEMENTS_NHWC = 1 << 8


def _pool(alg_of: Callable[[Mapping[str, Any]], str | None], generic: Callable[..., list[np.ndarray]],
          fallback: Prepare | None = None) -> Prepare:
    """Prepare for MaxPool / AveragePool: float32 X of static 4-D/5-D/3-D shape, Y only, bound to
    oneDNN's pooling in the layout GE chose (``_layout == "NHWC"``: channels-last, else NCHW); a
    call with another layout, or an all-NaN max window, runs ``generic``. ``fallback`` is the
    next prepare to try when oneDNN is not used."""

    def prepare(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
        k = _bind_pool(alg_of(attrs), attrs, ins, outs, generic)
        if k is None and fallback is not None:
            return fallback(attrs, ins, consts, outs)
        return k

    return prepare


def _bind_pool(alg: str | None, attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None],
               outs: Sequence[TensorDesc | None], generic: Callable[..., list[np.ndarray]]) -> Kernel | None:
    from pycann.ops.nn.pool import _pool_window

    xs = _static(ins[0])
    if alg is None or xs is None or not 3 <= len(xs) <= 5 or not _f32(ins[0]) or len(outs) != 1 \
            or int(attrs.get("_n_outputs", 1)) != 1:
        return None
    floor = POOL_MIN_ELEMENTS_NHWC if attrs.get("_layout") == "NHWC" else POOL_MIN_ELEMENTS
    if int(np.prod(xs, dtype=np.int64)) < floor:
        return None  # numpy's few strided passes beat a primitive call and an OpenMP fork/join
    if not _usable():  # (after the size test: a small numpy-only model never loads libdnnl, ~40 MB)
        return None
    nhwc = attrs.get("_layout") == "NHWC"
    if attrs.get("_global"):
        attrs = {"kernel_shape": list(xs[2:]), "strides": [1] * (len(xs) - 2)}
    try:
        win, ends = _pool_window(xs, attrs)
    except (ValueError, KeyError, TypeError):
        return None
    ys = xs[:2] + tuple(win.out)
    if _static(outs[0]) != ys or any(e >= win.span(i) for i, e in enumerate(ends)) \
            or any(b >= win.span(i) for i, b in enumerate(win.pads_begin)):
        return None  # a window that lies entirely in padding: the generic kernel's rules
    if alg == "avg_include_padding" and tuple(ends) != tuple(win.pads_end):
        return None  # ceil_mode reaches past the pads: ONNX does not count those cells
    from pycann.kernels.providers import nan_guard, onednn_pool

    # the layout GE chose first; the other one too, since an op GE left outside a chain (e.g.
    # GlobalAveragePool after it) still receives that chain's channels-last arrays
    bound = [onednn_pool.bound_pool(alg, xs, ys, cl, win.kernel, win.strides, win.dilations, win.pads_begin, ends)
             for cl in (nhwc, not nhwc)]
    b = bound[0]
    if b is None:
        return None
    pools = [p.pool for p in bound if p is not None]

    def kernel(x: Sequence[Any], a: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        o = out[0] if out is not None else None
        for pool in pools:
            y = pool(x[0], o)
            if y is not None:
                break
        else:
            y = generic(x, a)[0]
        if o is not None and y is not o:
            o[...] = y  # the executor reads its arena view (another layout, or the generic result)
            forget(o, None)  # (no bound proven for what the generic kernel computed)
        return [y]

    forget = nan_guard.record
    # (writes into the executor's arena view; OpenMP: the executor holds OpenBLAS to one thread meanwhile)
    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, impl=b.impl)


def _max_alg(attrs: Mapping[str, Any]) -> str | None:
    return "max" if not int(attrs.get("storage_order", 0)) else None


def _avg_alg(attrs: Mapping[str, Any]) -> str | None:
    return "avg_include_padding" if int(attrs.get("count_include_pad", 0)) else "avg_exclude_padding"


def _softmax(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """Softmax over the last axis (the same computation at every opset) of float32 X of static
    shape, at least ``onednn_softmax.MIN_ELEMENTS`` elements: ``onednn_softmax.bound_softmax``
    (PP-OCR rec's vocabulary softmax: 5 numpy passes -> 1)."""
    from pycann.kernels.providers import onednn_softmax
    from pycann.ops.registry import lookup

    xs = _static(ins[0])
    if xs is None or not xs or not _f32(ins[0]) or len(outs) != 1:
        return None
    if int(attrs.get("axis", -1)) % len(xs) != len(xs) - 1:
        return None
    if int(np.prod(xs, dtype=np.int64)) < onednn_softmax.MIN_ELEMENTS or not _usable():
        return None
    generic = lookup("Softmax", "", 13).kernel  # axis = last: the opset-13 kernel computes every form
    return onednn_softmax.bound_softmax(xs, generic)  # type: ignore[no-any-return]


def _gemm(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """Gemm with a constant float32 B, alpha = 1, no transA and a constant C that is a row of N
    values (or absent) selected for ``onednn:gemm``: B (transposed once when transB) and beta*C
    become ``onednn_matmul.bound_matmul``'s packed weight and bias (ResNet-50's classifier: B is
    re-described every call otherwise)."""
    from pycann.kernels.providers import onednn_matmul

    xs = _static(ins[0])
    b = consts[1] if len(consts) > 1 else None
    c = consts[2] if len(consts) > 2 else None
    if algorithm.of(attrs) != ONEDNN_GEMM or xs is None or len(xs) != 2 or b is None or b.ndim != 2 \
            or not _f32(ins[0]) or b.dtype != np.float32 or not _usable():
        return None
    if int(attrs.get("transA", 0)) or float(attrs.get("alpha", 1.0)) != 1.0:
        return None
    beta = float(attrs.get("beta", 1.0))
    if len(ins) > 2 and ins[2] is not None and (c is None or c.dtype != np.float32):
        return None  # a run-time or non-float32 C: the generic kernel
    bb = np.ascontiguousarray(b.T) if int(attrs.get("transB", 0)) else b
    n = bb.shape[1]
    bias = None
    if c is not None and beta != 0.0:
        if c.size != n or (c.ndim == 2 and c.shape[0] != 1) or c.ndim > 2:
            return None  # C broadcasting over rows (or a full M x N C): the generic kernel
        bias = (c.reshape(n) * np.float32(beta)).astype(np.float32) if beta != 1.0 else c.reshape(n)
    k = onednn_matmul.bound_matmul(bb, bias, xs, None)
    if k is None or _static(outs[0]) != (xs[0], n):
        return None
    return k  # type: ignore[no-any-return]


def _global_average_pool(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """GlobalAveragePool: of a 4-D float32 X, the channel sums as one sgemv (``global_pool``: no
    primitive, and numpy's mean of a channels-last X was slow); other ranks as an average pooling
    whose window is the whole spatial extent."""
    from pycann.kernels import global_pool

    xs = _static(ins[0])
    if global_pool.ENABLED and xs is not None and len(xs) == 4 and 0 not in xs and _f32(ins[0]) and len(outs) == 1:
        return global_pool.bound_global_average_pool(xs, _k_global_average_pool)  # type: ignore[return-value]
    return _bind_pool("avg_exclude_padding", {**attrs, "_global": True}, ins, outs, _k_global_average_pool)


def _torch_max_pool(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    from pycann.kernels.bind import _max_pool  # ATen's pooling when torch is loaded anyway

    return _max_pool(attrs, ins, consts, outs)


def _or_generic(bound_run: BoundKernel, generic: Callable[..., Sequence[np.ndarray]]) -> BoundKernel:
    """A plan kernel for ``onednn_binary``'s bound primitive: into the executor's arena view when it
    gives one (``writes_out``), and through ``generic`` for a call it declines (other strides)."""
    run = bound_run.run

    def kernel(x: Sequence[Any], a: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        o = out[0] if out is not None else None
        y = run(x, o)
        if y is None:
            y = generic(x, a)[0]
        if o is None:
            return [y]
        if y is not o:
            o[...] = y  # the executor reads its arena view
        return [o]

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=bound_run.keep, impl=bound_run.impl)


def _chain(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """ElementwiseChain over float32 inputs of static shape with a result of at least
    ``onednn_binary.min_elements`` (16K for two steps or more): one oneDNN binary primitive with the later steps as post-ops
    (multi-threaded, one pass; PP-OCR det's RSE-FPN ``conv * se + conv + up`` on 96x160x160).
    A chain ending in Relu/Clip (a pre-activation BatchNormalization + Relu) runs whole on oneDNN
    behind the NaN guard (``guarded_chain``), else its head there and the tail in numpy.
    Chains it cannot express (module docstring of ``onednn_binary``), and smaller ones, keep
    ``prepared_small``'s numpy kernel; a call with other strides runs the generic kernel."""
    from pycann.kernels import guarded_chain
    from pycann.kernels.bind_small import PREPARE_SMALL
    from pycann.kernels.providers import onednn_binary
    from pycann.ops.registry import lookup

    small = PREPARE_SMALL[("pycann", "ElementwiseChain")]
    shapes = [_static(d) if d is not None else None for d in ins]
    out = _static(outs[0]) if outs else None
    if out is None or not ins or any(d is None or not _f32(d) for d in ins) \
            or int(np.prod(out, dtype=np.int64)) < onednn_binary.min_elements(attrs["steps"]) or not _usable():
        return small(attrs, ins, consts, outs)
    steps = list(attrs["steps"])
    generic = lookup("ElementwiseChain", "pycann", 1).kernel
    nhwc = attrs.get("_layout") == "NHWC"
    run = onednn_binary.bound_chain(steps, shapes, nhwc)
    if run is not None:
        return _or_generic(run, generic)
    # a chain ending in unary steps oneDNN does not take (Relu: its max turns NaN into 0): the
    # binary head on oneDNN (one multi-threaded pass), the tail in numpy in place on its result
    # (a BatchNormalization + Relu of a pre-activation net: bn_to_affine.py)
    cut = len(steps)
    while cut > 1 and steps[cut - 1][0] in CHAIN_UNARY:
        cut -= 1
    if cut == len(steps):
        return small(attrs, ins, consts, outs)
    head_attrs = {**attrs, "steps": steps[:cut]}
    tail = [(UNARY_IN_PLACE[op], (p0, p1)) for op, _i, _r, p0, p1 in steps[cut:]]
    # the whole chain in one oneDNN pass when the NaN guard can bound the value entering the tail
    head_map, tail_map = guarded_chain.bound_map(steps[:cut], consts), guarded_chain.bound_map(steps[cut:], consts)
    whole = onednn_binary.bound_chain(steps, shapes, nhwc, drop_nan=True) \
        if head_map is not None and tail_map is not None else None
    head_run: list[BoundKernel | None] = []  # the head alone: bound now, or (guarded) on its first call

    def bind_head() -> BoundKernel | None:
        head = onednn_binary.bound_chain(steps[:cut], shapes, nhwc)
        bk = _or_generic(head, lambda x, a: generic(x, head_attrs)) if head is not None else None
        if not head_run:
            head_run.append(bk)
        return head_run[0]

    def kernel(x: Sequence[Any], a: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        bk = head_run[0] if head_run else bind_head()
        if bk is not None:
            y = bk.run(x, a, out)[0]
        else:  # (oneDNN declined the head alone after taking the whole chain)
            y = generic(x, head_attrs)[0]
            if out is not None:
                out[0][...] = y
        if out is not None:  # the executor reads its arena view
            y = out[0]
        with np.errstate(all="ignore"):
            for fn, p in tail:
                fn(y, p)
        return [y]

    if whole is None or head_map is None or tail_map is None:
        bk = bind_head()
        return small(attrs, ins, consts, outs) if bk is None else replace(bk, run=kernel)
    return guarded_chain.guarded_chain(_or_generic(whole, generic), kernel, head_map, tail_map)


def _concat(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
    """Concat of float32 (or bfloat16 / float16: a reduced-precision mode's FPN) 4-D inputs of
    static shape inside a channels-last chain
    (``_layout == "NHWC"``), written into the executor's arena view: at least
    ``onednn_concat.MIN_ELEMENTS`` in all, one oneDNN concat primitive (multi-threaded); smaller,
    numpy's one strided copy (single-threaded, but in cache it beats the primitive: DenseNet's 62
    channel concats of 32-channel slices took 2.4 ms on oneDNN, 1.3 ms on numpy). A call whose
    arrays have other strides, or with no arena view, gets the same values."""
    from pycann.kernels.bind import _concat as numpy_concat
    from pycann.kernels.providers import nan_guard, onednn_concat
    from pycann.kernels.providers import onednn_capi as capi

    fallback = numpy_concat(attrs, ins, consts, outs)
    shapes = [_static(d) for d in ins]
    out = _static(outs[0]) if outs else None
    if fallback is None or out is None or len(out) != 4 or attrs.get("_layout") != "NHWC" or not ins \
            or any(s is None or len(s) != 4 for s in shapes) or len({d.dtype for d in ins}) != 1 \
            or ins[0].dtype not in _CONCAT_DTYPES or not _usable():
        return fallback
    dtype = to_numpy(ins[0].dtype)
    axis = int(attrs["axis"]) % 4
    cl = [capi.layout_strides(s, True) for s in shapes]  # type: ignore[arg-type]
    primitive = onednn_concat.bound_concat(shapes, cl, axis, out, capi.layout_strides(out, True),  # type: ignore[arg-type]
                                           dtype)
    if primitive is None:
        return fallback  # (bind._concat: numpy's copy, into the arena view, bounds passed on)
    run, numpy_run = primitive.run, fallback.run  # type: ignore[union-attr,attr-defined]
    perm = (0, 2, 3, 1)
    record_max = nan_guard.record_max

    def kernel(x: Sequence[Any], a: Mapping[str, Any], into: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        y = into[0] if into is not None else np.empty([out[p] for p in perm], dtype).transpose(0, 3, 1, 2)
        if run(x, y) is None:  # other strides than bound
            return numpy_run(x, a, [y])  # type: ignore[no-any-return]
        if into is not None:
            record_max(y, x)
        return [y]

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, layout=Layout.NHWC, keep=primitive.keep)


# float32, float16, bfloat16 (TensorProto): the concats the primitive copies
_CONCAT_DTYPES = (1, 10, 16)


def _binary(op: str) -> Prepare:
    """Add / Sub / Mul / Div of two float32 tensors of static shape with a result of at least
    ``onednn_binary.MIN_ELEMENTS`` elements: one oneDNN binary primitive (multi-threaded; PP-OCR
    rec's squeeze-excite ``x * se`` on channels-last maps), as a one-step ElementwiseChain;
    otherwise, and for calls with other strides, the generic kernel."""

    def prepare(attrs, ins, consts, outs) -> Kernel | None:  # type: ignore[no-untyped-def]
        from pycann.kernels.providers import onednn_binary
        from pycann.ops.registry import lookup

        out = _static(outs[0]) if outs else None
        if len(ins) != 2 or not _f32(*ins) or out is None \
                or int(np.prod(out, dtype=np.int64)) < onednn_binary.MIN_ELEMENTS or not _usable():
            return None
        run = onednn_binary.bound_chain([[op, 1, 0, 0.0, 0.0]], [_static(d) for d in ins],
                                        attrs.get("_layout") == "NHWC")
        return None if run is None else _or_generic(run, lookup(op, "", 14).kernel)

    return prepare


PREPARE_ONEDNN: dict[tuple[str, str], Prepare] = {
    **{("", op): _binary(op) for op in ("Add", "Sub", "Mul", "Div")},
    ("", "Concat"): _concat,
    ("pycann", "ElementwiseChain"): _chain,
    ("", "LayerNormalization"): _layer_norm,
    ("pycann", "FusedAttention"): _attention,
    ("", "MaxPool"): _pool(_max_alg, _k_max_pool, _torch_max_pool),
    ("", "AveragePool"): _pool(_avg_alg, _k_average_pool),
    ("", "GlobalAveragePool"): _global_average_pool,
    ("", "Softmax"): _softmax,
    ("", "Gemm"): _gemm,
}
