"""ONNX graph work for AMCT: find the quantisable layers, fold BatchNormalization into the conv
before them (AMCT's ``do_fusion``), and write Quantize/DequantizeLinear pairs (QDQ, the ONNX
standard form that ONNX Runtime and pycann's atc read).

A quantisable layer is a ``Conv``, a ``Gemm`` (``transA = 0``) or a rank-2-weight ``MatMul`` whose
weight is an initializer. Its weight's output-channel axis (per-channel scales) and its input's
channel axis (the per-channel mean, for bias correction) are recorded in ``Layer``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pycann.errors import ModelError


@dataclass(frozen=True)
class Layer:
    """One quantisable node: ``name`` (unique; generated when the node has none), its activation
    input, weight initializer, optional bias initializer, weight out-channel axis, input channel axis."""

    name: str
    op_type: str
    activation: str
    weight: str
    bias: str
    weight_axis: int
    input_axis: int


def name_nodes(model: onnx.ModelProto) -> None:
    """Give every unnamed node a unique name (AMCT's config and record key layers by name)."""
    seen: set[str] = set()
    for i, n in enumerate(model.graph.node):
        if not n.name or n.name in seen:
            n.name = f"{n.op_type}_{i}"
        seen.add(n.name)


def _inits(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Top-level ``Constant`` nodes holding a tensor (``value``) become initializers, so weights that
    an exporter wrote as Constants (paddle2onnx: PP-OCR) are found as layers. Returns how many."""
    g = model.graph
    keep, moved = [], 0
    for n in g.node:
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and set(attrs) == {"value"} and len(n.output) == 1:
            t = onnx.TensorProto()
            t.CopyFrom(attrs["value"].t)
            t.name = n.output[0]
            g.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    if moved:
        del g.node[:]
        g.node.extend(keep)
    return moved


def float16_layers(model: onnx.ModelProto) -> list[str]:
    """Conv/Gemm/MatMul nodes with a constant float16 weight: AMCT's QDQ layout (float32 scales on
    the activation) does not apply to them, so they are refused rather than written as invalid QDQ."""
    inits = _inits(model)
    return [n.name for n in model.graph.node
            if n.op_type in ("Conv", "Gemm", "MatMul") and n.domain in ("", "ai.onnx") and len(n.input) >= 2
            and n.input[1] in inits and inits[n.input[1]].data_type == onnx.TensorProto.FLOAT16]


def refuse_float16(model: onnx.ModelProto, path: str) -> None:
    """Raise ``ModelError`` naming the float16 layers of ``model`` (see ``float16_layers``)."""
    names = float16_layers(model)
    if names:
        raise ModelError(f"AMCT: {path} has float16 layers ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}); "
                         "AMCT quantises float32 models: convert the model to float32 first")


def find_layers(model: onnx.ModelProto) -> list[Layer]:
    """The quantisable layers of ``model`` in graph order (float32 weights only)."""
    inits = _inits(model)
    out: list[Layer] = []
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or len(n.input) < 2 or n.input[1] not in inits:
            continue
        w = inits[n.input[1]]
        if w.data_type != onnx.TensorProto.FLOAT:
            continue
        bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else ""
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Conv" and len(w.dims) >= 3:
            out.append(Layer(n.name, "Conv", n.input[0], n.input[1], bias, 0, 1))
        elif n.op_type == "Gemm" and not attrs.get("transA", 0) and len(w.dims) == 2:
            out.append(Layer(n.name, "Gemm", n.input[0], n.input[1], bias, 0 if attrs.get("transB", 0) else 1, -1))
        elif n.op_type == "MatMul" and len(w.dims) == 2:
            out.append(Layer(n.name, "MatMul", n.input[0], n.input[1], "", 1, -1))
    return out


def fold_batchnorm(model: onnx.ModelProto, skip: list[str] | None = None) -> list[str]:
    """Fold each ``Conv -> BatchNormalization`` (constant statistics, the conv output read only
    by the BN) into the conv's weight and bias. Returns the folded BN names."""
    inits = _inits(model)
    g = model.graph
    readers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in g.output}
    by_out = {o: n for n in g.node for o in n.output}
    folded: list[str] = []
    drop: list[onnx.NodeProto] = []
    for bn in g.node:
        if bn.op_type != "BatchNormalization" or bn.name in (skip or []) or len(bn.output) != 1:
            continue
        conv = by_out.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or conv.input[1] not in inits:
            continue
        if readers.get(bn.input[0], 0) != 1 or bn.input[0] in outputs or any(i not in inits for i in bn.input[1:5]):
            continue
        eps = next((helper.get_attribute_value(a) for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(inits[i]).astype(np.float64) for i in bn.input[1:5])
        w = numpy_helper.to_array(inits[conv.input[1]])
        b = (numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
             if len(conv.input) > 2 and conv.input[2] in inits else np.zeros(w.shape[0]))
        s = gamma / np.sqrt(var + eps)
        w2 = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = ((b - mean) * s + beta).astype(w.dtype)
        wname, bname = f"{conv.name}_amct_w", f"{conv.name}_amct_b"
        g.initializer.extend([numpy_helper.from_array(w2, wname), numpy_helper.from_array(b2, bname)])
        del conv.input[1:]
        conv.input.extend([wname, bname])
        conv.output[0] = bn.output[0]
        drop.append(bn)
        folded.append(bn.name)
    for bn in drop:
        g.node.remove(bn)
    return folded


def add_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    """Make ``names`` graph outputs too (element type float, shape unknown), for recording."""
    have = {o.name for o in model.graph.output}
    for v in names:
        if v not in have:
            model.graph.output.append(helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None))
            have.add(v)


