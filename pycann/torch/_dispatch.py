"""The npu device's kernels: one boxed Python kernel for every ATen op on PrivateUse1.

``install()`` registers ``_kernel`` as PrivateUse1's fallback (``torch.library.Library.fallback``,
the boxed mechanism torch_npu's C++ ``npu_cpu_fallback`` uses). For each call it looks the op up
in ``optable`` (cached per ``OpOverload``) and

* META ops: redispatches to PyTorch's CPU kernel with the npu tensors themselves (views share
  the storage, as a real device's view kernels do);
* allocation (``empty``, ``empty_strided``), copies (``_copy_from``) and ``resize_``: done here;
* the rest: npu tensor arguments become CPU tensors over the same memory (``_alias.to_cpu``), the
  op runs (pycann's op library for ``PYCANN_OPS``, else torch's CPU kernel), new results become
  npu tensors over their memory (``_alias.to_npu``), in-place / ``out=`` results are the npu
  arguments themselves (resized first when the kernel resized them).

Random ops without an explicit generator use the npu generator (``pycann.torch.npu.random``), so
``torch.npu.manual_seed`` and ``get_rng_state`` act on npu ops only, as in torch_npu.
"""

from __future__ import annotations

import functools
import re
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch

from pycann import config
from pycann.errors import PycannError
from pycann.torch import (
    _aliasing,
    _contiguous_args,
    _fastpath,
    _half_conv,
    _max_pool_backward,
    _pycann_ops,
    _rnn_cells,
    _sync_bn,
    _sync_debug,
    fallback,
)
from pycann.torch._alias import to_cpu, to_npu
from pycann.torch._memory_ops import (
    _copy_from,
    _copy_from_and_resize,
    _empty,
    _follow,
    _index_of,
    _resize,
    _to_copy,
    _zero_tensor,
)
from pycann.torch.optable import Provider, PycannOp, provider_of, pycann_op

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
_NPU = "npu"
_perf = time.perf_counter


@dataclass(frozen=True)
class _OpInfo:
    """What the kernel needs to know about one op overload, computed once."""

    name: str
    provider: Provider
    pycann: PycannOp | None
    arg_names: tuple[str, ...]
    kwarg_only: frozenset[str]
    device_arg: int  # index of a ``Device? device`` argument, or -1
    generator_arg: int  # index of a ``Generator? generator`` argument, or -1
    # for each return: the index of the argument it aliases with write (in-place / out=), or -1
    write_returns: tuple[int, ...]
    mutable_args: tuple[int, ...]
    special: Any  # the kernel of an allocation / copy / resize op, else None
    stats: dict[Provider, fallback.OpStat]  # this op's counters, per provider that served it
    # arguments whose schema type can hold an npu tensor or device (Tensor, Tensor?, Tensor[],
    # Device?, ...): only these are converted to host views; ints, floats, int[] pass as they are
    tensor_args: tuple[int, ...] = ()
    tensor_kwargs: frozenset[str] = frozenset()
    inplace: bool = False  # argument 0 is written and returned (``relu_``, ``add_.Tensor``)
    cross_device: bool = False  # takes CPU tensors beside npu ones (``_CROSS_DEVICE``): no device check
    # ``Tensor`` arguments (plain, not optional or lists): a wrapped number (``fmod.Scalar`` calls
    # ``fmod.Tensor`` with its Scalar as one) reaches the boxed kernel as a Python number
    plain_tensor_args: tuple[int, ...] = ()
    fast: _fastpath.OpCache = field(default_factory=_fastpath.OpCache)  # a pycann op's recorded signatures
    fused_optimizer: bool = False  # one of ``_FUSED_OPTIMIZERS``: its written npu tensors get a version bump
    # (info, args, kwargs) -> whether this call would synchronize on CUDA (``_sync_debug.SYNCING``), else None
    syncs: Any = None


_infos: dict[int, _OpInfo] = {}  # by id(): OpOverload.__hash__ is Python code, too slow per call
_keep: list[Any] = []


