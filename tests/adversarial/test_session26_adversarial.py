"""Session 26 adversarial tests: today's bf16 patch deconv (onednn_bf16_deconv) and the fork-safe
kernel locks (omp_fork.fork_safe)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import bfloat16
from pycann.kernels import fused as kf
from pycann.kernels.providers import nan_guard
from pycann.kernels.providers import onednn_bf16 as ob
from pycann.kernels.providers import onednn_bf16_deconv as bd
from pycann.ops import fused_deconv as ref_deconv

BF = bfloat16()
native_bf16 = pytest.mark.skipif(not ob.native(), reason="no avx512_bf16/amx_bf16 CPU or no libdnnl.so.3")


@pytest.fixture(autouse=True)
def _no_run_left_open() -> Any:
    yield
    nan_guard.end_run()


def _deconv_attrs(act: str = "", k: int = 2) -> dict[str, Any]:
    return {"kernel_shape": [k, k], "strides": [k, k], "pads": [0, 0, 0, 0], "group": 1, "dilations": [1, 1],
            "activation": act, "act_alpha": 0.0, "act_beta": 0.0}


def _channels_last(a: np.ndarray) -> np.ndarray:
    c = ob._channels_last(a.shape)
    c[...] = a
    return c


@native_bf16
@pytest.mark.parametrize("view", ["channel_slice", "w_step", "h_step"])
def test_bf16_patch_deconv_of_a_non_dense_channels_last_view(view: str) -> None:
    """A channels-last view whose strides are not the dense ones (a channel slice of a wider map, a
    step in H or W) has strides[1] == 2, so it was taken as it is and the primitive, which reads the
    input as dense (pixels, C) rows, read the wrong pixels (errors of ~3-4 against the widened path)."""
    rng = np.random.default_rng(0)
    big = _channels_last(rng.standard_normal((1, 8, 6, 10)).astype(np.float32).astype(BF))
    x = {"channel_slice": big[:, :4], "w_step": big[:, :4, :, ::2], "h_step": big[:, :4, ::2]}[view]
    w = (rng.standard_normal((4, 3, 2, 2)) * 0.3).astype(np.float32).astype(BF)
    before = bd.stats()["patch_deconv"]
    (y,) = kf.k_fused_conv_transpose([x, w, None], _deconv_attrs())
    assert bd.stats()["patch_deconv"] == before + 1
    (ref,) = ref_deconv._k_fused_conv_transpose([x, w, None], _deconv_attrs())
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=2 ** -7, atol=1e-3)


@native_bf16
@pytest.mark.parametrize("c", [1, 3, 17])
def test_bf16_patch_deconv_inf_in_the_last_of_an_odd_channel_count(c: int) -> None:
    """ConvTranspose (no activation) of an input with +inf in its last channel, C odd, a patch row of
    more than 8 columns: the spec's sums are +inf (positive weights), but oneDNN's bf16 matmul also
    multiplies that channel by a padding zero and gave NaN for the whole patch."""
    rng = np.random.default_rng(1)
    x = _channels_last(rng.standard_normal((1, c, 4, 5)).astype(np.float32).astype(BF))
    x[0, c - 1] = np.inf
    w = (rng.standard_normal((c, 24, 2, 2)) * 0.1 + 2).astype(np.float32).astype(BF)
    nan_guard.new_run()
    (y,) = kf.k_fused_conv_transpose([x, w, None], _deconv_attrs())
    (ref,) = ref_deconv._k_fused_conv_transpose([x, w, None], _deconv_attrs())
    assert np.isposinf(ref.astype(np.float32)).all()
    np.testing.assert_array_equal(y.astype(np.float32), ref.astype(np.float32))


def _run_script(tmp_path: Any, text: str, timeout: int = 120) -> Any:
    import os
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env)


_FORK_MID_APPEND = r"""
import os, signal, threading
import numpy as np
from pycann.kernels import kv_cache
past = np.zeros((1, 2, 0, 4), np.float32)
(present,) = kv_cache.k_cache_append([past, np.ones((1, 2, 3, 4), np.float32)], {"axis": 2})
inside, go = threading.Event(), threading.Event()
def pausing_write(owner, b, rows, new):  # kv_cache._write with the parent thread stopped mid-copy
    with b.lock:
        owner.flags.writeable = True
        try:
            inside.set(); go.wait()
            owner[rows] = new
        finally:
            owner.flags.writeable = False
