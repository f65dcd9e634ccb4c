"""Which kernel runs each ATen operator on an ``npu`` tensor: the explicit table.

Every ATen op that reaches the ``npu`` device (PyTorch's PrivateUse1 dispatch key) is served by
one of four providers (``Provider``):

* ``PYCANN``: pycann's operator library computes it, through GE's single-op path
  (``pycann.ge.run.singleop.run_op``, the path ``acl.op.execute_v2`` takes) on zero-copy numpy views
  of the tensors. ``PYCANN_OPS`` maps the ATen op to the ONNX/CANN op and its attributes.
* ``HOST``: torch's own CPU kernel runs on the tensors' memory, which *is* pycann's device memory
  (the CPU device computes on host memory). Used for ops pycann's library also has (Conv,
  BatchNormalization, MaxPool, Gemm, ReduceMean, ...) but whose eager single-op form would pay
  per-call planning that torch's kernel does not (eager ResNet-50 must stay within 1.1x of
  torch's CPU eager time), and for the tensor plumbing an accelerator backend implements
  natively (fill, copy, cat, index). Reported as "host", not as a fallback.
* ``META``: metadata-only kernels (views, ``set_``) that PyTorch's CPU kernel runs directly on the
  ``npu`` tensor: no data is touched, the storage stays shared.
* ``FALLBACK``: everything else. Like torch_npu's ``npu_cpu_fallback`` it runs torch's CPU kernel
  and warns once per op; ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` makes it an error.

``run_op`` semantics match ATen's only under conditions (same dtypes, alpha 1, ...): each entry's
``accepts`` says when; otherwise the op runs on the ``HOST`` provider and the report says so.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pycann.kernels.algorithm import ONEDNN_GEMM, TORCH_CONV2D_NHWC


class Provider(enum.Enum):
    """Who computes an ATen op on the npu device (see the module docstring)."""

    PYCANN = "pycann"
    HOST = "host"
    META = "meta"
    FALLBACK = "fallback"


@dataclass(frozen=True)
class PycannOp:
    """An ATen op computed by pycann's op library.

    ``op_type``: the ONNX/CANN op. ``inputs(args)``: the positional ATen arguments -> the op's
    input tensors (CPU tensors; converted to numpy views). ``attrs(args)``: its attributes.
    ``accepts(args, kwargs)``: whether the ONNX semantics equal ATen's for these arguments
    (``.out`` overloads are served too: the result is copied into ``out``).
    """

    op_type: str
    inputs: Callable[[Sequence[Any]], list[Any]]
    attrs: Callable[[Sequence[Any]], dict[str, Any]]
    accepts: Callable[[Sequence[Any], dict[str, Any]], bool]
    # indices (into ``inputs(args)``) of inputs bound as constants when the op's kernel is bound
    # for a signature (a conv's weight and bias: packed once, ``_pycann_ops``)
    consts: tuple[int, ...] = ()
    # ATen's result from the op's output and the arguments (ops with more results than the ONNX op)
    result: Callable[[Any, Sequence[Any]], Any] | None = None


_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


def _float_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in _NUMPY_FLOATS


def _unary(op_type: str) -> PycannOp:
    return PycannOp(op_type, lambda a: [a[0]], lambda a: {}, lambda a, k: _float_tensor(a[0]))


def _same_float(a: Sequence[Any], k: dict[str, Any]) -> bool:
    alpha = a[2] if len(a) > 2 else k.get("alpha", 1)
    return (len(a) >= 2 and _float_tensor(a[0]) and _float_tensor(a[1]) and a[0].dtype == a[1].dtype
            and a[0].shape == a[1].shape and alpha == 1)


def _binary(op_type: str) -> PycannOp:
    return PycannOp(op_type, lambda a: [a[0], a[1]], lambda a: {}, _same_float)


def _unary_inplace(op_type: str) -> PycannOp:
    """``relu_`` & co.: the op's result written back into ``self`` (``_dispatch`` passes it as ``out``)."""
    return PycannOp(op_type, lambda a: [a[0]], lambda a: {}, lambda a, k: _float_tensor(a[0]))


