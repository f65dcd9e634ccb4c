"""The writing op families of the torch op fuzzer (see ``torch_ops.py``): ``out=`` forms (an out
tensor of the right shape, a wrong one that gets resized, an empty one, another dtype, a
non-contiguous one), copies between devices and dtypes into (non-contiguous) views, and in-place
ops on views (index_put_ with accumulate, masked_fill_, scatter_, fill_, zero_, clamp_, addmm_, ...).
The written tensors' bases are compared after the call (``Arg``), so a write that misses a view's
strides or offset shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tests.fuzz.torch_ops import Case, Draw, broadcastable, builder

_OUT_OPS: dict[str, Callable[..., Any]] = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub, "div": torch.div, "maximum": torch.maximum,
    "relu": lambda a, b, out: torch.nn.functional.relu(a, inplace=False).clone() if out is None else
    torch.clamp(a, min=0, out=out), "sigmoid": lambda a, b, out: torch.sigmoid(a, out=out),
    "exp": lambda a, b, out: torch.exp(a, out=out), "mm": lambda a, b, out: torch.mm(a, b.mT, out=out),
    "bmm": lambda a, b, out: torch.bmm(a.unsqueeze(0), b.mT.unsqueeze(0), out=out),
    "sum": lambda a, b, out: torch.sum(a, 0, out=out), "mean": lambda a, b, out: torch.mean(a, 0, out=out),
    "cat": lambda a, b, out: torch.cat([a, b], 0, out=out), "where": lambda a, b, out: torch.where(a > 0, a, b, out=out),
    "softmax": lambda a, b, out: torch.softmax(a, -1, out=out) if out is not None else torch.softmax(a, -1),
    "abs": lambda a, b, out: torch.abs(a, out=out), "eq": lambda a, b, out: torch.eq(a, b, out=out),
    "addmm": lambda a, b, out: torch.addmm(a[0], a, b.mT, out=out), "sqrt": lambda a, b, out: torch.sqrt(a, out=out),
}


@builder("out")
def out_form(d: Draw) -> Case:
    name = d.pick(sorted(_OUT_OPS), "op")
    f = _OUT_OPS[name]
    m, n = d.pick([0, 1, 2, 3], "m"), d.pick([1, 2, 3, 4], "n")
    dtype = d.dtype("dtype")
    a = d.arg([m, n], dtype, "a")
    b = d.arg([m, n] if name not in ("mm", "bmm", "addmm") else [d.pick([1, 2, 3], "k"), n], dtype, "b")
    # the out tensor: the result's shape (found by a CPU call here), another shape (resized), another dtype
    try:
        want = f(a.base if a.view is None else a.view(a.base), b.base if b.view is None else b.view(b.base), None)
    except Exception:  # noqa: BLE001 - a call CPU torch refuses: any out tensor will do
        want = torch.empty(1, dtype=dtype)
    oshape = d.pick(["same", "same", "empty", "other", "transposed"], "out_shape")
    odt = d.dtype("out_dtype") if d.int(0, 3, "other_dtype") == 0 else want.dtype
    shape = {"same": list(want.shape), "empty": [0], "other": [2, 5]}.get(oshape, list(want.shape)[::-1])
    # (a view out of another shape stays contiguous: one that must grow past its storage grows the
    # storage it shares with its base on CPU, which npu memory (a DLPack view of host memory) cannot:
    # the npu out gets new memory and the base keeps its values, a known difference)
    o = d.arg(shape, odt, "out", writable=True, layout=oshape not in ("transposed", "other"))
    view: Callable[[torch.Tensor], torch.Tensor] | None = (lambda t: t.mT) if oshape == "transposed" and \
        len(shape) == 2 else None
    if view is not None:
        o.view = view
    # (the out tensor's base is compared after the call: Case compares every argument's leaf)
    return Case(name, [a, b, o], lambda x, y, z: (f(x, y, z), z), d.params)


@builder("copy")
def copy(d: Draw) -> Case:
    name = d.pick(["copy_", "copy_from_cpu", "to_cpu", "to_dtype", "clone", "contiguous", "fill_", "zero_",
                   "index_put_", "masked_fill_", "scatter_", "clamp_", "addmm_", "setitem", "setitem_tensor",
                   "index_copy_", "masked_scatter_", "baddbmm_", "lerp_", "addcmul_"], "op")
    shape = d.shape(1, 4, "shape")
    dtype = d.dtype("dtype")
    dst = d.arg(shape, dtype, "dst", writable=True)
    src = d.arg(broadcastable(d, shape, "src") if d.flag("broadcast") else shape, d.dtype("src_dtype"), "src")
    v = d.pick([0, 1, -2.5, True], "value")
    nd = len(shape)
    dim = d.int(0, nd - 1, "dim")
    acc = d.flag("accumulate")
    idx = d.arg([d.int(0, 4, "n_index")], torch.int64, "index", layout=False, lo=0, hi=max(shape[0], 1))
    mask = d.arg(broadcastable(d, shape, "mask"), torch.bool, "mask")
    sl = d.int(0, 2, "slice_start")

    def fn(a: torch.Tensor, s: torch.Tensor, i: torch.Tensor, m: torch.Tensor) -> Any:
        if name == "copy_":
            return a.copy_(s)
        if name == "copy_from_cpu":
            return a.copy_(s.cpu())
        if name == "to_cpu":  # npu -> a CPU tensor of another dtype -> back
            return torch.empty(a.shape, dtype=s.dtype).copy_(a).to(a.device)
        if name == "to_dtype":
            return a.to(s.device, s.dtype), a.cpu().to(a.device, s.dtype)
        if name == "clone":
            return a.clone(memory_format=torch.preserve_format).stride(), a.clone()
        if name == "contiguous":
            return a.contiguous().is_contiguous(), a.contiguous()
        if name == "fill_":
            return a.fill_(v)
        if name == "zero_":
            return a.zero_()
        if name == "index_put_":
            return a.index_put_((i,), s[0] if s.dim() == nd and s.shape[0] else s.new_ones(()), accumulate=acc)
        if name == "masked_fill_":
            return a.masked_fill_(m, v)
        if name == "scatter_":
            return a.scatter_(0, i.view(-1, *[1] * (nd - 1)).expand(-1, *a.shape[1:]).clone(), v)
        if name == "clamp_":
            return a.clamp_(-0.5, 0.5)
        if name == "addmm_":
            return a.addmm_(a, a.mT, beta=0.5, alpha=2) if nd == 2 else a.addmm_(s, s)
        if name == "baddbmm_":
            return a.baddbmm_(a, a.mT, beta=0.5) if nd == 3 else a.baddbmm_(s, s)
        if name == "setitem":
            a[sl:] = v
            return a
        if name == "setitem_tensor":
            a[..., sl:] = s[..., sl:]
            return a
        if name == "index_copy_":
            return a.index_copy_(dim, i.clamp(max=a.shape[dim] - 1), s.narrow(dim, 0, min(i.numel(), s.shape[dim])))
        if name == "masked_scatter_":
            return a.masked_scatter_(m, s.to(a.dtype).expand_as(a).contiguous() if s.dim() <= nd else s)
        if name == "lerp_":
            return a.lerp_(s, 0.3)
        return a.addcmul_(s, s, value=0.5)
    return Case(name, [dst, src, idx, mask], fn, d.params)


_ALIASED: dict[str, Callable[[torch.Tensor], Any]] = {
    "add_self": lambda a: a.add_(a), "mul_self": lambda a: a.mul_(a), "sub_row": lambda a: a.sub_(a[..., :1, :]),
    "add_out_self": lambda a: torch.add(a, a, out=a),
    "sigmoid_out_self": lambda a: torch.sigmoid(a, out=a),
    "copy_shifted": lambda a: a[..., 1:].copy_(a[..., :-1]), "copy_self": lambda a: a.copy_(a),
    "softmax_out_self": lambda a: torch.softmax(a, -1, out=a), "exp_out_view": lambda a: torch.exp(
        a[..., :a.shape[-1] // 2], out=a[..., a.shape[-1] - a.shape[-1] // 2:]),
    "clamp_self": lambda a: torch.clamp(a, a[..., :1, :], a, out=a),
    "masked_fill_self": lambda a: a.masked_fill_(a > 0, 1.5), "index_copy_self": lambda a: a.index_copy_(
        -1, torch.arange(a.shape[-1] - 1, -1, -1, device=a.device), a),
    "addcmul_self": lambda a: a.addcmul_(a, a), "lerp_self": lambda a: a.lerp_(a, 0.5),
}


@builder("aliased")
def aliased(d: Draw) -> Case:
    """Writes whose operands share the written tensor's memory: the same view (allowed), a partial
    overlap (ATen refuses most). (Not ``mm(a, a, out=a)`` nor ``a.add_(a.mT)``: ATen lets them through
    and CPU torch's result depends on its kernel's order, where the npu gives the product / sum.)"""
    name = d.pick(sorted(_ALIASED), "op")
    n = d.pick([1, 2, 3, 17], "n")
    shape = [n, n] if d.flag("square") else [d.pick([1, 2, 3], "batch"), n, n]
    a = d.arg(shape, d.dtype("dtype"), "a", writable=True)
    f = _ALIASED[name]
    return Case(name, [a], lambda t: (f(t), t), d.params)
