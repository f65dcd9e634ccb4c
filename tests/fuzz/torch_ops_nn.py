"""The nn op families of the torch op fuzzer (see ``torch_ops.py``): convolutions (1-3 spatial dims,
groups, dilation, stride, int / "same" / "valid" padding and the reflect / replicate / circular
padding modes, transposed with output_padding), linear algebra (linear, matmul, mm, bmm, baddbmm,
addmm), pooling (max / avg / adaptive, 1-3 spatial dims, ceil_mode, dilation, indices), norms
(batch in training and inference, layer, group, instance) and interpolate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from tests.fuzz.torch_ops import ALL, FLOATS, Case, Draw, builder

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_DECONV = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@builder("conv")
def conv(d: Draw) -> Case:
    n = d.int(1, 3, "spatial")
    transposed = d.int(0, 2, "transposed") == 0
    dtype = d.pick(FLOATS + (torch.float32, torch.float32, torch.int64), "dtype")
    groups = d.pick([1, 1, 1, 2, 3], "groups")
    # one time in four, channels and images big enough for the kernels' blocked, packed and Winograd paths
    big = d.int(0, 3, "big") == 0
    per = [1, 2, 3, 8, 16, 24] if big else [1, 2, 3]
    cin, cout = groups * d.pick(per, "cin_per_group"), groups * d.pick(per, "cout_per_group")
    if d.int(0, 19, "bad_channels") == 0:
        cin += 1  # not divisible by groups / not the weight's: CPU torch raises
    batch = d.pick([1, 1, 2, 0, None], "batch")  # None: an unbatched input
    ks = [d.int(1, 3, f"k{i}") for i in range(n)]
    stride = [d.int(1, 3, f"stride{i}") for i in range(n)]
    dil = [d.int(1, 2, f"dilation{i}") for i in range(n)]
    size = [d.int(1, (7 if n < 3 else 5) * (3 if big else 1), f"size{i}") for i in range(n)]
    modes = ["int", "int"] if transposed else ["int", "int", "same", "valid", "reflect", "replicate", "circular"]
    mode = d.pick(modes, "padding")
    pad = [d.int(0, 2, f"pad{i}") for i in range(n)]
    opad = [d.int(0, 2, f"output_padding{i}") for i in range(n)] if transposed else []
    xshape = ([batch] if batch is not None else []) + [cin] + size
    # (no NaN / inf in a conv's operands: how one spreads is the algorithm's (a padded tap's 0 * inf is NaN
    # for ATen's im2col, skipped by oneDNN; a Winograd tile mixes its inputs), not a semantic)
    x = d.arg(xshape, dtype, "x", grad=True, special=False)
    fan = max(1, cin // groups * int(torch.tensor(ks).prod()))
    wshape = [cin, cout // groups, *ks] if transposed else [cout, cin // groups, *ks]
    if cin % groups:
        wshape[1 if not transposed else 0] = max(1, cin // groups)
    w = d.arg(wshape, dtype, "weight", grad=True, scale=fan ** -0.5, special=False)
    args = [x, w]
    if d.flag("bias"):
        args.append(d.arg([cout], dtype, "bias", grad=True, layout=False, special=False))
    g = groups

    def fn(xx: torch.Tensor, ww: torch.Tensor, bb: torch.Tensor | None = None) -> torch.Tensor:
        if transposed:
            return _DECONV[n](xx, ww, bb, stride, pad, opad, g, dil)
        if mode == "int":
            return _CONV[n](xx, ww, bb, stride, pad, dil, g)
        if mode in ("same", "valid"):
            return _CONV[n](xx, ww, bb, stride, mode, dil, g)
        pads = [p for p in reversed(pad) for _ in (0, 1)]
        return _CONV[n](F.pad(xx, pads, mode), ww, bb, stride, 0, dil, g)
    return Case("conv_transpose" if transposed else "conv", args, fn, d.params, grad=True,
                upcast=dtype in (torch.float16, torch.bfloat16))


@builder("matmul")
def matmul(d: Draw) -> Case:
    name = d.pick(["linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "addmv", "dot", "einsum"], "op")
    dtype = d.pick(FLOATS + (torch.float32, torch.int64, torch.int32), "dtype")
    big = d.int(0, 3, "big") == 0
    m, k, nn = (d.pick([0, 1, 2, 3, 5, 8] + ([17, 64, 100] if big else []), label) for label in ("m", "k", "n"))
    b = d.pick([0, 1, 2, 3, 5, 8], "b")
    if d.int(0, 19, "bad_inner") == 0:
        k2 = k + 1  # mismatched inner dims: CPU torch raises
    else:
        k2 = k
    sc = k ** -0.5 if k else 1.0
    beta, alpha = d.pick([1, 1, 0, 0.5], "beta"), d.pick([1, 1, 2], "alpha")
    lead = d.shape(0, 2, "lead", zero=False, top=3)
    if name == "linear":
        x = d.arg([*lead, k], dtype, "x", grad=True)
        w = d.arg([nn, k2], dtype, "w", grad=True, scale=sc)
        bias = [d.arg([nn], dtype, "bias", grad=True)] if d.flag("bias") else []
        return Case(name, [x, w, *bias], F.linear, d.params, grad=True)
    if name == "matmul":
        ashape = d.pick([[k], [m, k], [*lead, m, k], [b, 1, m, k]], "a_shape")
        bshape = d.pick([[k2], [k2, nn], [*lead, k2, nn], [b, k2, nn]], "b_shape")
        a, bb = d.arg(ashape, dtype, "a", grad=True), d.arg(bshape, dtype, "b", grad=True, scale=sc)
        return Case(name, [a, bb], torch.matmul, d.params, grad=True)
    if name == "mm":
        return Case(name, [d.arg([m, k], dtype, "a", grad=True), d.arg([k2, nn], dtype, "b", grad=True, scale=sc)],
                    torch.mm, d.params, grad=True)
    if name == "dot":
        return Case(name, [d.arg([k], dtype, "a", grad=True), d.arg([k2], dtype, "b", grad=True)], torch.dot,
                    d.params, grad=True)
    if name == "addmv":
        c = d.arg(d.pick([[m], [1], []], "c_shape"), dtype, "c", grad=True)
        return Case(name, [c, d.arg([m, k], dtype, "a", grad=True), d.arg([k2], dtype, "v", grad=True, scale=sc)],
                    lambda cc, aa, vv: torch.addmv(cc, aa, vv, beta=beta, alpha=alpha), d.params, grad=True)
    if name == "addmm":
        c = d.arg(d.pick([[m, nn], [nn], [1, nn], [m, 1]], "c_shape"), dtype, "c", grad=True)
        return Case(name, [c, d.arg([m, k], dtype, "a", grad=True), d.arg([k2, nn], dtype, "b", grad=True, scale=sc)],
                    lambda cc, aa, bb: torch.addmm(cc, aa, bb, beta=beta, alpha=alpha), d.params, grad=True)
    if name == "einsum":
        eq = d.pick(["bik,bkj->bij", "ik,kj->ij", "bik,bjk->bij", "i,i->", "bij->bji"], "equation")
        ops = {"bik,bkj->bij": ([b, m, k], [b, k2, nn]), "ik,kj->ij": ([m, k], [k2, nn]),
               "bik,bjk->bij": ([b, m, k], [b, nn, k2]), "i,i->": ([k], [k2]), "bij->bji": ([b, m, k], None)}
        sa, sb = ops[eq]
        args = [d.arg(sa, dtype, "a", grad=True)] + ([d.arg(sb, dtype, "b", grad=True)] if sb else [])
        return Case(name, args, lambda *t: torch.einsum(eq, *t), d.params, grad=True)
    a = d.arg([b, m, k], dtype, "a", grad=True)
    bb = d.arg([b, k2, nn], dtype, "b", grad=True, scale=sc)
    if name == "bmm":
        return Case(name, [a, bb], torch.bmm, d.params, grad=True)
    c = d.arg(d.pick([[b, m, nn], [m, nn], [1, 1, nn]], "c_shape"), dtype, "c", grad=True)
    return Case(name, [c, a, bb], lambda cc, aa, b2: torch.baddbmm(cc, aa, b2, beta=beta, alpha=alpha),
                d.params, grad=True)


@builder("pool")
def pool(d: Draw) -> Case:
    name = d.pick(["max", "max", "avg", "avg", "adaptive_avg", "adaptive_max", "lp"], "op")
    n = d.int(1, 3, "spatial")
    dtype = d.pick(FLOATS + (torch.float32, torch.int64), "dtype")
    batch = d.pick([1, 2, 0, None], "batch")
    c = d.int(1, 3, "channels")
    size = [d.int(1, 7 if n < 3 else 5, f"size{i}") for i in range(n)]
    x = d.arg(([batch] if batch is not None else []) + [c] + size, dtype, "x", grad=True)
    ks = [d.int(1, 3, f"k{i}") for i in range(n)]
    stride = [d.int(1, 3, f"stride{i}") for i in range(n)] if d.flag("stride") else None
    dil = [d.int(1, 2, f"dilation{i}") for i in range(n)]
    # (more than half the kernel, one time in ten: refused by CPU torch)
    pad = [d.int(0, (ks[i] // 2) if d.int(0, 9, f"bad_pad{i}") else 2, f"pad{i}") for i in range(n)]
    ceil = d.flag("ceil_mode")
    inc = d.flag("count_include_pad")
    div = d.pick([None, None, None, 2], "divisor_override")
    osize = [d.pick([1, 2, 3, None], f"out{i}") for i in range(n)]
    ind = d.flag("return_indices")
    p = d.pick([1, 2, 3.0], "norm_type")

    def fn(a: torch.Tensor) -> Any:
        if name == "max":
            f = getattr(F, f"max_pool{n}d")
            return f(a, ks, stride, pad, dil, ceil_mode=ceil, return_indices=ind)
        if name == "avg":
            f = getattr(F, f"avg_pool{n}d")
            if n == 1:
                return f(a, ks, stride, pad, ceil, inc)
            return f(a, ks, stride, pad, ceil, inc, div)
        if name == "lp":
            if n == 1:
                return F.lp_pool1d(a, p, ks[0], stride[0] if stride else None, ceil)
            return getattr(F, f"lp_pool{n}d")(a, p, ks, stride, ceil)
        if name == "adaptive_avg":
            return getattr(F, f"adaptive_avg_pool{n}d")(a, osize if n > 1 else osize[0] or 1)
        return getattr(F, f"adaptive_max_pool{n}d")(a, osize if n > 1 else osize[0] or 1, ind)
    # CPU torch's max pool backward writes a window's gradient past its plane when the window reads only
    # padding (dilated, under ceil_mode): the golden would corrupt this process's heap, so no gradients
    # then (tests/torch/test_max_pool_padding_windows.py checks the npu's)
    blind = name == "max" and any(_padding_only_window(size[i], ks[i], (stride or ks)[i], pad[i], dil[i], ceil)
                                  for i in range(n))
    return Case(name, [x], fn, d.params, grad=name not in ("lp",) and not blind,
                cpu_only_refusal=name == "max" and n == 1 and not dtype.is_floating_point)


def _padding_only_window(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> bool:
    """Whether a max pool along one dim (ATen's output size rule) has a window reading no input."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1  # (// rounds down, as ATen's div_rtn)
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return any(all(not 0 <= o * s - p + j * d < size for j in range(k)) for o in range(out))


