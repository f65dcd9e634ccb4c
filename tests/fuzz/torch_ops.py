"""Random torch op calls for the npu differential fuzzer (``test_torch_ops_fuzz.py``).

A builder draws one call with hypothesis (``Draw``: every parameter is a labelled draw, so the
falsifying example names them) and returns a ``Case``: its tensor arguments (a base tensor plus an
optional view: transposed, strided, offset, channels-last or expanded, so kernels see
non-contiguous inputs), the call itself as a function of those arguments (a closure over the drawn
parameters: nothing is drawn inside it), and whether gradients are compared. Values come from a
``torch.Generator`` seeded by a drawn seed. Shapes include size-1 and (one time in ten) zero-size
dims. Parameters are drawn in and out of their valid ranges: where CPU torch raises, the npu must
raise too. The op families live in ``torch_ops_nn.py`` (conv, pooling, norms, interpolate, linear
algebra) and here (elementwise, reductions, indexing, shape plumbing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
ALL = FLOATS + INTS + (torch.bool,)
LAYOUTS = ("contiguous", "contiguous", "contiguous", "transposed", "strided", "offset", "channels_last",
           "expanded")


@dataclass
class Arg:
    """A tensor argument: ``view(base)`` is what the op gets; ``base`` is the leaf whose values (an
    in-place op's write) and gradient are compared."""

    base: torch.Tensor
    view: Callable[[torch.Tensor], torch.Tensor] | None = None
    grad: bool = False

    def make(self, device: str, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(leaf on ``device``, the view the op gets); the leaf requires grad when ``grad`` and this
        argument is differentiable."""
        leaf = self.base.detach().clone().to(device)
        if grad and self.grad:
            leaf.requires_grad_(True)
        return leaf, (self.view(leaf) if self.view is not None else leaf)


@dataclass
class Case:
    """One drawn call: ``fn(*views)`` on CPU and on npu must agree."""

    op: str
    args: list[Arg]
    fn: Callable[..., Any]
    params: dict[str, Any] = field(default_factory=dict)
    grad: bool = False
    # a float16 / bfloat16 convolution: CPU torch's own half conv crashes the process (SIGSEGV) on
    # some degenerate geometries, so the golden is the float32 conv of the same values, rounded
    upcast: bool = False
    # CPU torch refuses the call in a CPU-only kernel that a device takes another route around (an
    # integer max_pool1d: CPU's max_pool1d_impl has no integer kernel, a device's max_pool2d_with_indices
    # does): the npu may compute it
    cpu_only_refusal: bool = False


class Draw:
    """hypothesis draws with labels (recorded in ``params``) and a seeded generator for values."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.params: dict[str, Any] = {}
        self.trace: list[Any] = []  # every drawn value in order (``Replay`` draws them again)
        self.gen = torch.Generator().manual_seed(self(st.integers(0, 2**32 - 1), "seed"))

    def __call__(self, strategy: st.SearchStrategy[Any], label: str) -> Any:
        v = self.data.draw(strategy, label=label)
        self.params[label] = v
        self.trace.append(v)
        return v

    def int(self, lo: int, hi: int, label: str) -> int:
        return int(self(st.integers(lo, hi), label))

    def pick(self, seq: Sequence[Any], label: str) -> Any:
        return self(st.sampled_from(list(seq)), label)

    def dtype(self, label: str, floats: bool = False) -> torch.dtype:
        """float32 most often, then the half types, then the integer types and bool (only floats:
        ``floats``)."""
        choices = [torch.float32, torch.float32, torch.float16, torch.bfloat16]
        return self.pick(choices if floats else choices + [torch.float32, *INTS, torch.bool], label)

    def flag(self, label: str) -> bool:
        return bool(self(st.booleans(), label))

    def float(self, lo: float, hi: float, label: str) -> float:
        return float(self(st.floats(lo, hi, allow_nan=False, width=32), label))

    def shape(self, lo: int, hi: int, label: str, zero: bool = True, top: int = 5) -> list[int]:
        """``lo``..``hi`` dims of 1..``top``, size 1 often; one dim 0 one time in ten (``zero``); one
        time in ten, one dim of 17-130 (a kernel's vectorised body and its tail)."""
        dims = self(st.lists(st.sampled_from([1, 1, 2, 3, 4, top]), min_size=lo, max_size=hi), label)
        if dims and self.int(0, 9, label + ".long") == 0:
            dims[self.int(0, len(dims) - 1, label + ".long_dim")] = self.pick([17, 33, 64, 130], label + ".length")
        if zero and dims and self.int(0, 9, label + ".zero") == 0:
            dims[self.int(0, len(dims) - 1, label + ".zero_dim")] = 0
        return list(dims)

    def values(self, shape: Sequence[int], dtype: torch.dtype, lo: int = -4, hi: int = 5,
               special: bool = True, scale: float = 1.0) -> torch.Tensor:
        """Random values of ``dtype``: normal floats (a NaN / inf among them one time in twenty
        when ``special``), integers in ``[lo, hi)``, bools."""
        shape = list(shape)
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=self.gen) * scale
            if special and t.numel() and self.int(0, 19, "special") == 0:
                flat = t.view(-1)
                k = int(torch.randint(0, flat.numel(), (1,), generator=self.gen))
                flat[k] = self.pick([float("nan"), float("inf"), float("-inf")], "special_value")
            return t.to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=self.gen).bool()
        return torch.randint(lo, hi, shape, generator=self.gen).to(dtype)

    def arg(self, shape: Sequence[int], dtype: torch.dtype, label: str, grad: bool = False,
            layout: bool = True, writable: bool = False, **kw: Any) -> Arg:
        """A tensor argument of ``shape``, maybe a non-contiguous view (``LAYOUTS``; not an expanded
        one when the op writes it: ``writable``)."""
        shape = list(shape)
        kind = self.pick(LAYOUTS, label + ".layout") if layout else "contiguous"
        g = grad and dtype.is_floating_point
        if kind == "transposed" and len(shape) >= 2:
            i, j = sorted(self(st.lists(st.integers(0, len(shape) - 1), min_size=2, max_size=2, unique=True),
                               label + ".swap"))
            bs = list(shape)
            bs[i], bs[j] = bs[j], bs[i]
            return Arg(self.values(bs, dtype, **kw), lambda t: t.transpose(i, j), g)
        if kind == "strided" and shape:
            ax = self.int(0, len(shape) - 1, label + ".step_axis")
            bs = list(shape)
            bs[ax] *= 2
            idx = (slice(None),) * ax + (slice(None, None, 2),)
            return Arg(self.values(bs, dtype, **kw), lambda t: t[idx], g)
        if kind == "offset" and shape:
            bs = [shape[0] + 1] + shape[1:]
            return Arg(self.values(bs, dtype, **kw), lambda t: t[1:], g)
        if kind == "channels_last" and len(shape) in (4, 5):
            fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
            return Arg(self.values(shape, dtype, **kw).contiguous(memory_format=fmt), None, g)
        if kind == "expanded" and not writable and 1 in shape:
            ax = shape.index(1)
            bs = list(shape)
            return Arg(self.values(bs, dtype, **kw), lambda t: t.expand(*shape), g)
        return Arg(self.values(shape, dtype, **kw), None, g)


