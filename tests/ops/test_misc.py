"""pycann.ops.misc (Upsample, signal, vision, grid and random ops) against ONNX Runtime, or a
numpy golden where ORT lacks the case or disagrees with the spec (DFT: numpy.fft)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError
from pycann.ops import registry
from pycann.ops.opdef import InferContext
from tests.ops.oracle import check_op, run_pycann_op

RT, AT = 1e-4, 1e-5


def _infer(op_type: str, opset: int, inputs: list, values: list, attrs: dict) -> list[TensorDesc]:
    op = registry.lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs), inputs, values, opset, 1)
    return list(op.infer(ctx))


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------- Upsample


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int8])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.5, 2.7], [1.0, 2.0, 2.0, 1.0]])
def test_upsample(dtype: type, mode: str, scales: list[float]) -> None:
    x = (_rng().random((1, 2, 4, 5)) * 100).astype(dtype)
    check_op("Upsample", [x], {"mode": mode, "scales": scales}, opset=7, rtol=1e-5, atol=1e-4)
    check_op("Upsample", [x, np.array(scales, np.float32)], {"mode": mode}, opset=9, const_inputs=(1,),
             rtol=1e-5, atol=1e-4)


def test_upsample_infer() -> None:
    x = TensorDesc(1, ("N", 3, 4, 5))
    (d,) = _infer("Upsample", 7, [x], [None], {"scales": [1.0, 1.0, 2.0, 3.0]})
    assert d.shape == ("N", 3, 8, 15)
    with pytest.raises(ShapeError, match=">= 1"):
        _infer("Upsample", 9, [x, TensorDesc(1, (4,))], [None, np.array([1, 1, 0.5, 1], np.float32)], {})
    with pytest.raises(ShapeError, match="scales"):
        _infer("Upsample", 7, [x], [None], {})


# --------------------------------------------------------------------------------------- DFT


def _np_dft(x: np.ndarray, n: int | None, axis: int, inverse: int, onesided: int) -> np.ndarray:
    sig = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    a = axis % x.ndim
    if inverse and onesided:
        return np.fft.irfft(sig, n, axis=a)[..., None].astype(x.dtype)
    z = np.fft.ifft(sig, n, axis=a) if inverse else np.fft.fft(sig, n, axis=a)
    if onesided:
        z = np.take(z, np.arange(z.shape[a] // 2 + 1), axis=a)
    return np.stack([z.real, z.imag], -1).astype(x.dtype)


@pytest.mark.parametrize(
    "shape,axis,n",
    [((3, 7, 5, 1), 1, None), ((3, 7, 5, 2), 2, 12), ((2, 9, 2), 1, 4), ((4, 6, 1), -2, None), ((2, 3, 10, 1), 1, 7)],
)
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("opset", [17, 20])
def test_dft(shape: tuple[int, ...], axis: int, n: int | None, inverse: int, onesided: int, opset: int) -> None:
    x = _rng().standard_normal(shape).astype(np.float32)
    if onesided and (shape[-1] == 1) == bool(inverse):
        pytest.skip("RFFT needs real input, IRFFT complex input")
    ins = [x, None if n is None else np.array(n, np.int64)]
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset == 17:
        attrs["axis"] = axis
    else:
        ins.append(np.array(axis, np.int64))
    while ins[-1] is None:
        ins.pop()
    check_op("DFT", ins, attrs, opset=opset, const_inputs=(1, 2), rtol=RT, atol=1e-4,
             expected=[_np_dft(x, n, axis, inverse, onesided)])


def test_dft_matches_ort_simple() -> None:
    x = _rng(1).standard_normal((2, 8, 2)).astype(np.float32)
    check_op("DFT", [x], {"axis": 1}, opset=17, rtol=RT, atol=1e-4)
    check_op("DFT", [x], {"inverse": 1}, opset=20, rtol=RT, atol=1e-4)


def test_dft_infer() -> None:
    x = TensorDesc(1, ("B", 16, 1))
    (d,) = _infer("DFT", 20, [x], [None], {"onesided": 1})
    assert d.shape == ("B", 9, 2)
    (d,) = _infer("DFT", 17, [x, TensorDesc(7, ())], [None, np.array(20)], {"axis": 1})
    assert d.shape == ("B", 20, 2)
    (d,) = _infer("DFT", 20, [TensorDesc(1, (4, 9, 2))], [None], {"onesided": 1, "inverse": 1})
    assert d.shape == (4, 16, 1)
    with pytest.raises(ShapeError, match="axis"):
        _infer("DFT", 17, [x], [None], {"axis": 2})
    with pytest.raises(ShapeError, match="last dim"):
        _infer("DFT", 17, [TensorDesc(1, (2, 8, 3))], [None], {})


# -------------------------------------------------------------------------------------- STFT


def test_stft() -> None:
    rng = _rng(2)
    s = rng.standard_normal((2, 64, 1)).astype(np.float32)
    w = np.hanning(16).astype(np.float32)
    check_op("STFT", [s, np.array(4, np.int64), w], {}, opset=17, const_inputs=(1,), rtol=RT, atol=1e-4)
    check_op("STFT", [s, np.array(5, np.int64), None, np.array(16, np.int64)], {"onesided": 0}, opset=17,
             const_inputs=(1, 3), rtol=RT, atol=1e-4)
    c = rng.standard_normal((1, 40, 2)).astype(np.float32)
    check_op("STFT", [c, np.array(3, np.int64), w], {"onesided": 0}, opset=17, const_inputs=(1,),
             rtol=RT, atol=1e-4)


def test_stft_infer() -> None:
    (d,) = _infer("STFT", 17, [TensorDesc(1, (2, 64, 1)), TensorDesc(7, ()), TensorDesc(1, (16,))],
                  [None, np.array(4), None], {})
    assert d.shape == (2, 13, 9, 2)
    with pytest.raises(ShapeError, match="longer"):
        _infer("STFT", 17, [TensorDesc(1, (2, 8, 1)), TensorDesc(7, ()), None, TensorDesc(7, ())],
               [None, np.array(1), None, np.array(16)], {})


# ------------------------------------------------------------------------------ windows, mel


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size,dtype", [(1, 1), (8, 1), (11, 11)])
def test_windows(op: str, periodic: int, size: int, dtype: int) -> None:
    check_op(op, [np.array(size, np.int64)], {"periodic": periodic, "output_datatype": dtype}, opset=17,
             const_inputs=(0,), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("args", [(8, 256, 8000, 0.0, 4000.0), (20, 512, 16000, 20.0, 8000.0), (5, 64, 22050, 300.0, 3000.0)])
def test_mel_weight_matrix(args: tuple) -> None:
    ins = [np.array(args[0], np.int32), np.array(args[1], np.int32), np.array(args[2], np.int32),
           np.array(args[3], np.float32), np.array(args[4], np.float32)]
    check_op("MelWeightMatrix", ins, {}, opset=17, const_inputs=(0, 1, 2, 3, 4))


# ---------------------------------------------------------------------------------- RoiAlign

ROIS = np.array([[0, 0, 9, 9], [2, 3, 7.5, 8.2], [-3, -2, 14, 11], [5, 5, 5.2, 5.1], [1, 1, 30, 25]], np.float32)


@pytest.mark.parametrize("opset,coord", [(10, None), (16, "half_pixel"), (16, "output_half_pixel")])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sr,oh,ow", [(0, 3, 4), (2, 1, 1), (2, 2, 3)])
def test_roi_align(opset: int, coord: str | None, mode: str, sr: int, oh: int, ow: int) -> None:
    x = _rng(3).standard_normal((2, 3, 10, 12)).astype(np.float32)
    attrs = {"mode": mode, "sampling_ratio": sr, "output_height": oh, "output_width": ow, "spatial_scale": 0.8}
    if coord:
        attrs["coordinate_transformation_mode"] = coord
    check_op("RoiAlign", [x, ROIS, np.array([0, 1, 0, 1, 1], np.int64)], attrs, opset=opset, rtol=RT, atol=AT)


def test_roi_align_infer() -> None:
    (d,) = _infer("RoiAlign", 16, [TensorDesc(1, ("N", 8, 5, 5)), TensorDesc(1, ("R", 4)), TensorDesc(7, ("R",))],
                  [None] * 3, {"output_height": 7, "output_width": 6})
    assert d.shape == ("R", 8, 7, 6)
    with pytest.raises(ShapeError, match="mode"):
        _infer("RoiAlign", 16, [TensorDesc(1, (1, 8, 5, 5)), TensorDesc(1, (2, 4)), TensorDesc(7, (2,))],
               [None] * 3, {"mode": "sum"})


# ------------------------------------------------------------------------ NonMaxSuppression


@pytest.mark.parametrize("cpb", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(10, 0.5, 0.2), (3, 0.3, None), (0, 0.5, 0.0), (100, 0.0, None)])
def test_nms(cpb: int, max_out: int, iou: float, score: float | None) -> None:
    rng = _rng(4)
    boxes = rng.random((2, 30, 4)).astype(np.float32)
    boxes[..., 2:] += boxes[..., :2]
    scores = rng.random((2, 3, 30)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 6]  # a tie: lower index first
    ins = [boxes, scores, np.array([max_out], np.int64), np.array([iou], np.float32)]
    if score is not None:
        ins.append(np.array([score], np.float32))
    check_op("NonMaxSuppression", ins, {"center_point_box": cpb}, opset=11)


def test_nms_defaults_and_infer() -> None:
    rng = _rng(5)
    boxes = rng.random((1, 6, 4)).astype(np.float32)
    check_op("NonMaxSuppression", [boxes, rng.random((1, 2, 6)).astype(np.float32)], {}, opset=10)
    (d,) = _infer("NonMaxSuppression", 11, [TensorDesc(1, (1, 6, 4)), TensorDesc(1, (1, 2, 6))], [None] * 2, {})
    assert d.shape == (None, 3) and d.dtype == 7
    with pytest.raises(ShapeError, match="boxes"):
        _infer("NonMaxSuppression", 11, [TensorDesc(1, (1, 6, 5)), TensorDesc(1, (1, 2, 6))], [None] * 2, {})


# ----------------------------------------------------------------------- Col2Im, CenterCropPad


@pytest.mark.parametrize(
    "img,blk,attrs",
    [([5, 5], [2, 2], {}), ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
     ([9], [3], {"strides": [2]})],
)
def test_col2im(img: list[int], blk: list[int], attrs: dict) -> None:
    d = len(img)
    st, pd, dl = attrs.get("strides", [1] * d), attrs.get("pads", [0] * 2 * d), attrs.get("dilations", [1] * d)
    nb = [(img[i] + pd[i] + pd[i + d] - (dl[i] * (blk[i] - 1) + 1)) // st[i] + 1 for i in range(d)]
    x = _rng(6).standard_normal((2, 3 * int(np.prod(blk)), int(np.prod(nb)))).astype(np.float32)
    check_op("Col2Im", [x, np.array(img, np.int64), np.array(blk, np.int64)], attrs, opset=18,
             const_inputs=(1, 2), rtol=1e-5, atol=1e-5)


def test_col2im_infer_error() -> None:
    with pytest.raises(ShapeError, match="multiple"):
        _infer("Col2Im", 18, [TensorDesc(1, (1, 10, 4)), TensorDesc(7, (2,)), TensorDesc(7, (2,))],
               [None, np.array([3, 3]), np.array([2, 2])], {})


@pytest.mark.parametrize("shape,axes", [([3, 8, 6], None), ([7, 2], [0, 2]), ([5], [-2]), ([4, 5, 6], None), ([1, 1, 9], None)])
def test_center_crop_pad(shape: list[int], axes: list[int] | None) -> None:
    x = _rng(7).standard_normal((4, 5, 6)).astype(np.float32)
    check_op("CenterCropPad", [x, np.array(shape, np.int64)], {"axes": axes} if axes else {}, opset=18,
             const_inputs=(1,))


# ----------------------------------------------------------------------- GridSample, AffineGrid


@pytest.mark.parametrize("opset,mode", [(16, "bilinear"), (16, "nearest"), (16, "bicubic"), (20, "linear"),
                                        (20, "nearest"), (20, "cubic")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(opset: int, mode: str, padding: str, align: int) -> None:
    rng = _rng(8)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    g = (rng.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)
    g[0, 0, 0], g[0, 0, 1] = [1, 1], [-1, -1]
    check_op("GridSample", [x, g], {"mode": mode, "padding_mode": padding, "align_corners": align},
             opset=opset, rtol=RT, atol=AT)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode: str, padding: str) -> None:
    rng = _rng(9)
    x = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    g = (rng.random((1, 3, 2, 4, 3)) * 2.4 - 1.2).astype(np.float32)
    check_op("GridSample", [x, g], {"mode": mode, "padding_mode": padding}, opset=20, rtol=RT, atol=AT)


def test_grid_sample_infer() -> None:
    (d,) = _infer("GridSample", 20, [TensorDesc(1, ("N", 3, 5, 6)), TensorDesc(1, ("N", 7, 8, 2))], [None] * 2, {})
    assert d.shape == ("N", 3, 7, 8)
    with pytest.raises(ShapeError, match="mode"):
        _infer("GridSample", 20, [TensorDesc(1, (1, 3, 5, 6)), TensorDesc(1, (1, 7, 8, 2))], [None] * 2,
               {"mode": "bilinear"})


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(align: int) -> None:
    rng = _rng(10)
    check_op("AffineGrid", [rng.standard_normal((2, 2, 3)).astype(np.float32), np.array([2, 3, 5, 6], np.int64)],
             {"align_corners": align}, opset=20, const_inputs=(1,), rtol=1e-5, atol=1e-5)
    check_op("AffineGrid", [rng.standard_normal((2, 3, 4)).astype(np.float32), np.array([2, 3, 4, 5, 6], np.int64)],
             {"align_corners": align}, opset=20, const_inputs=(1,), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ random


def test_random_normal_uniform() -> None:
    a = {"shape": [200, 300], "mean": 2.0, "scale": 0.5, "seed": 3.0}
    (y,), (d,) = run_pycann_op("RandomNormal", [], a, 1, 17)
    assert y.shape == (200, 300) and y.dtype == np.float32 and d.shape == (200, 300)
    assert abs(y.mean() - 2.0) < 0.01 and abs(y.std() - 0.5) < 0.01
    (y2,), _ = run_pycann_op("RandomNormal", [], a, 1, 17)
    np.testing.assert_array_equal(y, y2)  # seed respected
    (u,), _ = run_pycann_op("RandomUniform", [], {"shape": [1000], "low": -1.0, "high": 3.0, "dtype": 11}, 1, 17)
    assert u.dtype == np.float64 and u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1) < 0.15
    assert not registry.lookup("RandomNormal", "", 17).foldable


def test_random_like_bernoulli_multinomial() -> None:
    x = np.zeros((50, 40), np.float16)
    (y,), (d,) = run_pycann_op("RandomUniformLike", [x], {}, 1, 17)
    assert y.dtype == np.float16 and y.shape == x.shape and d.dtype == 10
    (y,), (d,) = run_pycann_op("RandomNormalLike", [x], {"dtype": 1, "seed": 1.5}, 1, 17)
    assert y.dtype == np.float32 and d.dtype == 1
    p = np.full((100, 100), 0.3, np.float32)
    (b,), _ = run_pycann_op("Bernoulli", [p], {"seed": 2.0}, 1, 17)
    assert b.dtype == np.float32 and set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.03
    (b,), _ = run_pycann_op("Bernoulli", [p], {"dtype": 9}, 1, 17)
    assert b.dtype == np.bool_
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.0001, 0.0001, 0.9998]], np.float32))
    (m,), (d,) = run_pycann_op("Multinomial", [logits], {"sample_size": 4000, "seed": 4.0}, 1, 17)
    assert m.shape == (2, 4000) and m.dtype == np.int32 and d.shape == (2, 4000)
    np.testing.assert_allclose(np.bincount(m[0], minlength=3) / 4000, [0.7, 0.2, 0.1], atol=0.03)
    assert (m[1] == 2).mean() > 0.99
    with pytest.raises(ShapeError, match="INT32"):
        _infer("Multinomial", 7, [TensorDesc(1, (2, 3))], [None], {"dtype": 1})