@builder("norm")
def norm(d: Draw) -> Case:
    name = d.pick(["batch", "batch", "layer", "group", "instance", "rms"], "op")
    dtype = d.pick(FLOATS + (torch.float32, torch.float32), "dtype")
    c = d.int(1, 4, "channels")
    batch = d.pick([1, 2, 3, 0], "batch")
    spatial = d.shape(0, 3, "spatial", top=4)
    shape = [batch, c, *spatial]
    x = d.arg(shape, dtype, "x", grad=True)
    pdt = d.pick([dtype, dtype, torch.float32], "param_dtype")
    # (parameters and statistics without NaN / inf: an inference batch norm folds them into one scale and
    # shift, as CANN's does, and an infinite scale then gives inf - inf where ATen's order gives inf;
    # contiguous statistics: CPU torch's inference batch-norm backward ignores their strides, so
    # running_mean=base[::2] gives it wrong gradients, 1e7 or 1e18)
    eps = d.pick([1e-5, 1e-3, 0.1], "eps")
    affine = d.flag("affine")
    if name == "batch":
        training = d.flag("training")
        stats = d.flag("running_stats") or not training
        mom = d.pick([0.1, 0.5, None], "momentum")
        args = [x]
        if stats:
            args += [d.arg([c], pdt, "running_mean", special=False, layout=False), d.arg([c], pdt, "running_var", special=False, layout=False)]
        if affine:
            args += [d.arg([c], pdt, "weight", grad=True, special=False, layout=False), d.arg([c], pdt, "bias", grad=True, special=False, layout=False)]

        def bn(a: torch.Tensor, *t: torch.Tensor) -> Any:
            rm, rv = (t[0], t[1].abs() + 0.5) if stats else (None, None)
            w, b = (t[-2], t[-1]) if affine else (None, None)
            out = F.batch_norm(a, rm, rv, w, b, training, mom if mom is not None else 0.1, eps)
            return (out, rm, rv) if stats else out
        return Case("batch_norm", args, bn, d.params, grad=True)
    if name == "group":
        g = d.pick([1, c, 2], "groups")
        args = [x] + ([d.arg([c], pdt, "weight", grad=True, special=False), d.arg([c], pdt, "bias", grad=True, special=False)] if affine else [])
        return Case("group_norm", args, lambda a, *t: F.group_norm(a, g, *t, eps=eps), d.params, grad=True)
    if name == "instance":
        use_in = d.flag("use_input_stats")
        args = [x, d.arg([c], pdt, "running_mean", special=False, layout=False), d.arg([c], pdt, "running_var", special=False, layout=False)]
        return Case("instance_norm", args, lambda a, m, v: F.instance_norm(
            a, m, v.abs() + 0.5, None, None, use_in, 0.1, eps), d.params, grad=True)
    k = d.int(1, len(shape), "normalized_dims")
    ns = shape[-k:]
    args = [x] + ([d.arg(ns, pdt, "weight", grad=True, special=False)] if affine else [])
    with_bias = name == "layer" and affine and d.flag("bias")
    if with_bias:
        args.append(d.arg(ns, pdt, "bias", grad=True, special=False))
    if name == "rms":
        return Case("rms_norm", args, lambda a, *t: F.rms_norm(a, ns, *t, eps=eps), d.params, grad=True)
    return Case("layer_norm", args, lambda a, *t: F.layer_norm(
        a, ns, t[0] if t else None, t[1] if len(t) > 1 else None, eps), d.params, grad=True)