kv_cache._write = pausing_write
t = threading.Thread(target=lambda: kv_cache.k_cache_append([present, np.full((1, 2, 1, 4), 5, np.float32)], {"axis": 2}))
t.start(); inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)
    try:
        present.flags.writeable = True
        present[...] = 7
        os._exit(3)   # a read-only present became writable
    except ValueError:
        os._exit(0)
code = os.waitpid(pid, 0)[1]
go.set(); t.join()
print("child", code >> 8)
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_of_a_mid_append_keeps_the_cache_read_only(tmp_path: Any) -> None:
    """A parent thread inside a KV cache append at the fork (numpy's copy of ``new`` releases the
    GIL; the thread is stopped there by a copy of ``kv_cache._write`` that waits mid-write) holds the
    buffer's lock with the buffer set writable. The child releases the lock (``fork_safe``) but the
    buffer stayed writable: ``present.flags.writeable = True`` then succeeded and a write changed the
    rows every other ``present`` of that buffer shares (kv_cache's doc: they are read-only)."""
    out = _run_script(tmp_path, _FORK_MID_APPEND)
    assert "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])


_FORK_MID_RUN_CLOSE = r"""
import os, signal, threading, numpy as np
from onnx import TensorProto, helper
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
nodes = [helper.make_node("Relu", ["x"], ["y"])]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
lm = LoadedModel.from_compiled(compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
x = np.ones((4, 8), np.float32)
lm.run([x])
import pycann.ge.run.plan as P
plans = [o for o in __import__("gc").get_objects() if isinstance(o, P.Plan)]
plan = plans[0]
inside, go = threading.Event(), threading.Event()
real = plan._run_arena
def paused(feeds, env):
    inside.set(); go.wait()
    return real(feeds, env)
plan._run_arena = paused
t = threading.Thread(target=lambda: plan.run([x])); t.start(); inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)
    plan._run_arena = real
    plan.close()
    os._exit(0 if plan.steps == [] else 3)
code = os.waitpid(pid, 0)[1]
go.set(); t.join()
print("child", code >> 8)
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_drops_a_closed_plan_a_parent_thread_was_running(tmp_path: Any) -> None:
    """A parent thread inside ``Plan.run`` at the fork (stopped there by a wrapper of ``_run_arena``)
    counts as a run in flight; it never ends in the child, so the child's ``close`` (a plan cache
    evicting it) left the plan's kernels and arenas to that run for ever: its native memory leaked
    in the child (``plan.steps`` stayed)."""
    out = _run_script(tmp_path, _FORK_MID_RUN_CLOSE)
    assert "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])


@native_bf16
def test_bf16_mode_channel_slice_before_a_patch_deconv_matches_onnx_runtime() -> None:
    """The plan-level form of the non-dense view defect: in ``allow_fp32_to_bf16`` a Slice of the
    upper half of a conv's channels-last bf16 map is a view (strides[1] == 2, pixel stride of the
    wider map) and fed the native patch deconv, which read it as dense rows: max error 3.6 against
    ONNX Runtime on outputs of magnitude ~4 (now within bf16 rounding)."""
    from onnx import TensorProto, helper, numpy_helper

    from pycann.ge.compile.compiler import CompileOptions, compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.ops.oracle import run_ort

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((16, 24, 2, 2)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([16], np.int64), "st"),
             numpy_helper.from_array(np.array([32], np.int64), "en"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Slice", ["r", "st", "en", "ax"], ["s"]),
             helper.make_node("ConvTranspose", ["s", "w", "b"], ["d"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["d"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.standard_normal((1, 16, 20, 24)).astype(np.float32)
    (want,) = run_ort(m, {"x": x})
    before = bd.stats()["patch_deconv"]
    lm = LoadedModel.from_compiled(compile_model(m, CompileOptions(precision_mode="allow_fp32_to_bf16",
                                                                   soc_version="CPU")))
    (y,) = lm.run([x])
    assert bd.stats()["patch_deconv"] > before
    np.testing.assert_allclose(np.asarray(y, np.float32), want, atol=0.08, rtol=0.02)


def test_fork_safe_refuses_an_rlock() -> None:
    """``fork_safe(threading.RLock())`` was taken silently: an RLock has no ``locked()`` on this
    Python, so every later fork's child handler raised at it ("Exception ignored"), leaving the
    fork_safe locks after it taken (the child's next call of those kernels waited for ever) and
    the forking thread's stale libgomp pool unmarked."""
    import threading

    from pycann.kernels.providers import omp_fork

    with pytest.raises(TypeError):
        omp_fork.fork_safe(threading.RLock())
    lock = threading.Lock()
    assert omp_fork.fork_safe(lock) is lock


@pytest.mark.parametrize("symbolic", [False, True])
def test_convs_sharing_a_weight_with_other_biases_match_onnx_runtime(symbolic: bool) -> None:
    """Two Conv nodes reading one weight initializer with different biases (3x3 and pointwise), static
    and on the shape-generic plan over several sizes: a node's bound plans share its bias memory, and
    a plan found by weight must never run with the other node's bias."""
    from onnx import TensorProto, helper, numpy_helper

    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.ops.oracle import run_ort

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "B1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 5, "B2"),
             numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32), "W1")]
    nodes = [helper.make_node("Conv", ["x", "W", "B1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "W", "B2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "W1", "B1"], ["c"]), helper.make_node("Conv", ["x", "W1", "B2"], ["d"]),
             helper.make_node("Relu", ["a"], ["ar"]), helper.make_node("Add", ["ar", "b"], ["e"]),
             helper.make_node("Add", ["c", "d"], ["f"]), helper.make_node("Concat", ["e", "f"], ["y"], axis=1)]
    dims: list[Any] = [1, 8, "H", "W"] if symbolic else [1, 8, 20, 24]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lm = LoadedModel.from_compiled(compile_model(m))
    sizes = [(20, 24), (9, 13), (20, 24), (40, 7)] if symbolic else [(20, 24)] * 3
    for h, w in sizes:
        x = rng.standard_normal((1, 8, h, w)).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


