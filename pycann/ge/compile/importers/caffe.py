"""Caffe ``.prototxt`` + ``.caffemodel`` (``atc --framework=0 --weight=...``) -> pycann IR ``Graph``.

The network comes from the prototxt, the blobs from the caffemodel, matched by layer name; both
parse with Caffe's own ``caffe.proto`` (caffe_proto.py). Layer semantics: BVLC Caffe's layer
implementations (src/caffe/layers/*.cpp); the per-layer converters are in caffe_layers.py.
Values are named by their top blob; a blob redefined in place (``ReLU`` with top == bottom) gets
``<blob>/<layer>`` for the new value. Layers excluded from the TEST phase are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ModelError, OptionError, UnsupportedOpError
from pycann.ge.compile.importers.caffe_layers import LAYERS, CaffeEmitter, out_rank
from pycann.ge.compile.importers.caffe_proto import read_caffemodel, read_prototxt
from pycann.ge.compile.importers.tensorflow_emit import OPSET
from pycann.ge.ir import Graph, Node

TEST_PHASE = 1
# V1LayerParameter.LayerType names (old prototxts: ``layers { type: CONVOLUTION }``) -> layer types
V1_TYPES = {
    "CONVOLUTION": "Convolution", "DECONVOLUTION": "Deconvolution", "POOLING": "Pooling",
    "INNER_PRODUCT": "InnerProduct", "RELU": "ReLU", "SIGMOID": "Sigmoid", "TANH": "TanH",
    "SOFTMAX": "Softmax", "LRN": "LRN", "CONCAT": "Concat", "DROPOUT": "Dropout", "ELTWISE": "Eltwise",
    "FLATTEN": "Flatten", "SPLIT": "Split", "SLICE": "Slice", "POWER": "Power", "ABSVAL": "AbsVal",
    "BNLL": "BNLL", "EXP": "Exp", "DATA": "Data", "SOFTMAX_LOSS": "SoftmaxWithLoss", "ACCURACY": "Accuracy",
}


def supported_layers() -> list[str]:
    """Every Caffe layer type the importer converts (docs/importers.md lists them)."""
    return sorted(LAYERS)


class _Layer:
    """One layer of either format: ``type`` always a string (V1's enum mapped through V1_TYPES)."""

    def __init__(self, proto: Any, v1: bool) -> None:
        self.proto = proto
        self.name = str(proto.name)
        if v1:
            enum = type(proto).DESCRIPTOR.fields_by_name["type"].enum_type
            raw = enum.values_by_number[proto.type].name
            self.type = V1_TYPES.get(raw, raw.title().replace("_", ""))
        else:
            self.type = str(proto.type)
        self.bottom = [str(b) for b in proto.bottom]
        self.top = [str(t) for t in proto.top]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proto, name)


def _in_test_phase(layer: Any) -> bool:
    if layer.include:
        return any(not r.HasField("phase") or r.phase == TEST_PHASE for r in layer.include)
    return not any(r.HasField("phase") and r.phase == TEST_PHASE for r in layer.exclude)


def blob_array(blob: Any) -> np.ndarray:
    """A ``BlobProto`` as float32 (shape from ``shape.dim``, else legacy num/channels/height/width)."""
    data = np.asarray(blob.data if len(blob.data) else blob.double_data, dtype=np.float32)
    if blob.HasField("shape"):
        shape = tuple(int(d) for d in blob.shape.dim)
    else:
        shape = tuple(int(v) for v in (blob.num, blob.channels, blob.height, blob.width))
    if int(np.prod(shape)) != data.size:
        raise ModelError(f"blob of shape {list(shape)} holds {data.size} values")
    return data.reshape(shape)


def _weights(weights: Any) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[np.ndarray]] = {}
    for layer in list(weights.layer) + list(weights.layers):
        if len(layer.blobs):
            try:
                out[str(layer.name)] = [blob_array(b) for b in layer.blobs]
            except ModelError as e:
                raise ModelError(f"layer {layer.name} in the caffemodel: {e}") from None
    return out


def _inputs(net: Any, layers: list[_Layer], shapes: Mapping[str, Sequence[Any]]) -> list[tuple[str, list[int]]]:
    ins: list[tuple[str, list[int]]] = []
    for i, name in enumerate(net.input):
        if i < len(net.input_shape):
            dims = [int(d) for d in net.input_shape[i].dim]
        else:
            dims = [int(d) for d in net.input_dim[4 * i: 4 * i + 4]]
        ins.append((str(name), dims))
    for layer in layers:
        if layer.type == "Input":
            for j, top in enumerate(layer.top):
                sh = layer.input_param.shape
                dims = [int(d) for d in sh[min(j, len(sh) - 1)].dim] if len(sh) else []
                ins.append((top, dims))
    for n, dims in ins:
        bad = [d for d in dims if d < -1]
        if bad and n not in shapes:  # (-1: dynamic, as atc's --input_shape; Caffe itself takes no negative dim)
            raise ModelError(f"input [{n}]: the prototxt declares dims {dims}; {bad[0]} is no size (use -1 for a "
                             f"dynamic dim, or give --input_shape \"{n}:...\")")
    for n, dims in ins:  # as the compiler checks an ONNX/TF input (here the prototxt's dims are replaced first)
        if n in shapes and dims and len(shapes[n]) != len(dims):
            raise OptionError(f"E10001: --input_shape gives input [{n}] rank {len(shapes[n])} but the model declares "
                              f"{len(dims)} dims {dims}")
    # --input_shape dims: ints, -1 (dynamic) or (lo, hi) ranges (dynamic here; the compiler records ranges)
    return [(n, [d if isinstance(d, int) else -1 for d in shapes[n]] if n in shapes else dims) for n, dims in ins]


