"""Caffe layers -> ONNX ops (semantics: BVLC Caffe's src/caffe/layers/*.cpp).

Where Caffe and ONNX differ, the converter says so: Pooling's default ceil rounding and its
average divisor are exactly ONNX's ``ceil_mode=1, count_include_pad=1`` (both drop a last window
that starts in the end padding, both count the declared padding but not the cells past it);
LRN's ``alpha`` is already per window size like ONNX's; InnerProduct flattens from ``axis``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_emit import INT64_MAX, OPSET
from pycann.ge.ir import Graph, Node


class CaffeEmitter:
    """Builds the IR graph layer by layer (``layer`` is the one being converted)."""

    def __init__(self, graph: Graph, blobs: dict[str, list[np.ndarray]]) -> None:
        self.graph = graph
        self.blobs = blobs
        self.current: dict[str, str] = {}  # blob name -> IR value holding it now
        self.defined: set[str] = set()
        self.layer: Any = None
        self._k = 0
        self.ranks: dict[str, int] = {}  # IR value -> rank, propagated layer by layer (out_rank)

    def where(self) -> str:
        return f"layer {self.layer.name} ({self.layer.type})"

    def value(self, blob: str) -> str:
        if blob not in self.current:
            raise ModelError(f"{self.where()}: bottom '{blob}' is produced by no earlier layer")
        return self.current[blob]

    def top(self, i: int = 0) -> str:
        t = self.layer.top[i]
        name = t if t not in self.defined else f"{t}/{self.layer.name}"
        while name in self.defined:
            self._k += 1
            name = f"{t}/{self.layer.name}_{self._k}"
        self.defined.add(name)
        return str(name)

    def fresh(self, base: str) -> str:
        self._k += 1
        return f"{self.layer.name}/{base}/pycann_{self._k}"

    def add(self, op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        o = out or self.fresh(op)
        self.graph.nodes.append(Node(op, list(inputs), [o], dict(attrs), name=self.fresh(self.layer.name),
                                     opset=OPSET, origin=[self.layer.name]))
        return o

    def constant(self, value: Any, base: str = "const", dtype: Any = np.float32) -> str:
        name = self.fresh(base)
        self.graph.initializers[name] = np.asarray(value, dtype=dtype)
        return name

    def weight(self, i: int, what: str) -> np.ndarray:
        got = self.blobs.get(self.layer.name, [])
        if i >= len(got):
            raise ModelError(f"{self.where()}: blob {i} ({what}) is missing: the caffemodel has {len(got)} blob(s) "
                             "for this layer name (is --weight the caffemodel of this prototxt?)")
        return got[i]

    def shaped(self, w: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
        """``w`` reshaped to ``shape`` (one -1 allowed), or ``ModelError`` naming the layer."""
        known = int(np.prod([d for d in shape if d != -1]))
        if (-1 in shape and (known == 0 or w.size % known)) or (-1 not in shape and w.size != known):
            raise ModelError(f"{self.where()}: blob {what} has {w.size} values {list(w.shape)}, which do not fit "
                             f"{list(shape)} (-1: any); is --weight the caffemodel of this prototxt?")
        return w.reshape(shape)

    def has_weight(self, i: int) -> bool:
        return i < len(self.blobs.get(self.layer.name, []))

    def rank(self, v: str) -> int:
        if v in self.ranks:
            return self.ranks[v]
        d = self.graph.descs.get(v)
        if d is None or d.shape is None:
            from pycann.ge.compile.passes.infer_shapes import infer_graph

            infer_graph(self.graph, strict=False)
            d = self.graph.descs.get(v)
        if d is None or d.shape is None:
            raise ModelError(f"{self.where()}: the rank of '{v}' is unknown; give the input shape (--input_shape)")
        return len(d.shape)


Layer = Callable[[CaffeEmitter, list[str]], list[str]]


def out_rank(e: CaffeEmitter, in_rank: int) -> int | None:
    """The rank of the current layer's tops from its first bottom's (None: not known here), so
    layers needing a rank do not run shape inference over the whole graph again."""
    t, la = e.layer.type, e.layer
    if t == "InnerProduct":
        return int(la.inner_product_param.axis) % in_rank + 1
    if t == "Flatten":
        p = la.flatten_param
        return int(p.axis) % in_rank + 1 + (in_rank - 1 - int(p.end_axis) % in_rank)
    if t == "Reshape":
        p = la.reshape_param
        axis = int(p.axis) % (in_rank + 1) if p.axis < 0 else int(p.axis)
        end = in_rank if p.num_axes == -1 else axis + int(p.num_axes)
        return axis + len(p.shape.dim) + in_rank - end
    if t in ("Convolution", "Deconvolution", "Pooling", "BatchNorm", "Scale", "Bias", "ReLU", "PReLU", "ELU",
             "Sigmoid", "TanH", "AbsVal", "BNLL", "Power", "Eltwise", "Concat", "Softmax", "LRN", "Dropout",
             "Split", "Slice", "Permute"):
        return in_rank
    return None


def _hw(p: Any, name: str, default: int) -> list[int]:
    """Caffe's ``kernel_size``/``stride``/``pad`` (repeated) or ``*_h``/``*_w`` pair."""
    h, w = f"{name}_h", f"{name}_w"
    if p.HasField(h) or p.HasField(w):
        return [int(getattr(p, h)), int(getattr(p, w))]
    field = {"kernel": "kernel_size"}.get(name, name)
    raw = getattr(p, field)
    if isinstance(raw, int):  # PoolingParameter: scalar fields with proto defaults
        return [int(raw), int(raw)]
    vals = list(raw)
    if not vals:
        return [default, default]
    return [int(vals[0]), int(vals[-1])] if len(vals) <= 2 else [int(v) for v in vals]