class Replay:
    """Stands for hypothesis's ``data`` in ``Draw(Replay(trace))``: gives back the values of a
    printed ``Draw.trace``, in order, to rebuild a case outside hypothesis."""

    def __init__(self, trace: Sequence[Any]) -> None:
        self.values = list(trace)

    def draw(self, strategy: Any, label: str = "") -> Any:
        return self.values.pop(0)


BUILDERS: dict[str, Callable[[Draw], Case]] = {}


def builder(name: str) -> Callable[[Callable[[Draw], Case]], Callable[[Draw], Case]]:
    def reg(f: Callable[[Draw], Case]) -> Callable[[Draw], Case]:
        BUILDERS[name] = f
        return f
    return reg


def broadcastable(d: Draw, shape: list[int], label: str) -> list[int]:
    """A shape that broadcasts with ``shape`` (some leading dims dropped, some dims set to 1), or,
    one time in ten, one that does not."""
    drop = d.int(0, len(shape), label + ".drop")
    out = [1 if d.int(0, 3, f"{label}.one{i}") == 0 else s for i, s in enumerate(shape[drop:])]
    if out and d.int(0, 9, label + ".clash") == 0:
        out[0] = out[0] + 1
    return out


UNARY: dict[str, Callable[..., Any]] = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "abs": torch.abs, "neg": torch.neg, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "sign": torch.sign, "erf": torch.erf,
    "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "silu": torch.nn.functional.silu,
    "hardswish": torch.nn.functional.hardswish, "hardsigmoid": torch.nn.functional.hardsigmoid,
    "mish": torch.nn.functional.mish, "softplus": torch.nn.functional.softplus, "elu": torch.nn.functional.elu,
    "leaky_relu": torch.nn.functional.leaky_relu, "relu6": torch.nn.functional.relu6,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "isnan": torch.isnan,
    "isinf": torch.isinf, "square": torch.square, "relu_": torch.relu_, "sigmoid_": torch.sigmoid_,
    "exp_": torch.exp_, "neg_": torch.neg_, "abs_": torch.abs_, "tanh_": torch.tanh_,
}