def load_caffe(model: str | os.PathLike[str], weight: str | os.PathLike[str] | None,
               out_nodes: Sequence[tuple[str, int]] = (),
               input_shape: Mapping[str, Sequence[Any]] | None = None) -> Graph:
    """Import a Caffe network (prototxt) with its weights (caffemodel).

    ``out_nodes``: ``(layer name, top index)`` pairs (atc's ``--out_nodes``); default: every blob
    nobody reads. ``input_shape`` (``--input_shape``, by input blob name) replaces the prototxt's
    input dims (fixed ints; -1 for a dynamic dim). Raises ``ModelError`` (unreadable files, a layer
    without its blobs, bad parameters), ``UnsupportedOpError`` (E19010, every unsupported layer at
    once), ``OptionError`` (E10016: an ``out_nodes`` layer that does not exist).
    """
    net = read_prototxt(model)
    v1 = not len(net.layer) and bool(len(net.layers))
    layers = [_Layer(p, v1) for p in (net.layers if v1 else net.layer) if _in_test_phase(p)]
    bad = [f"{la.name} ({la.type})" for la in layers if la.type not in LAYERS and la.type != "Input"]
    if bad:
        raise UnsupportedOpError(
            f"E19010: No parser is registered for {len(bad)} Caffe layer(s) [framework type Caffe]: "
            f"{'; '.join(bad)}. pycann converts the layers listed in docs/importers.md", code="E19010")
    blobs = _weights(read_caffemodel(weight)) if weight else {}
    g = Graph(name=str(net.name) or "main", opsets={"": OPSET})
    g.metadata["producer"] = "caffe prototxt"
    e = CaffeEmitter(g, blobs)
    for name, dims in _inputs(net, layers, input_shape or {}):
        g.inputs.append(name)
        g.descs[name] = TensorDesc(DType.FLOAT, tuple(None if d < 0 else d for d in dims) if dims else None)
        e.current[name] = name
        e.defined.add(name)
        if dims:
            e.ranks[name] = len(dims)
    if not g.inputs:
        raise ModelError("the prototxt declares no input (input:/input_shape or an Input layer): use a deploy prototxt")
    by_layer: dict[str, list[str]] = {}
    # one entry per top a layer produced: [value, read by a later layer]; a blob's latest entry is
    # the one its readers consume (Caffe's net outputs are the tops nobody consumes afterwards)
    entries: list[list[Any]] = []
    latest: dict[str, list[Any]] = {}
    for layer in layers:
        if layer.type == "Input":
            continue
        e.layer = layer
        ins = [e.value(b) for b in layer.bottom]
        for b in layer.bottom:
            if b in latest:
                latest[b][1] = True
        try:
            outs = LAYERS[layer.type](e, ins)
        except (ValueError, IndexError, KeyError) as exc:  # a parameter the converter did not check
            raise ModelError(f"{e.where()}: {exc}") from None
        if len(outs) != len(layer.top):
            raise ModelError(f"layer {layer.name} ({layer.type}): {len(layer.top)} tops, the converter made {len(outs)}")
        if ins and ins[0] in e.ranks:
            r = out_rank(e, e.ranks[ins[0]])
            if r is not None:
                e.ranks.update((v, r) for v in outs)
        by_layer[layer.name] = outs
        for top, v in zip(layer.top, outs):
            e.current[top] = v
            latest[top] = [v, False]
            entries.append(latest[top])
    if out_nodes:
        g.outputs = []
        for lname, idx in out_nodes:
            if lname not in by_layer:
                raise OptionError(f"E10016: layer [{lname}] in --out_nodes is not in the Caffe network", code="E10016")
            if idx >= len(by_layer[lname]):
                raise OptionError(f"E10001: layer [{lname}] has {len(by_layer[lname])} tops; --out_nodes asks for {idx}")
            g.outputs.append(by_layer[lname][idx])
    else:
        g.outputs = [v for v, was_read in entries if not was_read]
    if not g.outputs:
        raise ModelError("the Caffe net has no output: it declares inputs but no layer (in the TEST phase) "
                         "that computes from them")
    return _distinct_outputs(g)


def _distinct_outputs(g: Graph) -> Graph:
    """An output that is a graph input or repeats an earlier output (a net ending in Dropout or Split,
    which pass their bottom through) gets its own ``Identity``, so every output is a distinct value."""
    seen: set[str] = set(g.inputs)
    for i, v in enumerate(g.outputs):
        if v in seen:
            g.outputs[i] = out = f"{v}/pycann_output_{i}"
            g.nodes.append(Node("Identity", [v], [out], {}, name=out, opset=OPSET))
        seen.add(g.outputs[i])
    return g