_PLAIN_TYPES = frozenset({"int", "SymInt", "float", "bool", "str", "number", "Scalar", "ScalarType", "Layout",
                          "MemoryFormat", "Generator"})
_WRAPPER = re.compile(r"^(?:Optional|List)\[(.*)\]$")


def _may_hold_tensor(type_str: str) -> bool:
    """Whether an argument of JIT schema type ``type_str`` ("Tensor", "Optional[Device]",
    "List[Optional[Tensor]]", "List[int]", ...) can be an npu tensor, a list of them or an npu
    device; plain types ("int", "Optional[List[int]]", "number", "Optional[Generator]") cannot."""
    base = type_str
    while (m := _WRAPPER.match(base)) is not None:
        base = m.group(1)
    return base not in _PLAIN_TYPES


def _info(op: Any) -> _OpInfo:
    info = _infos.get(id(op))
    if info is not None:
        return info
    schema = op._schema
    name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    args = schema.arguments
    sets: dict[str, int] = {}
    mutable = []
    for i, a in enumerate(args):
        if a.alias_info is not None and a.alias_info.is_write:
            mutable.append(i)
            for s in a.alias_info.before_set:
                sets[s] = i
    writes = []
    for r in schema.returns:
        idx = -1
        if r.alias_info is not None and r.alias_info.is_write:
            idx = next((sets[s] for s in r.alias_info.before_set if s in sets), -1)
        writes.append(idx)
    device_arg = next((i for i, a in enumerate(args) if a.name == "device"), -1)
    generator_arg = next((i for i, a in enumerate(args) if a.name == "generator"), -1)
    provider = provider_of(name, schema.name)
    special = _SPECIAL.get(schema.name)
    spec = pycann_op(name, schema.name)
    if spec is not None and (_kernels[0] or config.torch_kernels()) == "host":
        # PYCANN_TORCH_KERNELS=host: torch's kernels for the PYCANN_OPS too (read when an op is
        # first seen; use_kernels() changes it at run time)
        spec, provider = None, Provider.HOST
    tensorish = [i for i, a in enumerate(args) if _may_hold_tensor(str(a.type))]
    info = _OpInfo(name, provider, spec,
                   tuple(a.name for a in args), frozenset(a.name for a in args if a.kwarg_only),
                   device_arg, generator_arg, tuple(writes), tuple(mutable), special, {},
                   tuple(tensorish), frozenset(args[i].name for i in tensorish),
                   bool(mutable) and mutable[0] == 0 and not args[0].kwarg_only and writes[:1] == [0],
                   schema.name in _CROSS_DEVICE,
                   plain_tensor_args=tuple(i for i, a in enumerate(args) if str(a.type) == "Tensor"),
                   fused_optimizer=name.startswith(_FUSED_OPTIMIZERS), syncs=_sync_debug.SYNCING.get(schema.name))
    _infos[id(op)] = info
    _keep.append(op)  # ids stay valid: the overloads live as long as the process anyway
    return info


_kernels: list[str | None] = [None]  # use_kernels()' choice, over PYCANN_TORCH_KERNELS


def use_kernels(mode: str | None) -> None:
    """Choose who computes the ``optable.PYCANN_OPS`` ops from now on: ``"pycann"`` (pycann's op
    library through GE's single-op path) or ``"host"`` (torch's CPU kernels), over
    ``PYCANN_TORCH_KERNELS``; None: back to that variable. Forgets the per-op decisions made so far."""
    if mode not in ("host", "pycann", None):
        raise ValueError(f"use_kernels({mode!r}): expected 'host', 'pycann' or None")
    _kernels[0] = mode
    for key, info in list(_infos.items()):
        if info.pycann is not None or info.provider is Provider.HOST:
            del _infos[key]


def _is_npu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == _NPU