def _binary_inplace_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    return _same_float(a, k)


def _conv_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """2-D, float32, not transposed, symmetric padding by construction (ATen's int[] padding)."""
    x, w, b = a[0], a[1], a[2] if len(a) > 2 else None
    return (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dtype == torch.float32
            and w.dtype == torch.float32 and x.dim() == 4 and w.dim() == 4 and not a[6]
            and not any(int(p) for p in a[7]) and (b is None or (isinstance(b, torch.Tensor) and b.dtype == torch.float32
                                                               and b.dim() == 1)))


def _conv_inputs(a: Sequence[Any]) -> list[Any]:
    return [a[0], a[1]] if a[2] is None else [a[0], a[1], a[2]]


def _spatial(values: Sequence[Any], n: int) -> list[int]:
    """A conv's stride, padding or dilation for ``n`` spatial dims: ATen expands a single value
    (``padding="valid"`` reaches ``aten::convolution`` as ``[0]``) to every dim."""
    out = [int(v) for v in values]
    return out * n if len(out) == 1 else out


def _conv_attrs(a: Sequence[Any]) -> dict[str, Any]:
    n = a[1].dim() - 2
    pads = _spatial(a[4], n)
    return {"kernel_shape": [int(d) for d in a[1].shape[2:]], "strides": _spatial(a[3], n),
            "pads": pads + pads, "dilations": _spatial(a[5], n), "group": int(a[8]),
            # pycann's Conv on its torch provider, channels-last with the weight prepacked (the
            # algorithm GE selects for ResNet-class convs; ``kernels.bind._conv`` binds it)
            "_algo": TORCH_CONV2D_NHWC}


def _addmm_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """``addmm(bias, x, w)`` as nn.Linear calls it: float32 2-D matrices, a bias of N values,
    ``beta`` and ``alpha`` 1 (keyword-only in ATen's schema; other values run on torch's kernel)."""
    c, x, w = a[0], a[1], a[2]
    return (k.get("beta", 1) == 1 and k.get("alpha", 1) == 1 and _float_tensor(x) and x.dtype == torch.float32
            and isinstance(w, torch.Tensor) and w.dtype == torch.float32 and isinstance(c, torch.Tensor)
            and c.dtype == torch.float32 and x.dim() == 2 and w.dim() == 2 and c.dim() == 1
            and c.shape[0] == w.shape[1])


def _bn_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """Inference batch norm (running statistics) with affine parameters, float32."""
    return (_float_tensor(a[0]) and a[0].dtype == torch.float32 and a[0].dim() >= 2
            and all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in a[1:5]))


def _bn_eps(a: Sequence[Any]) -> dict[str, Any]:
    # _native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps);
    # native_batch_norm(x, w, b, mean, var, training, momentum, eps)
    return {"epsilon": float(a[-1])}


def _bn_result(y: Any, a: Sequence[Any]) -> Any:
    e = torch.empty(0, dtype=y.dtype)
    return y, e, e.clone()


def _native_bn_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    return not a[5] and _bn_ok(a, k)


def _gap_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    return _float_tensor(a[0]) and a[0].dim() == 4 and [int(s) for s in a[1]] == [1, 1]


def _spatial_mean_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """``mean.dim`` over the two spatial dims of a 4-D float tensor (what adaptive_avg_pool2d to
    1x1 becomes): GlobalAveragePool."""
    x = a[0]
    dims = a[1] if len(a) > 1 else None
    return (_float_tensor(x) and x.dim() == 4 and dims is not None and len(dims) == 2
            and {int(d) % 4 for d in dims} == {2, 3} and k.get("dtype") is None)


def _spatial_mean_result(y: Any, a: Sequence[Any]) -> Any:
    keepdim = bool(a[2]) if len(a) > 2 else False
    return y if keepdim else y.reshape(y.shape[:2])


