"""Adversarial tests of the MaxPool hand-on of the NaN guard's proven bound (``onednn_pool``:
``nan_guard.proven`` replaces the all-NaN-window check and is recorded for the pool's output view).

Each model is run through the same bound kernels with finite, NaN, all-NaN, +-inf and huge (1e30)
inputs in alternation, sequentially and from several threads at once (several arenas), and
compared with the numpy provider (whose MaxPool NaN rule pycann keeps: ``onednn_pool``'s docstring)
and, for finite inputs, with ONNX Runtime. Shapes put every MaxPool on oneDNN
(``bind_onednn.POOL_MIN_ELEMENTS``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.adversarial.test_nonfinite import _poison as _poison_std
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(1313)
# e18: fused all the way on huge values; e33: the first conv fused, the propagated bound too loose
# for the second (it re-reads the pool's output); big (1e30 x): the first conv unfused
KINDS = ["finite", "nan", "finite", "all_nan", "inf", "finite", "ninf", "big", "e33", "finite", "nan_z", "e18",
         "finite"]


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _poison(x: np.ndarray, kind: str) -> np.ndarray:
    """test_nonfinite's poisons, plus ``eN``: every value times 10**N."""
    if kind.startswith("e"):
        return x * np.float32(10.0 ** int(kind[1:]))
    return _poison_std(x, kind)


def _model(nodes: list[onnx.NodeProto], ins: list[tuple[str, tuple[int | str, ...]]], outs: list[str],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, list(s)) for n, s in ins],
                          [helper.make_tensor_value_info(o, F, None) for o in outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv(x: str, w: str, b: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w, b], [y], pads=[1, 1, 1, 1])


def _two_consumers(n: int | str = 1, pool_out: bool = False) -> onnx.ModelProto:
    """conv+relu -> MaxPool (``pool_out``: a graph output too, so off the arena) -> {conv+relu,
    Sigmoid, Neg -> conv+relu}."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(16, 32, 3, 3, scale=0.2), "b2": _f(16),
             "w3": _f(16, 32, 3, 3, scale=0.2), "b3": _f(16)}
    nodes = [_conv("x", "w1", "b1", "c1"), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             _conv("p", "w2", "b2", "c2"), helper.make_node("Relu", ["c2"], ["y"]),
             helper.make_node("Sigmoid", ["p"], ["s"]),
             helper.make_node("Neg", ["p"], ["q"]), _conv("q", "w3", "b3", "c3"), helper.make_node("Relu", ["c3"], ["t"])]
    return _model(nodes, [("x", (n, 16, 48, 48)), ("z", (n, 32, 48, 48))], ["p"] * pool_out + ["y", "s", "t"], inits)


def _unguarded_between(op: str, pool_out: bool = False) -> onnx.ModelProto:
    """conv+relu -> Add/Concat with a graph input -> MaxPool (ceil_mode, asymmetric pads) -> conv+relu:
    the pool's input is not the guarded conv's view, so it must carry no bound."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(16, 32, 3, 3, scale=0.2), "b2": _f(16)}
    if op == "Add":
        mid = helper.make_node("Add", ["r1", "z"], ["a"])
    else:
        mid = helper.make_node("Concat", ["r1", "z"], ["a"], axis=1)
        inits["w2"] = _f(16, 64, 3, 3, scale=0.2)
    nodes = [_conv("x", "w1", "b1", "c1"), helper.make_node("Relu", ["c1"], ["r1"]), mid,
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 0, 0],
                              ceil_mode=1),
             _conv("p", "w2", "b2", "c2"), helper.make_node("Relu", ["c2"], ["y"])]
    return _model(nodes, [("x", (1, 16, 48, 48)), ("z", (1, 32, 48, 48))], ["y"] + ["p"] * pool_out, inits)


def _sibling_in_place() -> onnx.ModelProto:
    """conv+relu -> {Add with a graph input (listed first: a candidate to compute over the conv's
    buffer), MaxPool -> conv+relu}; the Add's result pooled too. The first MaxPool must read the
    conv's values, not the Add's, whatever the memory plan shares."""
    inits = {"w1": _f(32, 16, 3, 3, scale=0.2), "b1": _f(32), "w2": _f(16, 32, 3, 3, scale=0.2), "b2": _f(16)}
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    nodes = [_conv("x", "w1", "b1", "c1"), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Add", ["r1", "z"], ["a"]),
             helper.make_node("MaxPool", ["r1"], ["p"], **pool), _conv("p", "w2", "b2", "c2"),
             helper.make_node("Relu", ["c2"], ["y"]), helper.make_node("MaxPool", ["a"], ["p2"], **pool),
             _conv("p2", "w2", "b2", "c3"), helper.make_node("Relu", ["c3"], ["t"])]
    return _model(nodes, [("x", (1, 16, 48, 48)), ("z", (1, 32, 48, 48))], ["y", "t"], inits)


def _feeds(m: onnx.ModelProto) -> list[list[np.ndarray]]:
    shapes = [tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in m.graph.input]
    x, z = _f(*shapes[0]), _f(*shapes[1])
    out = []
    for kind in KINDS:
        if kind == "nan_z":  # x finite (the conv runs fused, records its bound), NaN only in z
            out.append([x, _poison(z, "all_nan")])
        else:
            out.append([_poison(x, kind), z])
    return out


