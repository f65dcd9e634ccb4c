"""In-place residual convs: the memory plan gives a FusedConv's output its residual's buffer when
the residual dies there (``plan_memory(share=...)``), the plan binds it only to a kernel that says
``inplace`` (the oneDNN conv's "sum" post-op), and values stay ONNX Runtime's. Also: the prepared
oneDNN conv is the kernel the plan runs (it once never was: its capability check got an empty
array)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.ir import Graph, Node
from pycann.ge.planning.memory import plan_memory
from pycann.ge.run.executor import ARENA, INPLACE, inplace_candidates
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels.bound import bound as _bound_kernel
from pycann.kernels.providers import onednn
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(11)
C = 64  # every conv above TINY_FLOPS, so oneDNN (not the small-shape numpy path) computes it

needs_dnnl = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")


pytestmark = pytest.mark.usefixtures("default_providers")  # tests/conftest.py


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], outputs: list[str], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 28, 28])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _weights(n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i in range(n):
        out[f"W{i}"] = _f32(C, C, 3, 3) * 0.05
        out[f"B{i}"] = _f32(C) * 0.1
    return out


def _conv(i: int, x: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [y], pads=[1, 1, 1, 1])


def _two_blocks(extra_reader: bool = False) -> onnx.ModelProto:
    """Two ResNet bottleneck-like blocks, each ``Relu(conv(conv(r)) + r)``: each residual dies at
    its block's Add, so both residual convs can write over their residuals. ``extra_reader``: the
    first block's output is also read after the second Add, so that one must not share."""
    relu = lambda a, b: helper.make_node("Relu", [a], [b])  # noqa: E731
    nodes = [
        _conv(0, "x", "c0"), relu("c0", "r0"),
        _conv(1, "r0", "c1"), relu("c1", "r1"),
        _conv(2, "r1", "c2"), helper.make_node("Add", ["c2", "r0"], ["a2"]), relu("a2", "y1"),
        _conv(3, "y1", "c3"), relu("c3", "r3"),
        _conv(4, "r3", "c4"), helper.make_node("Add", ["c4", "y1"], ["a4"]), relu("a4", "y"),
        helper.make_node("GlobalAveragePool", ["y"], ["g"]),
    ]
    outputs = ["g"]
    if extra_reader:
        nodes.append(helper.make_node("Sub", ["y", "y1"], ["d"]))
        nodes.append(helper.make_node("GlobalAveragePool", ["d"], ["g2"]))
        outputs.append("g2")
    return _model(nodes, outputs, _weights(5))


def _planned(m: onnx.ModelProto) -> tuple[LoadedModel, Any, Any]:
    lm = LoadedModel.from_compiled(compile_model(m))
    plan, _ = lm.executor.plan_for([np.zeros((1, C, 28, 28), np.float32)])
    from pycann.ge.run.executor import arena_candidates

    memory = plan_memory(plan.graph, only=arena_candidates(plan.graph), share=inplace_candidates(plan.graph))
    return lm, plan, memory


def _fused_steps(plan: Any) -> list[tuple[Node, Any]]:
    return [(n, st) for n, st in zip(plan.nodes, plan.steps) if n.op_type == "FusedConv"]


def test_inplace_table_names_the_residual_of_fused_conv() -> None:
    assert INPLACE[("pycann", "FusedConv")] == (0, 3)


@needs_dnnl
def test_every_onednn_conv_runs_its_prepared_kernel() -> None:
    """Regression: the plan-time bound conv (packed weight, ~5 us a call) is what runs, not the
    generic FusedConv kernel that looks the primitive up per call."""
    _, plan, _ = _planned(_two_blocks())
    convs = [(n, st) for n, st in zip(plan.nodes, plan.steps) if "Conv" in n.op_type]
    assert convs and all(str(n.attrs.get("_algo")) in ("onednn:conv_nhwc", "onednn:conv_winograd") for n, _ in convs)
    assert all(st.bound is not None and st.bound.writes_out and st.kind is ARENA for _, st in convs), \
        [(n.op_type, st.run) for n, st in convs]


