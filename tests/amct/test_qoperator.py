"""QOperator models (issue 22 item 2): ONNX Runtime's ``quantize_static`` QOperator output
(QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm; QLinearMatMul) is rewritten into QDQ
(GE QOperatorToQDQ) and fused onto pycann.QuantConv / QuantMatMul. Goldens: ONNX Runtime, and
pycann's own QOperator reference kernels.

Tolerance: 1 LSB of the output quantisation. A QOperator op requantises its int32 accumulator with
one multiplier ``xs * ws / ys``; the QDQ form rounds a float conv and divides by ``ys``: a value
within float rounding of a half-way point may round the other way. ONNX Runtime's own kernels are a
golden only where they are exact: on a CPU without VNNI its u8 x s8 kernels add products in
saturating int16, so the tests against ORT's QOperator kernels use ``reduce_range=True`` (7-bit
weights, |w| <= 64: exact everywhere) unless the CPU has VNNI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import torch_int8
from tests.amct.qop_models import qlinear_matmul_model

torch = pytest.importorskip("torch")
ortq = pytest.importorskip("onnxruntime.quantization")
import onnxruntime as ort  # noqa: E402

RNG = np.random.default_rng(21)
SHAPE = (2, 3, 16, 16)


class _Net(torch.nn.Module):
    """Conv-ReLU, MaxPool, Conv-ReLU + residual, global average pool, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        a = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        b = torch.relu(self.c2(a)) + a
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(b, 1), 1))


def _batches(n: int, seed: int) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    return [r.standard_normal(SHAPE).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def float_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    p = tmp_path_factory.mktemp("qop") / "f.onnx"
    torch.onnx.export(_Net().eval(), torch.randn(*SHAPE), str(p), opset_version=13, dynamo=False, input_names=["x"])
    return p


def _quantise(float_model: Path, fmt: str, reduce_range: bool) -> onnx.ModelProto:
    batches = iter(_batches(4, 1))

    class Reader(ortq.CalibrationDataReader):
        def get_next(self):  # noqa: ANN202
            x = next(batches, None)
            return None if x is None else {"x": x}

    out = float_model.with_name(f"{fmt}_{int(reduce_range)}.onnx")
    ortq.quantize_static(str(float_model), str(out), Reader(), quant_format=getattr(ortq.QuantFormat, fmt),
                         per_channel=True, reduce_range=reduce_range, activation_type=ortq.QuantType.QUInt8,
                         weight_type=ortq.QuantType.QInt8)
    return onnx.load(str(out))


def _out_scale(m: onnx.ModelProto) -> float:
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == m.graph.output[0].name)
    return float(numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == dq.input[1])))


def _ort(m: onnx.ModelProto, x: np.ndarray, optimise: bool = True) -> np.ndarray:
    so = ort.SessionOptions()
    if not optimise:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _lsb(a: np.ndarray, b: np.ndarray, s: float) -> int:
    return int(np.abs(np.rint((a.astype(np.float64) - b) / s)).max())


def _compile(m: onnx.ModelProto, **kw: object) -> tuple[LoadedModel, list[str], list[str]]:
    """Compiled with ``high_precision``: every fused layer keeps the QDQ arithmetic (the default may
    keep layers fp32 where int8 would be slower: test_int8_choice.py)."""
    lines: list[str] = []
    opts = CompileOptions(op_select_implmode="high_precision", **kw)  # type: ignore[arg-type]
    cm = compile_model(m, opts, log=lines.append)
    return LoadedModel.from_compiled(cm), [n.op_type for n in cm.graph.nodes], lines