def _avg_pool_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """``avg_pool2d`` without ceil_mode or divisor_override (where ONNX AveragePool means the same)."""
    ceil = bool(a[4]) if len(a) > 4 else False
    divisor = a[6] if len(a) > 6 else None
    return _float_tensor(a[0]) and a[0].dim() == 4 and not ceil and divisor is None


def _pair(v: Any, default: Any) -> list[int]:
    v = default if v is None or (isinstance(v, (list, tuple)) and not v) else v
    return [int(v[0]), int(v[-1])] if isinstance(v, (list, tuple)) else [int(v), int(v)]


def _avg_pool_attrs(a: Sequence[Any]) -> dict[str, Any]:
    kernel = _pair(a[1], None)
    stride = _pair(a[2] if len(a) > 2 else None, kernel)  # ATen: an empty stride means the kernel size
    pad = _pair(a[3] if len(a) > 3 else 0, 0)
    include = bool(a[5]) if len(a) > 5 else True
    return {"kernel_shape": kernel, "strides": stride, "pads": pad + pad, "count_include_pad": int(include)}


def _softmax_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    """A contiguous input only: ATen's softmax result is contiguous whatever the input's layout
    (pycann's kept it: a channels-last conv's or a transposed tensor's softmax could not be
    ``.view``-ed as on torch CPU); others take torch's kernel. Not a 0-dim input (ONNX's Softmax needs
    an axis: pycann's kernel raised a KernelError where ATen returns 1)."""
    return _float_tensor(a[0]) and not a[2] and a[0].dim() > 0 and a[0].is_contiguous()


def _mm_ok(a: Sequence[Any], k: dict[str, Any]) -> bool:
    return (_float_tensor(a[0]) and _float_tensor(a[1]) and a[0].dtype == a[1].dtype
            and a[0].dim() == a[1].dim())


# ATen op (name.overload) -> pycann op. Elementwise and matrix ops whose ONNX meaning is ATen's.
PYCANN_OPS: dict[str, PycannOp] = {
    "aten::relu": _unary("Relu"),
    "aten::sigmoid": _unary("Sigmoid"),
    "aten::tanh": _unary("Tanh"),
    "aten::exp": _unary("Exp"),
    "aten::log": _unary("Log"),
    "aten::sqrt": _unary("Sqrt"),
    "aten::neg": _unary("Neg"),
    "aten::abs": _unary("Abs"),
    "aten::erf": _unary("Erf"),
    "aten::reciprocal": _unary("Reciprocal"),
    "aten::add": _binary("Add"),
    "aten::sub": _binary("Sub"),
    "aten::mul": _binary("Mul"),
    "aten::div": _binary("Div"),
    "aten::maximum": _binary("Max"),
    "aten::minimum": _binary("Min"),
    "aten::mm": PycannOp("MatMul", lambda a: [a[0], a[1]], lambda a: {}, _mm_ok),
    "aten::bmm": PycannOp("MatMul", lambda a: [a[0], a[1]], lambda a: {}, _mm_ok),
    "aten::_softmax": PycannOp("Softmax", lambda a: [a[0]], lambda a: {"axis": int(a[1])}, _softmax_ok),
    "aten::_log_softmax": PycannOp("LogSoftmax", lambda a: [a[0]], lambda a: {"axis": int(a[1])},
                                   _softmax_ok),
    "aten::relu_": _unary_inplace("Relu"),
    "aten::add_": PycannOp("Add", lambda a: [a[0], a[1]], lambda a: {}, _binary_inplace_ok),
    "aten::mul_": PycannOp("Mul", lambda a: [a[0], a[1]], lambda a: {}, _binary_inplace_ok),
    "aten::convolution": PycannOp("Conv", _conv_inputs, _conv_attrs, _conv_ok, consts=(1, 2)),
    "aten::addmm": PycannOp("Gemm", lambda a: [a[1], a[2], a[0]], lambda a: {"_algo": ONEDNN_GEMM}, _addmm_ok,
                            consts=(1, 2)),
    "aten::_native_batch_norm_legit_no_training": PycannOp(
        "BatchNormalization", lambda a: list(a[:5]), _bn_eps, _bn_ok, consts=(1, 2, 3, 4), result=_bn_result),
    "aten::native_batch_norm": PycannOp(
        "BatchNormalization", lambda a: list(a[:5]), _bn_eps, _native_bn_ok, consts=(1, 2, 3, 4), result=_bn_result),
    "aten::_adaptive_avg_pool2d": PycannOp("GlobalAveragePool", lambda a: [a[0]], lambda a: {}, _gap_ok),
    "aten::avg_pool2d": PycannOp("AveragePool", lambda a: [a[0]], _avg_pool_attrs, _avg_pool_ok),
    "aten::mean": PycannOp("GlobalAveragePool", lambda a: [a[0]], lambda a: {}, _spatial_mean_ok,
                           result=_spatial_mean_result),
}