@needs_dnnl
def test_residual_convs_write_over_their_residual_and_match_ort(in_place_calls: dict[str, int]) -> None:
    calls = in_place_calls
    m = _two_blocks()
    lm, plan, memory = _planned(m)
    fused = [(n, st) for n, st in _fused_steps(plan) if len(n.inputs) > 3 and n.inputs[3]]
    assert len(fused) == 2
    for n, st in fused:
        assert memory.shared.get(n.outputs[0]) == n.inputs[3]
        assert memory.offsets[n.outputs[0]][0] == memory.offsets[n.inputs[3]][0]
        assert st.inplace and st.kind is ARENA
    x = _f32(1, C, 28, 28)
    for _ in range(2):  # the second run reuses the arena the first left behind
        np.testing.assert_allclose(lm.run_dict({"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert calls["n"] >= 2


@needs_dnnl
def test_a_residual_read_again_later_keeps_its_own_buffer() -> None:
    m = _two_blocks(extra_reader=True)
    lm, plan, memory = _planned(m)
    second = [n for n, _ in _fused_steps(plan) if len(n.inputs) > 3 and n.inputs[3]][-1]
    assert second.outputs[0] not in memory.shared
    assert memory.offsets[second.outputs[0]][0] != memory.offsets[second.inputs[3]][0]
    x = _f32(1, C, 28, 28)
    for got, want in zip(lm.run_dict({"x": x}), run_ort(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_dnnl
def test_conv_whose_input_is_its_own_residual_is_not_in_place() -> None:
    """y = Relu(Conv(r) + r): the conv reads r while it would write over it."""
    nodes = [_conv(0, "x", "c0"), helper.make_node("Relu", ["c0"], ["r0"]),
             _conv(1, "r0", "c1"), helper.make_node("Add", ["c1", "r0"], ["a1"]), helper.make_node("Relu", ["a1"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["g"])]
    m = _model(nodes, ["g"], _weights(2))
    lm, plan, memory = _planned(m)
    fused = [n for n, _ in _fused_steps(plan) if len(n.inputs) > 3 and n.inputs[3]]
    assert fused and fused[0].inputs[0] == fused[0].inputs[3]
    assert not memory.shared
    x = _f32(1, C, 28, 28)
    np.testing.assert_allclose(lm.run_dict({"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_kernels_that_cannot_compute_in_place_get_their_own_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's FusedConv (conv into the output, then += residual) is not in-place safe: the plan
    does not bind a shared output to it, and the values stay right."""
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    m = _two_blocks()
    lm, plan, memory = _planned(m)
    for n, st in _fused_steps(plan):
        if n.outputs[0] in memory.shared:
            assert not st.inplace and st.kind is not ARENA
    x = _f32(1, C, 28, 28)
    np.testing.assert_allclose(lm.run_dict({"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _graph(nodes: list[Node], sizes: dict[str, int]) -> Graph:
    from pycann.dtypes import TensorDesc

    g = Graph(name="g", nodes=nodes, inputs=["x"], outputs=[nodes[-1].outputs[0]])
    g.descs = {v: TensorDesc(1, (n,)) for v, n in sizes.items()}
    return g


def test_planner_shares_a_chain_and_only_pairs_whose_input_dies_there() -> None:
    # a -> b (over a) -> c (over b) ; d reads c and c again later: d must not share c's buffer
    nodes = [Node("Relu", ["x"], ["a"]), Node("Neg", ["a"], ["b"]), Node("Neg", ["b"], ["c"]),
             Node("Neg", ["c"], ["d"]), Node("Add", ["c", "d"], ["e"]), Node("Neg", ["e"], ["y"])]
    g = _graph(nodes, {"x": 256, "a": 256, "b": 256, "c": 256, "d": 256, "e": 256, "y": 256})
    plan = plan_memory(g, share={"b": "a", "c": "b", "d": "c"})
    assert plan.shared == {"b": "a", "c": "b"}
    assert plan.offsets["a"][0] == plan.offsets["b"][0] == plan.offsets["c"][0]
    assert plan.offsets["d"][0] != plan.offsets["c"][0]
    # no two values alive at one step overlap
    life = {"a": (0, 1), "b": (1, 2), "c": (2, 4), "d": (3, 4), "e": (4, 5)}
    for u, (s1, e1) in life.items():
        for v, (s2, e2) in life.items():
            if u < v and not (e1 < s2 or e2 < s1) and plan.shared.get(v) != u and plan.shared.get(u) != v:
                o1, n1 = plan.offsets[u]
                o2, n2 = plan.offsets[v]
                assert o1 + n1 <= o2 or o2 + n2 <= o1, (u, v)


def test_planner_never_shares_different_sizes() -> None:
    nodes = [Node("Relu", ["x"], ["a"]), Node("Pad", ["a"], ["b"]), Node("Neg", ["b"], ["y"])]
    g = _graph(nodes, {"x": 256, "a": 256, "b": 512, "y": 512})
    plan = plan_memory(g, share={"b": "a"})
    assert not plan.shared
    assert plan.offsets["a"][0] != plan.offsets["b"][0] or plan.offsets["a"][1] == 0


@needs_dnnl
def test_bound_conv_remembers_buffers_but_follows_them_when_they_change() -> None:
    """The bound conv skips its checks and handle updates for (x, out, residual) addresses it ran
    before: alternating two sets of buffers, and a call without ``out``, must each get their own
    result."""
    from pycann.ops.nn.conv import conv_window

    w, b = _f32(C, C, 1, 1) * 0.1, _f32(C)
    win = conv_window((1, C, 14, 14), w.shape, {})
    k = onednn.bound_conv_nhwc(w, b, 1, win, (1, C, 14, 14), onednn.onednn_unary("Relu", 0, 0), True)
    assert k is not None
    sets = []
    for _ in range(2):
        x, z = onednn.empty_channels_last((1, C, 14, 14)), onednn.empty_channels_last((1, C, 14, 14))
        x[...] = _f32(1, C, 14, 14)
        z[...] = _f32(1, C, 14, 14)
        want = np.maximum(np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + b[None, :, None, None] + z, 0)
        sets.append((x, z, onednn.empty_channels_last((1, C, 14, 14)), want))
    for _ in range(3):
        for x, z, o, want in sets:
            o[...] = np.nan  # a stale result must not pass
            got = k([x, w, b, z], {}, [o])[0]
            assert got is o
            np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-4)
    for x, z, _, want in sets:
        np.testing.assert_allclose(k([x, w, b, z], {})[0], want, rtol=1e-4, atol=1e-4)
    # in place: the output is the residual's buffer (the memory plan's sharing)
    for x, z, _, want in sets:
        zz = onednn.empty_channels_last(z.shape)
        zz[...] = z
        for _ in range(2):
            zz[...] = z
            assert k([x, w, b, zz], {}, [zz])[0] is zz
            np.testing.assert_allclose(zz, want, rtol=1e-4, atol=1e-4)


@needs_dnnl
def test_concurrent_runs_of_one_model_keep_their_buffers_apart() -> None:
    import threading

    m = _two_blocks()
    lm = LoadedModel.from_compiled(compile_model(m))
    xs = [_f32(1, C, 28, 28) for _ in range(4)]
    want = [run_ort(m, {"x": x})[0] for x in xs]
    errors: list[str] = []

    def worker(i: int) -> None:
        for _ in range(6):
            got = lm.run_dict({"x": xs[i]})[0]
            if not np.allclose(got, want[i], rtol=1e-4, atol=1e-4):
                errors.append(f"thread {i}: max diff {np.abs(got - want[i]).max()}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@needs_dnnl
@pytest.mark.parametrize("nan", ["none", "one", "window"])
def test_prepared_max_pool_writes_into_the_arena_view(nan: str) -> None:
    """The oneDNN MaxPool kernel writes into the executor's (channels-last) view; NaN cases that
    it hands to the numpy kernel land in that view too."""
    from pycann.dtypes import TensorDesc
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN
    from pycann.ops.registry import lookup

    x = _f32(1, 32, 64, 64)  # 128K elements: above POOL_MIN_ELEMENTS
    if nan == "one":
        x[0, 1, 3, 4] = np.nan
    elif nan == "window":
        x[0, 2, 0:3, 0:3] = np.nan
    op = lookup("MaxPool", "", 12)
    a = op.with_defaults({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "_layout": "NHWC",
                          "_n_outputs": 1})
    want = op.kernel([x], a)[0]
    kernel = PREPARE_ONEDNN[("", "MaxPool")](a, [TensorDesc(1, x.shape)], [None], [TensorDesc(1, want.shape)])
    assert kernel is not None and _typed(kernel).writes_out
    xc = onednn.empty_channels_last(x.shape)
    xc[...] = x
    for layout in ("nhwc", "nchw"):
        o = onednn.empty_channels_last(want.shape) if layout == "nhwc" else np.empty(want.shape, np.float32)
        o[...] = -7.0
        got = kernel([xc], a, [o])[0]
        np.testing.assert_array_equal(o, want)
        np.testing.assert_array_equal(got, want)
        if layout == "nhwc" and nan != "window":
            assert got is o  # computed in place, no allocation


@needs_dnnl
def test_bound_conv_is_not_fooled_by_reused_object_ids() -> None:
    """The bound conv recognises arrays it has seen by identity (weakly referenced): arrays that
    die and are replaced by new ones, which CPython often gives the same id, must be re-checked
    and re-pointed, never written through a stale address."""
    from pycann.ops.nn.conv import conv_window

    w, b = _f32(C, C, 1, 1) * 0.1, _f32(C)
    shape = (1, C, 6, 6)
    win = conv_window(shape, w.shape, {})
    k = onednn.bound_conv_nhwc(w, b, 1, win, shape, None, False)
    assert k is not None
    n = int(np.prod(shape))

    def at(offset: int) -> np.ndarray:  # a channels-last array at a varying address
        raw = np.empty(n + 16 * offset, np.float32)[16 * offset:]
        return raw.reshape(1, 6, 6, C).transpose(0, 3, 1, 2)

    for i in range(40):
        x = at(i % 3)
        x[...] = _f32(*shape)
        o = at(2 - i % 3)
        o[...] = np.nan
        want = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + b[None, :, None, None]
        for _ in range(2):  # the second call takes the remembered-identity path
            assert k([x, w, b], {}, [o])[0] is o
            np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-4, err_msg=f"iteration {i}")
        del x, o


def _typed(k: object) -> Any:
    """A binder's result as a ``BoundKernel`` (plain functions: one without arena or OpenMP)."""
    return _bound_kernel(k)  # type: ignore[arg-type]