@builder("unary")
def unary(d: Draw) -> Case:
    name = d.pick(sorted(UNARY), "op")
    dtype = d.dtype("dtype")
    inplace = name.endswith("_")
    x = d.arg(d.shape(0, 4, "shape"), dtype, "x", grad=not inplace, writable=inplace)
    f = UNARY[name]
    return Case(name, [x], lambda a: f(a), d.params, grad=not inplace)


@builder("activation")
def activation(d: Draw) -> Case:
    F = torch.nn.functional
    name = d.pick(["hardtanh", "clamp", "leaky_relu", "elu", "softplus", "threshold", "celu", "hardtanh_"],
                  "op")
    dtype = d.dtype("dtype", floats=d.int(0, 4, "any_dtype") > 0)
    x = d.arg(d.shape(0, 4, "shape"), dtype, "x", grad=True, writable=True)
    lo, hi = d.float(-3, 3, "lo"), d.float(-3, 3, "hi")
    which = d.int(0, 2, "clamp_bounds")
    fns: dict[str, Callable[[Any], Any]] = {
        "hardtanh": lambda a: F.hardtanh(a, lo, hi), "hardtanh_": lambda a: F.hardtanh_(a, lo, hi),
        "clamp": lambda a: torch.clamp(a, lo if which != 1 else None, hi if which != 0 else None),
        "leaky_relu": lambda a: F.leaky_relu(a, lo), "elu": lambda a: F.elu(a, hi),
        "softplus": lambda a: F.softplus(a, hi, abs(lo) + 1), "threshold": lambda a: F.threshold(a, lo, hi),
        "celu": lambda a: F.celu(a, abs(hi) + 0.1)}
    return Case(name, [x], fns[name], d.params, grad=not name.endswith("_"))


BINARY: dict[str, Callable[..., Any]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "minimum": torch.minimum, "pow": torch.pow, "remainder": torch.remainder, "fmod": torch.fmod,
    "atan2": torch.atan2, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "floor_divide": torch.floor_divide, "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "xlogy": torch.xlogy,
    "add_": torch.Tensor.add_, "mul_": torch.Tensor.mul_, "sub_": torch.Tensor.sub_, "div_": torch.Tensor.div_, "hypot": torch.hypot, "copysign": torch.copysign,
}


@builder("binary")
def binary(d: Draw) -> Case:
    name = d.pick(sorted(BINARY), "op")
    f = BINARY[name]
    shape = d.shape(0, 4, "shape")
    other = broadcastable(d, shape, "other") if d.flag("broadcast") else list(shape)
    if d.flag("swap"):
        shape, other = other, shape
    ta, tb = d.dtype("dtype"), d.dtype("dtype_b") if d.int(0, 3, "mixed") == 0 else None
    tb = tb or ta
    inplace = name.endswith("_")
    a = d.arg(shape, ta, "a", grad=not inplace, writable=inplace)
    scalars = ["int", "float"] if name not in ("maximum", "minimum", "atan2", "hypot", "logical_and",
                                               "logical_or") else []
    form = d.pick(["tensor", "tensor", "tensor", "zero_dim", *scalars], "b_form")
    if form == "int":
        s = d.int(-3, 3, "b_int")
        return Case(name, [a], lambda x: f(x, s), d.params, grad=not inplace)
    if form == "float":
        v = d.float(-3, 3, "b_float")
        return Case(name, [a], lambda x: f(x, v), d.params, grad=not inplace)
    b = d.arg([] if form == "zero_dim" else other, tb, "b", grad=not inplace)
    alpha = d.pick([None, None, 2, 0.5], "alpha") if name in ("add", "sub", "add_", "sub_") else None
    if alpha is not None:
        return Case(name, [a, b], lambda x, y: f(x, y, alpha=alpha), d.params, grad=not inplace)
    return Case(name, [a, b], f, d.params, grad=not inplace)