def _conv_attrs(p: Any) -> dict[str, Any]:
    pads = _hw(p, "pad", 0)
    dil = [int(d) for d in p.dilation] or [1]
    return {"kernel_shape": _hw(p, "kernel", 1), "strides": _hw(p, "stride", 1), "pads": pads + pads,
            "dilations": dil * 2 if len(dil) == 1 else dil, "group": int(p.group)}


def convolution(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.convolution_param
    attrs = _conv_attrs(p)
    w = e.weight(0, "weights")
    k = attrs["kernel_shape"]
    if e.layer.type == "Convolution":
        w = e.shaped(w, (int(p.num_output), -1, *k), "weights")
    else:  # Deconvolution: [C_in, C_out / group, kh, kw], ONNX ConvTranspose's layout
        w = e.shaped(w, (-1, int(p.num_output) // attrs["group"], *k), "weights")
    args = [ins[0], e.constant(w, "weight")]
    if p.bias_term:
        args.append(e.constant(e.shaped(e.weight(1, "bias"), (int(p.num_output),), "bias"), "bias"))
    op = "Conv" if e.layer.type == "Convolution" else "ConvTranspose"
    return [e.add(op, args, e.top(), **attrs)]


def pooling(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.pooling_param
    method = type(p).PoolMethod.Name(p.pool)
    if method not in ("MAX", "AVE"):
        raise ModelError(f"{e.where()}: pool {method} is not supported (MAX, AVE)")
    if p.global_pooling:
        return [e.add("GlobalMaxPool" if method == "MAX" else "GlobalAveragePool", ins[:1], e.top())]
    pads = _hw(p, "pad", 0)
    ceil = type(p).RoundMode.Name(p.round_mode) == "CEIL" if hasattr(p, "round_mode") else True
    attrs: dict[str, Any] = {"kernel_shape": _hw(p, "kernel", 1), "strides": _hw(p, "stride", 1),
                             "pads": pads + pads, "ceil_mode": int(ceil)}
    if method == "AVE":
        attrs["count_include_pad"] = 1
    return [e.add("MaxPool" if method == "MAX" else "AveragePool", ins[:1], e.top(), **attrs)]


def inner_product(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.inner_product_param
    axis = int(p.axis)
    w = e.weight(0, "weights")
    w = e.shaped(w, (-1, int(p.num_output)) if p.transpose else (int(p.num_output), -1), "weights")
    x = ins[0]
    flat = e.add("Flatten", [x], axis=axis)
    args = [flat, e.constant(w, "weight")]
    if p.bias_term:
        args.append(e.constant(e.weight(1, "bias").reshape(-1), "bias"))
    if (axis % e.rank(x) if axis < 0 else axis) == 1:
        return [e.add("Gemm", args, e.top(), transB=int(not p.transpose))]
    # Caffe keeps the leading dims: reshape [prod(lead), O] back to lead + [O]
    y = e.add("Gemm", args, transB=int(not p.transpose))
    lead = e.add("Slice", [e.add("Shape", [x]), e.constant([0], "s", np.int64), e.constant([axis], "e", np.int64)])
    shape = e.add("Concat", [lead, e.constant([int(p.num_output)], "o", np.int64)], axis=0)
    return [e.add("Reshape", [y, shape], e.top())]


def _channel(e: CaffeEmitter, x: str, v: np.ndarray, axis: int = 1) -> str:
    """``v`` ([C...]) shaped to broadcast from ``axis`` of ``x``."""
    r = e.rank(x)
    axis = axis % r
    return e.constant(v.reshape(v.shape + (1,) * (r - axis - v.ndim)), "channel")


def batch_norm(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.batch_norm_param
    mean, var = e.weight(0, "mean"), e.weight(1, "variance")
    sf = float(e.weight(2, "scale factor").reshape(-1)[0]) if e.has_weight(2) else 1.0
    sf = 0.0 if sf == 0 else 1.0 / sf  # Caffe's moving-average normaliser
    mean, var = (mean.reshape(-1) * sf).astype(np.float32), (var.reshape(-1) * sf).astype(np.float32)
    c = mean.size
    args = [ins[0], e.constant(np.ones(c), "scale"), e.constant(np.zeros(c), "bias"), e.constant(mean, "mean"),
            e.constant(var, "var")]
    return [e.add("BatchNormalization", args, e.top(), epsilon=float(p.eps))]


def _aligned(e: CaffeEmitter, x: str, v: str, axis: int) -> str:
    """A scale/bias taken from a second bottom, given trailing 1-dims so that its first dim lines up
    with ``axis`` of ``x`` (Caffe's Scale and Bias broadcast it from ``axis``, not from the last dim)."""
    extra = e.rank(x) - axis % e.rank(x) - e.rank(v)
    if extra <= 0:
        return v
    return e.add("Unsqueeze", [v, e.constant(list(range(-extra, 0)), "axes", np.int64)])


def scale(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.scale_param if e.layer.type == "Scale" else e.layer.bias_param
    axis = int(p.axis)
    x = ins[0]
    if e.layer.type == "Bias":
        b = _aligned(e, x, ins[1], axis) if len(ins) > 1 else _channel(e, x, e.weight(0, "bias"), axis)
        return [e.add("Add", [x, b], e.top())]
    s = _aligned(e, x, ins[1], axis) if len(ins) > 1 else _channel(e, x, e.weight(0, "scale"), axis)
    y = e.add("Mul", [x, s], None if p.bias_term else e.top())
    if p.bias_term:
        bi = 1 if len(ins) == 1 else 0
        y = e.add("Add", [y, _channel(e, x, e.weight(bi, "bias"), axis)], e.top())
    return [y]


def relu(e: CaffeEmitter, ins: list[str]) -> list[str]:
    slope = float(e.layer.relu_param.negative_slope)
    if slope:
        return [e.add("LeakyRelu", ins[:1], e.top(), alpha=slope)]
    return [e.add("Relu", ins[:1], e.top())]


def prelu(e: CaffeEmitter, ins: list[str]) -> list[str]:
    w = e.weight(0, "slope").reshape(-1)
    slope = e.constant(w, "slope") if e.layer.prelu_param.channel_shared else _channel(e, ins[0], w)
    return [e.add("PRelu", [ins[0], slope], e.top())]


def _unary(op: str, **attrs: Any) -> Layer:
    def conv(e: CaffeEmitter, ins: list[str]) -> list[str]:
        return [e.add(op, ins[:1], e.top(), **attrs)]

    return conv


def elu(e: CaffeEmitter, ins: list[str]) -> list[str]:
    return [e.add("Elu", ins[:1], e.top(), alpha=float(e.layer.elu_param.alpha))]


def power(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.power_param  # (shift + scale * x) ^ power
    y = ins[0]
    if p.scale != 1:
        y = e.add("Mul", [y, e.constant(p.scale, "scale")])
    if p.shift != 0:
        y = e.add("Add", [y, e.constant(p.shift, "shift")])
    return [e.add("Pow", [y, e.constant(p.power, "power")], e.top()) if p.power != 1 else e.add("Identity", [y], e.top())]


def eltwise(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.eltwise_param
    op = type(p).EltwiseOp.Name(p.operation)
    coeff = list(p.coeff)
    if coeff and op != "SUM":
        raise ModelError(f"{e.where()}: coeff is only defined for operation SUM")
    if coeff and len(coeff) != len(ins):
        raise ModelError(f"{e.where()}: {len(coeff)} coeffs for {len(ins)} bottoms")
    terms = [e.add("Mul", [x, e.constant(c, "coeff")]) if coeff and c != 1 else x for x, c in zip(ins, coeff or [1] * len(ins))]
    onnx_op = {"SUM": "Sum", "PROD": "Mul", "MAX": "Max"}[op]
    if onnx_op == "Mul":
        y = terms[0]
        for t in terms[1:-1]:
            y = e.add("Mul", [y, t])
        return [e.add("Mul", [y, terms[-1]], e.top()) if len(terms) > 1 else e.add("Identity", [y], e.top())]
    return [e.add(onnx_op, terms, e.top())]


def concat(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.concat_param
    axis = int(p.concat_dim) if p.HasField("concat_dim") else int(p.axis)
    return [e.add("Concat", ins, e.top(), axis=axis)]


def softmax(e: CaffeEmitter, ins: list[str]) -> list[str]:
    return [e.add("Softmax", ins[:1], e.top(), axis=int(e.layer.softmax_param.axis))]


def reshape(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.reshape_param
    dims = [int(d) for d in p.shape.dim]
    axis, num = int(p.axis), int(p.num_axes)
    if axis == 0 and num == -1:
        return [e.add("Reshape", [ins[0], e.constant(dims, "shape", np.int64)], e.top())]
    r = e.rank(ins[0])
    axis = axis % (r + 1) if axis < 0 else axis
    end = r if num == -1 else axis + num
    shp = e.add("Shape", [ins[0]])
    parts = [e.add("Slice", [shp, e.constant([0], "s", np.int64), e.constant([axis], "e", np.int64)]),
             e.constant(dims, "dims", np.int64),
             e.add("Slice", [shp, e.constant([end], "s", np.int64), e.constant([INT64_MAX], "e", np.int64)])]
    return [e.add("Reshape", [ins[0], e.add("Concat", parts, axis=0)], e.top())]


def flatten(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.flatten_param
    axis, end = int(p.axis), int(p.end_axis)
    r = e.rank(ins[0])
    axis, end = axis % r, end % r
    if end == r - 1 and axis == 1:  # Caffe's default: [N, C*H*W], ONNX Flatten's form
        return [e.add("Flatten", ins[:1], e.top(), axis=1)]
    shp = e.add("Shape", ins[:1])
    parts = [e.add("Slice", [shp, e.constant([0], "s", np.int64), e.constant([axis], "e", np.int64)]),
             e.constant([-1], "m", np.int64),
             e.add("Slice", [shp, e.constant([end + 1], "s", np.int64), e.constant([INT64_MAX], "e", np.int64)])]
    return [e.add("Reshape", [ins[0], e.add("Concat", parts, axis=0)], e.top())]


def permute(e: CaffeEmitter, ins: list[str]) -> list[str]:
    order = [int(o) for o in e.layer.permute_param.order]
    r = e.rank(ins[0])
    perm = order + [a for a in range(r) if a not in order]
    return [e.add("Transpose", ins[:1], e.top(), perm=perm)]


def lrn(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.lrn_param
    region = type(p).NormRegion.Name(p.norm_region)
    if region != "ACROSS_CHANNELS":
        raise ModelError(f"{e.where()}: norm_region {region} is not supported (ACROSS_CHANNELS)")
    return [e.add("LRN", ins[:1], e.top(), size=int(p.local_size), alpha=float(p.alpha), beta=float(p.beta),
                  bias=float(p.k))]


def identity(e: CaffeEmitter, ins: list[str]) -> list[str]:
    """Dropout (identity at inference: Caffe scales during training) and Split (one copy per top)."""
    return [ins[0] for _ in e.layer.top]


def _static_dim(e: CaffeEmitter, v: str, axis: int) -> int | None:
    """Dim ``axis`` of ``v`` when shape inference knows it as a number, else None."""
    d = e.graph.descs.get(v)
    if d is None or d.shape is None:
        from pycann.ge.compile.passes.infer_shapes import infer_graph

        infer_graph(e.graph, strict=False)
        d = e.graph.descs.get(v)
    if d is None or d.shape is None or not -len(d.shape) <= axis < len(d.shape):
        return None
    dim = d.shape[axis]
    return dim if isinstance(dim, int) and dim >= 0 else None


def slice_(e: CaffeEmitter, ins: list[str]) -> list[str]:
    p = e.layer.slice_param
    axis = int(p.slice_dim) if p.HasField("slice_dim") else int(p.axis)
    points = [int(v) for v in p.slice_point]
    n = len(e.layer.top)
    if not points:
        outs = [e.top(i) for i in range(n)]
        e.graph.nodes.append(Node("Split", [ins[0]], outs, {"axis": axis, "num_outputs": n}, name=e.fresh("split"),
                                  opset=OPSET, origin=[e.layer.name]))
        return outs
    if len(points) != n - 1:
        raise ModelError(f"{e.where()}: {len(points)} slice_points for {n} tops (need {n - 1})")
    # Caffe's SliceLayer CHECKs each point > the one before (> 0 first) and the tops' sizes to add up
    # to the axis; ONNX Slice would clamp instead: empty or overlapping tops, silently
    if any(b <= a for a, b in zip([0, *points], points)):
        raise ModelError(f"{e.where()}: slice_point {points} must increase strictly from above 0 (Caffe's "
                         "SliceLayer refuses it too)")
    size = _static_dim(e, ins[0], axis)
    if size is not None and points[-1] >= size:
        raise ModelError(f"{e.where()}: slice_point {points[-1]} is not inside axis {axis} of bottom "
                         f"'{e.layer.bottom[0]}' (size {size}): the last top would be empty")
    bounds = [0, *points, INT64_MAX]
    return [e.add("Slice", [ins[0], e.constant([bounds[i]], "s", np.int64), e.constant([bounds[i + 1]], "e", np.int64),
                            e.constant([axis], "a", np.int64)], e.top(i)) for i in range(n)]


LAYERS: dict[str, Layer] = {
    "Convolution": convolution, "Deconvolution": convolution, "Pooling": pooling, "InnerProduct": inner_product,
    "BatchNorm": batch_norm, "Scale": scale, "Bias": scale, "ReLU": relu, "PReLU": prelu, "ELU": elu,
    "Sigmoid": _unary("Sigmoid"), "TanH": _unary("Tanh"), "AbsVal": _unary("Abs"), "BNLL": _unary("Softplus"),
    "Power": power, "Eltwise": eltwise, "Concat": concat, "Softmax": softmax, "Reshape": reshape,
    "Flatten": flatten, "Permute": permute, "LRN": lrn, "Dropout": identity, "Split": identity, "Slice": slice_,
}
