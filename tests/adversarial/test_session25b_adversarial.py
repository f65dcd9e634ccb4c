"""Adversarial tests of session 25b's changes: plain-int oneDNN handles, the slotted pointwise
runner, FusedConvTranspose's bfloat16 rounding, the deconvolution NaN guard skipped for
PatchDeconv's dense numpy form, and the oneDNN machine roofs (``pycann.profiler.peak``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.kernels import conv as kconv
from pycann.kernels import providers
from pycann.ops.fused_deconv import _k_fused_conv_transpose

needs_dnnl = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")

_ACTS = [("Relu", 0.0, 0.0), ("LeakyRelu", 0.1, 0.0), ("HardSigmoid", 0.2, 0.5), ("Clip", -1.0, 1.0),
         ("Sigmoid", 0.0, 0.0), ("Gelu", 0.0, 0.0)]


def _nan_input(c: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, c, 8, 8)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    x[0, 1, 1, 1] = np.inf
    x[0, :, 5, 5] = -np.inf
    return x


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("act", _ACTS)
@pytest.mark.parametrize("cmk", [(4, 1, 2), (24, 1, 2), (4, 4, 2)])
def test_patch_plan_rejected_keeps_nan_guard(monkeypatch: pytest.MonkeyPatch, act: tuple[str, float, float],
                                             cmk: tuple[int, int, int]) -> None:
    """A kernel == stride deconvolution whose PatchDeconv oneDNN rejects (``patch_plan`` None: its
    matmul has only reference loops on this CPU, or fails) runs in the per-shape oneDNN
    deconvolution with the activation as a post-op: the NaN guard must still run there (it was
    skipped because the *geometry* said the dense numpy form runs)."""
    from pycann.kernels.providers import onednn_capi as capi
    from pycann.kernels.providers import onednn_pointwise as pw

    def rejected(self: Any, batch: int) -> Any:
        raise capi.DnnlError("simulated: oneDNN offers only its reference implementation", 3)

    monkeypatch.setattr(pw.PatchDeconv, "_primitive", rejected)
    monkeypatch.setattr(pw, "_patch_plans", {})
    c, m, k = cmk
    rng = np.random.default_rng(4)
    w = rng.standard_normal((c, m, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    x = _nan_input(c)
    attrs = {"kernel_shape": [k, k], "strides": [k, k], "activation": act[0], "act_alpha": act[1],
             "act_beta": act[2]}
    with np.errstate(all="ignore"):
        y = np.asarray(_k_fused_conv_transpose([x, w, b], attrs, kconv.conv_transpose_act)[0])
        ref = _k_fused_conv_transpose([x, w, b], attrs)[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- FusedConvTranspose in bf16 / fp16


def _bf16() -> Any:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("narrow", ["bfloat16", "float16"])
@pytest.mark.parametrize("act", [("Relu", 0.0, 0.0), ("Sigmoid", 0.0, 0.0), ("LeakyRelu", 0.1, 0.0),
                                 ("Clip", -0.5, 0.5)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("geom", [{"kernel_shape": [2, 2], "strides": [2, 2]},
                                  {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "output_padding": [1, 1]},
                                  {"kernel_shape": [2, 2], "strides": [2, 2], "group": 2}])
def test_narrow_fused_deconv_is_float32_rounded_once(narrow: str, act: tuple[str, float, float], bias: bool,
                                                     geom: dict[str, Any]) -> None:
    """bf16/fp16 X, W, B: the float32 computation on the widened operands, rounded once to X's
    dtype (NaN and infinities as the float32 computation has them)."""
    dt = _bf16() if narrow == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(5)
    g = int(geom.get("group", 1))
    k = geom["kernel_shape"][0]
    x = rng.standard_normal((1, 4, 6, 5)).astype(dt)
    x[0, 0, 0, 0], x[0, 1, 2, 2], x[0, 3, 4, 4] = np.nan, np.inf, -np.inf
    w = rng.standard_normal((4, 2 // g * g, k, k)).astype(dt)
    ins = [x, w] + ([rng.standard_normal(w.shape[1] * g).astype(dt)] if bias else [])
    attrs = {**geom, "activation": act[0], "act_alpha": act[1], "act_beta": act[2]}
    with np.errstate(all="ignore"):
        y = _k_fused_conv_transpose(ins, attrs, kconv.conv_transpose_act)[0]
        wide = _k_fused_conv_transpose([a.astype(np.float32) for a in ins], attrs)[0]
    assert y.dtype == dt
    ref = wide.astype(dt)
    np.testing.assert_array_equal(np.isnan(y.astype(np.float32)), np.isnan(ref.astype(np.float32)))
    # (the providers' float32 sums differ in the last float32 bits: one narrow ulp at most)
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def _det_like() -> Any:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)

    def w(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)

    inits = {"wc": w(8, 3, 3, 3), "bc": w(8), "w1": w(8, 4, 2, 2), "b1": w(4), "w2": w(4, 1, 2, 2), "b2": w(1)}
    nodes = [helper.make_node("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c", "w1", "b1"], ["d1"], strides=[2, 2]),
             helper.make_node("Relu", ["d1"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "w2", "b2"], ["d2"], strides=[2, 2]),
             helper.make_node("Sigmoid", ["d2"], ["y"])]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class _Dtypes:
    """A node observer recording (op type, output name, output dtype) of every executed node."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, np.dtype]] = []

    def on_node(self, node: Any, inputs: Any, outputs: Any, start_ns: int, end_ns: int, graph_name: str) -> None:
        self.seen += [(node.op_type, name, np.asarray(o).dtype) for name, o in zip(node.outputs, outputs)]

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None:
        pass


