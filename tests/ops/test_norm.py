"""Normalisation ops against ONNX Runtime (numpy goldens where ORT lacks a kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

RTOL, ATOL = 1e-4, 1e-5
F = int(DType.FLOAT)


def _r(*shape: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + 7 * sum(shape)).standard_normal(shape).astype(dtype)


def _bn_inputs(x_shape: tuple, dtype: type = np.float32) -> list[np.ndarray]:
    c = x_shape[1]
    return [_r(*x_shape, dtype=dtype), _r(c, dtype=dtype, seed=1), _r(c, dtype=dtype, seed=2),
            _r(c, dtype=dtype, seed=3), (np.abs(_r(c, seed=4)) + 0.5).astype(dtype)]


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 6), (1, 3, 2, 2, 2)])
def test_batch_norm(opset: int, shape: tuple) -> None:
    check_op("BatchNormalization", _bn_inputs(shape), {"epsilon": 1e-3}, opset=opset, rtol=RTOL, atol=ATOL)


def test_batch_norm_momentum_uses_running_stats() -> None:
    """Paddle exports opset-9 BN with `momentum`; it must still use input_mean/input_var."""
    x, s, b, mean, var = _bn_inputs((2, 3, 4, 5))
    want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    want = want * s.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    for opset in (9, 14):
        check_op("BatchNormalization", [x, s, b, mean, var], {"momentum": 0.9}, opset=opset,
                 expected=[want.astype(np.float32)], rtol=RTOL, atol=ATOL)
    check_op("BatchNormalization", [x, s, b, mean, var], {"momentum": 0.9}, opset=9, rtol=RTOL, atol=ATOL)
    # Batch statistics would give a different answer: make sure they are not what we return.
    batch = (x - x.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    got = lookup("BatchNormalization", "", 9).kernel([x, s, b, mean, var], {"momentum": 0.9, "epsilon": 1e-5})[0]
    assert not np.allclose(got, batch * s.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1), atol=1e-2)


def test_batch_norm_explicit_training_mode_uses_batch_statistics() -> None:
    """BatchNormalization-15 with training_mode=1 (explicit) normalises with the batch's own
    mean/variance and updates the running statistics (numpy golden from the spec's formulas)."""
    x, s, b, m, v = _bn_inputs((2, 3, 4))
    y, rm, rv = lookup("BatchNormalization", "", 15).kernel([x, s, b, m, v], {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1})
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    want = (x - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5) * s[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rm, m * 0.9 + mean * 0.1, rtol=1e-6)
    np.testing.assert_allclose(rv, v * 0.9 + var * 0.1, rtol=1e-6)


def test_batch_norm_dtypes() -> None:
    check_op("BatchNormalization", _bn_inputs((2, 3, 4, 5), np.float16), {}, opset=15, rtol=1e-2, atol=1e-2)
    check_op("BatchNormalization", _bn_inputs((2, 3, 4, 5), np.float64), {}, opset=15, rtol=1e-9, atol=1e-9)
    x, s, b, m, v = _bn_inputs((2, 3, 4, 5))  # opset 15: float16 X with float32 statistics
    check_op("BatchNormalization", [x.astype(np.float16), s, b, m, v], {}, opset=15, rtol=1e-2, atol=1e-2)


def test_batch_norm_spatial0_old_opset() -> None:
    """BatchNormalization-7 spatial=0: statistics per (C, H, W) element (numpy golden)."""
    x = _r(2, 3, 2, 2)
    s, b, m = _r(3, 2, 2, seed=1), _r(3, 2, 2, seed=2), _r(3, 2, 2, seed=3)
    v = np.abs(_r(3, 2, 2, seed=4)) + 0.5
    want = (x - m) / np.sqrt(v + 1e-5) * s + b
    check_op("BatchNormalization", [x, s, b, m, v], {"spatial": 0}, opset=7, expected=[want], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 3, 2, 2)])
def test_instance_norm(shape: tuple) -> None:
    c = shape[1]
    check_op("InstanceNormalization", [_r(*shape), _r(c, seed=1), _r(c, seed=2)], {"epsilon": 1e-3},
             rtol=RTOL, atol=ATOL)