@builder("where")
def where(d: Draw) -> Case:
    shape = d.shape(0, 4, "shape")
    c = d.arg(broadcastable(d, shape, "cond"), d.pick([torch.bool, torch.bool, torch.uint8], "cond_dtype"), "c")
    x = d.arg(shape, d.dtype("dtype"), "x", grad=True)
    form = d.pick(["tensor", "scalar", "zero_dim"], "y_form")
    if form == "scalar":
        v = d.pick([0, 1.5, -2], "y_scalar")
        return Case("where", [c, x], lambda cc, xx: torch.where(cc, xx, v), d.params, grad=True)
    y = d.arg(broadcastable(d, shape, "y") if form == "tensor" else [], d.dtype("dtype_y"), "y", grad=True)
    return Case("where", [c, x, y], torch.where, d.params, grad=True)


@builder("reduce")
def reduce(d: Draw) -> Case:
    name = d.pick(["sum", "mean", "amax", "amin", "prod", "max", "min", "argmax", "argmin", "std", "var", "all",
                   "any", "logsumexp", "norm", "count_nonzero", "nansum", "median"], "op")
    dtype = d.dtype("dtype")
    shape = d.shape(0, 4, "shape")
    x = d.arg(shape, dtype, "x", grad=True)
    nd = max(len(shape), 1)
    dims = d(st.lists(st.integers(-nd, nd - 1), max_size=3, unique=True), "dims")
    keep = d.flag("keepdim")
    whole = d.int(0, 3, "whole") == 0
    single = ("max", "min", "argmax", "argmin", "median")
    out_dtype = d.pick([None, None, torch.float32, torch.int64], "out_dtype") if name in ("sum", "mean", "prod") else None

    def fn(a: torch.Tensor) -> Any:
        f = getattr(torch, name)
        if whole:
            return f(a) if name != "logsumexp" else f(a, list(range(a.dim())))
        if name in single:
            return f(a, dims[0] if dims else 0, keep)
        if name == "count_nonzero":
            return f(a, dims)
        if out_dtype is not None:
            return f(a, dims, keep, dtype=out_dtype)
        if name in ("all", "any") and len(dims) != 1:
            return f(a, tuple(dims), keepdim=keep)
        if name == "norm":
            return torch.linalg.vector_norm(a, 2, dims or None, keep)
        return f(a, dims, keepdim=keep) if name != "prod" else f(a, dims[0] if dims else 0, keep)
    return Case(name, [x], fn, d.params, grad=name not in ("argmax", "argmin", "median", "max", "min"))


@builder("softmax")
def softmax(d: Draw) -> Case:
    F = torch.nn.functional
    name = d.pick(["softmax", "log_softmax"], "op")
    shape = d.shape(0, 4, "shape")
    x = d.arg(shape, d.dtype("dtype", floats=d.int(0, 9, "any_dtype") > 0), "x", grad=True)
    dim = d.int(-max(len(shape), 1) - 1, max(len(shape), 1), "dim")
    dt = d.pick([None, None, None, torch.float32, torch.float16], "out_dtype")
    f = F.softmax if name == "softmax" else F.log_softmax
    return Case(name, [x], lambda a: f(a, dim, dtype=dt), d.params, grad=True)


@builder("cumulative")
def cumulative(d: Draw) -> Case:
    name = d.pick(["cumsum", "cumprod", "cummax", "logcumsumexp"], "op")
    shape = d.shape(0, 4, "shape")
    x = d.arg(shape, d.dtype("dtype"), "x", grad=True)
    dim = d.int(-max(len(shape), 1), max(len(shape), 1) - (d.int(0, 9, "bad_dim") > 0), "dim")
    dt = d.pick([None, None, torch.float32, torch.int64], "out_dtype") if name in ("cumsum", "cumprod") else None
    f = getattr(torch, name)
    return Case(name, [x], (lambda a: f(a, dim, dtype=dt)) if dt else (lambda a: f(a, dim)), d.params,
                grad=name != "cummax")


