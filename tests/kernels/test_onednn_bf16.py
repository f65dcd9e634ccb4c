"""oneDNN's native bfloat16 kernels (``pycann.kernels.providers.onednn_bf16``) used by the bf16
precision modes: convolutions with bias/residual/activation post-ops and matmuls, against the
float32 computation of the same bfloat16 values (numpy's reference kernels), and ResNet-50 in
``allow_fp32_to_bf16`` against ONNX Runtime float32 with the native path checked to have run.
Skipped cleanly on CPUs without avx512_bf16/amx_bf16 or without libdnnl."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn_bf16 as ob
from pycann.kernels.providers.onednn_eltwise import RELU, onednn_unary
from pycann.ops.nn.spatial import Window

BF16 = np.dtype(ml_dtypes.bfloat16)
needs_bf16 = pytest.mark.skipif(not ob.native(), reason="no avx512_bf16/amx_bf16 CPU or no libdnnl.so.3")
# One bf16 rounding of the float32 result (8 significant bits: relative 2^-8 at worst), plus the
# float32 accumulation order, a small fraction of the output's scale.
RTOL = 2.0**-8


def _bf(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(BF16)


def _win(k: int, s: int, p: int, hw: int, nd: int = 2) -> Window:
    out = (hw + 2 * p - k) // s + 1
    return Window(kernel=(k,) * nd, strides=(s,) * nd, dilations=(1,) * nd, pads_begin=(p,) * nd,
                  pads_end=(p,) * nd, out=(out,) * nd)


def _assert_bf16_close(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=1e-3 * float(np.abs(w).max()))


@needs_bf16
@pytest.mark.parametrize(("c", "m", "k", "s", "p", "group", "hw"), [
    (16, 32, 3, 1, 1, 1, 14), (64, 32, 1, 2, 0, 1, 15), (3, 16, 7, 2, 3, 1, 32), (32, 32, 3, 1, 1, 32, 9),
    (32, 48, 3, 2, 1, 4, 10)])
@pytest.mark.parametrize("residual", [None, "bf16", "f32"])
@pytest.mark.parametrize("act", [None, "Relu", "HardSwish"])
def test_conv_equals_float32_of_bf16_values(c: int, m: int, k: int, s: int, p: int, group: int, hw: int,
                                            residual: str | None, act: str | None) -> None:
    x, w = _bf((2, c, hw, hw), 0), _bf((m, c // group, k, k), 1, 0.2)
    b = np.random.default_rng(2).standard_normal(m).astype(np.float32)
    win = _win(k, s, p, hw)
    want = nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), b, group, win, None)
    z = None
    if residual is not None:
        z = _bf(want.shape, 3).astype(BF16 if residual == "bf16" else np.float32)
        want = want + z.astype(np.float32)
    unary = None
    if act == "Relu":
        unary, want = RELU, np.maximum(want, 0)
    elif act == "HardSwish":
        unary, want = onednn_unary("HardSwish", 0.0, 0.0), want * np.clip(want / 6 + 0.5, 0, 1)
    before = ob.stats()["conv"]
    y = ob.conv(x, w, b, group, win, z, unary)
    assert y is not None and y.dtype == BF16 and y.shape == want.shape
    assert ob.stats()["conv"] == before + 1
    _assert_bf16_close(y, want)


@needs_bf16
@pytest.mark.parametrize(("c", "m", "k", "s", "hw"), [(3, 64, 7, 2, 32), (3, 5, 3, 1, 5), (4, 16, 3, 1, 56)])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_conv_with_few_input_channels_keeps_a_nonfinite_input_inside_its_window(
        c: int, m: int, k: int, s: int, hw: int, bad: float) -> None:
    # On AMX CPUs oneDNN picks its "jit:avx512_core_amx" kernel for small channel counts (an RGB
    # stem), which multiplies zero padding weights by neighbouring pixels: one inf pixel made
    # 128 outputs of a 7x7/2 stem NaN where float32's are finite or inf.
    x, w = _bf((1, c, hw, hw), 0), _bf((m, c, k, k), 1, 0.2)
    x[0, c - 1, hw // 2, hw // 2] = bad
    win = _win(k, s, k // 2, hw)
    want = nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), None, 1, win, None)
    y = ob.conv(x, w, None, 1, win)
    assert y is not None
    got = y.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=RTOL, atol=1e-3 * float(np.abs(want[fin]).max()))


@needs_bf16
@pytest.mark.parametrize("bad", [np.inf, np.nan])
@pytest.mark.parametrize("fused", [True, False])
def test_guarded_relu_conv_keeps_a_nonfinite_input_inside_its_window(bad: float, fused: bool) -> None:
    # The NaN guard declines the fused ReLU for such an input; the conv then ran in torch's bf16
    # kernel, whose AMX version (an 11x11/4 stem on 3 channels) also multiplied padding weights by
    # neighbouring pixels: NaN outside the window. Now the native conv runs alone, ReLU in numpy.
    from pycann.kernels import conv as kconv
    from pycann.kernels import fused as kfused

    x, w = _bf((1, 3, 32, 32), 0), _bf((4, 3, 11, 11), 1, 0.1)
    x[0, 1, 16, 16] = bad
    b = np.random.default_rng(2).standard_normal(4).astype(np.float32)
    attrs = {"kernel_shape": [11, 11], "strides": [4, 4], "pads": [2, 2, 2, 2]}
    want = nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), b, 1, _win(11, 4, 2, 32), None)
    want = np.where(np.isnan(want), want, np.maximum(want, 0))
    if fused:
        y = kfused._bf16_conv_fused([x, w, b], {**attrs, "activation": "Relu"}, False)
    else:
        y = kconv.conv([x, w, b], attrs, relu=True)
    assert y is not None
    got = np.asarray(y).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=RTOL, atol=1e-3 * float(np.abs(want[fin]).max()))


@needs_bf16
@pytest.mark.parametrize(("c", "m", "k", "s", "hw"), [(3, 64, 7, 2, 32), (3, 5, 3, 1, 5), (4, 16, 3, 1, 56)])
def test_conv_with_few_input_channels_on_a_proven_finite_input_matches_the_window_kernel(
        c: int, m: int, k: int, s: int, hw: int) -> None:
    """``finite=True`` (the NaN guard proved x finite) lets the AMX reduced-lowering kernel run: the
    same values as the kernel that multiplies only the window, within bf16 rounding of the sum."""
    x, w = _bf((1, c, hw, hw), 2), _bf((m, c, k, k), 3, 0.2)
    win = _win(k, s, k // 2, hw)
    want = nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), None, 1, win, None)
    safe = ob.conv(x, w, None, 1, win)
    fast = ob.conv(x, w, None, 1, win, finite=True)
    assert safe is not None and fast is not None
    for y in (safe, fast):
        np.testing.assert_allclose(y.astype(np.float32), want, rtol=RTOL, atol=1e-3 * float(np.abs(want).max()))


@needs_bf16
def test_conv_writes_into_out_of_any_layout_and_reads_strided_inputs() -> None:
    x = np.ascontiguousarray(_bf((1, 16, 12, 12), 0).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # channels-last
    w, win = _bf((8, 16, 3, 3), 1, 0.2), _win(3, 1, 1, 12)
    want = nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), None, 1, win, None)
    outs: list[np.ndarray] = [np.empty((1, 8, 12, 12), BF16), np.empty((1, 12, 12, 8), BF16).transpose(0, 3, 1, 2)]
    for out in outs:
        y = ob.conv(x, w, None, 1, win, out=out)
        assert y is out
        _assert_bf16_close(out, want)
    y = ob.conv(np.ascontiguousarray(x), w, None, 1, win)  # NCHW source: copied channels-last first
    assert y is not None and y.strides[1] == 2
    _assert_bf16_close(y, want)


@needs_bf16
def test_conv_declines_what_it_does_not_take() -> None:
    w, win = _bf((8, 16, 3, 3), 1), _win(3, 1, 1, 12)
    assert ob.conv(np.zeros((1, 16, 12, 12), np.float32), w, None, 1, win) is None  # float32 source
    assert ob.matmul(np.zeros((4, 8), np.float32), _bf((8, 4), 0)) is None
    assert ob.matmul(_bf((2, 4, 8), 0), _bf((3, 8, 4), 1)) is None  # broadcast batch: caller's path


@needs_bf16
@pytest.mark.parametrize(("a_shape", "b_shape"), [((128, 768), (768, 3072)), ((1, 2048), (2048, 1000)),
                                                  ((2, 16, 64), (64, 48)), ((12, 128, 64), (12, 64, 128)),
                                                  ((2, 3, 16, 8), (2, 3, 8, 16))])
def test_matmul_float32_result_of_bf16_operands(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = _bf(a_shape, 0), _bf(b_shape, 1)
    before = ob.stats()["matmul"]
    y = ob.matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))  # bf16 products are exact in float32
    assert y is not None and y.dtype == np.float32 and y.shape == want.shape
    assert ob.stats()["matmul"] == before + 1
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * a_shape[-1])


@needs_bf16
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("residual", [None, "bf16", "f32"])
@pytest.mark.parametrize("act", [None, "Gelu", "Tanh"])
def test_matmul_post_ops_and_bf16_result(packed: bool, residual: str | None, act: str | None) -> None:
    """FusedMatMul's ``act(A @ B + bias + residual)`` in one primitive, rounded once to bf16."""
    from pycann.ops.fused import apply_activation

    a, b = _bf((2, 16, 64), 0), _bf((64, 96), 1, 0.2)
    bias = np.random.default_rng(2).standard_normal(96).astype(BF16)
    want = np.matmul(a.astype(np.float32), b.astype(np.float32)) + bias.astype(np.float32)
    r = None
    if residual is not None:
        r = _bf(want.shape, 3).astype(BF16 if residual == "bf16" else np.float32)
        want = want + r.astype(np.float32)
    if act:
        apply_activation(want, act, 0.0, 0.0)
    unary = onednn_unary(act, 0.0, 0.0) if act else None
    out = np.empty(want.shape, BF16)
    for _ in range(2):  # the second call reuses the plan (and the packed B)
        y = ob.matmul(a, b, bias, r, unary, BF16, packed, out)
        assert y is not None and y.dtype == BF16
        assert np.shares_memory(y, out)
        _assert_bf16_close(y, want)