_MODES = {1: ["nearest", "nearest-exact", "linear", "area"],
          2: ["nearest", "nearest-exact", "bilinear", "bicubic", "area"],
          3: ["nearest", "nearest-exact", "trilinear", "area"]}


@builder("interpolate")
def interpolate(d: Draw) -> Case:
    n = d.int(1, 3, "spatial")
    mode = d.pick(_MODES[n] + (["bilinear"] if n != 2 else []), "mode")  # (a wrong-rank mode: raises)
    dtype = d.pick(FLOATS + (torch.float32, torch.float32, torch.uint8), "dtype")
    shape = [d.int(0, 2, "batch"), d.int(1, 3, "channels")] + [d.int(1, 6, f"size{i}") for i in range(n)]
    x = d.arg(shape, dtype, "x", grad=True)
    by_size = d.flag("by_size")
    size = [d.int(1, 9, f"out{i}") for i in range(n)]
    scale = [d.pick([0.5, 1.0, 1.5, 2.0, 3.0, 0.7], f"scale{i}") for i in range(n)]
    corners = d.pick([None, True, False], "align_corners") if mode in ("linear", "bilinear", "bicubic",
                                                                         "trilinear") else None
    recompute = d.flag("recompute_scale_factor") if not by_size else None
    aa = mode in ("bilinear", "bicubic") and d.int(0, 3, "antialias") == 0

    def fn(a: torch.Tensor) -> torch.Tensor:
        if by_size:
            return F.interpolate(a, size=size, mode=mode, align_corners=corners, antialias=aa)
        return F.interpolate(a, scale_factor=scale, mode=mode, align_corners=corners,
                             recompute_scale_factor=recompute, antialias=aa)
    return Case("interpolate", [x], fn, d.params, grad=mode != "nearest-exact")