def test_ort_qoperator_model_runs_on_quantconv_within_1_lsb_of_ort(float_model: Path) -> None:
    m = _quantise(float_model, "QOperator", reduce_range=not torch_int8.cpu_has_vnni())
    assert {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= {n.op_type for n in m.graph.node}
    lm, ops, lines = _compile(m)
    assert ops.count("QuantConv") == 2 and ops.count("QuantMatMul") == 1, ops
    assert not {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm", "Conv"} & set(ops), ops
    assert any("QOperatorToQDQ" in ln and "5 QOperator nodes -> QDQ" in ln for ln in lines), lines
    s = _out_scale(m)
    for x in _batches(3, 7):
        got, want = lm.run([x])[0], _ort(m, x)
        assert _lsb(got, want, s) <= 1


def test_full_range_qoperator_model_equals_pycanns_qoperator_kernels(float_model: Path) -> None:
    """Full 8-bit weights and activations: the rewritten graph vs the QOperator ops' own reference
    kernels (QOperatorToQDQ and QuantizedConvFusion off), and vs ORT where ORT is exact (VNNI)."""
    m = _quantise(float_model, "QOperator", reduce_range=False)
    fast, ops, _ = _compile(m)
    ref, ref_ops, _ = _compile(m, disabled_passes=("QOperatorToQDQ", "QuantizedConvFusion"))
    assert "QuantConv" in ops and "QLinearConv" in ref_ops and "QuantConv" not in ref_ops
    s = _out_scale(m)
    for x in _batches(3, 8):
        got = fast.run([x])[0]
        assert _lsb(got, ref.run([x])[0], s) <= 1
        if torch_int8.cpu_has_vnni():
            assert _lsb(got, _ort(m, x), s) <= 1


def test_ort_qdq_model_within_1_lsb_of_ort(float_model: Path) -> None:
    """ORT's QDQ model, full range: golden = ORT unoptimised (float kernels on the QDQ values: exact)."""
    m = _quantise(float_model, "QDQ", reduce_range=False)
    lm, ops, _ = _compile(m)
    assert ops.count("QuantConv") == 2 and ops.count("QuantMatMul") == 1, ops
    s = _out_scale(m)
    for x in _batches(3, 9):
        assert _lsb(lm.run([x])[0], _ort(m, x, optimise=False), s) <= 1


def test_narrow_weights_take_the_int8_kernel_without_vnni(float_model: Path) -> None:
    from pycann.ge.compile.compiler import compile_model as cmod

    hp = CompileOptions(op_select_implmode="high_precision")
    cm = cmod(_quantise(float_model, "QOperator", reduce_range=True), hp)
    qs = [n for n in cm.graph.nodes if n.op_type in ("QuantConv", "QuantMatMul")]
    assert qs and all(n.attrs["narrow_w"] == 1 for n in qs)
    cm = cmod(_quantise(float_model, "QOperator", reduce_range=False), hp)
    assert any(n.attrs["narrow_w"] == 0 for n in cm.graph.nodes if n.op_type == "QuantConv")


def _qlinear_matmul_model(scale_input: bool) -> onnx.ModelProto:
    return qlinear_matmul_model(RNG, scale_input)


def test_qlinear_matmul_becomes_quantmatmul() -> None:
    m = _qlinear_matmul_model(scale_input=False)
    lm, ops, _ = _compile(m)
    assert "QuantMatMul" in ops and "QLinearMatMul" not in ops, ops
    x = RNG.standard_normal((4, 24)).astype(np.float32) * 3
    assert _lsb(lm.run([x])[0], _ort(m, x), 0.4) <= 1


def test_unsupported_qoperator_pattern_stays_on_reference_and_says_why() -> None:
    m = _qlinear_matmul_model(scale_input=True)
    lines: list[str] = []
    cm = compile_model(m, CompileOptions(op_select_implmode="high_precision"), log=lines.append)
    assert "QLinearMatMul" in [n.op_type for n in cm.graph.nodes]
    assert any("QOperatorToQDQ" in ln and "qmm (QLinearMatMul): input 6 (ys) is not a constant" in ln
               and "reference kernel" in ln for ln in lines), lines
    x = RNG.standard_normal((4, 24)).astype(np.float32)
    ys = np.array(0.3, np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = LoadedModel.from_compiled(cm).run([x, ys])[0]
    assert _lsb(got, sess.run(None, {"x": x, "ys": ys})[0], 0.3) <= 1


def test_channels_last_pool_is_kept_and_logged() -> None:
    x_t = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 4, 3])
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(5), "z")]
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
                            channels_last=1, name="gap")
    g = helper.make_graph([node], "g", [x_t], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    lines: list[str] = []
    cm = compile_model(m, log=lines.append)
    assert any("gap (QLinearGlobalAveragePool): channels_last=1" in ln for ln in lines), lines
    x = RNG.integers(0, 256, (1, 4, 4, 3)).astype(np.uint8)
    got = LoadedModel.from_compiled(cm).run([x])[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (1, 1, 1, 3) and int(np.abs(got.astype(int) - want).max()) <= 1