@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("mode", ["allow_fp32_to_bf16", "allow_fp32_to_fp16", "allow_mix_precision_bf16",
                                  "allow_mix_precision_fp16", "force_fp16", "force_fp32"])
@pytest.mark.parametrize("om", [False, True])
def test_det_like_narrow_mode_every_output_has_the_graph_dtype(tmp_path: Any, mode: str, om: bool) -> None:
    """conv -> deconv -> relu -> deconv -> sigmoid compiled in a narrow mode: every node's output
    has the dtype its graph desc says (also after an .om round trip), and the result stays close
    to float32's."""
    from pycann.dtypes import to_numpy
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    m = _det_like()
    cm = compile_model(m, CompileOptions(precision_mode=mode, soc_version="CPU"))
    descs = cm.graph.descs
    if om:
        cm.save(tmp_path / "m.om")
        lm = LoadedModel.from_file(tmp_path / "m.om")
    else:
        lm = LoadedModel.from_compiled(cm)
    x = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    from pycann.profiler import hooks

    obs = _Dtypes()
    with hooks.observe(obs):
        lm.run([x])
    seen = obs.seen
    assert seen
    assert any(op == "FusedConvTranspose" for op, *_ in seen)
    bad = [(op, name, str(dt), str(to_numpy(descs[name].dtype))) for op, name, dt in seen
           if name in descs and dt != to_numpy(descs[name].dtype)]
    assert not bad
    y = np.asarray(lm.run([x])[0], dtype=np.float32)
    ref = np.asarray(LoadedModel.from_compiled(compile_model(m, CompileOptions(soc_version="CPU"))).run([x])[0])
    np.testing.assert_allclose(y, ref, atol=3e-2)


# ---------------------------------------------------------------- machine roofs (profiler.peak)


def test_peak_measure_with_onednn_disabled_uses_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PYCANN_PROVIDERS=numpy``: pycann's kernels run in numpy, so the roofs are numpy's (the
    probe must not measure, nor load, the oneDNN the user turned off)."""
    from pycann.profiler import peak

    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    try:
        p = peak.measure(gemm_n=16, copy_mib=1, repeat=1)
    finally:
        monkeypatch.delenv("PYCANN_PROVIDERS")
        providers.reset()
    assert p.source.startswith("measured: numpy") and p.flops > 0 and p.bandwidth > 0


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_peak_measure_falls_back_to_numpy_when_onednn_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A oneDNN error in the probe (a primitive it does not make here) is no reason for msprof's
    summary to fail: the numpy probe measures instead."""
    from pycann.kernels.providers import onednn_capi as capi
    from pycann.kernels.providers import onednn_capi_ops as capi_ops
    from pycann.profiler import peak

    def fails(*a: Any, **k: Any) -> Any:
        raise capi.DnnlError("dnnl_matmul_primitive_desc_create", 3)

    monkeypatch.setattr(capi_ops, "matmul_pd", fails)
    p = peak.measure(gemm_n=16, copy_mib=1, repeat=1)
    assert p.source.startswith("measured: numpy") and p.flops > 0