@builder("sort")
def sort(d: Draw) -> Case:
    name = d.pick(["sort", "topk", "argsort", "kthvalue"], "op")
    shape = d.shape(0, 4, "shape")
    dtype = d.dtype("dtype")
    x = d.arg(shape, dtype, "x")
    dim = d.int(-max(len(shape), 1), max(len(shape), 1) - 1, "dim")
    desc, stable = d.flag("descending"), d.flag("stable")
    k = d.int(0, 6, "k")

    def fn(a: torch.Tensor) -> Any:
        if name == "sort":
            v, i = torch.sort(a, dim=dim, descending=desc, stable=stable)
            # ties: indices are only unique with stable; the values they pick are always comparable
            return (v, i) if stable else (v, a.gather(dim, i) if a.dim() else v)
        if name == "argsort":
            return torch.argsort(a, dim=dim, descending=desc, stable=True)
        if name == "kthvalue":
            return torch.kthvalue(a, k, dim, keepdim=desc).values
        v, i = torch.topk(a, k, dim=dim, largest=desc, sorted=True)
        return v, a.gather(dim, i) if a.dim() else v
    return Case(name, [x], fn, d.params)


@builder("index")
def index(d: Draw) -> Case:
    name = d.pick(["gather", "scatter", "scatter_value", "scatter_add", "scatter_reduce", "index_select",
                   "masked_fill", "index_put", "getitem", "index_add", "take", "masked_select",
                   "index_fill", "nonzero"], "op")
    shape = d.shape(1, 4, "shape")
    dtype = d.dtype("dtype")
    nd = len(shape)
    dim = d.int(-nd, nd - 1, "dim")
    size = shape[dim]
    bad = d.int(0, 9, "bad_index") == 0  # an out-of-range index: CPU torch raises
    hi = size + (2 if bad else 0)
    lo = -size if name in ("index_select", "getitem", "index_put", "take") and not bad else 0
    idx_dtype = d.pick([torch.int64, torch.int64, torch.int32], "index_dtype")
    x = d.arg(shape, dtype, "x", grad=True, writable=True)
    ishape = [min(s, d.int(0, s, f"ishape{i}")) for i, s in enumerate(shape)]
    iarg = d.arg(ishape, idx_dtype, "index", layout=False, lo=lo if size else 0, hi=max(hi, 1))
    src = d.arg(ishape, dtype, "src", grad=True)
    v = d.pick([0, -1.5, 3], "value")
    n = d.int(0, 4, "n")
    vec = d.arg([n], idx_dtype, "vec", layout=False, lo=lo if size else 0, hi=max(hi, 1))
    red = d.pick(["sum", "prod", "mean", "amax", "amin"], "reduce")
    mask = d.arg(broadcastable(d, shape, "mask"), torch.bool, "mask")
    fns: dict[str, Callable[..., Any]] = {
        "gather": lambda a, i, s, m, vv: torch.gather(a, dim, i),
        "scatter": lambda a, i, s, m, vv: torch.scatter(a, dim, i, s),
        "scatter_value": lambda a, i, s, m, vv: torch.scatter(a, dim, i, v),
        "scatter_add": lambda a, i, s, m, vv: torch.scatter_add(a, dim, i, s),
        "scatter_reduce": lambda a, i, s, m, vv: torch.scatter_reduce(a, dim, i, s, red),
        "index_select": lambda a, i, s, m, vv: torch.index_select(a, dim, vv),
        "masked_fill": lambda a, i, s, m, vv: a.masked_fill(m, v),
        "index_put": lambda a, i, s, m, vv: a.clone().index_put_((vv,), torch.tensor(v, dtype=a.dtype,
                                                                                      device=a.device)),
        "getitem": lambda a, i, s, m, vv: a[vv],
        "index_add": lambda a, i, s, m, vv: torch.index_add(a, dim, vv, a.narrow(dim, 0, min(n, size))),
        "take": lambda a, i, s, m, vv: torch.take(a, vv),
        "masked_select": lambda a, i, s, m, vv: torch.masked_select(a, m),
        "index_fill": lambda a, i, s, m, vv: a.index_fill(dim, vv.long(), v),
        "nonzero": lambda a, i, s, m, vv: torch.nonzero(a),
    }
    scattering = name.startswith("scatter") or name == "index_put"
    # (a scatter with duplicate indices keeps any one of the writes: values compared only without duplicates)
    return Case(name, [x, iarg, src, mask, vec], fns[name], d.params, grad=not scattering and name != "nonzero")


