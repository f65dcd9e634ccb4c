"""``onednn:conv_winograd`` (oneDNN v2's Winograd kernels through ``onednn2_capi``) against numpy,
ONNX Runtime and the direct oneDNN conv: values, the eligibility rules, the plan kernel, threads,
KernelSelection under ``--op_select_implmode``, and the fallback without ``libdnnl.so.2``.
Skipped when ``libdnnl.so.2`` is missing (``python scripts/fetch_onednn2.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn, onednn_conv_plan, onednn_wino
from pycann.ops.nn.spatial import Window
from pycann.tools.atc import main as atc_main
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.skipif(not (onednn.available() and onednn_wino.available()),
                                 reason="libdnnl.so.2 missing: python scripts/fetch_onednn2.py"),
              pytest.mark.usefixtures("default_providers")]

RNG = np.random.default_rng(20261130)
# Winograd rounds differently from a direct sum: ~2e-6 of the output's range on these shapes
REL = 2e-5


def _win(h: int, w: int, pad: int = 1) -> Window:
    return Window((3, 3), (1, 1), (1, 1), (pad, pad), (pad, pad), (h + 2 * pad - 2, w + 2 * pad - 2))


def _data(n: int, c: int, m: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (RNG.standard_normal((m, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32)
    return x, wt, (RNG.standard_normal(m) * 0.1).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.abs(want).max()) or 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=REL * scale)


# (n, c, m, h, w, pad): ResNet-50-like (2x3 kernel at batch 1), batched (4x3 kernel), rectangular,
# unpadded with 24 output channels (padded to 32 inside: PP-OCR det), channels changing
SHAPES = [(1, 64, 64, 16, 16, 1), (4, 48, 48, 14, 14, 1), (1, 64, 48, 20, 28, 1), (2, 96, 24, 18, 18, 0),
          (1, 128, 64, 14, 14, 1)]


@pytest.mark.parametrize("n,c,m,h,w,pad", SHAPES)
@pytest.mark.parametrize("post", ["none", "relu", "clip", "leaky", "relu+affine"])
def test_matches_numpy_with_each_post_op(n: int, c: int, m: int, h: int, w: int, pad: int, post: str) -> None:
    x, wt, b = _data(n, c, m, h, w)
    win = _win(h, w, pad)
    assert onednn_wino.eligible(x.shape, wt.shape, 1, win)
    unary = {"none": None, "relu": onednn.RELU, "clip": (onednn.E["clip"], 0.0, 6.0),
             "leaky": (onednn.E["relu"], 0.1, 0.0),
             "relu+affine": (onednn.RELU, (onednn.E["linear"], 0.5, -1.0))}[post]
    p = onednn_wino.plan(x.shape, wt, b, win, unary)
    if post in ("none", "relu"):
        assert p is not None and "wino" in p.impl
    else:  # oneDNN's Winograd kernels take a plain ReLU post-op only: the direct conv computes these
        assert p is None and not onednn_wino.takes_post_ops(unary)
    want = nb.conv_im2col_gemm(x, wt, b, 1, win)
    want = onednn._numpy_unary(want, unary) if unary is not None else want
    y = onednn_wino.conv_winograd(x, wt, b, 1, win, unary=unary)  # NCHW input: reordered by oneDNN
    assert y.strides[1] == 4  # channels-last result
    _close(y, want)


def test_without_bias_and_into_out() -> None:
    x, wt, _ = _data(1, 64, 64, 16, 16)
    win = _win(16, 16)
    out = onednn.empty_channels_last((1, 64, 16, 16))
    xc = onednn.empty_channels_last(x.shape)
    xc[...] = x
    y = onednn_wino.conv_winograd(xc, wt, None, 1, win, out)
    assert y is out
    _close(out, nb.conv_im2col_gemm(x, wt, None, 1, win))


@pytest.mark.parametrize("case", ["stride2", "5x5", "c24", "c32", "m8", "dilated", "grouped", "7x7_image", "pad2",
                                  "1d"])
def test_not_eligible(case: str) -> None:
    x_shape, w_shape, group = (1, 64, 16, 16), (64, 64, 3, 3), 1
    assert onednn_wino.eligible(x_shape, w_shape, group, _win(16, 16))
    win = _win(16, 16)
    if case == "stride2":
        win = Window((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (8, 8))
    elif case == "5x5":
        w_shape, win = (64, 64, 5, 5), Window((5, 5), (1, 1), (1, 1), (2, 2), (2, 2), (16, 16))
    elif case == "c24":
        x_shape, w_shape = (1, 24, 16, 16), (64, 24, 3, 3)
    elif case == "c32":  # too few input channels to pay for the transforms
        x_shape, w_shape = (1, 32, 16, 16), (64, 32, 3, 3)
    elif case == "m8":
        w_shape = (8, 64, 3, 3)
    elif case == "dilated":
        win = Window((3, 3), (1, 1), (2, 2), (2, 2), (2, 2), (16, 16))
    elif case == "grouped":
        w_shape, group = (64, 32, 3, 3), 2
    elif case == "7x7_image":
        x_shape, win = (1, 64, 7, 7), _win(7, 7)
    elif case == "pad2":
        win = Window((3, 3), (1, 1), (1, 1), (2, 2), (2, 2), (18, 18))
    elif case == "1d":
        x_shape = (1, 64, 16)
    assert not onednn_wino.eligible(x_shape, w_shape, group, win)


def test_ineligible_and_residual_calls_take_the_direct_conv() -> None:
    x, wt, b = _data(1, 24, 32, 16, 16)  # 24 input channels: not Winograd
    win = _win(16, 16)
    assert onednn_wino.plan(x.shape, wt, b, win, None) is None
    _close(onednn_wino.conv_winograd(x, wt, b, 1, win), nb.conv_im2col_gemm(x, wt, b, 1, win))
    x, wt, b = _data(1, 64, 64, 16, 16)
    r = RNG.standard_normal((1, 64, 16, 16)).astype(np.float32)
    y = onednn_wino.conv_winograd(x, wt, b, 1, win, residual=r, relu=True)
    np.testing.assert_allclose(y, np.maximum(nb.conv_im2col_gemm(x, wt, b, 1, win) + r, 0), rtol=1e-4, atol=1e-4)


def test_concurrent_threads_with_both_kernels() -> None:
    """Regression: v2.6's jit_wino_4x3 crashed when run from a second thread with its library-managed
    scratchpad; now every call passes pycann's own (shared under one lock)."""
    x1, wt, b = _data(1, 64, 64, 16, 16)
    x4 = RNG.standard_normal((4, 64, 16, 16)).astype(np.float32)
    win = _win(16, 16)
    wants = {1: nb.conv_im2col_gemm(x1, wt, b, 1, win), 4: nb.conv_im2col_gemm(x4, wt, b, 1, win)}
    impls = {n: onednn_wino.plan(x.shape, wt, b, win, None).impl for n, x in ((1, x1), (4, x4))}  # type: ignore[union-attr]
    assert "wino" in impls[1] and "wino" in impls[4]
    errors: list[str] = []

    def worker(i: int) -> None:
        for k in range(8):
            n = (1, 4)[(i + k) % 2]
            y = onednn_wino.conv_winograd(x1 if n == 1 else x4, wt, b, 1, win)
            if not np.allclose(y, wants[n], rtol=0, atol=REL * float(np.abs(wants[n]).max())):
                errors.append(f"thread {i} batch {n}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and impls


def _model(residual: bool = False) -> onnx.ModelProto:
    """x (N, 64, 16, 16) -> Conv 3x3 -> Relu -> Conv 3x3 (+ x) -> Relu: two Winograd candidates, the
    second with a residual Add that fuses into it."""
    w1 = (RNG.standard_normal((64, 64, 3, 3)) * 0.08).astype(np.float32)
    w2 = (RNG.standard_normal((64, 64, 3, 3)) * 0.08).astype(np.float32)
    b1 = (RNG.standard_normal(64) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1])]
    last = "c2"
    if residual:
        nodes.append(helper.make_node("Add", ["c2", "x"], ["s"]))
        last = "s"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(b1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _algos(lm: LoadedModel, x: np.ndarray) -> list[str]:
    plan, _ = lm.executor.plan_for([x])
    return [str(n.attrs.get("_algo")) for n in plan.graph.nodes if "Conv" in n.op_type]


@pytest.mark.parametrize("batch", [1, 4])
def test_model_default_is_winograd_and_matches_ort(batch: int) -> None:
    m = _model()
    x = RNG.standard_normal((batch, 64, 16, 16)).astype(np.float32)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert _algos(lm, x) == ["onednn:conv_winograd"] * 2
    want = run_ort(m, {"x": x})[0]
    for _ in range(2):  # the second run reuses the arena and the bound kernels
        _close(lm.run([x])[0], want)


def test_residual_conv_keeps_the_direct_algorithm() -> None:
    m = _model(residual=True)
    x = RNG.standard_normal((1, 64, 16, 16)).astype(np.float32)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert _algos(lm, x) == ["onednn:conv_winograd", "onednn:conv_nhwc"]
    _close(lm.run([x])[0], run_ort(m, {"x": x})[0])


def test_conv_with_another_activation_keeps_the_direct_algorithm() -> None:
    """Relu6 (Clip 0..6) fuses into the conv, and Winograd's kernels take a plain ReLU only: the
    recorded algorithm is the one that runs."""
    m = _model()
    g = m.graph
    relu = next(n for n in g.node if n.op_type == "Relu")
    relu.op_type = "Clip"
    relu.input.extend(["lo", "hi"])
    g.initializer.extend([numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")])
    x = RNG.standard_normal((1, 64, 16, 16)).astype(np.float32)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert _algos(lm, x) == ["onednn:conv_nhwc", "onednn:conv_winograd"]
    _close(lm.run([x])[0], run_ort(m, {"x": x})[0])


@pytest.mark.parametrize("mode,types,want", [
    ("high_precision", [], "onednn:conv_nhwc"),
    ("high_precision_for_all", [], "onednn:conv_nhwc"),
    ("high_precision", ["Conv"], "onednn:conv_nhwc"),
    ("high_precision", ["MatMul"], "onednn:conv_winograd"),  # the mode applies to MatMul only
    ("high_performance", [], "onednn:conv_winograd"),
])
def test_implmode_options(mode: str, types: list[str], want: str) -> None:
    m = _model()
    x = RNG.standard_normal((1, 64, 16, 16)).astype(np.float32)
    cm = compile_model(m, CompileOptions(op_select_implmode=mode, optypelist_for_implmode=types))
    lm = LoadedModel.from_compiled(cm)
    assert _algos(lm, x) == [want] * 2
    got, ref = lm.run([x])[0], run_ort(m, {"x": x})[0]
    if want == "onednn:conv_nhwc":
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    else:
        _close(got, ref)


def test_run_time_choice_without_a_recorded_algorithm_is_exact() -> None:
    """Dynamic shapes chosen at run time (no ``_algo``), single ops: never the approximate algorithm."""
    spec = providers.conv_spec("Conv", (1, 64, 16, 16), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]})
    assert providers.select(spec).key == "onednn:conv_nhwc"
    assert providers.select(spec, approx=True).key == "onednn:conv_winograd"
    assert providers.resolve(None, lambda: spec).key == "onednn:conv_nhwc"


def test_atc_option_and_its_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    base = [f"--model={model}", "--framework=5", "--soc_version=Ascend310P3", "--input_shape=x:1,64,16,16",
            "--log=info"]
    assert atc_main([*base, f"--output={tmp_path / 'p'}", "--op_select_implmode=high_precision"]) == 0
    out = capsys.readouterr().out
    assert "onednn:conv_nhwc 2" in out and "winograd" not in out and "no effect" not in out, out
    assert "Winograd off for 2 3x3 convs (op_select_implmode high_precision)" in out, out
    assert atc_main([*base, f"--output={tmp_path / 'f'}"]) == 0
    assert "onednn:conv_winograd 2" in capsys.readouterr().out
    assert atc_main([*base, f"--output={tmp_path / 'l'}", "--optypelist_for_implmode=Conv"]) == 0
    out = capsys.readouterr().out
    assert "without --op_select_implmode it changes nothing" in out and "onednn:conv_winograd 2" in out, out
    assert atc_main([*base, f"--output={tmp_path / 'bad'}", "--op_select_implmode=fastest"]) != 0
    out = capsys.readouterr().out
    assert "E10001" in out and "op_select_implmode" in out and "high_precision" in out, out


def test_without_the_v2_library_the_direct_conv_runs(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import numpy as np, sys
        sys.path.insert(0, ".")
        from tests.kernels.test_onednn_wino import _model
        from tests.ops.oracle import run_ort
        from pycann.ge.compile.compiler import compile_model
        from pycann.ge.run.model import LoadedModel
        from pycann.ge.compile.options import CompileOptions
        from pycann.kernels.providers import onednn_wino
        m = _model()
        x = np.random.default_rng(0).standard_normal((1, 64, 16, 16)).astype(np.float32)
        lines = []
        cm = compile_model(m, log=lines.append)
        lm = LoadedModel.from_compiled(cm)
        plan, _ = lm.executor.plan_for([x])
        algos = sorted({str(n.attrs.get("_algo")) for n in plan.graph.nodes if "Conv" in n.op_type})
        ok = np.allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
        static = compile_model(m, CompileOptions(input_shape={"x": [1, 64, 16, 16]}), log=lines.append)
        note = any("libdnnl.so.2 not found (python scripts/fetch_onednn2.py)" in ln for ln in lines)
        print(onednn_wino.available(), algos, ok, note)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYCANN_PROVIDERS"}
    env.update(PYCANN_DNNL2_LIB=str(tmp_path / "missing.so"), PYCANN_CACHE=str(tmp_path / "cache"))
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root)
    assert out.stdout.strip() == "False ['onednn:conv_nhwc'] True True", out.stdout + out.stderr


def test_fetch_script_check_follows_the_library_lookup(tmp_path: Path) -> None:
    """``scripts/fetch_onednn2.py --check`` reports the path ``onednn2_capi`` would load."""
    root = Path(__file__).resolve().parents[2]
    script = [sys.executable, str(root / "scripts" / "fetch_onednn2.py"), "--check"]
    env = dict(os.environ, PYCANN_DNNL2_LIB=str(tmp_path / "none.so"))
    out = subprocess.run(script, capture_output=True, text=True, env=env)
    assert out.returncode == 1 and out.stdout.strip() == f"missing: {tmp_path / 'none.so'}"
    env = {k: v for k, v in os.environ.items() if k != "PYCANN_DNNL2_LIB"}
    cached = Path(os.environ.get("PYCANN_CACHE") or Path.home() / ".cache" / "pycann") / "onednn2" / "libdnnl.so.2"
    out = subprocess.run(script, capture_output=True, text=True, env=env)
    assert (out.returncode, out.stdout.strip()) == ((0, str(cached)) if cached.is_file() else (1, f"missing: {cached}"))


def test_a_plan_bound_at_load_reserves_what_its_first_run_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reserve`` grows the shared buffers (pages written) and makes the channels-last input reorder,
    so the first run allocates and creates nothing; ``bound_conv_winograd`` calls it; values as numpy's."""
    x, wt, b = _data(1, 64, 96, 40, 36)
    win = _win(40, 36)
    p = onednn_wino._Plan(x.shape, wt, b, win, None)
    p.reserve()
    assert list(p.x_reorders) == [onednn_conv_plan._cl_strides(x.shape)]
    sizes = [a.size for a in onednn_wino._scratch]
    assert all(s >= need for s, need in zip(sizes, (p.src_bytes, p.dst_bytes, p.scratch_bytes)))
    xc = onednn.empty_channels_last(x.shape)
    xc[...] = x
    y = p.run(xc, None)
    assert len(p.x_reorders) == 1 and [a.size for a in onednn_wino._scratch] == sizes
    _close(y, nb.conv_im2col_gemm(x, wt, b, 1, win))
    reserved: list[object] = []
    monkeypatch.setattr(onednn_wino._Plan, "reserve", lambda self: reserved.append(self))
    assert onednn_wino.bound_conv_winograd(wt, b, win, x.shape, None) is not None and len(reserved) == 1
