"""Adversarial checks of the shape-generic plan's per-shape Conv / FusedConv kernels
(``kernels/bind_generic_conv.py``) and the sized pointwise runner (``Pointwise.sized``), against
ONNX Runtime: conv geometries (1-D, 3-D, dilations, auto_pad, asymmetric pads, groups,
depthwise, batch > 1), fused activations fed NaN / inf, residuals of another layout or sharing
the input's memory, odd input layouts, empty batches, a wrong channel count inside the graph, more
sizes than ``MAX_SHAPES``, threads on other OpenMP teams, and ``os.fork`` beside a running conv."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.errors import KernelError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import bind_generic_conv
from pycann.kernels.providers import onednn, openmp
from tests.kernels.test_bind_generic_conv import _generic
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")]

from pycann.kernels.providers import onednn_pointwise as pw  # noqa: E402

RTOL = ATOL = 1e-4


def _vi(name: str, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _t(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto],
           ) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [_vi("y", None)], inits)  # type: ignore[arg-type]
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv_model(w_shape: tuple[int, ...], attrs: dict[str, Any], act: str | None = None, seed: int = 0,
                bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    c = w_shape[1] * int(attrs.get("group", 1))
    inits = [_t(rng, "w", *w_shape)] + ([_t(rng, "b", w_shape[0])] if bias else [])
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c" if act else "y"], **attrs)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    return _model(nodes, [_vi("x", ["n", c] + [f"s{i}" for i in range(len(w_shape) - 2)])], inits)


def _assert_ort(lm: LoadedModel, model: onnx.ModelProto, x: np.ndarray) -> None:
    got = lm.run([x])[0]
    want = run_ort(model, {"x": np.ascontiguousarray(x)})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = want[np.isfinite(want)]
    # huge inputs cancel in the sums: their rounding is relative to the largest value, not to each
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=max(ATOL, 1e-6 * scale))


def _uses_per_shape_kernels(lm: LoadedModel) -> bool:
    steps = [st for st in lm.executor.generic_plan().steps if st.node.op_type in ("Conv", "FusedConv")]
    return bool(steps) and all(st.bound is not None and st.bound.impl == "generic:conv_per_shape" for st in steps)


GEOMETRIES = [
    ("1d_pointwise", (12, 8, 1), {}, [(1, 8, 10), (2, 8, 7), (3, 8, 1)]),
    ("1d_dilated_asym", (12, 8, 3), {"dilations": [2], "pads": [1, 3]}, [(1, 8, 10), (2, 8, 7)]),
    ("1d_same_upper_s2", (12, 8, 4), {"auto_pad": "SAME_UPPER", "strides": [2]}, [(1, 8, 10), (2, 8, 7), (1, 8, 1)]),
    ("3d_pointwise", (6, 4, 1, 1, 1), {}, [(1, 4, 3, 5, 6), (2, 4, 2, 2, 2)]),
    ("3d_k3_asym", (6, 4, 3, 3, 3), {"pads": [1, 0, 1, 1, 2, 0]}, [(1, 4, 3, 5, 6), (2, 4, 4, 4, 4)]),
    ("2d_same_lower_s23", (16, 8, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_valid_dilated", (16, 8, 3, 3), {"auto_pad": "VALID", "strides": [2, 1], "dilations": [1, 2]},
     [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_groups", (12, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_grouped_pointwise", (12, 2, 1, 1), {"group": 4}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_depthwise_x2", (16, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_pointwise_s2", (16, 8, 1, 1), {"strides": [2, 2]}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_pointwise_padded", (16, 8, 1, 1), {"pads": [1, 0, 0, 1]}, [(1, 8, 11, 13), (2, 8, 6, 5)]),
    ("2d_big_3x3", (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, [(1, 32, 20, 20), (2, 32, 9, 17)]),
]


@pytest.mark.parametrize("act", [None, "Relu"])
@pytest.mark.parametrize("name,w_shape,attrs,shapes", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_geometries_match_onnxruntime(name: str, w_shape: tuple[int, ...], attrs: dict[str, Any],
                                      shapes: list[tuple[int, ...]], act: str | None) -> None:
    model = _conv_model(w_shape, attrs, act)
    lm = _generic(model)
    assert _uses_per_shape_kernels(lm)
    rng = np.random.default_rng(1)
    for s in shapes + shapes[:1]:  # the first size comes back: served by its bound kernel
        _assert_ort(lm, model, rng.standard_normal(s).astype(np.float32))


def _fused(w_shape: tuple[int, ...], attrs: dict[str, Any], act: str, act_inputs: dict[str, float],
           act_attrs: dict[str, Any], residual: str | None, affine: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    inits = [_t(rng, "w", *w_shape), _t(rng, "b", w_shape[0])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)]
    cur = "c"
    if residual == "branch":  # another conv's (channels-last) output as the residual
        inits += [_t(rng, "w2", *w_shape), _t(rng, "b2", w_shape[0])]
        nodes += [helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], **attrs), helper.make_node("Add", ["c", "c2"], ["s"])]
        cur = "s"
    elif residual == "input":  # the conv's own input (the caller's C-order array, shared memory)
        nodes.append(helper.make_node("Add", [cur, "x"], ["s"]))
        cur = "s"
    elif residual == "channel":  # a per-channel constant that broadcasts
        inits.append(_t(rng, "rc", 1, w_shape[0], 1, 1))
        nodes.append(helper.make_node("Add", [cur, "rc"], ["s"]))
        cur = "s"
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in act_inputs.items()]
    nodes.append(helper.make_node(act, [cur, *act_inputs], ["a"], **act_attrs))
    cur = "a"
    if affine:
        inits += [numpy_helper.from_array(np.array(0.5, np.float32), "sc"),
                  numpy_helper.from_array(np.array(-1.0, np.float32), "sh")]
        nodes += [helper.make_node("Mul", [cur, "sc"], ["m"]), helper.make_node("Add", ["m", "sh"], ["p"])]
        cur = "p"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    return _model(nodes, [_vi("x", ["n", w_shape[1], "h", "w"])], inits)


ACTS = [("Relu", {}, {}), ("Clip", {"lo": 0.0, "hi": 6.0}, {}), ("HardSigmoid", {}, {"alpha": 0.3, "beta": 0.4}),
        ("LeakyRelu", {}, {"alpha": 0.1}), ("HardSwish", {}, {})]


@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf, 1e30])
@pytest.mark.parametrize("residual,affine", [(None, False), (None, True), ("branch", False), ("input", False),
                                             ("channel", False)])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("act,act_inputs,act_attrs", ACTS, ids=[a[0] for a in ACTS])
def test_fused_activation_on_non_finite_input(act: str, act_inputs: dict[str, float], act_attrs: dict[str, Any],
                                              k: int, residual: str | None, affine: bool, poison: float) -> None:
    model = _fused((32, 32, k, k), {"pads": [k // 2] * 4}, act, act_inputs, act_attrs, residual, affine)
    lm = _generic(model)
    rng = np.random.default_rng(3)
    for s in [(1, 32, 12, 10), (2, 32, 5, 7)]:
        x = rng.standard_normal(s).astype(np.float32)
        _assert_ort(lm, model, x)  # bound for the size on finite data
        x.reshape(-1)[::97] = poison
        with np.errstate(all="ignore"):
            _assert_ort(lm, model, x)


@pytest.mark.parametrize("w_shape,attrs", [((64, 32, 1, 1), {}), ((32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
                                           ((4, 32, 3, 3), {"pads": [1, 1, 1, 1]})], ids=["pointwise", "3x3", "tiny"])
def test_input_layouts_and_empty_batch(w_shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    model = _conv_model(w_shape, attrs, "Relu")
    lm = _generic(model)
    rng = np.random.default_rng(4)
    base = rng.standard_normal((2, 32, 9, 11)).astype(np.float32)
    read_only = base.copy()
    read_only.flags.writeable = False
    for x in (base, np.ascontiguousarray(base.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2), np.asfortranarray(base),
              rng.standard_normal((2, 32, 18, 11)).astype(np.float32)[:, :, ::2], base[:, :, ::-1], read_only,
              np.broadcast_to(base[:1, :, :1], (2, 32, 9, 11)), base[:, :, :1, :1]):
        _assert_ort(lm, model, x)
    y = lm.run([np.zeros((0, 32, 9, 11), np.float32)])[0]
    assert y.shape == (0, w_shape[0], 9, 11)


@pytest.mark.parametrize("k", [1, 3])
def test_wrong_channel_count_inside_the_graph_names_node_and_problem(k: int) -> None:
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["xr"]),
             helper.make_node("Conv", ["xr", "w", "b"], ["y"], pads=[k // 2] * 4, name="myconv")]
    model = _model(nodes, [_vi("x", ["a"]), helper.make_tensor_value_info("s", TensorProto.INT64, [4])],
                   [_t(rng, "w", 16, 8, k, k), _t(rng, "b", 16)])
    lm = _generic(model)
    assert lm.run([np.ones(8 * 20, np.float32), np.array([1, 8, 4, 5])])[0].shape == (1, 16, 4, 5)
    for _ in range(2):  # the second call finds the shape recorded as the generic kernel's
        with pytest.raises(KernelError, match=r"myconv.*channels of X \(1, 6, 4, 5\) do not match W"):
            lm.run([np.ones(6 * 20, np.float32), np.array([1, 6, 4, 5])])


def test_more_sizes_than_the_table_keeps() -> None:
    model = _conv_model((32, 16, 1, 1), {}, "Relu")
    lm = _generic(model)
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((1, 16, 3 + i % 9, 2 + i // 9)).astype(np.float32)
          for i in range(bind_generic_conv.MAX_SHAPES + 8)]
    for x in xs + xs[:4]:  # evicted sizes come back and bind again
        _assert_ort(lm, model, x)
    tables = [st.bound.keep[2] for st in lm.executor.generic_plan().steps if st.bound is not None
              and st.bound.impl == "generic:conv_per_shape"]
    assert tables and all(len(t) == bind_generic_conv.MAX_SHAPES for t in tables)


def test_threads_on_other_openmp_teams() -> None:
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4), helper.make_node("Relu", ["c0"], ["a0"]),
             helper.make_node("Conv", ["a0", "w1", "b1"], ["c1"]), helper.make_node("Conv", ["a0", "w2", "b2"], ["c2"]),
             helper.make_node("Add", ["c1", "c2"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [_vi("x", ["n", 3, "h", "w"])],
                   [_t(rng, "w0", 32, 3, 3, 3), _t(rng, "b0", 32), _t(rng, "w1", 64, 32, 1, 1), _t(rng, "b1", 64),
                    _t(rng, "w2", 64, 32, 1, 1), _t(rng, "b2", 64)])
    lm = _generic(model)
    feeds = []
    for i in range(6):
        x = rng.standard_normal((1 + i % 2, 3, 8 + i, 14 - i)).astype(np.float32)
        if i % 3 == 0:
            x[0, 0, 1, 1] = np.nan
        feeds.append((x, run_ort(model, {"x": x})[0]))
    bad: list[Any] = []

    def work(tid: int) -> None:
        r = np.random.default_rng(tid)
        openmp.set_max_threads(1 + tid % 3)
        for k in range(24):
            if k == 12:
                openmp.set_max_threads(1 + (tid + 1) % 3)
            x, want = feeds[int(r.integers(len(feeds)))]
            try:
                got = lm.run([x])[0]
                if not (np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
                        and np.array_equal(np.isnan(got), np.isnan(want))):
                    bad.append((tid, k))
            except Exception as e:  # noqa: BLE001 - reported below
                bad.append((tid, k, repr(e)))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert bad == []


def _runner_lock(run: Any) -> Any:
    """The one lock of a kernel: ``Pointwise.sized``'s runner (its ``lock`` slot), or the lock in the
    per-node table kernel's closure."""
    if isinstance(getattr(run, "lock", None), type(threading.Lock())):
        return run.lock
    locks = [c.cell_contents for c in run.__closure__ or () if isinstance(c.cell_contents, type(threading.Lock()))]
    assert len(locks) == 1
    return locks[0]


