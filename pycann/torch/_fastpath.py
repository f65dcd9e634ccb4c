"""The second and later calls of an eager pycann op with the same signature, without the general path.

``_dispatch._compute`` serves an op on pycann's op library (``optable.PYCANN_OPS``) in steps that
each cost a few microseconds of Python: every argument made a host view, the device rule, the
entry's ``accepts`` / ``inputs`` / ``attrs``, the binding key built from numpy views
(``_pycann_ops``), the constants' views made again each call. An eager ResNet-50 makes ~170 such
calls a pass, and the time between its kernels decides whether the torch pool's worker is still
spinning when the next one starts (docs/torch.md, "Performance").

After a call has gone that way, ``record`` keeps what it decided under the call's *signature*:
for each argument its dtype, sizes and strides (a tensor), its value (anything else), and for
the arguments bound as constants (a conv's weight, a batch norm's statistics) the tensor's
identity instead, with its data pointer and version as the *state* the binding was made from;
and the first tensor's device index and torch's thread count.
Everything the general path decides (whether the entry accepts the call, the op's inputs and
attributes, the kernel) is a function of exactly that, so a later call with the same signature
and state (``run``) only makes host views of its run-time tensors, runs the bound kernel and
wraps the result. Any difference -- a CPU tensor (the device rule), a tensor in a list or an
``out=`` argument (but ``out=`` the first argument itself: ``x.add_(y)``), an inference tensor as a constant (no version counter), another shape, a
constant written in place or re-pointed -- takes the general path, which records anew (the new
entry replaces the old one: one per signature, so the old packed weights go).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pycann.torch import _pycann_ops
from pycann.torch._alias import to_cpu, to_npu
from pycann.torch.optable import PycannOp

_threads = torch.get_num_threads
_OUT_SELF = ("out", "self")
_PLAIN = (int, float, bool)
_MAX_CALLS = 256  # signatures kept per op overload (a model that feeds ever new shapes just re-records)


@dataclass(frozen=True)
class FastCall:
    """One recorded signature: what its later calls need."""

    handle: Any  # _pycann_ops._Handle: the bound kernel, attributes, result shape
    state: tuple[Any, ...]  # the constants' (data pointer, version) when recorded
    template: tuple[np.ndarray | None, ...]  # the op's inputs: the constants' host views, None elsewhere
    dynamic: tuple[tuple[int, int], ...]  # (op input, ATen argument) of the run-time tensors
    into: int  # in-place ops: the op input that is the destination (argument 0), else -1
    result: Any  # PycannOp.result, or None
    index: int  # npu device index of the results
    owners: tuple[Any, ...]  # weak references to the constants' tensors (an entry dies with them)


class OpCache:
    """Per op overload: the ATen arguments bound as constants, and the recorded signatures."""

    __slots__ = ("const_args", "calls", "off", "stats", "__weakref__")

    def __init__(self) -> None:
        _caches.add(self)
        self.const_args: frozenset[int] | None = None  # None: nothing recorded yet
        self.calls: dict[tuple[Any, ...], FastCall] = {}
        self.off = False  # this op's arguments cannot be mapped to its inputs: always the general path
        self.stats = False  # a batch norm: its state includes the train-mode batch norms' count


_caches: weakref.WeakSet[OpCache] = weakref.WeakSet()  # every op's cache (``clear``)


def clear() -> None:
    """Forget every recorded call (``torch.npu.empty_cache``, ``_pycann_ops.clear``)."""
    for cache in list(_caches):
        cache.calls.clear()


def signature(cache: OpCache, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """(signature, constants' state) of a call, or None when only the general path may serve it."""
    consts = cache.const_args
    if consts is None:
        return None
    # the thread count too: a kernel bound at one is not reused at another (``_pycann_ops._key``)
    sig: list[Any] = [_threads()]
    state: list[Any] = []
    first = True
    dev = -1
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.is_cpu or a.is_meta:
                return None  # the device rule and CPU scalars: the general path's
            if first:
                dev = a.get_device()
                sig.append(dev)
                first = False
            elif a.get_device() != dev:
                return None  # two npu devices: the general path's device rule
            if i in consts:
                try:
                    state.append((a.data_ptr(), a._version))
                except RuntimeError:  # an inference tensor: no version counter
                    return None
                sig.append((id(_pycann_ops._owner(a)), a.dtype, a.shape, a.stride()))
            else:
                sig.append((a.dtype, a.shape, a.stride()))
        elif type(a) is list or type(a) is tuple:
            # int[] / float[] (a conv's strides, pads): a schema list holds one type, so its first
            # element says; Tensor[] / Tensor?[] take the general path
            if a and type(a[0]) not in _PLAIN:
                for e in a:
                    if isinstance(e, torch.Tensor):
                        return None
            sig.append(tuple(a))
        else:
            sig.append(a)
    if kwargs:
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                if k == "out" and args and v is args[0]:
                    sig.append(_OUT_SELF)  # ``x.add_(y)`` reaches the device as ``add.out(x, y, out=x)``
                    continue
                return None  # another out= (and any tensor keyword): the general path
            sig.append((k, tuple(v) if type(v) is list else v))
    if cache.stats:  # train-mode batch norms write statistics without a version bump (``_pycann_ops._state``)
        state.append(_pycann_ops.stat_writes[0])
    return tuple(sig), tuple(state)


def run(cache: OpCache, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The op's result (npu tensors; argument 0 for an in-place op) when this call's signature
    and constants' state were recorded, else None (the caller takes the general path)."""
    if cache.off:
        return None
    ss = signature(cache, args, kwargs)
    if ss is None:
        return None
    try:
        fc = cache.calls.get(ss[0])
    except TypeError:  # an argument value that cannot be a key (a nested list): the general path
        return None
    if fc is None or fc.state != ss[1]:
        return None
    ins = list(fc.template)
    for j, k in fc.dynamic:
        ins[j] = to_cpu(args[k]).numpy()
    h = fc.handle
    counters = _pycann_ops.counters
    counters["calls"] += 1
    if fc.into >= 0:
        dst = ins[fc.into]
        for j, k in fc.dynamic:
            if j != fc.into and args[k] is not args[0] and np.may_share_memory(ins[j], dst):
                return None  # an input overlapping the destination (``a.add_(a.t())``): the general path's rules
        h.out_kernel(ins, h.attrs, [dst])
        return args[0]
    if h.bound:
        counters["bound_calls"] += 1
    y = torch.from_numpy(_pycann_ops.compute(h, ins))
    if fc.result is None:
        return to_npu(y, fc.index)
    out = fc.result(y, args)
    if isinstance(out, tuple):
        return tuple(to_npu(o, fc.index) if isinstance(o, torch.Tensor) else o for o in out)
    return to_npu(out, fc.index)


@dataclass(frozen=True)
class _Arg:
    """Stands for tensor argument ``index`` while ``record`` maps an op's inputs to its arguments."""

    index: int


def _drop(cache: OpCache, sig: tuple[Any, ...], ref: Any) -> None:
    fc = cache.calls.get(sig)
    if fc is not None and any(r is ref for r in fc.owners):
        del cache.calls[sig]


def record(cache: OpCache, spec: PycannOp, args: Sequence[Any], kwargs: dict[str, Any], inplace: bool,
           consts: Sequence[tuple[int, torch.Tensor]], index: int) -> None:
    """Keep what the general path just decided for this call (``spec`` accepted it and
    ``_pycann_ops.run`` computed it), so that ``run`` serves its signature from now on.
    ``consts``: (op input, npu tensor) bound as constants; ``index``: the results' device."""
    if cache.off:
        return
    npu_ins = spec.inputs(args)
    # which argument each input is: by position, not identity (``mul(t, t)`` passes one tensor
    # twice, and the next call's two arguments may differ), found by giving ``inputs`` markers
    # in place of the tensors (it only picks arguments out, and tests None)
    where: list[int] = []
    for m in spec.inputs([_Arg(i) if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]):
        if m is None:
            where.append(-1)
        elif isinstance(m, _Arg):
            where.append(m.index)
        else:  # an input that is not an argument itself: nothing to map it to
            cache.off = True
            return
    const_args = frozenset(where[j] for j, _ in consts)
    if cache.const_args is None:
        cache.const_args = const_args
    elif not const_args <= cache.const_args:
        # more constant arguments than the op's calls so far (a conv's bias after bias-free convs):
        # the union. The signatures recorded before held no tensor at the new ones (a None bias
        # stays the value None), or an inference tensor, which no call matches any more
        cache.const_args = cache.const_args | const_args
    cache.stats = spec.op_type == "BatchNormalization"
    ss = signature(cache, args, kwargs)
    if ss is None:
        return
    sig, state = ss
    try:
        fc = cache.calls.get(sig)
    except TypeError:  # an unhashable argument value
        return
    if fc is not None and fc.state == state:
        return  # recorded already (``run`` declined this call for its own reason)
    const_at = {j for j, _ in consts}
    # the constants' host views of *detached* aliases: a view of the tensor itself would hold its
    # TensorImpl and so keep the Python object (and this entry) alive for good
    template = tuple(to_cpu(t.detach()).numpy() if j in const_at and isinstance(t, torch.Tensor) else None
                     for j, t in enumerate(npu_ins))
    ins = [t if t is not None else (to_cpu(npu_ins[j]).numpy() if npu_ins[j] is not None else None)
           for j, t in enumerate(template)]
    h = _pycann_ops.handle(spec.op_type, ins, spec.attrs(args), consts)
    if h is None:
        return
    into = -1
    if inplace or _OUT_SELF in sig:
        into = where.index(0) if 0 in where else -1
        dst = args[0]
        if into < 0 or h.out_kernel is None or dst.dtype != h.out_dtype or tuple(dst.shape) != h.out_shape:
            return  # an in-place call the general path served through a copy: keep it there
    dynamic = tuple((j, k) for j, k in enumerate(where) if k >= 0 and j not in const_at)
    if len(cache.calls) >= _MAX_CALLS:
        cache.calls.clear()
    owners = tuple(weakref.ref(_pycann_ops._owner(t), functools.partial(_drop, cache, sig)) for _, t in consts)
    cache.calls[sig] = FastCall(h, state, template, dynamic, into, spec.result, index, owners)