@builder("shape")
def shape_ops(d: Draw) -> Case:
    name = d.pick(["cat", "stack", "split", "chunk", "transpose", "permute", "narrow", "flip", "roll", "repeat",
                   "expand", "reshape", "unbind", "tril", "triu", "pad", "contiguous", "to", "unfold",
                   "movedim", "repeat_interleave", "squeeze", "unsqueeze"], "op")
    shape = d.shape(1, 4, "shape")
    dtype = d.dtype("dtype")
    nd = len(shape)
    dim = d.int(-nd, nd - 1, "dim")
    x = d.arg(shape, dtype, "x", grad=True)
    oshape = list(shape)
    oshape[dim] = d.pick([0, 1, 3, shape[dim]], "other_size")
    y = d.arg(oshape if name == "cat" else shape, d.pick([dtype, dtype, dtype, *ALL], "dtype_y"), "y", grad=True)
    k = d.int(1, 3, "k")
    perm = d(st.permutations(list(range(nd))), "perm")
    reps = d(st.lists(st.integers(0, 2), min_size=nd, max_size=nd + 1), "repeats")
    pads = d(st.lists(st.integers(-1, 2), min_size=2, max_size=2 * min(nd, 3)), "pads")
    mode = d.pick(["constant", "reflect", "replicate", "circular"], "pad_mode")
    to_dt = d.dtype("to_dtype")
    fns: dict[str, Callable[..., Any]] = {
        "cat": lambda a, b: torch.cat([a, b], dim), "stack": lambda a, b: torch.stack([a, b], dim),
        "split": lambda a, b: torch.split(a, k, dim), "chunk": lambda a, b: torch.chunk(a, k, dim),
        "transpose": lambda a, b: a.transpose(dim, -1).contiguous() * 1, "permute": lambda a, b: a.permute(perm) + 0,
        "narrow": lambda a, b: a.narrow(dim, 0, min(k, shape[dim])).clone(), "flip": lambda a, b: a.flip(dim),
        "roll": lambda a, b: a.roll(k, dim), "repeat": lambda a, b: a.repeat(reps),
        "expand": lambda a, b: a.unsqueeze(0).expand(k, *shape).contiguous(), "reshape": lambda a, b: a.reshape(-1, 1),
        "unbind": lambda a, b: torch.unbind(a, dim), "tril": lambda a, b: torch.tril(a, k - 2),
        "triu": lambda a, b: torch.triu(a, k - 2),
        "pad": lambda a, b: torch.nn.functional.pad(a, pads, mode, None if mode != "constant" else 1.5),
        "contiguous": lambda a, b: a.contiguous(), "to": lambda a, b: a.to(to_dt),
        "unfold": lambda a, b: a.unfold(dim, k, k - 1 if k > 1 else 1).clone(),
        "movedim": lambda a, b: torch.movedim(a, dim, 0).contiguous(),
        "repeat_interleave": lambda a, b: a.repeat_interleave(k, dim),
        "squeeze": lambda a, b: a.squeeze(dim) * 1, "unsqueeze": lambda a, b: a.unsqueeze(dim) * 1,
    }
    return Case(name, [x, y], fns[name], d.params, grad=True)


@builder("embedding")
def embedding(d: Draw) -> Case:
    F = torch.nn.functional
    num, dim = d.int(1, 6, "num"), d.int(0, 4, "dim")
    w = d.arg([num, dim], d.dtype("dtype", floats=True), "weight", grad=True, writable=True)
    bad = d.int(0, 9, "bad_index") == 0
    i = d.arg(d.shape(0, 3, "index_shape"), d.pick([torch.int64, torch.int32], "index_dtype"), "index",
              layout=False, lo=0, hi=num + (2 if bad else 0))
    pad = d.pick([None, None, 0, -1, num - 1], "padding_idx")
    max_norm = d.pick([None, None, None, 1.0], "max_norm")
    scale = d.flag("scale_grad_by_freq")
    # (max_norm renormalizes the weight in place: the leaf's values are compared afterwards)
    return Case("embedding", [w, i], lambda ww, ii: F.embedding(ii, ww, pad, max_norm, 2.0, scale), d.params,
                grad=max_norm is None)