def _beside_held(lock: Any, call: Any, what: str) -> Any:
    """``call()`` on another thread while ``lock`` is held, as a thread that is gone after an
    ``os.fork`` would hold it: it must finish (not wait for a lock nobody will release); its result."""
    lock.acquire()
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(call()), daemon=True)
    try:
        t.start()
        t.join(10)
        assert not t.is_alive(), f"{what} waited for a lock nobody will release"
    finally:
        lock.release()
        t.join(10)
    return got[0]


@pytest.mark.parametrize("bias,residual", [(True, False), (False, True), (True, True)])
def test_sized_runner_never_waits_for_its_lock(bias: bool, residual: bool) -> None:
    """A thread of the parent running a pointwise conv at an ``os.fork`` leaves the runner's lock
    taken in the child for ever: the child's next call of that shape must still run (it hung),
    with its bias and residual."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 16, 6, 7)).astype(np.float32)
    w = (rng.standard_normal((24, 16, 1, 1)) / 4).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32) if bias else None
    r = rng.standard_normal((2, 24, 6, 7)).astype(np.float32) if residual else None
    k = pw.plan(w, bias, None, residual)
    assert k is not None
    run = k.sized(x.shape, b)
    want = run(x, r).copy()
    got = _beside_held(_runner_lock(run), lambda: run(x, r), "the sized pointwise runner")
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_beside_a_running_pointwise_conv() -> None:
    """Forks while another thread keeps running the model's pointwise convs: every child's runs of
    the same size (and a new one) finish and are right (3 of 12 children hung)."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 128, "h", "w"])],
                   [_t(rng, "w1", 256, 128, 1, 1), _t(rng, "b1", 256), _t(rng, "w2", 128, 256, 1, 1), _t(rng, "b2", 128)])
    lm = _generic(model)
    x = rng.standard_normal((1, 128, 64, 64)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    lm.run([x])
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            lm.run([x])

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    statuses = []
    try:
        for i in range(12):
            time.sleep(0.013 * (i % 5))
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                signal.alarm(30)
                try:
                    y = lm.run([x])[0]
                    lm.run([x[:, :, :8, :8].copy()])
                    os._exit(0 if np.allclose(y, want, rtol=RTOL, atol=ATOL) else 3)
                except BaseException:  # noqa: BLE001 - the exit status says it
                    os._exit(4)
            statuses.append(os.waitpid(pid, 0)[1])
    finally:
        stop.set()
        t.join()
    assert [os.WIFSIGNALED(s) for s in statuses] == [False] * 12, "a child hung"
    assert [os.WEXITSTATUS(s) for s in statuses] == [0] * 12


def test_a_new_size_never_waits_for_the_table_lock() -> None:
    """The per-node table's lock, held by a thread that is gone (a fork while the parent recorded
    a shape): a new size still runs, right, from a kernel bound for the call (it hung)."""
    model = _conv_model((24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu")
    lm = _generic(model)
    step = next(st for st in lm.executor.generic_plan().steps if st.bound is not None
                and st.bound.impl == "generic:conv_per_shape")
    lock = _runner_lock(step.bound.run)
    x = np.random.default_rng(10).standard_normal((1, 16, 7, 9)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got = _beside_held(lock, lambda: lm.run([x])[0], "a new size")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert step.bound.keep[2] == {}  # not recorded while the lock was taken
    _assert_ort(lm, model, x)
    assert len(step.bound.keep[2]) == 1


@pytest.mark.parametrize("k", [1, 3])
def test_run_time_residual_broadcasts_or_is_refused_as_before(k: int) -> None:
    """A residual graph input of the output's symbolic shape, fed broadcasting, other-layout or
    misfit arrays: values as ONNX Runtime's, a misfit named by the FusedConv's shape error."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [_vi("x", ["n", 32, "h", "w"]), _vi("r", ["n", 64, "h", "w"])],
                   [_t(rng, "w", 64, 32, k, k), _t(rng, "b", 64)])
    lm = _generic(model)
    assert [st.node.op_type for st in lm.executor.generic_plan().steps] == ["FusedConv"]
    x = rng.standard_normal((2, 32, 9, 11)).astype(np.float32)
    full = rng.standard_normal((2, 64, 9, 11)).astype(np.float32)
    read_only = full.copy()
    read_only.flags.writeable = False
    for r in (full, full[:1], full[:, :, :1], full[:, :, :, :1], read_only,
              np.ascontiguousarray(full.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2),
              rng.standard_normal((2, 64, 18, 11)).astype(np.float32)[:, :, ::2]):
        want = run_ort(model, {"x": x, "r": np.ascontiguousarray(r)})[0]
        np.testing.assert_allclose(lm.run([x, r])[0], want, rtol=RTOL, atol=ATOL)
    for shape in ((2, 64, 8, 11), (3, 64, 9, 11)):
        with pytest.raises(Exception, match=r"residual\) \[.*\] does not broadcast"):
            lm.run([x, np.zeros(shape, np.float32)])


@pytest.mark.parametrize("mode", ["allow_fp32_to_bf16", "allow_mix_precision_bf16"])
def test_bf16_precision_modes_keep_the_generic_kernel(mode: str) -> None:
    from pycann.ge.compile.options import CompileOptions

    model = _conv_model((32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu")
    lm = LoadedModel.from_compiled(compile_model(model, CompileOptions(precision_mode=mode, soc_version="Ascend910B1")),
                                   plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC, build=PlanBuild.INLINE))
    steps = [st for st in lm.executor.generic_plan().steps if "Conv" in st.node.op_type]
    assert steps and all(st.bound is None or st.bound.impl != "generic:conv_per_shape" for st in steps)
    x = np.random.default_rng(12).standard_normal((1, 16, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("allowed", ["torch,numpy", "numpy"])
def test_other_providers(monkeypatch: pytest.MonkeyPatch, allowed: str) -> None:
    from pycann.kernels import providers

    monkeypatch.setenv("PYCANN_PROVIDERS", allowed)
    providers.reset()
    for w_shape, attrs in [((64, 32, 1, 1), {}), ((32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
                           ((32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32})]:
        model = _conv_model(w_shape, attrs, "Relu")
        lm = _generic(model)
        rng = np.random.default_rng(13)
        for s in [(1, 32, 12, 10), (2, 32, 5, 7), (1, 32, 12, 10)]:
            x = rng.standard_normal(s).astype(np.float32)
            x[0, 3, 2, 2] = np.nan
            _assert_ort(lm, model, x)


@pytest.mark.parametrize("k", [1, 3])
def test_leaky_relu_alpha_zero_keeps_plus_inf(k: int) -> None:
    """FusedConv + LeakyRelu(alpha=0) fed inf: the NaN guard hands the call to numpy's activation,
    whose max(y, 0 * y) made +inf NaN (ONNX: +inf stays, -inf * 0 is NaN)."""
    model = _fused((64, 32, k, k), {"pads": [k // 2] * 4}, "LeakyRelu", {}, {"alpha": 0.0}, None, False)
    lm = _generic(model)
    rng = np.random.default_rng(14)
    for s in [(1, 32, 9, 11), (2, 32, 4, 5)]:
        x = rng.standard_normal(s).astype(np.float32)
        x.reshape(-1)[::53] = np.inf
        with np.errstate(all="ignore"):
            _assert_ort(lm, model, x)


def test_apply_activation_leaky_relu_non_finite() -> None:
    from pycann.ops import fused

    y = np.array([np.inf, -np.inf, np.nan, -2.0, 3.0, 0.0], np.float32)
    for alpha in (0.0, 0.1, 1.0, 2.0, -1.0):
        with np.errstate(invalid="ignore"):
            want = np.where(y < 0, y * np.float32(alpha), y)
        got = fused.apply_activation(y.copy(), "LeakyRelu", alpha, 0.0)
        np.testing.assert_array_equal(got, want)
