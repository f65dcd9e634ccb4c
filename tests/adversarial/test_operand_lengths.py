"""Per-channel and broadcast operands of the wrong length (issue 14, memory safety).

Each case is a valid ONNX model (onnx.checker passes) whose bias / scale / zero point / slope does
not fit the op. ONNX Runtime refuses every one (the golden: asserted here too); pycann must refuse
it at compile time with a one-line ``ShapeError`` that names the node, the op and the input,
never compute with it (the oneDNN convolution read past a short bias before). The kernels check
again at run time, for dims that were symbolic when compiling and for the single-op API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import KernelError, OperandError, ShapeError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ge.run.singleop import run_op

F = TensorProto.FLOAT
RNG = np.random.default_rng(14)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@dataclass
class Case:
    """One op with one bad operand: ``inits`` become initializers, ``x`` is the fed input."""

    op: str
    inputs: list[str]
    inits: dict[str, np.ndarray]
    x: np.ndarray
    bad: str  # the input the error must name
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 17
    x_type: int = F
    y_type: int = F

    def model(self) -> onnx.ModelProto:
        node = helper.make_node(self.op, self.inputs, ["y"], **self.attrs)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", self.x_type, list(self.x.shape))],
                              [helper.make_tensor_value_info("y", self.y_type, [None] * self.x.ndim)],
                              [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def _conv(nb: int, m: int = 8, **kw: Any) -> Case:
    return Case("Conv", ["x", "w", "b"], {"w": _f(m, 4, 3, 3), "b": _f(nb)}, _f(1, 4, 6, 6), "B", kw)


def _deconv(nb: int, m: int = 8, group: int = 1) -> Case:
    return Case("ConvTranspose", ["x", "w", "b"], {"w": _f(4, m // group, 3, 3), "b": _f(nb)}, _f(1, 4, 6, 6), "B",
                {"group": group})


def _bn(bad: str, shape: tuple[int, ...]) -> Case:
    inits = {n: np.abs(_f(6)) + 0.5 for n in ("scale", "B", "mean", "var")}
    inits[bad] = np.abs(_f(*shape)) + 0.5
    return Case("BatchNormalization", ["x", "scale", "B", "mean", "var"], inits, _f(2, 6, 3, 3),
                {"mean": "input_mean", "var": "input_var"}.get(bad, bad))


def _qconv(bad: str, shape: tuple[int, ...]) -> Case:
    inits: dict[str, np.ndarray] = {
        "xs": np.array(0.05, np.float32), "xz": np.array(128, np.uint8), "w": RNG.integers(0, 255, (4, 3, 3, 3),
                                                                                           dtype=np.uint8),
        "ws": np.full(4, 0.02, np.float32), "wz": np.full(4, 120, np.uint8), "ys": np.array(0.1, np.float32),
        "yz": np.array(100, np.uint8), "b": RNG.integers(-50, 50, 4, dtype=np.int32)}
    v = inits[bad]
    inits[bad] = np.resize(v, shape).astype(v.dtype)
    names = {"ws": "w_scale", "wz": "w_zero_point", "b": "B", "xs": "x_scale"}
    return Case("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], inits,
                RNG.integers(0, 255, (1, 3, 5, 5), dtype=np.uint8), names[bad], x_type=TensorProto.UINT8,
                y_type=TensorProto.UINT8)


def _rnn(op: str, gates: int, bad: str, shape: tuple[int, ...]) -> Case:
    hidden, inp = 4, 3
    inits = {"W": _f(1, gates * hidden, inp), "R": _f(1, gates * hidden, hidden), "B": _f(1, 2 * gates * hidden),
             "h0": _f(1, 2, hidden)}
    inits[bad] = _f(*shape)
    c = Case(op, ["x", "W", "R", "B", "", "h0"], inits, _f(5, 2, inp), {"h0": "initial_h"}.get(bad, bad),
             {"hidden_size": hidden}, opset=14)
    c.y_type = F
    return c


CASES: dict[str, Callable[[], Case]] = {
    "lstm_bias_short": lambda: _rnn("LSTM", 4, "B", (1, 30)),
    "lstm_bias_long": lambda: _rnn("LSTM", 4, "B", (1, 40)),
    "lstm_w_input_size": lambda: _rnn("LSTM", 4, "W", (1, 16, 4)),
    "lstm_r_hidden": lambda: _rnn("LSTM", 4, "R", (1, 16, 5)),
    "lstm_initial_h_batch": lambda: _rnn("LSTM", 4, "h0", (1, 3, 4)),
    "gru_bias_short": lambda: _rnn("GRU", 3, "B", (1, 20)),
    "rnn_bias_short": lambda: _rnn("RNN", 1, "B", (1, 6)),
    "conv_bias_short": lambda: _conv(1),
    "conv_bias_one_less": lambda: _conv(7),
    "conv_bias_long": lambda: _conv(9),
    "conv_bias_2d": lambda: Case("Conv", ["x", "w", "b"], {"w": _f(8, 4, 3, 3), "b": _f(8, 1)}, _f(1, 4, 6, 6), "B"),
    "conv_grouped_bias_short": lambda: Case("Conv", ["x", "w", "b"], {"w": _f(8, 2, 3, 3), "b": _f(4)},
                                            _f(1, 4, 6, 6), "B", {"group": 2}),
    "conv1d_bias_long": lambda: Case("Conv", ["x", "w", "b"], {"w": _f(8, 4, 3), "b": _f(16)}, _f(1, 4, 9), "B"),
    "deconv_bias_short": lambda: _deconv(1),
    "deconv_bias_long": lambda: _deconv(12),
    "deconv_grouped_bias_short": lambda: _deconv(4, m=8, group=2),
    "batchnorm_scale_short": lambda: _bn("scale", (5,)),
    "batchnorm_bias_long": lambda: _bn("B", (7,)),
    "batchnorm_mean_2d": lambda: _bn("mean", (6, 1)),
    "batchnorm_var_short": lambda: _bn("var", (1,)),
    "instancenorm_scale_short": lambda: Case("InstanceNormalization", ["x", "s", "b"], {"s": _f(3), "b": _f(6)},
                                             _f(2, 6, 4, 4), "scale"),
    "instancenorm_bias_long": lambda: Case("InstanceNormalization", ["x", "s", "b"], {"s": _f(6), "b": _f(7)},
                                           _f(2, 6, 4, 4), "B"),
    "layernorm_scale_short": lambda: Case("LayerNormalization", ["x", "s", "b"], {"s": _f(3), "b": _f(8)},
                                          _f(2, 5, 8), "Scale"),
    "layernorm_bias_long": lambda: Case("LayerNormalization", ["x", "s", "b"], {"s": _f(8), "b": _f(9)},
                                        _f(2, 5, 8), "B"),
    "layernorm_scale_rank": lambda: Case("LayerNormalization", ["x", "s"], {"s": _f(3, 8)}, _f(2, 5, 8), "Scale"),
    "groupnorm21_scale_groups": lambda: Case("GroupNormalization", ["x", "s", "b"], {"s": _f(2), "b": _f(2)},
                                             _f(2, 6, 4, 4), "scale", {"num_groups": 2}, opset=21),
    "groupnorm21_bias_short": lambda: Case("GroupNormalization", ["x", "s", "b"], {"s": _f(6), "b": _f(5)},
                                           _f(2, 6, 4, 4), "bias", {"num_groups": 2}, opset=21),
    "gemm_c_short": lambda: Case("Gemm", ["x", "w", "c"], {"w": _f(5, 4), "c": _f(3)}, _f(2, 5), "C"),
    "gemm_c_rows": lambda: Case("Gemm", ["x", "w", "c"], {"w": _f(5, 4), "c": _f(3, 4)}, _f(2, 5), "C"),
    "prelu_slope_short": lambda: Case("PRelu", ["x", "s"], {"s": _f(3, 1, 1)}, _f(1, 4, 5, 5), "slope"),
    "qlinearconv_w_scale_short": lambda: _qconv("ws", (3,)),
    "qlinearconv_w_zero_point_long": lambda: _qconv("wz", (5,)),
    "qlinearconv_bias_short": lambda: _qconv("b", (2,)),
    "qlinearconv_x_scale_vector": lambda: _qconv("xs", (3,)),
    "matmulinteger_b_zero_point_short": lambda: Case(
        "MatMulInteger", ["x", "w", "", "bz"], {"w": RNG.integers(0, 255, (5, 6), dtype=np.uint8),
                                                "bz": np.full(5, 2, np.uint8)},
        RNG.integers(0, 255, (4, 5), dtype=np.uint8), "b_zero_point", opset=13, x_type=TensorProto.UINT8,
        y_type=TensorProto.INT32),
    "convinteger_w_zero_point_short": lambda: Case(
        "ConvInteger", ["x", "w", "", "wz"], {"w": RNG.integers(0, 255, (4, 3, 3, 3), dtype=np.uint8),
                                               "wz": np.full(3, 7, np.uint8)},
        RNG.integers(0, 255, (1, 3, 5, 5), dtype=np.uint8), "w_zero_point", x_type=TensorProto.UINT8,
        y_type=TensorProto.INT32),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnxruntime_refuses(name: str) -> None:
    """The golden: ONNX Runtime refuses each case (at session creation or at run time)."""
    case = CASES[name]()
    with pytest.raises(Exception) as e:  # noqa: B017,PT011 - ORT raises its own several types
        sess = ort.InferenceSession(case.model().SerializeToString(), providers=["CPUExecutionProvider"])
        sess.run(None, {"x": case.x})
    words = ("bias", "scale", "zero", "channel", "broadcast", "dimension", "shape", "size", "mismatch")
    assert any(w in str(e.value).lower() for w in words), str(e.value)  # refused for the operand, not else


@pytest.mark.parametrize("name", sorted(CASES))
def test_compile_refuses_with_one_line(name: str) -> None:
    case = CASES[name]()
    with pytest.raises(ShapeError) as e:
        compile_model(case.model())
    msg = str(e.value)
    assert "\n" not in msg
    assert case.op in msg and f"input {case.bad}" in msg, msg


def test_conv_bias_message_names_shapes_and_fix() -> None:
    with pytest.raises(ShapeError, match=r"input B has 1 elements but must have 8 .*W \[8, 4, 3, 3\].*fix: give B "
                                         r"shape \[8\]"):
        compile_model(_conv(1).model())


# ------------------------------------------------------------------ run time (symbolic dims, single ops)


def _dynamic_bias_conv(op: str) -> onnx.ModelProto:
    """A Conv whose bias is a graph input with a symbolic length: only the run time can check it."""
    w = _f(8, 4, 3, 3) if op == "Conv" else _f(4, 8, 3, 3)  # M = 8 either way
    node = helper.make_node(op, ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 4, 6, 6]),
                                        helper.make_tensor_value_info("b", F, ["m"])],
                          [helper.make_tensor_value_info("y", F, [None] * 4)], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("nb", [1, 7, 9, 4096])
def test_symbolic_bias_checked_at_run_time(op: str, nb: int) -> None:
    lm = LoadedModel.from_compiled(compile_model(_dynamic_bias_conv(op)))
    x = _f(1, 4, 6, 6)
    with pytest.raises((ShapeError, KernelError), match="input B has"):  # (re-inferred per input signature)
        lm.run([x, _f(nb)])
    y = lm.run([x, _f(8)])[0]  # the right length still runs
    assert np.isfinite(y).all()


@pytest.mark.parametrize("op,w_shape,m", [("Conv", (8, 4, 3, 3), 8), ("ConvTranspose", (4, 8, 3, 3), 8)])
@pytest.mark.parametrize("nb", [1, 9])
def test_single_op_refuses_bias(op: str, w_shape: tuple[int, ...], m: int, nb: int) -> None:
    with pytest.raises((ShapeError, KernelError), match="input B has"):
        run_op(op, [_f(1, 4, 6, 6), _f(*w_shape), _f(nb)])
    assert run_op(op, [_f(1, 4, 6, 6), _f(*w_shape), _f(m)])[0].shape[1] == m


@pytest.mark.parametrize("algo", ["onednn:conv_nhwc", "numpy:im2col_gemm", "numpy:gemm_1x1", "torch:conv2d_nhwc"])
def test_conv_kernel_refuses_bias_whatever_the_algorithm(algo: str) -> None:
    """The recorded algorithm cannot bypass the check (the oneDNN ones read B by pointer)."""
    from pycann.kernels.algorithm import BY_KEY
    from pycann.kernels.conv import conv_act

    x, w = _f(1, 4, 6, 6), _f(64, 4, 1, 1)
    with pytest.raises(OperandError, match="input B has 1 elements but must have 64"):
        conv_act([x, w, _f(1)], {"_algo": BY_KEY[algo], "group": 1})


def test_tiny_conv_with_wrong_bias_is_a_clear_error() -> None:
    """The issue's 'tiny conv' (numpy im2col path): no raw reshape traceback, a ShapeError."""
    with pytest.raises(ShapeError, match="input B has 1 elements but must have 4"):
        compile_model(Case("Conv", ["x", "w", "b"], {"w": _f(4, 8, 3, 3), "b": _f(1)}, _f(1, 8, 4, 4), "B").model())


@pytest.mark.parametrize("nb", [1, 100_000])
def test_tampered_om_bias_is_refused_at_load_or_run(nb: int, tmp_path: Any) -> None:
    """An .om whose bias initializer was replaced after compiling (a large one ran off the mapped
    file before): the plan's inference refuses it with the one-line ShapeError, no segfault."""
    from pycann.acl.session import InferSession

    case = _conv(8)
    cm = compile_model(case.model())
    cm.graph.initializers["b"] = np.ones(nb, np.float32)
    path = tmp_path / "bad.om"
    cm.save(path)
    with pytest.raises(ShapeError, match="input B has"):
        InferSession(0, str(path)).infer([case.x])