@needs_bf16
@pytest.mark.parametrize("mask", [False, True])
def test_bf16_attention_in_native_kernels_equals_the_reference_path(mask: bool) -> None:
    """FusedAttention on bf16 Q, K^T, V: both products in the native kernels give the reference
    path's numbers (scores and softmax in float32, P rounded to bf16) up to one bf16 rounding."""
    from pycann.kernels.fused import PROVIDED
    from pycann.ops.fused import REFERENCE, _k_attention

    q, kt, v = _bf((1, 4, 32, 16), 0), _bf((1, 4, 16, 32), 1), _bf((1, 4, 32, 16), 2)
    ins = [q, kt, v] + ([np.where(np.arange(32) < 28, 0.0, -1e9).astype(np.float32).reshape(1, 1, 1, 32)] if mask else [])
    before = ob.stats()["matmul"]
    got = _k_attention(ins, {"scale": 0.25}, PROVIDED)[0]
    assert ob.stats()["matmul"] == before + 2 and got.dtype == BF16
    _assert_bf16_close(got, _k_attention(ins, {"scale": 0.25}, REFERENCE)[0])


def test_kernel_note_says_which_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ob, "native", lambda: True)
    assert "oneDNN native bf16 kernels" in ob.kernel_note({"bf16", "fp32"})
    monkeypatch.setattr(ob, "native", lambda: False)
    assert "bf16 matrix ops: emulated in float32" in ob.kernel_note({"bf16"})
    assert "fp16 matrix ops: emulated in float32" in ob.kernel_note({"fp16"})
    assert ob.kernel_note({"fp32"}) == ""