@builder("factory")
def factory(d: Draw) -> Case:
    name = d.pick(["arange", "full", "zeros_like", "linspace", "eye", "rand_like_shape", "tensor", "ones"], "op")
    dtype = d.pick(ALL + (None,), "dtype")
    a, b = d.int(-3, 5, "start"), d.int(-3, 9, "end")
    step = d.pick([1, 2, -1, 0.5], "step")
    v = d.pick([0, 1, -2.5, True], "value")
    shape = d.shape(0, 3, "shape")
    fns: dict[str, Callable[[str], Any]] = {
        "arange": lambda dev: torch.arange(a, b, step, dtype=dtype, device=dev),
        "full": lambda dev: torch.full(shape, v, dtype=dtype, device=dev),
        "zeros_like": lambda dev: torch.zeros_like(torch.empty(shape, device=dev), dtype=dtype),
        "linspace": lambda dev: torch.linspace(a, b, max(0, b - a + 3), dtype=dtype, device=dev),
        "eye": lambda dev: torch.eye(max(a, 0), max(b, 0), dtype=dtype, device=dev),
        "rand_like_shape": lambda dev: torch.rand(shape, device=dev).shape,
        "tensor": lambda dev: torch.tensor([a, b, v], dtype=dtype, device=dev),
        "ones": lambda dev: torch.ones(shape, dtype=dtype, device=dev) * v,
    }
    f = fns[name]
    # (the call takes the device, not tensors: the harness passes it as a string argument)
    return Case(name, [], f, d.params)