# ATen ops run by torch's CPU kernel as the npu device's own kernel (packet names, any overload),
# each with the CANN op that computes the same thing: pycann's op library has it, except the
# names in CANN_ONLY (tests check both):
# hot NN ops whose eager single-op form would re-plan on every call, their backward ops, the
# optimizers' foreach ops, and the elementwise ops in forms PYCANN_OPS declines.
HOST_OPS: dict[str, str] = {
    "aten::convolution": "Conv", "aten::convolution_overrideable": "Conv", "aten::_convolution": "Conv",
    "aten::mkldnn_convolution": "Conv", "aten::convolution_backward": "ConvGrad",
    "aten::native_batch_norm": "BatchNormalization", "aten::_native_batch_norm_legit": "BatchNormalization",
    "aten::_native_batch_norm_legit_no_training": "BatchNormalization",
    "aten::native_batch_norm_backward": "BatchNormalizationGrad",
    "aten::native_layer_norm": "LayerNormalization", "aten::native_layer_norm_backward": "LayerNormalizationGrad",
    "aten::native_group_norm": "GroupNormalization", "aten::native_group_norm_backward": "GroupNormalizationGrad",
    "aten::max_pool2d_with_indices": "MaxPool", "aten::max_pool2d_with_indices_backward": "MaxPoolGrad",
    "aten::avg_pool2d": "AveragePool", "aten::avg_pool2d_backward": "AveragePoolGrad",
    "aten::_adaptive_avg_pool2d": "GlobalAveragePool", "aten::_adaptive_avg_pool2d_backward": "AveragePoolGrad",
    "aten::mean": "ReduceMean", "aten::sum": "ReduceSum", "aten::amax": "ReduceMax", "aten::amin": "ReduceMin",
    "aten::max": "ReduceMax", "aten::min": "ReduceMin", "aten::argmax": "ArgMax", "aten::argmin": "ArgMin",
    "aten::prod": "ReduceProd", "aten::addmm": "Gemm", "aten::addmv": "Gemm", "aten::baddbmm": "MatMul",
    "aten::mm": "MatMul", "aten::bmm": "MatMul", "aten::dot": "MatMul", "aten::matmul": "MatMul",
    "aten::add": "Add", "aten::sub": "Sub", "aten::mul": "Mul", "aten::div": "Div", "aten::add_": "Add",
    "aten::sub_": "Sub", "aten::mul_": "Mul", "aten::div_": "Div", "aten::rsub": "Sub",
    "aten::addcmul": "Mul", "aten::addcmul_": "Mul", "aten::addcdiv": "Div", "aten::addcdiv_": "Div",
    "aten::relu": "Relu", "aten::relu_": "Relu", "aten::threshold_backward": "ReluGrad",
    "aten::sigmoid": "Sigmoid", "aten::sigmoid_backward": "SigmoidGrad", "aten::tanh": "Tanh",
    "aten::tanh_backward": "TanhGrad", "aten::gelu": "Gelu", "aten::gelu_backward": "GeluGrad",
    "aten::silu": "HardSwish", "aten::silu_backward": "HardSwishGrad", "aten::hardtanh": "Clip",
    "aten::leaky_relu": "LeakyRelu", "aten::elu": "Elu", "aten::_softmax": "Softmax",
    "aten::_log_softmax": "LogSoftmax", "aten::_softmax_backward_data": "SoftmaxGrad",
    "aten::_log_softmax_backward_data": "LogSoftmaxGrad", "aten::sqrt": "Sqrt", "aten::rsqrt": "Sqrt",
    "aten::pow": "Pow", "aten::exp": "Exp", "aten::log": "Log", "aten::abs": "Abs", "aten::neg": "Neg",
    "aten::ceil": "Ceil", "aten::floor": "Floor", "aten::round": "Round", "aten::sign": "Sign",
    "aten::clamp": "Clip", "aten::clamp_min": "Clip", "aten::clamp_max": "Clip", "aten::where": "Where",
    "aten::maximum": "Max", "aten::minimum": "Min", "aten::erf": "Erf", "aten::reciprocal": "Reciprocal",
    "aten::sin": "Sin", "aten::cos": "Cos", "aten::eq": "Equal", "aten::ne": "Equal", "aten::lt": "Less",
    "aten::gt": "Greater", "aten::le": "LessOrEqual", "aten::ge": "GreaterOrEqual",
    "aten::logical_not": "Not", "aten::logical_and": "And", "aten::logical_or": "Or",
    "aten::bitwise_and": "BitwiseAnd", "aten::bitwise_or": "BitwiseOr", "aten::bitwise_not": "BitwiseNot",
    "aten::isnan": "IsNaN", "aten::isinf": "IsInf", "aten::masked_select": "Compress",
    "aten::nonzero": "NonZero", "aten::masked_fill": "Where", "aten::masked_fill_": "Where",
    "aten::mse_loss": "MeanSquaredDistance", "aten::mse_loss_backward": "MeanSquaredDistanceGrad",
    "aten::nll_loss_forward": "NegativeLogLikelihoodLoss", "aten::nll_loss_backward": "NegativeLogLikelihoodLossGrad",
    "aten::embedding": "Gather", "aten::embedding_dense_backward": "ScatterElements",
    "aten::cat": "Concat", "aten::stack": "Concat", "aten::index_select": "Gather", "aten::index": "Gather",
    "aten::gather": "GatherElements", "aten::scatter": "ScatterElements", "aten::index_put_": "ScatterND",
    "aten::sort": "TopK", "aten::topk": "TopK", "aten::tril": "Trilu", "aten::triu": "Trilu",
    "aten::flip": "Slice", "aten::roll": "Slice", "aten::repeat": "Tile", "aten::constant_pad_nd": "Pad",
    "aten::cumsum": "CumSum", "aten::all": "ReduceMin", "aten::any": "ReduceMax", "aten::equal": "Equal",
    "aten::_foreach_add": "Add", "aten::_foreach_add_": "Add", "aten::_foreach_mul": "Mul",
    "aten::_foreach_mul_": "Mul", "aten::_foreach_div_": "Div", "aten::_foreach_sqrt": "Sqrt",
    "aten::_foreach_addcmul_": "Mul", "aten::_foreach_addcdiv_": "Div", "aten::_foreach_lerp_": "Add",
    "aten::_foreach_neg": "Neg", "aten::_foreach_sub_": "Sub",
    "aten::normal_": "RandomNormal", "aten::uniform_": "RandomUniform", "aten::bernoulli_": "Bernoulli",
    "aten::random_": "RandomUniform", "aten::native_dropout": "Dropout",
    "aten::native_dropout_backward": "Mul",
    # in-place activations (MobileNet's ReLU6 is ``hardtanh_``; ``inplace=True`` modules)
    "aten::hardtanh_": "Clip", "aten::clamp_": "Clip", "aten::clamp_min_": "Clip", "aten::silu_": "HardSwish",
    "aten::hardswish": "HardSwish", "aten::hardswish_": "HardSwish", "aten::hardsigmoid": "HardSigmoid",
    "aten::hardsigmoid_": "HardSigmoid", "aten::leaky_relu_": "LeakyRelu", "aten::elu_": "Elu",
    "aten::sigmoid_": "Sigmoid", "aten::tanh_": "Tanh",
    # nn.SyncBatchNorm's statistics ops (pycann/torch/_sync_bn.py), with torch_npu's CANN ops
    "aten::batch_norm_stats": "BNTrainingReduce",
    "aten::batch_norm_gather_stats_with_counts": "SyncBatchNormGatherStatsWithCounts",
    "aten::batch_norm_elemt": "BNTrainingUpdate", "aten::batch_norm_backward_reduce": "SyncBatchNormBackwardReduce",
    "aten::batch_norm_backward_elemt": "SyncBatchNormBackwardElemt",
}