@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("bad", [{"gemm_n": 0}, {"copy_mib": 0}, {"repeat": 0}, {"gemm_n": -4}, {"repeat": -1}])
def test_peak_measure_rejects_sizes_below_one(bad: dict[str, int]) -> None:
    """Zero-sized probes measured nothing and reported roofs of 0 (every op then 'overhead-bound'),
    a negative one failed deep in numpy: ``ValueError`` up front, as ``bench/machine_limits.py`` does."""
    from pycann.profiler import peak

    args = {"gemm_n": 8, "copy_mib": 1, "repeat": 1, **bad}
    with pytest.raises(ValueError, match="at least 1"):
        peak.measure(**args)


def test_peak_env_overrides_win_without_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.profiler import peak

    monkeypatch.setattr(peak, "_CACHED", None)
    monkeypatch.setenv("PYCANN_PEAK_GFLOPS", "123")
    monkeypatch.setenv("PYCANN_PEAK_GBPS", "45")

    def no_probe(*a: Any, **k: Any) -> Any:
        raise AssertionError("measured despite both overrides")

    monkeypatch.setattr(peak, "measure", no_probe)
    p = peak.machine_peaks()
    assert (p.flops, p.bandwidth) == (123e9, 45e9) and p.source.startswith("env")
    monkeypatch.setattr(peak, "_CACHED", None)
    monkeypatch.delenv("PYCANN_PEAK_GBPS")
    monkeypatch.setattr(peak, "measure", lambda: peak.Peaks(1.0, 2.0, "measured: stub"))
    p = peak.machine_peaks()
    assert (p.flops, p.bandwidth) == (123e9, 2.0) and "overridden" in p.source
    monkeypatch.setattr(peak, "_CACHED", None)