def _reference(m: onnx.ModelProto, feeds: list[list[np.ndarray]], monkeypatch: pytest.MonkeyPatch) -> list[list[np.ndarray]]:
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    try:
        ref = LoadedModel.from_compiled(compile_model(m))
        return [ref.run(f) for f in feeds]
    finally:
        monkeypatch.delenv("PYCANN_PROVIDERS")
        providers.reset()


def _same(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, what
        for f in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(f(g), f(w), err_msg=f"{what}: output {i} {f.__name__} differs")
        fin = np.isfinite(w)
        scale = max(1.0, float(np.abs(w[fin]).max(initial=0.0)))
        np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4, atol=1e-4 * scale, err_msg=f"{what}: output {i}")


def _prepare(m: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> tuple[LoadedModel, list[list[np.ndarray]],
                                                                           list[list[np.ndarray]]]:
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")
    feeds = _feeds(m)
    want = _reference(m, feeds, monkeypatch)
    names = [i.name for i in m.graph.input]
    for f, w in zip(feeds, want):  # the numpy provider is ORT's answer where ORT's MaxPool NaN rule agrees
        if all(np.isfinite(a).all() for a in f):
            _same(w, run_ort(m, dict(zip(names, f))), "numpy provider vs ORT")
    return LoadedModel.from_compiled(compile_model(m)), feeds, want


@pytest.mark.parametrize("build", [_two_consumers, lambda: _two_consumers(pool_out=True), lambda: _two_consumers(2),
                                   lambda: _unguarded_between("Add"), lambda: _unguarded_between("Concat", True),
                                   _sibling_in_place],
                         ids=["two_consumers", "pool_is_output", "batch2", "add_between", "concat_between", "sibling"])
def test_alternating_nonfinite_inputs(build, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Finite, NaN, all-NaN, +-inf and 1e30 inputs in alternation through one LoadedModel: no
    bound recorded on a finite run may survive into a non-finite one (or the reverse)."""
    lm, feeds, want = _prepare(build(), monkeypatch)
    for _ in range(2):
        for kind, f, w in zip(KINDS, feeds, want):
            _same(lm.run(f), w, kind)


@pytest.mark.parametrize("table", [None, 3], ids=["table", "tiny_table"])
def test_concurrent_runs_mixing_nan_and_finite(table: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads run one LoadedModel at once (an arena each), each cycling through the inputs
    from a different start: a bound is per arena view, never another run's. ``tiny_table``: the
    bound table is cleared every few records, under the other threads' reads."""
    lm, feeds, want = _prepare(_two_consumers(), monkeypatch)
    if table is not None:
        from pycann.kernels.providers import nan_guard

        monkeypatch.setattr(nan_guard, "_PROVEN_MAX", table)

    def worker(start: int) -> list[str]:
        bad = []
        for r in range(3 * len(KINDS)):
            i = (start + r) % len(KINDS)
            try:
                _same(lm.run(feeds[i]), want[i], KINDS[i])
            except AssertionError as e:
                bad.append(f"{KINDS[i]}: {str(e)[:200]}")
        return bad

    with ThreadPoolExecutor(4) as ex:
        bad = [b for r in ex.map(worker, [0, 1, 3, 6]) for b in r]
    assert not bad, bad


def test_guard_off_keeps_no_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled and run with ``PYCANN_NAN_GUARD=0`` (no conv records anything), then with the guard
    back on: the pool's own all-NaN-window check still sends an all-NaN run to the generic kernel,
    and the NaN runs equal the numpy provider once the guard is on again."""
    m = _two_consumers()
    lm0, feeds, want = _prepare(m, monkeypatch)
    monkeypatch.setenv("PYCANN_NAN_GUARD", "0")
    lm = LoadedModel.from_compiled(compile_model(m))
    for kind, f, w in zip(KINDS, feeds, want):
        got = lm.run(f)
        if kind == "finite":
            _same(got, w, kind)
    monkeypatch.delenv("PYCANN_NAN_GUARD")
    for kind, f, w in zip(KINDS, feeds, want):
        _same(lm.run(f), w, f"guard back on: {kind}")


def test_dynamic_batch_alternating_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic batch: batch 1 and 2 alternate (a plan per signature, or the generic plan) with
    the non-finite inputs; each run equals the numpy provider."""
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")
    m = _two_consumers("N")
    x, z = _f(2, 16, 48, 48), _f(2, 32, 48, 48)
    feeds = []
    for i, kind in enumerate(KINDS):
        n = 1 + i % 2
        feeds.append([x[:n].copy(), _poison(z[:n], "all_nan")] if kind == "nan_z" else [_poison(x[:n], kind), z[:n].copy()])
    want = _reference(m, feeds, monkeypatch)
    lm = LoadedModel.from_compiled(compile_model(m))
    for _ in range(2):
        for kind, f, w in zip(KINDS, feeds, want):
            _same(lm.run(f), w, f"{kind} batch {f[0].shape[0]}")