_BF16_SE_FORK = r"""
import os, signal, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
rng = np.random.default_rng(0)
f = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
init = [numpy_helper.from_array(f(32, 3, 3, 3), "w0"), numpy_helper.from_array(f(8, 32, 1, 1), "w1"),
        numpy_helper.from_array(f(8), "b1"), numpy_helper.from_array(f(32, 8, 1, 1), "w2"),
        numpy_helper.from_array(f(32), "b2"), numpy_helper.from_array(f(16, 32, 3, 3), "w3")]
nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c0"], ["r0"]),
         helper.make_node("GlobalAveragePool", ["r0"], ["g"]),  # a squeeze-and-excitation block
         helper.make_node("Conv", ["g", "w1", "b1"], ["s1"]), helper.make_node("Relu", ["s1"], ["s1r"]),
         helper.make_node("Conv", ["s1r", "w2", "b2"], ["s2"]), helper.make_node("Sigmoid", ["s2"], ["gate"]),
         helper.make_node("Mul", ["r0", "gate"], ["se"]), helper.make_node("Conv", ["se", "w3"], ["y"], pads=[1, 1, 1, 1])]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
opts = CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2", input_shape={"x": [1, 3, 24, 24]})
lm = LoadedModel.from_compiled(compile_model(m, opts))
x = rng.standard_normal((1, 3, 24, 24)).astype(np.float32)
want = lm.run([x])[0]
bad = 0
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)
        ok = all(np.array_equal(lm.run([x])[0], want) for _ in range(2)) and "torch" not in sys.modules
        os._exit(0 if ok else 3)
    bad += os.waitpid(pid, 0)[1] != 0
print("BAD", bad)
"""


@native_bf16
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX-only")
def test_forked_children_of_a_bf16_model_with_a_squeeze_excite_block(tmp_path: Any) -> None:
    """A bf16 model (allow_fp32_to_bf16) run in the parent, then in forked children: the SE block's
    1x1 convs on a one-pixel map had taken oneDNN's bf16 gemm convolution, which fails on another
    thread than its maker (a forked child runs its plans on a fresh thread); the child fell back to
    torch, which aborted there (double free) or hung. Children now give the parent's values without torch."""
    out = _run_script(tmp_path, _BF16_SE_FORK, timeout=300)
    assert "BAD 0" in out.stdout, (out.stdout, out.stderr[-2000:])