@needs_bf16
def test_resnet50_allow_fp32_to_bf16_runs_native_bf16_and_stays_close_to_ort() -> None:
    """Every conv and the FC take the native kernels; logits within the measured bf16 error of
    ONNX Runtime float32 (docs/precision.md: max |err| / max |ref| 0.05-0.12, cosine >= 0.99), same top-1."""
    from scripts.model_zoo import MODELS, ort_run

    spec = MODELS["resnet50"]
    if not spec.path.is_file():
        pytest.skip("resnet50.onnx not in the model cache")
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    feeds = spec.test_inputs(0)
    cm = compile_model(str(spec.path), CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2",
                                                      input_shape={k: list(v.shape) for k, v in feeds.items()}))
    algos = {str(n.attrs.get("_algo")) for n in cm.graph.nodes if n.op_type in ("Conv", "FusedConv", "FusedMatMul")}
    assert algos == {"onednn:conv_bf16", "onednn:matmul_bf16_packed"}
    before = ob.stats()
    out = LoadedModel.from_compiled(cm).run_dict(feeds)
    got = np.asarray(next(iter(out.values())) if isinstance(out, dict) else out[0], np.float64)
    after = ob.stats()
    assert after["conv"] - before["conv"] == 53 and after["matmul"] - before["matmul"] == 1
    want = np.asarray(ort_run(spec.path, feeds)[0], np.float64)
    rel = np.abs(got - want).max() / np.abs(want).max()
    cos = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert rel < 0.15 and cos > 0.99, (rel, cos)
    assert (got.argmax(-1) == want.argmax(-1)).all()