# CPU views of npu parameters (leaf tensors that require grad), by id(): weights are read by
# every forward pass. An entry is used only while the same tensor object has the same data
# pointer, sizes and strides (set_ / resize_ change those), so a stale view is never handed out,
# and it goes when the tensor object dies (a weakref callback). The view is made of a detached
# alias: a DLPack view of the parameter itself would hold its TensorImpl, which keeps the Python
# object alive (PyTorch preserves it), so neither would ever be freed. Other tensors
# (activations, read by the next op or two) get a fresh view per op: caching them kept each
# activation's memory alive, so every forward pass faulted in fresh pages.
_views: dict[int, tuple[Any, int, Any, Any, torch.Tensor]] = {}
_MAX_VIEWS = 8192


def _drop_view(key: int, ref: Any) -> None:
    e = _views.get(key)
    if e is not None and e[0] is ref:
        del _views[key]


def _cached_view(x: torch.Tensor) -> torch.Tensor:
    if not (x.requires_grad and x.is_leaf):
        return to_cpu(x)
    key = id(x)
    e = _views.get(key)
    if e is not None and e[0]() is x and e[1] == x.data_ptr() and e[2] == x.shape and e[3] == x.stride():
        return e[4]
    v = to_cpu(x.detach())
    if len(_views) >= _MAX_VIEWS:
        _views.clear()
    ref = weakref.ref(x, functools.partial(_drop_view, key))
    _views[key] = (ref, x.data_ptr(), x.shape, x.stride(), v)
    return v


def _down(x: Any, index: list[int], seen: list[Any]) -> Any:
    """npu tensors (also inside lists) -> CPU tensors over the same memory. ``seen`` collects what
    PyTorch's device rule looks at (``_device_error``), in this same pass: ``seen[0]`` the first
    CPU tensor that is not a 0-dim scalar, ``seen[1]`` the first npu tensor, ``seen[2]`` the first
    npu tensor on another npu device than ``seen[1]``."""
    if isinstance(x, torch.Tensor):
        if x.is_cpu:  # (C getters; x.device would build a device object per call)
            if seen[0] is None and x.dim() != 0:
                seen[0] = x
            return x
        if x.is_meta:
            return x
        if seen[1] is None:
            seen[1] = x
        elif seen[2] is None and x.get_device() != seen[1].get_device():
            seen[2] = x
        if not index:
            index.append(x.get_device())
        return _cached_view(x)
    if isinstance(x, (list, tuple)) and x and any(isinstance(e, torch.Tensor) for e in x):
        return type(x)(_down(e, index, seen) for e in x)
    if isinstance(x, torch.device) and x.type == _NPU:
        if not index:
            index.append(_index_of(x))
        return torch.device("cpu")
    return x


def _up(x: Any, index: int) -> Any:
    if isinstance(x, torch.Tensor):
        return to_npu(x, index) if x.is_cpu else x
    if isinstance(x, (list, tuple)):
        return type(x)(_up(e, index) for e in x)
    return x


def _npu_generator(index: int) -> torch.Generator:
    from pycann.torch.npu import random as npu_random

    return npu_random.generator(index)


# Random ops whose schema has no generator argument: their CPU kernels draw from the CPU default
# generator, so they run with its state swapped for the npu generator's (seeded by
# torch.npu.manual_seed, and leaving the CPU generator's stream untouched).
_IMPLICIT_RNG = frozenset({"aten::native_dropout"})