# ---------------------------------------------------------------- Pointwise.sized's slotted runner


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_sized_runner_keeps_its_weight_alive() -> None:
    """The runner ``Pointwise.sized`` returns executes the Pointwise's primitive on its transposed
    weight copy (``wt``): dropping the Pointwise (the plan table starts over, or a caller keeps only
    the runner) freed that copy while the runner still read it (values from whatever reused it)."""
    import gc

    from pycann.kernels.providers import onednn_pointwise as pw

    rng = np.random.default_rng(8)
    w = rng.standard_normal((16, 32, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 32, 4, 4)).astype(np.float32)
    run = pw.Pointwise(w, False, None, False).sized(x.shape, None)
    gc.collect()
    junk = [np.full((32, 16), 1e6, np.float32) for _ in range(50)]
    y = np.asarray(run(x, None))
    del junk
    np.testing.assert_allclose(y, np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x), rtol=1e-4, atol=1e-4)


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_sized_runner_shape_residual_and_held_lock() -> None:
    """Shape check, residual prefill (a misfit or missing residual: OperandError), and a held lock
    (a concurrent run, or a forked child's orphaned lock) never waited for."""
    from pycann.errors import OperandError
    from pycann.kernels.providers import onednn_pointwise as pw

    rng = np.random.default_rng(9)
    w = rng.standard_normal((8, 4, 1, 1)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((1, 4, 3, 5)).astype(np.float32)
    r = rng.standard_normal((1, 8, 3, 5)).astype(np.float32)
    k = pw.Pointwise(w, True, None, True)
    run = k.sized(x.shape, b)
    ref = np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x) + b[None, :, None, None] + r
    np.testing.assert_allclose(np.asarray(run(x, r)), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(OperandError):
        run(x[:, :, :2], r)
    with pytest.raises(OperandError):
        run(x, None)
    with pytest.raises(OperandError):
        run(x, r[:, :4])
    assert run.lock.acquire(blocking=False)  # (held, as an orphaned lock in a forked child)
    try:
        np.testing.assert_allclose(np.asarray(run(x, r)), ref, rtol=1e-5, atol=1e-5)
    finally:
        run.lock.release()
    with pytest.raises(OperandError):
        k.sized((1, 5, 3, 5), b)
    with pytest.raises(OperandError):
        k.sized(x.shape, None)


# ---------------------------------------------------------------- oneDNN handles as plain ints


def _called_dnnl_functions(module_files: list[str]) -> set[str]:
    import re

    names: set[str] = set()
    for f in module_files:
        with open(f) as fh:
            src = fh.read()
        names |= set(re.findall(r"\b(dnnl_[a-z0-9_]+)\b", src))  # (those the library exports are its functions)
    return names


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_every_called_v3_function_declares_pointer_argtypes() -> None:
    """Handles are plain ints now: a function called without argtypes would pass one as a C int
    (truncating an address above 2**31). Every ``lib.dnnl_*(`` call of the v3 binding modules has
    declared argtypes once the library is loaded (int8's own after its probe)."""
    import glob
    import os

    from pycann.kernels.providers import onednn_capi as capi
    from pycann.kernels.providers import onednn_int8

    lib = capi.load()
    onednn_int8.available()
    here = os.path.dirname(capi.__file__)
    files = [f for f in glob.glob(os.path.join(here, "onednn*.py")) if not f.endswith("onednn2_capi.py")]
    files.append(os.path.join(here, "onednn_capi_table.py"))
    called = [n for n in sorted(_called_dnnl_functions(files)) if getattr(lib, n, None) is not None]
    assert len(called) >= 30
    missing = [n for n in called if getattr(lib, n).argtypes is None]
    if not onednn_int8.available():
        missing = [n for n in missing if "scales_mask" not in n and "zero_points_mask" not in n]
    assert not missing


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_handles_are_ints_and_destroyed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from pycann.kernels.providers import onednn_capi as capi

    lib = capi.load()
    destroyed: list[int] = []
    real = lib.dnnl_memory_destroy

    def counting(h: Any) -> Any:
        destroyed.append(h)
        return real(h)

    monkeypatch.setattr(lib, "dnnl_memory_destroy", counting)
    md = capi.MemoryDesc.strided((4, 4), (4, 1))
    buf = np.zeros((4, 4), np.float32)
    m = capi.Memory(md, capi.ptr(buf))
    null = capi.Memory(md, 0)  # (a memory over no buffer yet: pointed per call)
    assert isinstance(md.handle, int) and isinstance(m.handle, int) and isinstance(null.handle, int)
    h = m.handle
    del m
    gc.collect()
    assert destroyed == [h]
    del null
    gc.collect()
    assert len(destroyed) == 2


@pytest.mark.parametrize("bad", ["abc", "0", "-5", "nan", "inf", ""])
def test_peak_env_override_must_be_a_positive_number(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    """A bad ``PYCANN_PEAK_GFLOPS`` was a bare float() error ("abc"), or roofs of 0 / NaN / inf that
    made every verdict meaningless: ``ConfigError`` naming the variable (as pycann's other knobs)."""
    from pycann.config import ConfigError
    from pycann.profiler import peak

    monkeypatch.setattr(peak, "_CACHED", None)
    monkeypatch.setattr(peak, "measure", lambda: peak.Peaks(1.0, 2.0, "measured: stub"))
    monkeypatch.setenv("PYCANN_PEAK_GBPS", "45")
    monkeypatch.setenv("PYCANN_PEAK_GFLOPS", bad)
    if bad == "":  # (empty: unset, as before)
        assert peak.machine_peaks().flops == 1.0
    else:
        with pytest.raises(ConfigError, match="PYCANN_PEAK_GFLOPS"):
            peak.machine_peaks()
    monkeypatch.setattr(peak, "_CACHED", None)


@needs_dnnl
@pytest.mark.usefixtures("default_providers")
def test_sized_runner_concurrent_callers_get_their_own_results() -> None:
    """Threads sharing one runner (its two memories re-pointed under a lock, or a call's own
    memories while another holds it): each gets the conv of its own input."""
    import threading

    from pycann.kernels.providers import onednn_pointwise as pw

    rng = np.random.default_rng(10)
    w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    xs = [rng.standard_normal((2, 8, 9, 7)).astype(np.float32) for _ in range(6)]
    k = pw.Pointwise(w, False, None, False)
    run = k.sized(xs[0].shape, None)
    refs = [np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x) for x in xs]
    errors: list[str] = []

    def worker(i: int) -> None:
        for _ in range(30):
            y = np.asarray(run(xs[i], None))
            if not np.allclose(y, refs[i], rtol=1e-4, atol=1e-4):
                errors.append(f"thread {i}")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