def _node_index(model: onnx.ModelProto, name: str) -> int:
    for i, n in enumerate(model.graph.node):
        if n.name == name:
            return i
    raise ModelError(f"AMCT: layer {name!r} is not a node of the model")


@dataclass(frozen=True)
class LayerQuant:
    """What ``save_model`` writes for one layer: activation (scale, zero point, uint8 or int8),
    per-channel weight scales, int8 weight, and the corrected float bias (or None)."""

    layer: Layer
    act_scale: float
    act_zero_point: int
    act_unsigned: bool
    w_scales: np.ndarray
    w_int8: np.ndarray
    bias: np.ndarray | None
    reduce_range: bool = False


def insert_qdq(model: onnx.ModelProto, quants: list[LayerQuant], fake: bool) -> None:
    """Rewrite each layer to read ``DQ(Q(x))`` and a dequantised weight.

    ``fake=True`` (the fake-quant model): the weight is stored as float (int8 value x scale) and the
    bias as float, so any ONNX runtime reproduces the int8 rounding without int8 kernels. ``fake=False``
    (the deploy model, for atc): the weight is an int8 initializer with a per-channel
    ``DequantizeLinear`` and the bias an int32 one at scale ``act_scale * w_scale``, the layout of
    QDQ models from ONNX Runtime's quantiser."""
    g = model.graph
    for q in quants:
        lay = q.layer
        idx = _node_index(model, lay.name)
        node = g.node[idx]
        p = lay.name
        zp_t = np.uint8 if q.act_unsigned else np.int8
        g.initializer.extend([numpy_helper.from_array(np.array(q.act_scale, np.float32), f"{p}_x_scale"),
                              numpy_helper.from_array(np.array(q.act_zero_point, zp_t), f"{p}_x_zp")])
        x_in = lay.activation
        new: list[onnx.NodeProto] = []
        if q.reduce_range:  # 7-bit: the Clip makes "quantised value <= 127" visible to atc
            lo, hi = (0 - q.act_zero_point) * q.act_scale, (127 - q.act_zero_point) * q.act_scale
            g.initializer.extend([numpy_helper.from_array(np.array(lo, np.float32), f"{p}_x_lo"),
                                  numpy_helper.from_array(np.array(hi, np.float32), f"{p}_x_hi")])
            new.append(helper.make_node("Clip", [x_in, f"{p}_x_lo", f"{p}_x_hi"], [f"{p}_x_clip"], name=f"{p}_clip7"))
            x_in = f"{p}_x_clip"
        new += [helper.make_node("QuantizeLinear", [x_in, f"{p}_x_scale", f"{p}_x_zp"], [f"{p}_x_q"],
                                 name=f"{p}_quant"),
                helper.make_node("DequantizeLinear", [f"{p}_x_q", f"{p}_x_scale", f"{p}_x_zp"], [f"{p}_x_dq"],
                                 name=f"{p}_dequant")]
        shape = [1] * q.w_int8.ndim
        shape[lay.weight_axis] = -1
        if fake:
            w = (q.w_int8.astype(np.float32) * q.w_scales.reshape(shape)).astype(np.float32)
            g.initializer.append(numpy_helper.from_array(w, f"{p}_w_fq"))
            w_in = f"{p}_w_fq"
        else:
            g.initializer.extend([numpy_helper.from_array(q.w_int8, f"{p}_w_int8"),
                                  numpy_helper.from_array(q.w_scales.astype(np.float32), f"{p}_w_scale"),
                                  numpy_helper.from_array(np.zeros(q.w_scales.size, np.int8), f"{p}_w_zp")])
            new.append(helper.make_node("DequantizeLinear", [f"{p}_w_int8", f"{p}_w_scale", f"{p}_w_zp"], [f"{p}_w_dq"],
                                        name=f"{p}_w_dequant", axis=lay.weight_axis))
            w_in = f"{p}_w_dq"
        node.input[0] = f"{p}_x_dq"
        node.input[1] = w_in
        if q.bias is not None:
            b_scale = (q.w_scales.astype(np.float64) * q.act_scale).astype(np.float32)
            b_int = np.clip(np.round(q.bias.astype(np.float64) / b_scale), -(2**31), 2**31 - 1).astype(np.int32)
            if fake:
                g.initializer.append(numpy_helper.from_array((b_int * b_scale).astype(np.float32), f"{p}_b_fq"))
                b_in = f"{p}_b_fq"
            else:
                g.initializer.extend([numpy_helper.from_array(b_int, f"{p}_b_int32"),
                                      numpy_helper.from_array(b_scale, f"{p}_b_scale"),
                                      numpy_helper.from_array(np.zeros(b_int.size, np.int32), f"{p}_b_zp")])
                new.append(helper.make_node("DequantizeLinear", [f"{p}_b_int32", f"{p}_b_scale", f"{p}_b_zp"],
                                            [f"{p}_b_dq"], name=f"{p}_b_dequant", axis=0))
                b_in = f"{p}_b_dq"
            if len(node.input) > 2:
                node.input[2] = b_in
            else:
                node.input.append(b_in)
        for k, n in enumerate(new):
            g.node.insert(idx + k, n)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)


def ensure_opset(model: onnx.ModelProto, version: int = 13) -> None:
    """Convert ``model`` to at least ``version`` of the default domain (per-channel
    DequantizeLinear needs 13), before any QDQ node is written."""
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < version:
            converted = onnx.version_converter.convert_version(model, version)
            model.CopyFrom(converted)
            return
