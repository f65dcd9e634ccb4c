"""TF importer edge cases (the GraphDef helpers of test_tensorflow_graphdef).

Constants in the input's dtype: Relu6 on integers, Log1p/Erfc on half, FusedBatchNormV3 on half
activations with float statistics (Keras mixed precision) each made a graph that failed to compile
(a float or double constant beside an int32/half input); expected values are numpy restatements.
Damaged GraphDefs (a Const without a value, duplicate node names, no output) give one clear error.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.importers.test_tensorflow_graphdef import F32, G, _run, types_pb2

F16 = types_pb2.DT_HALF


@pytest.mark.parametrize("dtype,tf_type", [(np.int32, types_pb2.DT_INT32), (np.int64, types_pb2.DT_INT64),
                                           (np.float16, F16)])
def test_relu6_keeps_the_input_dtype(dtype: type, tf_type: int) -> None:
    x = np.array([-9, -1, 0, 3, 6, 7, 20, 5], dtype)
    g = G()
    g.placeholder("x", x.shape, tf_type)
    g.node("Relu6", "r", ["x"], T=("type", tf_type))
    (got,) = _run(g.gd, [x], [("r", 0)])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.clip(x, 0, 6))


@pytest.mark.parametrize("op", ["Log1p", "Erfc"])
def test_log1p_and_erfc_on_half(op: str) -> None:
    x = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 3.5], np.float16)
    g = G()
    g.placeholder("x", x.shape, F16)
    g.node(op, "y", ["x"], T=("type", F16))
    (got,) = _run(g.gd, [x], [("y", 0)])
    ref = np.log1p(x.astype(np.float64)) if op == "Log1p" else np.array([math.erfc(v) for v in x.astype(np.float64)])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=1e-3)


def test_fused_batch_norm_half_input_float_statistics() -> None:
    """FusedBatchNormV3 with T=half, U=float, as Keras' mixed-precision BatchNormalization writes it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float16)
    scale, offset, mean = (rng.normal(size=5).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 5).astype(np.float32)
    g = G()
    g.placeholder("x", x.shape, F16)
    for name, v in (("s", scale), ("o", offset), ("m", mean), ("v", var)):
        g.const(name, v)
    g.node("FusedBatchNormV3", "bn", ["x", "s", "o", "m", "v"], T=("type", F16), U=("type", F32), epsilon=0.01,
           is_training=False, data_format="NHWC")
    (got,) = _run(g.gd, [x], [("bn", 0)])
    ref = (x.astype(np.float64) - mean) * scale / np.sqrt(var.astype(np.float64) + 0.01) + offset
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=0, atol=4e-3 * np.abs(ref).max())



def test_float_floor_mod_is_exact_where_the_quotient_rounds() -> None:
    """FloorMod on floats was a - floor(a / b) * b: 1e8 mod 3 gave 0 (TF: 1), 5 mod 0.1f gave 0
    (TF: 0.09999993), -1 mod inf NaN (TF: inf). Expected: TensorFlow 2.21's outputs for these."""
    a = np.array([5.0, 1e8, -7.5, 7.5, 3e7, -1e20, 1.0, -1.0, 0.0], np.float32)
    b = np.array([0.1, 3.0, 2.0, -2.0, 0.7, 3.0, np.inf, np.inf, -3.0], np.float32)
    g = G()
    g.placeholder("a", a.shape)
    g.placeholder("b", b.shape)
    g.node("FloorMod", "m", ["a", "b"], T=("type", F32))
    (got,) = _run(g.gd, [a, b], [("m", 0)])
    tf_out = np.array([0.099999927, 1.0, 0.5, -0.5, 0.41089696, 1.0, 1.0, np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(got, tf_out)



@pytest.mark.parametrize("dtype,tf_type,rtol", [(np.float32, F32, 5e-6), (np.float64, types_pb2.DT_DOUBLE, 1e-6)])
def test_erfc_keeps_its_relative_precision_in_the_tail(dtype: type, tf_type: int, rtol: float) -> None:
    """Erfc was 1 - Erf(x): in float32 erfc(3.5) came out 4% low and erfc(4.5), erfc(6) as 0
    (TensorFlow: 1.97e-10, 2.15e-17); in double erfc(6) and erfc(9) were 0 or 100% off."""
    x = np.array([-3.0, -0.7, 0.0, 0.3, 0.5, 1.0, 2.0, 3.5, 4.5, 6.0, 9.0], dtype)
    g = G()
    g.placeholder("x", x.shape, tf_type)
    g.node("Erfc", "e", ["x"], T=("type", tf_type))
    (got,) = _run(g.gd, [x], [("e", 0)])
    ref = np.array([math.erfc(v) for v in x.astype(np.float64)])
    keep = ref > np.finfo(dtype).tiny  # float32's erfc(9.0) is below its normal range
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64)[keep], ref[keep], rtol=rtol, atol=0)