@needs_bf16
@pytest.mark.parametrize("act", ["", "Relu", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "LeakyRelu"])
@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_fused_conv_records_a_sound_bound_of_its_output(act: str, scale: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NaN guard's record on a bf16 FusedConv's output (which spares the next conv a read of it)
    is at least max |y| for every activation it records one for, and none for the others; an
    activation that keeps NaN does not read an input that has no record."""
    from pycann.kernels import fused
    from pycann.kernels.providers import nan_guard

    x, w = _bf((1, 16, 12, 12), 4, scale), _bf((24, 16, 3, 3), 5, 0.3)
    b = np.random.default_rng(6).standard_normal(24).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1], "group": 1, "kernel_shape": [3, 3],
             "activation": act, "act_alpha": 0.1 if act == "LeakyRelu" else 0.2 if act == "HardSigmoid" else 0.0,
             "act_beta": 0.5 if act == "HardSigmoid" else 0.0}
    nan_guard.new_run()  # (as a plan run starts: records count)
    try:
        nan_guard.record(x, float(np.abs(x.astype(np.float32)).max()))  # as a guarded producer would
        y = fused._bf16_conv_fused([x, w, b], attrs, relu=False)
        rec = nan_guard.proven(y) if y is not None else None
        x2 = _bf((1, 16, 12, 12), 7, scale)  # no record
        if not fused.nan_guard.drops_nan(fused.onednn_unary(act, attrs["act_alpha"], attrs["act_beta"]) if act else None):
            monkeypatch.setattr(nan_guard, "_norm2", lambda a: pytest.fail("read an input it need not read"))
        assert fused._bf16_conv_fused([x2, w, b], attrs, relu=False) is not None
    finally:
        nan_guard.end_run()
    assert y is not None and y.dtype == BF16
    if act == "LeakyRelu":
        assert rec is None
    else:
        assert rec is not None and rec >= float(np.abs(y.astype(np.float32)).max())


@needs_bf16
@pytest.mark.parametrize("shape", [(1, 3, 160, 120), (2, 8, 64, 72)])
def test_large_nchw_bf16_input_is_relaid_exactly(shape: tuple[int, ...]) -> None:
    """A large NCHW bf16 input (the stem's) goes channels-last by a oneDNN reorder: bit-exact, NaN,
    inf and subnormals included, and the conv on it equals the float32 computation."""
    x = _bf(shape, 7, 3.0)
    flat = x.reshape(-1)
    flat[:4] = np.array([np.nan, np.inf, -np.inf, 1e-40], np.float32).astype(BF16)
    y = ob._to_channels_last(x)
    assert y.strides[1] == 2 and y.size >= ob._RELAYOUT_MIN
    # bit-exact but for subnormals, which oneDNN's reorder may flush to zero (as the conv's bf16 dot
    # product treats subnormal inputs as zero anyway: the conv's result is the same)
    same = y.view(np.uint16) == x.view(np.uint16)
    sub = np.abs(x.astype(np.float32)) < np.float32(1.1754944e-38)
    assert same[~sub].all() and (same | (y.astype(np.float32) == 0))[sub].all()
    assert np.isnan(y.reshape(-1)[0]) and np.isinf(y.reshape(-1)[1:3]).all()
    x = _bf(shape, 8)
    w = _bf((16, shape[1], 3, 3), 9, 0.2)
    win = Window(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1), out=shape[2:])
    got = ob.conv(x, w, None, 1, win)
    assert got is not None
    _assert_bf16_close(got, nb.conv_im2col_gemm(x.astype(np.float32), w.astype(np.float32), None, 1, win, None))


@needs_bf16
def test_relayout_does_not_wait_for_a_held_lock() -> None:
    """(a lock a forked child inherited taken): the relayout runs on memories of its own."""
    x = _bf((1, 3, 160, 120), 10)
    ob._to_channels_last(x)  # the reorder made
    (reorder,) = [r for k, r in ob._relayouts.items() if k[0] == x.shape and k[1] == x.strides]
    with reorder._lock:
        y = ob._to_channels_last(x)
    assert y.strides[1] == 2
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32))


def test_a_forked_child_gets_fresh_locks() -> None:
    """A parent thread inside a bf16 call at an os.fork leaves the module's locks taken in the child."""
    import os

    with ob._lock:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = ob._lock.acquire(timeout=5)
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


@needs_bf16
@pytest.mark.parametrize(("c", "m", "hw"), [(192, 48, 1), (48, 192, 1), (24, 8, 1)])
def test_a_conv_on_a_one_pixel_map_runs_on_another_thread(c: int, m: int, hw: int) -> None:
    """An SE block's 1x1 conv on a (1, C, 1, 1) map: both NCHW and channels-last strides fit it; as
    NCHW oneDNN took its bf16 ``gemm:jit`` convolution, whose execute on another thread than its
    maker failed (a plan's kernels run on any caller's thread; a forked child's on a fresh one), and
    the call fell back to torch. The channels-last form takes brgconv: same values on both threads."""
    import threading

    from pycann.ops.nn.conv import conv_window

    x, w = _bf((1, c, hw, hw), 11, 1.0), _bf((m, c, 1, 1), 12, 0.1)
    b = np.random.default_rng(13).standard_normal(m).astype(np.float32)
    win = conv_window(x.shape, w.shape, {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                                         "group": 1, "dilations": [1, 1]})
    y0 = ob.conv(x, w, b, 1, win)
    assert y0 is not None
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(ob.conv(x, w, b, 1, win)))
    t.start()
    t.join()
    assert got[0] is not None
    np.testing.assert_array_equal(got[0].astype(np.float32), y0.astype(np.float32))
    assert not any("gemm" in getattr(p, "impl", "") for p in ob._plans.values())