# CANN ops named in HOST_OPS that pycann's op library does not have: CANN's backward kernels (and
# MSE). torch's kernel computes them on the npu ("host" in the report); torch.compile's training
# path decomposes them into ops GE has (pycann.torch.compile.training).
CANN_ONLY: frozenset[str] = frozenset({
    "AveragePoolGrad", "BatchNormalizationGrad", "ConvGrad", "GeluGrad", "GroupNormalizationGrad", "HardSwishGrad",
    "LayerNormalizationGrad", "LogSoftmaxGrad", "MaxPoolGrad", "MeanSquaredDistance", "MeanSquaredDistanceGrad",
    "NegativeLogLikelihoodLossGrad", "ReluGrad", "SigmoidGrad", "SoftmaxGrad", "TanhGrad",
    "BNTrainingReduce", "SyncBatchNormGatherStatsWithCounts", "BNTrainingUpdate", "SyncBatchNormBackwardReduce",
    "SyncBatchNormBackwardElemt",
})

# The tensor plumbing every backend implements itself (allocation, copies, casts, fills).
PLUMBING_OPS: frozenset[str] = frozenset({
    "aten::empty", "aten::empty_strided", "aten::fill_", "aten::zero_", "aten::copy_", "aten::_copy_from",
    "aten::_copy_from_and_resize", "aten::_to_copy", "aten::clone", "aten::_local_scalar_dense",
    "aten::resize_", "aten::_pin_memory", "aten::arange", "aten::full", "aten::zeros", "aten::ones",
    "aten::contiguous", "aten::_has_compatible_shallow_copy_type", "aten::lift_fresh",
})

