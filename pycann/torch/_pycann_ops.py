"""Eager single ops on pycann's op library, each signature's kernel bound once and cached.

The first call of a signature -- (op, input dtypes, shapes and strides, attributes, and the
identity of the inputs bound as constants) -- goes through GE's single-op path with all its
checks (``pycann.ge.run.singleop.run_op``: schema defaults, shape/dtype inference, output check), as
``aclopCreateHandle`` compiles an op once. Then the op's kernel is *bound* for that signature
the way GE binds a plan's node (``pycann.kernels.bind.PREPARE``): a convolution's weight is
packed into oneDNN's blocked layout once, a Gemm's B is packed once, a pooling / softmax /
binary op gets its oneDNN primitive. Ops without a prepared form keep their generic kernel.
Later calls only run the bound kernel on zero-copy numpy views of the tensors.

Constant inputs (``PycannOp.consts``: a conv's weight and bias, a linear layer's weight) are
identified by their tensor (a weak reference to it, or to the base of a view such as
``weight.t()``) and strides, and their state by data pointer and version counter
(``Tensor._version``, bumped by every in-place write, e.g. an optimizer step): a changed state
rebinds, so a packed weight is never stale, and the new binding *replaces* the old one (one
handle per signature and tensor: a training loop that steps the optimizer between forward passes
keeps one packed copy of each weight, not one per step).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pycann.torch import _layout

_MAX_HANDLES = 4096


@dataclass(frozen=True)
class _Handle:
    kernel: Any  # kernel(inputs, attrs) -> [y] (bound or generic)
    out_kernel: Any  # out_kernel(inputs, attrs, [out]): the generic kernel writing into ``out``, or None
    attrs: dict[str, Any]
    owners: tuple[Any, ...]  # weak references to the tensors bound as constants
    state: tuple[Any, ...]  # their (data pointer, version) when bound (``_const_state``)
    bound: bool  # a prepared (bound) kernel, not the generic one
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype
    # the byte strides ATen gives the result (``_layout.expected``), or None: the kernel's layout is kept
    want: tuple[int, ...] | None = None
    # converts input 0 into the layout the bound kernel computes in (a contiguous input of the
    # channels-last conv: ``_layout.channels_last_input``), or None
    pre: Any = None


_handles: dict[tuple[Any, ...], _Handle] = {}
_threads = torch.get_num_threads
counters = {"calls": 0, "bound_calls": 0, "binds": 0}
"""Calls served here, calls that ran a bound (prepared) kernel, and kernels bound so far."""
stat_writes = [0]
"""Train-mode batch norms run so far on npu tensors (``_dispatch``): they write running statistics
without a ``_version`` bump, so a BatchNormalization's constant state includes this count."""
epoch = [0]
"""Bumped by ``clear()`` (``torch.npu.empty_cache``): torch.compile's plans compare it per call
(frozen.py), so the documented remedy for unversioned writes (``p.data.mul_``) reaches them too."""
_NO_OVERLAP_CHECK = frozenset({"MatMul"})
"""Ops whose ATen out= kernels (``mm``, ``bmm``) do not apply TensorIterator's partial-overlap rule."""


def _drop(key: tuple[Any, ...], ref: Any) -> None:
    h = _handles.get(key)
    if h is not None and any(r is ref for r in h.owners):
        del _handles[key]


def _owner(t: torch.Tensor) -> torch.Tensor:
    base = t._base
    return base if base is not None else t


def _const_key(t: Any) -> Any:
    """What identifies constant input ``t`` (a tensor, usually an npu parameter) for binding: its
    tensor (or view base). Its sizes and strides are in the key already, as its numpy view's
    (``_key``); its contents are ``_const_state``."""
    if not isinstance(t, torch.Tensor):
        return None
    return id(_owner(t))


def _const_state(t: Any) -> Any:
    """The state of constant input ``t`` a binding was made from: storage address and version
    (a changed one rebinds)."""
    if not isinstance(t, torch.Tensor):
        return None
    return (t.data_ptr(), t._version)


