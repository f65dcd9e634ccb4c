"""``torch.autocast("npu")``: PyTorch's autocast key for PrivateUse1, filled in from Python.

PyTorch registers autocast kernels for CPU/CUDA/XPU/MPS in C++; for PrivateUse1 the backend must
(torch_npu does in C++). Here, following CUDA's policy (``aten/src/ATen/autocast_mode.cpp``): a
fallthrough for every op (run in the input dtypes); for the "lower precision" ops (matmuls,
linear, convolutions) a kernel that casts floating npu tensors to the autocast dtype; for the
"fp32" ops (losses, norms, exp/log/pow and the like, whose float16 results lose range or
precision) one that casts float16/bfloat16 npu tensors to float32; for the "fp32 unless a dtype is
given" ops (softmax, log_softmax, sum, prod, cumsum, cumprod) the same when no ``dtype`` argument
is passed. Each redispatches below the autocast key. Only the functional overloads are covered,
as in PyTorch (``out=`` forms run as called).
"""

from __future__ import annotations

from typing import Any

import torch

LOWER_PRECISION_OPS = ("mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "linear", "conv1d", "conv2d",
                       "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
                       "_convolution", "convolution", "conv_tbc", "addmv", "addr", "einsum", "mv", "linalg_vecdot",
                       "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
                       "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
                       "_scaled_dot_product_flash_attention", "scaled_dot_product_attention")
FP32_OPS: tuple[str, ...] = ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
            "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
            "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
            "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
            "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
            "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
            "logsumexp", "cross_entropy_loss")
# (CUDA's float32 list ends with the upsampling ops)
FP32_OPS += ("upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
             "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
             "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa")
# ops that take several floating tensors of one dtype: run in the widest dtype among them (CUDA's
# "promote" list), so a float16 matmul result meets a float32 tensor in them as on CUDA
PROMOTE_OPS = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
               "tensordot", "scatter_add")
FP32_UNLESS_DTYPE_OPS = ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                         "linalg_matrix_norm", "sum")
_LOWER = (torch.float16, torch.bfloat16)
_KEY = torch._C.DispatchKey.AutocastPrivateUse1  # type: ignore[attr-defined]
_libraries: list[torch.library.Library] = []


def _cast(x: Any, dtype: torch.dtype) -> Any:
    # (float64 is not eligible, as PyTorch's autocast ``is_eligible``: a double matmul stays double)
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "npu" and x.dtype != dtype \
            and x.dtype != torch.float64:
        return x.to(dtype)
    if isinstance(x, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in x):
        return type(x)(_cast(e, dtype) for e in x)  # (einsum's, multi_dot's tensor lists, as CUDA casts them)
    return x


def _widen(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOWER and x.device.type == "npu":
        return x.float()
    return x


def _kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype("npu")
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            args = tuple(_cast(a, dtype) for a in args)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _fp32_kernel(op: Any, dtype_at: int) -> Any:
    """``op`` in float32 (its float16/bfloat16 npu tensors widened); ``dtype_at``: the position of
    its ``dtype`` argument (as called positionally or by name: given, the op runs as called), or -1."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            if dtype_at < 0 or (kwargs.get("dtype") is None and (len(args) <= dtype_at or args[dtype_at] is None)):
                args = tuple(_widen(a) for a in args)
                kwargs = {k: _widen(v) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _floats(x: Any) -> list[torch.dtype]:
    """The dtypes of the autocast-eligible tensors in ``x``: floating npu tensors but float64, which
    PyTorch's promote policy ignores (neither cast nor the dtype to cast to)."""
    if isinstance(x, torch.Tensor):
        return [x.dtype] if x.is_floating_point() and x.device.type == "npu" and x.dtype != torch.float64 else []
    if isinstance(x, (list, tuple)):
        return [d for e in x for d in _floats(e)]
    return []


def _promote_kernel(op: Any) -> Any:
    """``op`` with its floating npu tensors cast to the widest dtype among them."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            dtypes = _floats(args) + _floats(list(kwargs.values()))
            if len(set(dtypes)) > 1:
                wide = dtypes[0]
                for d in dtypes[1:]:
                    wide = torch.promote_types(wide, d)
                args = tuple(_cast(a, wide) for a in args)
                kwargs = {k: _cast(v, wide) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _functional(packet: Any) -> list[tuple[str, Any]]:
    """(qualified name for ``Library.impl``, overload) of the non-``out`` overloads of ``packet``."""
    out = []
    for overload in packet.overloads():
        op = getattr(packet, overload)
        if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            continue  # out= and in-place forms: not autocast's (as in PyTorch)
        out.append((packet._qualified_op_name.split("::")[1] + ("" if overload == "default" else f".{overload}"), op))
    return out


def install() -> None:
    """Register the fallthrough and the lower-precision kernels (once)."""
    if _libraries:
        return
    lib = torch.library.Library("_", "IMPL")  # noqa: TOR901 - autocast fallback, not an op library
    lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    aten = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for name in LOWER_PRECISION_OPS:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue  # (not in this torch)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            qual = name if overload == "default" else f"{name}.{overload}"
            aten.impl(qual, _kernel(op), "AutocastPrivateUse1")
    for names, unless_dtype in ((FP32_OPS, False), (FP32_UNLESS_DTYPE_OPS, True)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue  # (not in this torch)
            for qual, op in _functional(packet):
                at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), -1) if unless_dtype else -1
                aten.impl(qual, _fp32_kernel(op, at), "AutocastPrivateUse1")
    for name in PROMOTE_OPS:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for qual, op in _functional(packet):
            aten.impl(qual, _promote_kernel(op), "AutocastPrivateUse1")
    _libraries.extend([lib, aten])