@pytest.mark.parametrize("dtype,tf_type,rtol", [(np.float32, F32, 5e-7), (np.float64, types_pb2.DT_DOUBLE, 1e-15)])
def test_log1p_is_accurate_for_small_arguments(dtype: type, tf_type: int, rtol: float) -> None:
    """Log1p was Log(1 + x): 0 for x = 1e-8 in float32 (TensorFlow: 1e-8), 5% off at 1e-6."""
    x = np.array([1e-30, 1e-8, 1e-6, -1e-6, 1e-3, 0.3, -0.3, 0.5, -0.9999, 2.0, 1e30, np.inf, -1.0, np.nan], dtype)
    g = G()
    g.placeholder("x", x.shape, tf_type)
    g.node("Log1p", "y", ["x"], T=("type", tf_type))
    (got,) = _run(g.gd, [x], [("y", 0)])
    with np.errstate(all="ignore"):
        ref = np.log1p(x.astype(np.float64))
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=0, equal_nan=True)


# ---------------------------------------------------------------- damaged GraphDefs: one clear error


def _import(g: G) -> None:
    from pycann.ge.compile.importers.tensorflow import import_graph_def

    import_graph_def(g.gd)


def test_const_without_a_value_names_the_node() -> None:
    """A Const node without its tensor ``value`` ended in an AttributeError traceback from tensorboard."""
    from pycann.errors import ModelError

    g = G()
    g.placeholder("x", (2,))
    g.node("Const", "c", dtype=("type", F32))
    g.node("Add", "y", ["x", "c"], T=("type", F32))
    with pytest.raises(ModelError, match=r"node c \(Const\): no tensor 'value'"):
        _import(g)


def test_duplicate_node_names_are_refused() -> None:
    """Two nodes named ``r``: the second replaced the first, the graph read itself, and atc wrote a
    model with no inputs and no outputs (exit 0)."""
    from pycann.errors import ModelError

    g = G()
    g.placeholder("x", (2,))
    g.node("Relu", "r", ["x"], T=("type", F32))
    g.node("Relu", "r", ["r"], T=("type", F32))
    with pytest.raises(ModelError, match=r"two nodes named \[r\]"):
        _import(g)


def test_graph_without_an_output_is_refused(tmp_path: Path) -> None:
    """A GraphDef whose every node is read (or only placeholders) compiled to an .om with no outputs."""
    from pycann.tools.atc import main as atc

    g = G()
    g.placeholder("x", (2,))
    pb = tmp_path / "noout.pb"
    pb.write_bytes(g.gd.SerializeToString())
    assert atc([f"--model={pb}", "--framework=3", f"--output={tmp_path / 'm'}", "--soc_version=Ascend310P3"]) != 0
    assert not (tmp_path / "m.om").exists()


def test_a_folder_as_model_names_the_frameworks_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SavedModel folder given to atc --framework=3 was told to 'give the .onnx file'."""
    from pycann.tools.atc import main as atc

    for fw, want in (("3", "saved_model.pb"), ("0", "deploy .prototxt")):
        extra = ["--weight=w.caffemodel"] if fw == "0" else []
        assert atc([f"--model={tmp_path}", f"--framework={fw}", f"--output={tmp_path / 'm'}",
                    "--soc_version=Ascend310P3", *extra]) != 0
        out = capsys.readouterr()
        text = out.out + out.err
        assert "it is a directory" in text and want in text and ".onnx" not in text
