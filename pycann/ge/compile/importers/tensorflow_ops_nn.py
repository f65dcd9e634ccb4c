"""TensorFlow NN ops -> ONNX ops: convolutions, pooling, batch norm, matmuls, softmax, resizes.

Semantics: TensorFlow's op docs (tf.raw_ops); every NHWC op runs as the ONNX NCHW op between
Transposes (``Emitter.nchw_op``). ``SAME`` padding is ONNX ``SAME_UPPER`` (both put the odd
padding row/column at the end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.dtypes import DType, to_numpy
from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_emit import Emitter

Converter = Callable[[Emitter], list[str]]


def _hw(e: Emitter, values: list[int], what: str) -> list[int]:
    if len(values) != 4:
        raise ModelError(f"{e.where()}: {what} must have 4 entries, got {values}")
    return [int(v) for v in (values[1:3] if e.nhwc() else values[2:4])]


def _padding(e: Emitter) -> dict[str, Any]:
    pad = e.attr("padding", "VALID")
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "VALID":
        return {"pads": [0, 0, 0, 0]}
    if pad == "EXPLICIT":
        ep = [int(v) for v in e.attr("explicit_paddings", [])]
        if len(ep) != 8:
            raise ModelError(f"{e.where()}: explicit_paddings must have 8 entries, got {ep}")
        h, w = (1, 2) if e.nhwc() else (2, 3)
        return {"pads": [ep[2 * h], ep[2 * w], ep[2 * h + 1], ep[2 * w + 1]]}
    raise ModelError(f"{e.where()}: padding {pad} is not supported (SAME, VALID, EXPLICIT)")


def _conv_attrs(e: Emitter) -> dict[str, Any]:
    return {"strides": _hw(e, e.attr("strides", [1, 1, 1, 1]), "strides"),
            "dilations": _hw(e, e.attr("dilations", [1, 1, 1, 1]), "dilations"), **_padding(e)}


def conv2d(e: Emitter) -> list[str]:
    w = e.const(1)
    if w is not None:
        wname = e.constant(np.ascontiguousarray(w.transpose(3, 2, 0, 1)), "weight_oihw")  # HWIO -> OIHW
    else:
        wname = e.add("Transpose", [e.input(1)], perm=[3, 2, 0, 1])
    return [e.nchw_op("Conv", e.input(0), [wname], e.nhwc(), **_conv_attrs(e))]


def depthwise_conv2d(e: Emitter) -> list[str]:
    w = e.need_const(1, "filter")
    h, k, c, m = w.shape
    # [H, W, C, M] -> [C*M, 1, H, W]: output channel c*M + m reads input channel c (group = C)
    wname = e.constant(np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(c * m, 1, h, k)), "weight_dw")
    return [e.nchw_op("Conv", e.input(0), [wname], e.nhwc(), group=int(c), **_conv_attrs(e))]


def _pool(onnx_op: str) -> Converter:
    def conv(e: Emitter) -> list[str]:
        attrs = {"kernel_shape": _hw(e, e.attr("ksize", []), "ksize"),
                 "strides": _hw(e, e.attr("strides", [1, 1, 1, 1]), "strides"), **_padding(e)}
        return [e.nchw_op(onnx_op, e.input(0), None, e.nhwc(), **attrs)]

    return conv


def _channel_vector(e: Emitter, v: np.ndarray | str, nchw: bool) -> str:
    """A per-channel [C] vector broadcast over NCHW ([C, 1, 1]) or NHWC ([C])."""
    if isinstance(v, str):
        return e.add("Unsqueeze", [v, e.constant(np.array([1, 2], np.int64), "axes")]) if nchw else v
    return e.constant(v.reshape(-1, 1, 1) if nchw else v, "channel")


def fused_batch_norm(e: Emitter) -> list[str]:
    if e.attr("is_training", False):
        raise ModelError(f"{e.where()}: is_training=True (batch statistics) is a training graph; export the "
                         "model for inference (keras: model(x, training=False)) and freeze it again")
    eps = float(e.attr("epsilon", 1e-4))
    consts = [e.const(i) for i in range(1, 5)]
    x = e.input(0)
    twin = e.twin.get(x) if e.nhwc() else None
    nchw = not e.nhwc() or twin is not None
    # x is T (half in mixed-precision graphs), the statistics U (float): Mul/Add run in x's dtype
    x_dt = e.dtype("T") if e.attr("T") is not None else DType.FLOAT
    if all(c is not None for c in consts):
        scale, offset, mean, var = (np.asarray(c, np.float64) for c in consts)  # type: ignore[arg-type]
        a = scale / np.sqrt(var + eps)
        dt = to_numpy(x_dt)
        mul: str = _channel_vector(e, a.astype(dt), nchw)
        add: str = _channel_vector(e, (offset - mean * a).astype(dt), nchw)
    else:
        s, o, m, v = (e.input(i) for i in range(1, 5))
        u_dt = e.dtype("U") if e.attr("U") is not None else x_dt
        a_v = e.add("Div", [s, e.add("Sqrt", [e.add("Add", [v, e.constant(np.array(eps, to_numpy(u_dt)), "eps")])])])
        b_v = e.add("Sub", [o, e.add("Mul", [m, a_v])])
        if u_dt != x_dt:
            a_v, b_v = (e.add("Cast", [t], to=int(x_dt)) for t in (a_v, b_v))
        mul, add = _channel_vector(e, a_v, nchw), _channel_vector(e, b_v, nchw)
    src = twin if twin is not None else x
    y = e.add("Add", [e.add("Mul", [src, mul]), add], None if twin is not None else e.out())
    out = e.from_nchw(y, e.out()) if twin is not None else y
    # batch_mean / batch_variance / reserve spaces: the running statistics in inference
    return [out, e.input(3), e.input(4), e.input(3), e.input(4), e.input(3)]


def matmul(e: Emitter) -> list[str]:
    operands = []
    for i, flag in ((0, "transpose_a"), (1, "transpose_b")):
        c = e.const(i)
        if e.attr(flag, False):
            operands.append(e.constant(np.ascontiguousarray(c.T), "t") if c is not None
                            else e.add("Transpose", [e.input(i)], perm=[1, 0]))
        else:
            operands.append(e.input(i))
    return [e.add("MatMul", operands, e.out())]


def batch_matmul(e: Emitter) -> list[str]:
    adj_x, adj_y = bool(e.attr("adj_x", False)), bool(e.attr("adj_y", False))
    if not (adj_x or adj_y):
        return [e.add("MatMul", [e.input(0), e.input(1)], e.out())]
    # the rank may be unknown here: Einsum's ellipsis swaps the last two axes at any rank
    eq = f"...{'ji' if adj_x else 'ij'},...{'kj' if adj_y else 'jk'}->...ik"
    return [e.add("Einsum", [e.input(0), e.input(1)], e.out(), equation=eq)]


def softmax(onnx_op: str) -> Converter:
    def conv(e: Emitter) -> list[str]:
        return [e.add(onnx_op, [e.input(0)], e.out(), axis=-1)]

    return conv


def lrn(e: Emitter) -> list[str]:
    r = int(e.attr("depth_radius", 5))
    size = 2 * r + 1
    # TF divides by bias + alpha * sum; ONNX by bias + alpha / size * sum
    return [e.nchw_op("LRN", e.input(0), None, True, size=size, alpha=float(e.attr("alpha", 1.0)) * size,
                      beta=float(e.attr("beta", 0.5)), bias=float(e.attr("bias", 1.0)))]


def _resize(mode: str) -> Converter:
    def conv(e: Emitter) -> list[str]:
        align, half = bool(e.attr("align_corners", False)), bool(e.attr("half_pixel_centers", False))
        attrs: dict[str, Any] = {"mode": mode}
        if align:
            attrs["coordinate_transformation_mode"] = "align_corners"
            attrs["nearest_mode"] = "round_prefer_ceil"  # TF rounds half away from zero
        elif half:
            attrs["coordinate_transformation_mode"] = "half_pixel" if mode == "linear" else "tf_half_pixel_for_nn"
            attrs["nearest_mode"] = "floor"
        else:
            attrs["coordinate_transformation_mode"] = "asymmetric"
            attrs["nearest_mode"] = "floor"
        size = e.const(1)
        if size is not None and (np.ravel(size) <= 0).any():  # TF refuses it; Resize gave an empty tensor
            raise ModelError(f"{e.where()}: size {np.ravel(size).tolist()} must be positive (new height, width)")
        sizes = e.int64(e.input(1))
        x = e.input(0)
        twin = e.twin.get(x)
        if twin is not None:
            y = e.add("Resize", [twin, "", "", sizes], axes=[2, 3], **attrs)
            return [e.from_nchw(y, e.out())]
        return [e.add("Resize", [x, "", "", sizes], e.out(), axes=[1, 2], **attrs)]

    return conv


def _space_depth(onnx_op: str) -> Converter:
    def conv(e: Emitter) -> list[str]:
        attrs: dict[str, Any] = {"blocksize": int(e.attr("block_size", 2))}
        if onnx_op == "DepthToSpace":
            attrs["mode"] = "DCR"  # TF's channel order: (i * bs + j) * C_out + c
        return [e.nchw_op(onnx_op, e.input(0), None, e.nhwc(), **attrs)]

    return conv


def conv2d_backprop_input(e: Emitter) -> list[str]:
    """tf.nn.conv2d_transpose: ConvTranspose with TF's output size (``input_sizes``)."""
    sizes = e.need_const(0, "input_sizes").astype(np.int64).tolist()
    w = e.need_const(1, "filter")  # [H, W, out_channels, in_channels]
    wname = e.constant(np.ascontiguousarray(w.transpose(3, 2, 0, 1)), "weight_iohw")
    attrs = _conv_attrs(e)
    hw = sizes[1:3] if e.nhwc() else sizes[2:4]
    if "auto_pad" in attrs:
        attrs["output_shape"] = hw
    else:
        attrs["output_shape"] = hw
        attrs.pop("pads", None)
        attrs["auto_pad"] = "VALID"
    return [e.nchw_op("ConvTranspose", e.input(2), [wname], e.nhwc(), **attrs)]


NN_OPS: dict[str, Converter] = {
    "Conv2D": conv2d, "DepthwiseConv2dNative": depthwise_conv2d, "Conv2DBackpropInput": conv2d_backprop_input,
    "MaxPool": _pool("MaxPool"), "AvgPool": _pool("AveragePool"),
    "FusedBatchNorm": fused_batch_norm, "FusedBatchNormV2": fused_batch_norm, "FusedBatchNormV3": fused_batch_norm,
    "MatMul": matmul, "BatchMatMul": batch_matmul, "BatchMatMulV2": batch_matmul, "BatchMatMulV3": batch_matmul,
    "Softmax": softmax("Softmax"), "LogSoftmax": softmax("LogSoftmax"), "LRN": lrn,
    "ResizeBilinear": _resize("linear"), "ResizeNearestNeighbor": _resize("nearest"),
    "DepthToSpace": _space_depth("DepthToSpace"), "SpaceToDepth": _space_depth("SpaceToDepth"),
}