def test_instance_norm_f16_and_opset1() -> None:
    ins = [_r(2, 3, 7, dtype=np.float16), _r(3, dtype=np.float16, seed=1), _r(3, dtype=np.float16, seed=2)]
    check_op("InstanceNormalization", ins, {}, rtol=1e-2, atol=1e-2)
    check_op("InstanceNormalization", [_r(2, 3, 7), _r(3, seed=1), _r(3, seed=2)], {}, opset=6,
             rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "xs,ss,axis,bias",
    [((2, 3, 8), (8,), -1, True), ((2, 3, 8), (3, 8), 1, True), ((2, 3, 8), (3, 8), -2, False),
     ((4, 8), (8,), 1, True), ((2, 3, 8), (1,), -1, True), ((2, 3, 4, 5), (4, 5), 2, True)],
)
def test_layer_norm(xs: tuple, ss: tuple, axis: int, bias: bool) -> None:
    ins = [_r(*xs), _r(*ss, seed=1)] + ([_r(*ss, seed=2)] if bias else [])
    check_op("LayerNormalization", ins, {"axis": axis}, n_outputs=3, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("xs,ss,axis", [((2, 5, 8), (8,), -1), ((2, 5, 8), (5, 8), 1), ((2, 5, 8), (1, 8), 1),
                                         ((3, 4), (3, 4), 0), ((2, 0, 8), (8,), -1)])
def test_rms_norm(xs: tuple, ss: tuple, axis: int) -> None:
    """RMSNormalization-23 against ONNX Runtime (the op RMSNormFusion produces)."""
    check_op("RMSNormalization", [_r(*xs), _r(*ss, seed=1)], {"axis": axis, "epsilon": 1e-3}, opset=23,
             rtol=RTOL, atol=ATOL)


def test_rms_norm_rejects_a_scale_that_does_not_broadcast() -> None:
    with pytest.raises(ShapeError, match="does not broadcast"):
        _infer("RMSNormalization", [TensorDesc(F, (2, 5, 8)), TensorDesc(F, (3,))], {"axis": -1}, opset=23)


def test_layer_norm_dtypes() -> None:
    for dt, tol in ((np.float16, 1e-2), (np.float64, 1e-5)):
        ins = [_r(2, 3, 8, dtype=dt), _r(8, dtype=dt, seed=1), _r(8, dtype=dt, seed=2)]
        outs = check_op("LayerNormalization", ins, {"epsilon": 1e-3}, n_outputs=3, rtol=tol, atol=tol)
        assert outs[1].dtype == np.float32 and outs[2].dtype == np.float32  # stash_type float


@pytest.mark.parametrize("opset,per", [(18, 3), (21, 6)])
@pytest.mark.parametrize("shape", [(2, 6, 4, 5), (2, 6, 7)])
def test_group_norm(opset: int, per: int, shape: tuple) -> None:
    check_op("GroupNormalization", [_r(*shape), _r(per, seed=1), _r(per, seed=2)], {"num_groups": 3},
             opset=opset, rtol=RTOL, atol=ATOL)


def test_group_norm_18_vs_21_semantics() -> None:
    x = _r(1, 4, 3)
    gs, gb = np.array([2.0, -1.0], np.float32), np.array([0.5, 1.0], np.float32)
    y18 = lookup("GroupNormalization", "", 18).kernel([x, gs, gb], {"num_groups": 2, "epsilon": 1e-5})[0]
    y21 = lookup("GroupNormalization", "", 21).kernel([x, np.repeat(gs, 2), np.repeat(gb, 2)],
                                                      {"num_groups": 2, "epsilon": 1e-5})[0]
    np.testing.assert_allclose(y18, y21, rtol=1e-6)


@pytest.mark.parametrize("p,axis", [(2, -1), (1, 0), (2, 1), (1, -2)])
def test_lp_norm(p: int, axis: int) -> None:
    x = _r(2, 3, 4)
    x[0, :, 1] = 0  # a zero vector along axis 1 / -2
    x[1, 2, :] = 0
    check_op("LpNormalization", [x], {"p": p, "axis": axis}, rtol=RTOL, atol=ATOL)


def test_lp_norm_f64() -> None:
    check_op("LpNormalization", [_r(2, 3, 4, dtype=np.float64)], {}, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("axes", [None, [1, -1], [0, 1, 2, 3], [2]])
@pytest.mark.parametrize("opset", [9, 13])
def test_mvn(axes: list | None, opset: int) -> None:
    attrs = {} if axes is None else {"axes": axes}
    check_op("MeanVarianceNormalization", [_r(2, 3, 4, 5) * 3 + 1], attrs, opset=opset, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("size,extra", [(3, {}), (5, {"alpha": 1e-2, "beta": 0.5, "bias": 2.0}), (1, {})])
def test_lrn(size: int, extra: dict) -> None:
    check_op("LRN", [_r(2, 7, 4, 5)], {"size": size} | extra, rtol=RTOL, atol=ATOL)


def test_lrn_even_size_and_f16() -> None:
    x = _r(2, 5, 3, 3)
    sq = np.pad(x * x, ((0, 0), (1, 2), (0, 0), (0, 0)))  # size 4: 1 channel before, 2 after
    s = sum(sq[:, k : k + 5] for k in range(4))
    want = x / (1.0 + 1e-4 / 4 * s) ** 0.75
    check_op("LRN", [x], {"size": 4}, expected=[want], rtol=1e-5, atol=1e-6)  # ORT rejects even sizes
    check_op("LRN", [_r(2, 7, 4, 5, dtype=np.float16)], {"size": 5}, rtol=1e-2, atol=1e-2)


def _infer(op: str, descs: list, attrs: dict, opset: int = 21, n_outputs: int = 1) -> list[TensorDesc]:
    od = lookup(op, "", opset)
    ctx = InferContext("n", op, od.with_defaults(attrs), descs, [None] * len(descs), opset, n_outputs)
    return list(od.infer(ctx))


def test_norm_infer() -> None:
    x = TensorDesc(F, ("N", 3, "H", "W"))
    c = TensorDesc(F, (3,))
    assert _infer("BatchNormalization", [x, c, c, c, c], {})[0].shape == x.shape
    with pytest.raises(ShapeError, match="scale"):
        _infer("BatchNormalization", [x, TensorDesc(F, (4,)), c, c, c], {})
    y, m, inv = _infer("LayerNormalization", [x, TensorDesc(F, ("W",))], {"axis": -1}, n_outputs=3)
    assert y.shape == x.shape and m.shape == ("N", 3, "H", 1) and inv.dtype == F
    h16 = TensorDesc(int(DType.FLOAT16), (2, 4))
    assert _infer("LayerNormalization", [h16, h16], {"axis": 0}, n_outputs=2)[1] == TensorDesc(F, (1, 1))
    with pytest.raises(ShapeError, match="axis"):
        _infer("LayerNormalization", [x, c], {"axis": 4})
    with pytest.raises(ShapeError, match="num_groups"):
        _infer("GroupNormalization", [x, c, c], {"num_groups": 2})
    with pytest.raises(ShapeError, match="scale"):
        _infer("GroupNormalization", [TensorDesc(F, (1, 6, 2)), c, c], {"num_groups": 3})
    assert _infer("GroupNormalization", [TensorDesc(F, (1, 6, 2)), c, c], {"num_groups": 3}, opset=18)[0].shape == (
        1, 6, 2)
    with pytest.raises(ShapeError, match="p"):
        _infer("LpNormalization", [x], {"p": 3})
    with pytest.raises(ShapeError, match="axes"):
        _infer("MeanVarianceNormalization", [x], {"axes": [0, 5]})
    with pytest.raises(ShapeError, match="scale"):
        _infer("InstanceNormalization", [x, TensorDesc(F, (2,)), c], {})
    assert _infer("LRN", [TensorDesc(F, None)], {"size": 3})[0].shape is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_batch_norm_out_kernel(dtype: type) -> None:
    od = lookup("BatchNormalization", "", 15)
    ins = _bn_inputs((2, 3, 4, 5), dtype)
    want = od.kernel(ins, od.with_defaults({}))
    outs = [np.empty_like(w) for w in want]
    od.out_kernel(ins, od.with_defaults({}), outs[:1])
    np.testing.assert_array_equal(outs[0], want[0])
    od.out_kernel(ins, od.with_defaults({}), outs)
    for o, w in zip(outs, want):
        np.testing.assert_array_equal(o, w)
