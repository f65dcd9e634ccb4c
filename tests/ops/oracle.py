"""Single-op golden check: ONNX Runtime (or a numpy value) against pycann's OpDef.

``check_op`` builds a one-node ONNX model, runs it in ONNX Runtime, then runs pycann's kernel
(with schema defaults) and infer function, and asserts values, dtypes and inferred shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pycann.dtypes import TensorDesc, from_numpy
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def single_node_model(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    n_outputs: int,
    opset: int,
    const_inputs: Sequence[int] = (),
    domain: str = "",
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    names, feeds, g_inputs, inits = [], {}, [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if i in const_inputs:
            inits.append(onnx.numpy_helper.from_array(np.asarray(x), name))
        else:
            feeds[name] = x
            g_inputs.append(helper.make_tensor_value_info(name, int(from_numpy(x.dtype)), x.shape))
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node], "t", g_inputs, [helper.make_empty_tensor_value_info(o) for o in outs], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 8
    return model, feeds


def run_pycann_op(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    n_outputs: int,
    opset: int,
    const_inputs: Sequence[int] = (),
    domain: str = "",
) -> tuple[list[np.ndarray], list[TensorDesc]]:
    """Run pycann's kernel and infer for one op. Constant inputs are visible to infer."""
    op = lookup(op_type, domain, opset)
    full = op.with_defaults(attrs)
    descs = [None if x is None else TensorDesc(int(from_numpy(x.dtype)), tuple(x.shape)) for x in inputs]
    values = [x if (i in const_inputs and x is not None) else None for i, x in enumerate(inputs)]
    ctx = InferContext("t", op_type, full, descs, values, opset, n_outputs)
    inferred = list(op.infer(ctx))
    outs = list(op.kernel(list(inputs), full))
    return outs, inferred


def check_op(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    opset: int = 17,
    const_inputs: Sequence[int] = (),
    expected: Sequence[np.ndarray] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    domain: str = "",
) -> list[np.ndarray]:
    """Assert pycann == golden (ORT unless ``expected`` is given) for one op; returns pycann's outputs."""
    attrs = attrs or {}
    if expected is None:
        model, feeds = single_node_model(op_type, inputs, attrs, n_outputs, opset, const_inputs, domain)
        expected = run_ort(model, feeds)
    outs, inferred = run_pycann_op(op_type, inputs, attrs, n_outputs, opset, const_inputs, domain)
    assert len(outs) >= len(expected)
    for i, (got, want) in enumerate(zip(outs, expected)):
        assert isinstance(got, np.ndarray), f"output {i} is {type(got)}, not ndarray"
        want = np.asarray(want)
        assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"output {i}: shape {got.shape} != {want.shape}"
        if got.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"output {i}")
        d = inferred[i]
        assert d.dtype == int(from_numpy(got.dtype)), f"infer dtype {d.dtype} for output {i}"
        if d.shape is not None:
            assert len(d.shape) == got.ndim, f"infer rank {d.shape} vs {got.shape}"
            for a, b in zip(d.shape, got.shape):
                assert a is None or isinstance(a, str) or a == b, f"infer shape {d.shape} vs {got.shape}"
    return outs