def _with_npu_rng(op: Any, index: int, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    gen = _npu_generator(index)
    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(gen.get_state())
    try:
        return op._op(*args, **kwargs)
    finally:
        gen.set_state(cpu.get_state())
        cpu.set_state(saved)


def _stat(info: _OpInfo, provider: Provider) -> fallback.OpStat:
    st = info.stats.get(provider)
    if st is None:
        st = info.stats.setdefault(provider, fallback.stat(info.name, provider))
    return st


def _kernel(op: Any, *args: Any, **kwargs: Any) -> Any:
    info = _infos.get(id(op)) or _info(op)
    if info.syncs is not None and _sync_debug.mode and info.syncs(info, args, kwargs):
        _sync_debug.report(info.name)
    t0 = _perf()
    provider = info.provider
    if provider is Provider.META:
        out = op.redispatch(_CPU_KEYS, *args, **kwargs)
    elif info.special is not None:
        out = info.special(op, *args, **kwargs)
    else:
        if provider is Provider.FALLBACK:
            fallback.on_fallback(info.name)
        out, provider = _compute(op, info, args, kwargs)
    st = info.stats.get(provider) or _stat(info, provider)
    st.calls += 1
    st.seconds += _perf() - t0
    return out


# train-mode batch norms (input, weight, bias, running_mean, running_var, training, ...): torch's
# kernel writes the running statistics without bumping their ``_version``, and it must stay so:
# NativeBatchNormBackward0 saved them, and a bump fails its backward ("modified by an inplace
# operation"). The write is counted instead (``_pycann_ops.stat_writes``), which the bound batch
# norms' constant state includes, and so do torch.compile's plans for npu statistics (frozen.py)
_UNVERSIONED_WRITES = frozenset({"aten::native_batch_norm", "aten::_native_batch_norm_legit"})


# the fused optimizer steps (``Adam(fused=True)``, ``AdamW``, ``SGD``, ``Adagrad``): PyTorch writes
# their parameters (and state) without bumping ``_version``, so the kernels' bound constants (a
# conv's packed weight, a Linear's B) and torch.compile's embedded weights would keep the values from
# before the step; their written npu tensors get the bump an in-place op (the foreach steps) gives
_FUSED_OPTIMIZERS = ("aten::_fused_adam", "aten::_fused_adamw", "aten::_fused_sgd", "aten::_fused_adagrad")


def _bump_written(info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    written: list[torch.Tensor] = []
    for i in info.mutable_args:
        v = args[i] if i < len(args) else kwargs.get(info.arg_names[i])
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if _is_npu(t) and not t.is_inference():
                written.append(t)
    if written:
        torch._C._increment_version(written)


_NUMBERS = (bool, int, float, complex)


_EXACT = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def _category(dtype: torch.dtype) -> int:
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 0 if dtype == torch.bool else 1


def _category_of(v: Any) -> int:
    return 3 if isinstance(v, complex) else 2 if isinstance(v, float) else 0 if isinstance(v, bool) else 1


def _wrap_numbers(info: _OpInfo, cargs: list[Any], ckw: dict[str, Any]) -> None:
    """Python numbers in ``Tensor`` arguments -> 0-dim CPU tensors. ATen's Scalar overloads
    (``fmod.Scalar``, ``remainder.Scalar``, ``bitwise_and.Scalar``, ``xlogy.OtherScalar``, ...) call
    the Tensor overload with a wrapped-number tensor, which the boxed fallback receives as a Python
    number; calling the overload back with it fails ("Unable to cast 3 to Tensor") except for the few
    ops PyTorch's binding lets take numbers (add, mul, ...). The tensor gets the dtype the wrapped
    number would have promoted to (``torch.result_type``), so the result dtype is ATen's."""
    names = info.arg_names
    slots = [(i, cargs[i] if i < len(cargs) else ckw.get(names[i])) for i in info.plain_tensor_args]
    if not any(isinstance(v, _NUMBERS) for _, v in slots):
        return
    tensors = [v for _, v in slots if isinstance(v, torch.Tensor)]
    ref = tensors[0] if tensors else None
    # the highest category (bool < int < float < complex) of the tensors with dimensions
    top = max((_category(t.dtype) for t in tensors if t.dim() > 0), default=-1)
    for i, v in slots:
        if isinstance(v, _NUMBERS):
            if _category_of(v) <= top:
                # a 0-dim tensor of no higher category than a dimensioned operand does not take part
                # in type promotion, so the number keeps its exact value (a wrapped number is int64 /
                # double): -3 with a uint8 tensor is not 253, 1e5 with a float16 one not inf
                t = torch.tensor(v, dtype=_EXACT[type(v)])
            else:
                t = torch.tensor(v, dtype=torch.result_type(ref, v) if ref is not None else None)
            if i < len(cargs):
                cargs[i] = t
            else:
                ckw[names[i]] = t


def _compute(op: Any, info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Provider]:
    spec = info.pycann
    if spec is not None:
        fast = _fastpath.run(info.fast, args, kwargs)  # a signature served before (_fastpath)
        if fast is not None:
            return fast, info.provider
    index: list[int] = []
    seen: list[Any] = [None, None, None]
    cargs = list(args)
    n = len(cargs)
    for i in info.tensor_args:
        if i < n:
            cargs[i] = _down(cargs[i], index, seen)
    tk = info.tensor_kwargs
    ckw = {k: (_down(v, index, seen) if k in tk else v) for k, v in kwargs.items()} if kwargs else {}
    if seen[0] is not None and seen[1] is not None and not info.cross_device:
        # the CPU kernels below would accept the CPU tensor: PyTorch's device check is a device
        # kernel's (TensorIterator's, cat's), so it is made here, for out= / in-place forms too
        _device_error(info, seen[1])
    if seen[2] is not None and not info.cross_device and not info.name.startswith("aten::_foreach_"):
        # (a foreach op's lists may span devices: each pair of elements shares one, as on CUDA)
        _device_error(info, seen[1], seen[2])
    dev = index[0] if index else 0
    gen = info.generator_arg
    if gen >= 0:
        name = info.arg_names[gen]
        if gen < len(cargs) and cargs[gen] is None:
            cargs[gen] = _npu_generator(dev)
        elif gen >= len(cargs) and ckw.get(name) is None:
            ckw[name] = _npu_generator(dev)
    provider = info.provider
    done = False
    if spec is not None and spec.accepts(cargs, ckw) and _out_dtype_fits(info, spec, cargs, ckw) \
            and not _aliasing.internal_overlap(cargs[0] if info.inplace else ckw.get("out")):
        if info.inplace:
            dst = cargs[0]  # relu_, add_: the result goes back into self
        else:
            dst = ckw.get("out")
            dst = dst if isinstance(dst, torch.Tensor) else None
        consts: tuple[tuple[int, torch.Tensor], ...] = ()
        if spec.consts:  # the npu tensors themselves: their identity and version key the binding
            npu_ins = spec.inputs(args)
            # (not an inference tensor: it has no version counter, so a write to it could not be seen)
            consts = tuple((i, npu_ins[i]) for i in spec.consts
                           if i < len(npu_ins) and isinstance(npu_ins[i], torch.Tensor)
                           and not npu_ins[i].is_inference())
        try:
            res = _pycann_ops.run(spec.op_type, spec.inputs(cargs), spec.attrs(cargs), dst, consts)
            done = True
        except PycannError:
            # pycann's op refused the arguments (a conv's channels, a matmul's inner dims) with an
            # error naming ONNX nodes and outside RuntimeError: torch's kernel below raises torch's
            # own (or computes what pycann's op refused but torch accepts)
            pass
    if done and spec is not None:
        if dst is not None and res is not dst and not info.inplace:
            # an out= tensor of another shape: resized as ATen's resize_output does (its memory kept
            # when large enough, so the base of an out view sees the write, as on CPU), then written
            npu_out = kwargs["out"]
            _resize(npu_out, list(res.shape))
            ckw["out"] = to_cpu(npu_out)
            ckw["out"].copy_(res)
        if dst is None or info.inplace or (args and kwargs.get("out") is args[0]):
            _fastpath.record(info.fast, spec, args, kwargs, info.inplace, consts, dev)
        out: Any = res if spec.result is None else spec.result(res, cargs)
    else:
        if provider is Provider.PYCANN:
            provider = Provider.HOST
        if info.plain_tensor_args:
            _wrap_numbers(info, cargs, ckw)
        if info.name in _contiguous_args.ARGS:  # (torch's kernel ignores these arguments' strides)
            _contiguous_args.fix(info.name, cargs)
        if info.mutable_args:  # (operands sharing the written memory: one host storage, for ATen's checks)
            _aliasing.rebase(info.mutable_args, info.arg_names, args, kwargs, cargs, ckw)
        for i in info.mutable_args:
            # an empty out= tensor is resized by the kernel: give it resizable host memory
            name = info.arg_names[i]
            if name in info.kwarg_only and isinstance(ckw.get(name), torch.Tensor) and ckw[name].numel() == 0:
                ckw[name] = torch.empty(0, dtype=ckw[name].dtype)
        try:
            if info.mutable_args and "out" in ckw:
                # ATen's functional forms of some ops (mse_loss) pass out= tensors they sized to
                # [] themselves; the CPU kernel resizes them with a deprecation warning that is
                # torch's, not the user's: keep it quiet
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
                    out = op._op(*cargs, **ckw)
            elif info.name in _IMPLICIT_RNG:
                out = _with_npu_rng(op, dev, cargs, ckw)
            elif info.name in _half_conv.OPS and (half := _half_conv.half_dtype(cargs[:3])) is not None:
                out = _half_conv.run(op, half, cargs, ckw)  # (torch's half convs: wrong or crashing)
            elif info.name in _max_pool_backward.OPS:  # (torch's writes past the gradient for some windows)
                out = _max_pool_backward.run(op, _max_pool_backward.OPS[info.name], cargs, ckw)
            else:
                out = op._op(*cargs, **ckw)
        except RuntimeError as e:
            if "not resizable" not in str(e) or not info.mutable_args:
                raise
            for i in info.mutable_args:  # an out= tensor of the wrong size: the same, then retry
                name = info.arg_names[i]
                if name in info.kwarg_only and isinstance(ckw.get(name), torch.Tensor):
                    ckw[name] = torch.empty(0, dtype=ckw[name].dtype)
            out = op._op(*cargs, **ckw)
    if info.name in _UNVERSIONED_WRITES and len(args) > 5 and args[5]:  # training: the statistics were written
        _pycann_ops.stat_writes[0] += 1
    if info.fused_optimizer:
        _bump_written(info, args, kwargs)
    if not info.mutable_args:
        return _up(out, dev), provider
    # in-place / out=: the npu arguments are the results; follow a resize the kernel made
    for i in info.mutable_args:
        orig = args[i] if i < len(args) else kwargs.get(info.arg_names[i])
        new = cargs[i] if i < len(cargs) else ckw.get(info.arg_names[i])
        if isinstance(orig, torch.Tensor) and _is_npu(orig) and isinstance(new, torch.Tensor) and (
                new.shape != orig.shape or new.data_ptr() != orig.data_ptr() or new.stride() != orig.stride()):
            _follow(orig, new)
    outs = out if isinstance(out, tuple) else (out,)
    fixed = []
    for j, o in enumerate(outs):
        w = info.write_returns[j] if j < len(info.write_returns) else -1
        if w >= 0:
            fixed.append(args[w] if w < len(args) else kwargs.get(info.arg_names[w]))
        else:
            fixed.append(_up(o, dev))
    return (tuple(fixed) if isinstance(out, tuple) else fixed[0]), provider


def _out_dtype_fits(info: _OpInfo, spec: PycannOp, cargs: Sequence[Any], ckw: dict[str, Any]) -> bool:
    """Whether an ``out=`` tensor has the dtype pycann's op computes (its inputs'): ATen casts its
    result into an out tensor of another dtype (``torch.exp(x, out=half)``), pycann's op writes its
    own; the npu out tensor took the float32 result's memory, reading its bytes as float16 (wrong
    values), as float64 (a storage error) or failing on bfloat16. Such calls take torch's kernel."""
    out = ckw.get("out")
    if info.inplace or not isinstance(out, torch.Tensor):
        return True
    first = next((t for t in spec.inputs(cargs) if isinstance(t, torch.Tensor)), None)
    return first is None or out.dtype == first.dtype


# ops that take CPU tensors beside device ones in PyTorch (indices, a copy's source)
_CROSS_DEVICE = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
                           "aten::copy_", "aten::set_", "aten::_local_scalar_dense", "aten::equal"})