# Metadata-only ops whose CPU kernel works unchanged on an npu tensor (shares the storage).
META_OPS: frozenset[str] = frozenset({
    "aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::unfold", "aten::alias",
    "aten::_unsafe_view", "aten::set_", "aten::view_as_real", "aten::view_as_complex",
    "aten::_conj", "aten::_neg_view",
})


def pycann_op(name: str, packet: str) -> PycannOp | None:
    """The ``PYCANN_OPS`` entry of an overload: its functional (``add.Tensor``), ``.out`` or
    default overload; None for other overloads (``add.Scalar``, in-place ``add_``)."""
    overload = name[len(packet) + 1:] if name != packet else ""
    if overload in ("", "Tensor", "out", "default", "int", "Tensor_out", "dim"):
        return PYCANN_OPS.get(packet)
    return None


def provider_of(name: str, packet: str) -> Provider:
    """The provider of ATen op ``name`` ("aten::add.Tensor"; ``packet`` = "aten::add") when its
    arguments suit it (a ``PYCANN_OPS`` entry can still decline a call: then ``HOST``)."""
    if packet in META_OPS:
        return Provider.META
    if pycann_op(name, packet) is not None:
        return Provider.PYCANN
    if packet in HOST_OPS or packet in PLUMBING_OPS:
        return Provider.HOST
    return Provider.FALLBACK
