"""Random small ONNX models for the fuzzer: a chain of 1-5 nodes drawn from a table of ops with
attribute values both in and out of their valid ranges, random input shapes and dtypes,
constant operands of random shapes, occasionally a dangling input, a duplicate output name or a
random opset. The models are built with onnx.helper (no checker run here: pycann runs it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

SMALL_INT = st.integers(-3, 4)
AXIS = st.integers(-5, 5)
INTS = st.lists(SMALL_INT, min_size=0, max_size=5)
FLOAT = st.floats(-4, 4, allow_nan=False, width=32)

# op type -> (number of tensor inputs, {attribute: strategy})
UNARY: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Abs": {}, "Neg": {}, "Exp": {}, "Log": {}, "Sqrt": {}, "Floor": {},
    "Identity": {}, "Softmax": {"axis": AXIS}, "LogSoftmax": {"axis": AXIS}, "Flatten": {"axis": AXIS},
    "LeakyRelu": {"alpha": FLOAT}, "Elu": {"alpha": FLOAT}, "HardSigmoid": {"alpha": FLOAT, "beta": FLOAT},
    "Transpose": {"perm": st.permutations(range(4)).map(list) | INTS},
    "ReduceMean": {"axes": INTS, "keepdims": st.integers(0, 1)}, "ReduceMax": {"axes": INTS, "keepdims": st.integers(-1, 2)},
    "ArgMax": {"axis": AXIS, "keepdims": st.integers(0, 1)}, "Cast": {"to": st.sampled_from([1, 6, 7, 9, 10, 11, 0, 99])},
    "Shape": {}, "Size": {}, "Not": {}, "IsNaN": {}, "Sign": {}, "Round": {}, "Erf": {},
    "CumSum": {}, "Dropout": {}, "GlobalAveragePool": {}, "LRN": {"size": st.integers(-1, 5)},
    "MaxPool": {"kernel_shape": st.lists(st.integers(-1, 3), min_size=0, max_size=3),
                "strides": st.lists(st.integers(0, 3), min_size=1, max_size=2),
                "pads": st.lists(st.integers(-1, 2), min_size=0, max_size=4)},
    "AveragePool": {"kernel_shape": st.lists(st.integers(0, 3), min_size=1, max_size=2)},
    "Squeeze": {}, "Unsqueeze": {}, "DepthToSpace": {"blocksize": st.integers(-1, 3)},
    "InstanceNormalization": {"epsilon": FLOAT}, "Hardmax": {"axis": AXIS},
}
BINARY: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "Add": {}, "Sub": {}, "Mul": {}, "Div": {}, "Pow": {}, "Max": {}, "Min": {}, "Equal": {}, "Less": {},
    "MatMul": {}, "Mod": {"fmod": st.integers(-1, 2)}, "And": {}, "PRelu": {}, "Expand": {}, "Reshape": {},
    "Tile": {}, "Gather": {"axis": AXIS}, "Concat": {"axis": AXIS}, "Conv": {"group": st.integers(0, 3),
                                                                          "pads": INTS, "strides": INTS},
    "Gemm": {"transA": st.integers(0, 1), "transB": st.integers(0, 1), "alpha": FLOAT},
    "Where": {}, "Slice": {}, "TopK": {"axis": AXIS}, "Pad": {"mode": st.sampled_from(["constant", "reflect", "edge", "x"])},
    "Split": {"axis": AXIS}, "CumSum": {}, "ReduceSum": {"keepdims": st.integers(0, 1)}, "Clip": {},
    "Squeeze": {}, "Unsqueeze": {}, "OneHot": {}, "Resize": {"mode": st.sampled_from(["nearest", "linear", "cubic", "q"])},
}
DTYPES = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
          TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.UINT8]
SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=4)


def _array(draw: st.DrawFn, dtype: int, shape: list[int]) -> np.ndarray:
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    vals = draw(st.lists(st.integers(-3, 5), min_size=n, max_size=n))
    return np.array(vals).astype(np_dtype).reshape(shape)


@st.composite
def models(draw: st.DrawFn) -> onnx.ModelProto:
    """One random model (see the module docstring)."""
    in_dtype = draw(st.sampled_from(DTYPES))
    in_shape = draw(SHAPES)
    inputs = [helper.make_tensor_value_info("x", in_dtype, in_shape)]
    values = ["x"]
    inits: list[TensorProto] = []
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        binary = draw(st.booleans())
        table = BINARY if binary else UNARY
        op = draw(st.sampled_from(sorted(table)))
        attrs = {k: draw(s) for k, s in table[op].items() if draw(st.booleans())}
        attrs = {k: v for k, v in attrs.items() if v != []}  # onnx.helper cannot type an empty list
        ins = [draw(st.sampled_from(values))]
        if binary:
            if draw(st.integers(0, 9)) == 0:
                ins.append(draw(st.sampled_from(values)))
            else:
                c = f"c{i}"
                dt = draw(st.sampled_from([in_dtype, TensorProto.INT64, TensorProto.FLOAT]))
                inits.append(numpy_helper.from_array(_array(draw, dt, draw(SHAPES)), c))
                ins.append(c)
        if draw(st.integers(0, 19)) == 0:
            ins.append("dangling")
        outs = [f"v{i}"] + ([f"v{i}_b"] if op in ("TopK", "Split", "Dropout") else [])
        nodes.append(helper.make_node(op, ins, outs, name=f"n{i}", **attrs))
        values += outs
    final = values[-1] if draw(st.integers(0, 19)) else "x"
    out_type = draw(st.sampled_from([TensorProto.FLOAT, in_dtype, TensorProto.UNDEFINED]))
    outputs = [helper.make_tensor_value_info(final, out_type, None)]
    opset = draw(st.sampled_from([13, 13, 17, 17, 19, 21, 7, 11, 28]))
    g = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def feed_for(model: onnx.ModelProto, draw: Callable[[st.SearchStrategy[Any]], Any] | None = None) -> dict[str, np.ndarray]:
    """A deterministic input matching the model's declared input."""
    vi = model.graph.input[0]
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    np_dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    n = int(np.prod(dims)) if dims else 1
    return {vi.name: (np.arange(n) % 7 - 3).astype(np_dtype).reshape(dims)}