def _device_error(info: _OpInfo, npu: torch.Tensor, other: torch.Tensor | None = None) -> NoReturn:
    """PyTorch's device rule, as CUDA (and torch_npu) enforce it: an op on npu tensors takes no CPU
    tensor but a 0-dim one (a scalar; ``_down`` finds both in its pass). Raises RuntimeError with
    PyTorch's message, so code that mixes devices fails here as it would on a real NPU instead of
    silently running."""
    if other is not None:  # two npu devices
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"npu:{npu.get_device()} and npu:{other.get_device()}! (in {info.name})")
    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                       f"npu:{npu.get_device()} and cpu! (in {info.name}; move the CPU tensor with .npu() "
                       f"or .to(device))")


_SPECIAL: dict[str, Any] = {
    "aten::empty": _empty,
    "aten::empty_strided": _empty,
    "aten::_copy_from": lambda op, *a, **k: _copy_from(*a, **k),
    "aten::_copy_from_and_resize": lambda op, *a, **k: _copy_from_and_resize(*a, **k),
    "aten::resize_": lambda op, *a, **k: _resize(*a, **k),
    "aten::_to_copy": _to_copy,
    "aten::_efficientzerotensor": lambda op, *a, **k: _zero_tensor(*a, **k),
    **_rnn_cells.KERNELS,  # (the fused LSTM / GRU cells: CUDA-only ops ATen calls for PrivateUse1 too)
    **_sync_bn.KERNELS,  # (nn.SyncBatchNorm's statistics ops: CUDA-only too)
}