def _state(op_type: str, consts: Sequence[tuple[int, torch.Tensor]]) -> tuple[Any, ...]:
    """The constants' state a binding is made from (``_const_state``), and for a batch norm the
    count of train-mode batch norms run (they write the statistics without a version bump)."""
    if not consts:
        return ()
    state = tuple(_const_state(t) for _, t in consts)
    return state + (stat_writes[0],) if op_type == "BatchNormalization" else state


def _key(op_type: str, ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
         consts: tuple[Any, ...]) -> tuple[Any, ...]:
    # the thread count too: oneDNN fixes a primitive's work split when it is created, so a kernel
    # bound at 1 thread would stay single-threaded after torch.set_num_threads(2). The attributes
    # in their dict's order: each optable entry builds its dict in one order (another order could
    # only bind a second handle, never pick a wrong one).
    return (op_type, _threads(), tuple(None if a is None else (a.dtype, a.shape, a.strides) for a in ins),
            tuple((k, tuple(v) if type(v) is list else v) for k, v in attrs.items()), consts)


# the constants' state (data pointer, version) when their packings were last made, by id of the owning
# tensor, with a weak reference whose callback drops the entry when the tensor goes (a weakref, not
# ``weakref.finalize``: this runs inside torch.compile's tracing too, where Dynamo traced finalize's
# registry and failed with "dictionary changed size during iteration")
_packed_states: dict[int, tuple[tuple[Any, ...], Any]] = {}


def _forget_state(k: int, ref: Any) -> None:
    entry = _packed_states.get(k)
    if entry is not None and entry[1] is ref:
        del _packed_states[k]


def _invalidate_written(ins: Sequence[np.ndarray | None], consts: Sequence[tuple[int, torch.Tensor]]) -> None:
    """Before binding: a constant written in place since its packings were made (its version moved,
    its address did not) must not be served them again. oneDNN's packing cache (``onednn_packed``)
    is keyed by address, shape and strides, which suits a plan's immutable weights; an optimizer step
    or ``p.mul_(...)`` keeps the address, so a rebind got the packing of the old values
    (``nn.Linear(784, 1000)`` on the ``onednn:gemm`` path computed with the pre-step weights from the
    second call on). Unwritten constants keep sharing their packing between signatures."""
    for i, t in consts:
        a = ins[i] if i < len(ins) else None
        state = _const_state(t)
        if a is None or state is None:
            continue
        owner = _owner(t)
        k = id(owner)
        before = _packed_states.get(k)
        if before is None:
            ref = weakref.ref(owner, functools.partial(_forget_state, k))
        else:
            ref = before[1]
            if before[0] != state:
                try:
                    from pycann.kernels.providers import onednn_packed
                except (ImportError, OSError):  # no oneDNN: nothing was packed
                    pass
                else:
                    onednn_packed.invalidate(a)
        _packed_states[k] = (state, ref)


def _bind(op_type: str, ins: list[np.ndarray | None], attrs: Mapping[str, Any], res: np.ndarray,
          const_at: Sequence[int], want: tuple[int, ...] | None = None) -> tuple[Any, Any, dict[str, Any], bool]:
    """The kernel of this signature: the op's prepared kernel bound to ``ins[i]`` for ``i`` in
    ``const_at`` (as GE binds a plan node with constant inputs), else its generic kernel. ``want``:
    the result's byte strides (``_layout.expected``)."""
    from pycann.dtypes import TensorDesc, from_numpy
    from pycann.ge.run.singleop import find_op
    from pycann.kernels.bind import PREPARE
    from pycann.kernels.table import into_kernel, run_kernel

    opdef = find_op(op_type)
    full = opdef.with_defaults(dict(attrs), op_type)
    full["_n_outputs"] = 1
    pair = _torch_eltwise(op_type, ins)
    if pair is not None:
        return pair[0], pair[1], full, False
    if op_type == "Conv" and 1 in const_at and (len(ins) < 3 or ins[2] is None or 2 in const_at) \
            and want is not None and _layout.contiguous(res.shape, want, res.itemsize):
        from pycann.torch import _conv_nchw

        k = _conv_nchw.bind(ins, full)
        if k is not None:
            return k, None, full, True
    if op_type == "BatchNormalization" and set(const_at) >= {1, 2, 3, 4}:
        k = _bound_batch_norm(ins, full, res)
        if k is not None:
            return k, None, full, True
    prepare = PREPARE.get((opdef.domain, op_type))
    if prepare is not None:
        descs = [None if a is None else TensorDesc(int(from_numpy(a.dtype)), tuple(int(d) for d in a.shape))
                 for a in ins]
        consts = [a if i in const_at else None for i, a in enumerate(ins)]
        out = TensorDesc(int(from_numpy(res.dtype)), tuple(int(d) for d in res.shape))
        k = prepare(full, descs, consts, [out])
        if k is not None:
            return k, None, full, True
    return run_kernel(opdef), into_kernel(opdef), full, False


