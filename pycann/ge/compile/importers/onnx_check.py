"""``onnx.checker`` on a model's structure, without handing it the weights.

Why: the checker is C++ and takes the model as bytes, so checking a ``ModelProto`` serialises it
whole (GPT-2 6L's 483 MB of weights: ~0.7 s of serialisation and ~0.2 s of checking, two thirds of
compiling it from a proto) and checking a file reads and parses it once more before ``onnx.load``
does. What the checker says about an initializer's values is only whether they fill its dims, which
the importer checks itself as it reads them (``onnx.tensor_to_array``: a ``ModelError`` naming the
tensor). So the checker gets a copy of the model whose large initializers are empty tensors of
their rank, name and type (``structure_of``): every node, attribute, input, output, opset,
function and small constant as they are, a few kilobytes to check.
"""

from __future__ import annotations

import math

import onnx

__all__ = ["SMALL_ELEMENTS", "check_structure", "structure_of"]

SMALL_ELEMENTS = 1024  # initializers up to this many elements are handed to the checker as they are

_MODEL_FIELDS = ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string")


def _placeholder(t: onnx.TensorProto) -> onnx.TensorProto:
    """An empty tensor with ``t``'s name, type and rank (dims all 0: no data to hold)."""
    e = onnx.TensorProto()
    e.name = t.name
    e.data_type = t.data_type
    e.dims.extend([0] * len(t.dims))
    e.raw_data = b""  # (proto2: set, so the checker sees one value field, of the 0 bytes the dims need)
    return e


def structure_of(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for the checker: top-level initializers of more than ``SMALL_ELEMENTS``
    elements (or stored outside the file) replaced by ``_placeholder``s; everything else copied."""
    light = onnx.ModelProto()
    for f in _MODEL_FIELDS:
        if model.HasField(f):
            setattr(light, f, getattr(model, f))
    light.opset_import.extend(model.opset_import)
    light.metadata_props.extend(model.metadata_props)
    light.functions.extend(model.functions)
    light.training_info.extend(model.training_info)
    src, g = model.graph, light.graph
    g.name = src.name
    if src.HasField("doc_string"):
        g.doc_string = src.doc_string
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.quantization_annotation.extend(src.quantization_annotation)
    g.sparse_initializer.extend(src.sparse_initializer)
    for t in src.initializer:
        # (math.prod of the dims, not the data's length: reading ``raw_data`` copies it into Python)
        if math.prod(t.dims) > SMALL_ELEMENTS and t.data_type != onnx.TensorProto.STRING:
            g.initializer.append(_placeholder(t))
        else:
            g.initializer.append(t)
    return light


def check_structure(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_model`` (not ``full_check``) on ``structure_of(model)``; raises what it raises."""
    onnx.checker.check_model(structure_of(model))