# Ops that get the kernel registered for PrivateUse1 by name rather than through the fallback:
# those whose CompositeExplicitAutograd kernel would win over a fallback and end in a "not
# implemented for this backend" stub (convolution -> convolution_overrideable), and the
# functional forms of hot structured ops, which would otherwise reach the device as two calls
# (an ``empty`` for the result, then the ``.out`` overload).
EXPLICIT_OPS = (
    "convolution.default", "convolution_backward.default",
    "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum.default", "minimum.default",
    "mm.default", "bmm.default", "addmm.default", "mean.dim", "sum.dim_IntList", "max_pool2d_with_indices.default",
    "sigmoid.default", "tanh.default", "exp.default", "log.default", "sqrt.default", "rsqrt.default",
    "neg.default", "abs.default", "_softmax.default", "_log_softmax.default", "gelu.default", "silu.default",
    "threshold_backward.default", "native_layer_norm.default", "clamp_min.default", "pow.Tensor_Scalar",
    "where.self", "erf.default", "reciprocal.default", "_to_copy.default",
    "native_group_norm.default",  # (its CompositeExplicitAutograd kernel views a channels-last input: raised)
)

_libraries: list[torch.library.Library] = []


def _named_kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _kernel(op, *args, **kwargs)

    return kernel


def install() -> None:
    """Register the kernel for PrivateUse1 (once per process)."""
    if _libraries:
        return
    lib = torch.library.Library("_", "IMPL")  # noqa: TOR901 - a backend fallback, not an op library
    lib.fallback(_kernel, dispatch_key="PrivateUse1")
    aten = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - backend kernels for ATen ops
    for qual in EXPLICIT_OPS:
        packet, overload = qual.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        aten.impl(packet if overload == "default" else qual, _named_kernel(op), "PrivateUse1")
    # copies of a lazy conjugate / negative view (``c.conj()``, ``c.conj().imag``) reach the device
    # as ``_copy_from``, which the Conjugate / Negative fallbacks would first resolve (a clone: a
    # copy, so ``_copy_from`` again: unbounded recursion that killed the process on
    # ``c.conj().cpu()``, ``c.conj() * 2``, ``torch.fft.hfft``). They pass through: the kernel
    # copies from a host view that keeps the bits, and torch's CPU copy_ applies them.
    for key in ("Conjugate", "Negative"):
        for name in ("_copy_from", "_copy_from_and_resize"):
            aten.impl(name, torch.library.fallthrough_kernel, key)
    _libraries.extend([lib, aten])