def _torch_eltwise(op_type: str, ins: Sequence[np.ndarray | None]) -> tuple[Any, Any] | None:
    """Relu and the same-shape Add (``relu_``, ``add_``: their into-kernel writes over input 0, a
    residual) on the torch provider (``torch_eltwise``) for float32 inputs large enough to be worth
    it: the eager convolutions run on torch's thread pool, and one of these between them on another
    pool (or numpy's one thread) cost a worker wake-up each time (docs/torch.md, "Performance":
    "Eager: one thread pool"). None for other ops, dtypes, broadcasting or small inputs."""
    from pycann.kernels.providers import torch_eltwise

    kernels: dict[str, tuple[Callable[..., None], int]] = {"Relu": (torch_eltwise.relu_into, 1),
                                                            "Add": (torch_eltwise.add_into, 2)}
    entry = kernels.get(op_type)
    if entry is None:
        return None
    fn, n = entry
    xs = [a for a in ins[:n] if a is not None]
    if len(xs) < n or any(a.dtype != np.float32 or a.shape != xs[0].shape for a in xs) \
            or xs[0].size < torch_eltwise.MIN_ELEMENTS:
        return None

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        y = np.empty_like(inputs[0])  # (order "K": the input's layout, channels-last included)
        fn(*inputs[:n], y)
        return [y]

    def into(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
        fn(*inputs[:n], outs[0])

    return kernel, into


def _channels_last(a: np.ndarray) -> bool:
    return a.ndim == 4 and a.shape[1] > 1 and a.strides[1] == a.itemsize and a.strides[3] == a.itemsize * a.shape[1]


def _bound_batch_norm(ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any], res: np.ndarray) -> Any:
    """Inference BatchNormalization with constant scale, bias, mean and var, as GE computes it
    after folding: ``x * s + t`` with ``s = scale / sqrt(var + eps)``, ``t = bias - mean * s``
    computed once, run on the torch provider (``torch_eltwise.affine``, in the input's layout) or,
    below its size threshold, as pycann's ElementwiseChain (numpy for small inputs); a contiguous
    (NCHW) input from that threshold on ATen's own batch-norm kernel (``torch_eltwise.bound_batch_norm``)."""
    from pycann.dtypes import TensorDesc, from_numpy
    from pycann.kernels.bind import PREPARE
    from pycann.ops.registry import lookup

    x, scale, bias, mean, var = ins[:5]
    if x is None or x.dtype != np.float32 or any(a is None or a.dtype != np.float32 or a.ndim != 1
                                                  for a in (scale, bias, mean, var)):
        return None
    assert scale is not None and bias is not None and mean is not None and var is not None
    eps = float(attrs.get("epsilon", 1e-5))
    s64 = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    bshape = (-1,) + (1,) * (x.ndim - 2)
    s = s64.astype(np.float32).reshape(bshape)
    t = (bias.astype(np.float64) - mean.astype(np.float64) * s64).astype(np.float32).reshape(bshape)
    from pycann.kernels.providers import torch_eltwise

    if x.size >= torch_eltwise.MIN_ELEMENTS and x.ndim > 2 and x.flags.c_contiguous and not _channels_last(x):
        # NCHW: ATen's batch-norm kernel (a vectorized pass per channel), where addcmul's broadcast over
        # the spatial dims is 1.7-5x slower than over channels-last's innermost C
        run_nchw = torch_eltwise.bound_batch_norm(scale, bias, mean, var, eps, tuple(x.shape))
        return lambda inputs, a: [run_nchw(inputs[0])]
    if x.size >= torch_eltwise.MIN_ELEMENTS:
        # the torch provider: the same two float32 steps on torch's pool, where the eager
        # convolutions around it run (a oneDNN chain here woke the other pool's workers each call)
        run = torch_eltwise.bound_affine(s, t, tuple(x.shape))
        return lambda inputs, a: [run(inputs[0])]
    steps = [["Mul", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0]]
    chain_attrs = {"steps": steps, "_layout": "NHWC" if _channels_last(x) else "NCHW"}
    descs = [TensorDesc(1, tuple(int(d) for d in a.shape)) for a in (x, s, t)]
    out = TensorDesc(int(from_numpy(res.dtype)), tuple(int(d) for d in res.shape))
    chain = PREPARE[("pycann", "ElementwiseChain")](chain_attrs, descs, [None, s, t], [out]) \
        or lookup("ElementwiseChain", "pycann", 1).kernel

    def kernel(inputs: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        return list(chain([inputs[0], s, t], chain_attrs))

    return kernel


def _pre(op_type: str, kernel: Any, bound: bool, attrs: Mapping[str, Any], ins: Sequence[np.ndarray | None]) -> Any:
    """What a bound channels-last conv (``torch:conv2d_nhwc``) needs done to a contiguous input
    first (``_layout.channels_last_input``: oneDNN's reorder), else None."""
    from pycann.kernels.algorithm import TORCH_CONV2D_NHWC

    if op_type != "Conv" or not bound or attrs.get("_algo") != TORCH_CONV2D_NHWC or ins[0] is None \
            or getattr(kernel, "nchw", False):
        return None
    return _layout.channels_last_input(ins[0])


def run(op_type: str, inputs: Sequence[torch.Tensor | None], attrs: Mapping[str, Any],
        out: torch.Tensor | None = None, consts: Sequence[tuple[int, torch.Tensor]] = ()) -> torch.Tensor:
    """Compute ``op_type`` on CPU tensors ``inputs`` (None: an omitted optional input); the
    result is ``out`` when given and of the result's shape and dtype (written in place), else a
    new CPU tensor in the layout ATen gives it (``_layout``: a conv's result is channels-last for a
    channels-last input or weight, contiguous for contiguous ones).
    ``consts``: (input index, the npu tensor it views) for inputs to bind as constants. Errors are
    GE's single-op errors (``UnsupportedOpError``, ``ShapeError``, ``KernelError``) naming the op."""
    ins = [None if t is None else t.numpy() for t in inputs]
    if out is not None and op_type not in _NO_OVERLAP_CHECK:
        check_no_partial_overlap(out.numpy(), ins)
    ckeys = tuple((i, _const_key(t)) for i, t in consts)
    key = _key(op_type, ins, attrs, ckeys)
    counters["calls"] += 1
    h = _handles.get(key)
    state = _state(op_type, consts)
    if h is not None and not _current(h, state):
        h = None
    if h is None:
        from pycann.ge.run.singleop import run_op

        res = _array(run_op(op_type, ins, attrs)[0])
        want = _layout.expected(op_type, ins, res.shape, res.itemsize)
        _invalidate_written(ins, consts)
        kernel, out_kernel, full, bound = _bind(op_type, ins, attrs, res, [i for i, _ in consts], want)
        if len(_handles) >= _MAX_HANDLES:
            _handles.clear()
        if want is not None:
            res = _layout.conform(res, want)
        result = torch.from_numpy(res)
        # the handle goes when a bound tensor dies: its packed copy (a conv's weight) must not outlive the model
        owners = tuple(weakref.ref(_owner(t), functools.partial(_drop, key)) for _, t in consts)
        _handles[key] = _Handle(kernel, out_kernel, full, owners, state, bound, tuple(result.shape), result.dtype,
                                want, _pre(op_type, kernel, bound, full, ins))
        counters["binds"] += bound
        return _into(result, out)
    if h.bound:
        counters["bound_calls"] += 1
    elif h.out_kernel is not None and out is not None and out.dtype == h.out_dtype \
            and tuple(out.shape) == h.out_shape and (out.is_contiguous() or _same_view(out, inputs[0])):
        # relu_, add_ and .out overloads: the kernel writes the destination itself (no temporary)
        h.out_kernel(ins, h.attrs, [out.numpy()])
        return out
    return _into(torch.from_numpy(compute(h, ins)), out)


def compute(h: _Handle, ins: list[np.ndarray | None]) -> np.ndarray:
    """Run handle ``h``'s kernel on ``ins`` (numpy views; input 0 may be replaced by its converted
    copy, ``_Handle.pre``): its result as an array torch can view, in ATen's layout (``_Handle.want``)."""
    if h.pre is not None:
        ins[0] = h.pre(ins[0])
    res = _array(h.kernel(ins, h.attrs)[0])
    want = h.want
    if want is not None and res.strides != want:
        res = _layout.conform(res, want)
    return res


def handle(op_type: str, ins: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
           consts: Sequence[tuple[int, torch.Tensor]] = ()) -> _Handle | None:
    """The handle ``run`` holds for this signature (the same arguments as ``run``'s, ``ins`` as
    numpy views), or None when it holds none or a stale one (a constant written, re-pointed or
    dead since)."""
    h = _handles.get(_key(op_type, ins, attrs, tuple((i, _const_key(t)) for i, t in consts)))
    return h if h is not None and _current(h, _state(op_type, consts)) else None


def _current(h: _Handle, state: tuple[Any, ...]) -> bool:
    """Whether handle ``h`` still holds for constants in ``state``: none was written or re-pointed
    since it was bound, and none died (its id may now name another tensor)."""
    return h.state == state and all(r() is not None for r in h.owners)


def _dense(a: np.ndarray) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: the elements fill one block of memory, in some
    order of the dimensions."""
    dims = sorted((abs(st), n) for st, n in zip(a.strides, a.shape) if n != 1)
    expect = a.itemsize
    for st, n in dims:
        if st != expect:
            return False
        expect *= n
    return True


def check_no_partial_overlap(out: np.ndarray, ins: Sequence[np.ndarray | None]) -> None:
    """Raise PyTorch's error when the written-to array ``out`` partially overlaps an input
    (ATen's ``assert_no_partial_overlap`` in TensorIterator: ``torch.add(a, a.t(), out=a)``): the
    kernel would read elements it has already written. The same view (``x.add_(y)``'s ``x``) is
    allowed; so are arrays whose layouts are too hard to tell (not dense), as in ATen."""
    if not out.size:
        return
    lo = out.__array_interface__["data"][0]
    hi = lo + out.size * out.itemsize
    dense = None
    for a in ins:
        if a is None or not a.size:
            continue
        b_lo = a.__array_interface__["data"][0]
        b_hi = b_lo + a.size * a.itemsize
        if b_lo >= hi or lo >= b_hi:
            continue  # disjoint
        if b_lo == lo and b_hi == hi and a.strides == out.strides and a.shape == out.shape:
            continue  # the same elements in the same order: an in-place op
        if dense is None:
            dense = _dense(out)
        if dense and _dense(a):
            raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                               "refer to a single memory location. Please clone() the tensor before performing the "
                               "operation.")


def _same_view(out: torch.Tensor, x: torch.Tensor | None) -> bool:
    """``out`` is input ``x`` itself (an in-place op such as ``relu_`` on a channels-last tensor:
    the elementwise kernel writes any layout)."""
    return x is not None and out.data_ptr() == x.data_ptr() and out.stride() == x.stride()


def _array(a: Any) -> np.ndarray:
    """``a`` as a writable array torch can view: a 0-d result stays 0-d (``np.ascontiguousarray``
    would make it 1-d); a read-only or negatively strided one is copied."""
    a = np.asarray(a)
    if a.flags.writeable and all(s >= 0 for s in a.strides):
        return a
    return np.array(a, copy=True)


def _into(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None or out.shape != result.shape or out.dtype != result.dtype:
        return result
    if out.data_ptr() != result.data_ptr():
        out.copy_(result)
    return out


def clear() -> None:
    """Drop the cached handles (and with them the packed weights they hold), and the fast path's
    recorded calls, which hold handles too."""
    from pycann.torch import _fastpath  # (it builds on this module)

    _handles.clear()
    _fastpath.clear()
    epoch[0] += 1
