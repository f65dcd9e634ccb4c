"""BatchNormToScaleShift (ge/compile/passes/bn_to_affine.py) and the ElementwiseChain it feeds: an
inference BatchNormalization no conv absorbed becomes Mul + Add by per-channel constants, chains
with the Relu after it, and that chain runs its binary head on oneDNN and the Relu in numpy.
Positive, negative and equivalence (ONNX Runtime) cases, on hand-written ONNX (the pre-activation
block of DenseNet / ResNet v2) and on PyTorch's exporter."""

from __future__ import annotations

import io

import numpy as np
import pytest
from onnx import helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.importers.onnx import import_model
from pycann.ge.compile.passes import bn_to_affine
from pycann.ge.compile.passes.infer_shapes import infer_graph
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import check_compiled, const, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(11)
pytestmark = pytest.mark.usefixtures("default_providers")


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _bn_params(c: int, prefix: str = "bn") -> list[object]:
    return [const(f"{prefix}_s", _f32(c)), const(f"{prefix}_b", _f32(c)), const(f"{prefix}_m", _f32(c)),
            const(f"{prefix}_v", np.abs(_f32(c)) + 0.5)]


def _preact(c: int, hw: int) -> object:
    """DenseNet's layer: Concat(x1, x2) -> BatchNormalization -> Relu -> Conv 1x1."""
    nodes = [helper.make_node("Concat", ["x1", "x2"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"], epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Conv", ["r", "W"], ["y"])]
    return float_model(nodes, [("x1", [1, c // 2, hw, hw]), ("x2", [1, c // 2, hw, hw])], "y",
                       [*_bn_params(c), const("W", _f32(16, c, 1, 1) * 0.2)])


@pytest.mark.parametrize("c,hw", [(16, 8), (64, 32)])  # below and above oneDNN's binary threshold
def test_preactivation_bn_becomes_a_chain_with_ort_values(c: int, hw: int) -> None:
    m = _preact(c, hw)
    feeds = {"x1": _f32(1, c // 2, hw, hw), "x2": _f32(1, c // 2, hw, hw)}
    ops = check_compiled(m, feeds, {"ElementwiseChain": 1}, absent=("BatchNormalization", "Relu"), rtol=1e-5, atol=1e-5)
    assert ops.count("Concat") == 1


def test_bn_after_a_conv_still_folds_into_it() -> None:
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["y"])]
    m = float_model(nodes, [("x", [1, 8, 12, 12])], "y", [const("W", _f32(8, 8, 3, 3) * 0.2), *_bn_params(8)])
    ops = check_compiled(m, {"x": _f32(1, 8, 12, 12)}, absent=("BatchNormalization", "Mul", "Add", "ElementwiseChain"))
    assert ops in (["Conv"], ["FusedConv"])


def _graph(bn_attrs: dict[str, object], const_scale: bool = True, outputs: int = 1, rank: int | None = 4) -> object:
    shape = None if rank is None else [2, 6, 5, 5][:rank]
    params = _bn_params(6)
    ins = [("x", shape)] + ([] if const_scale else [("bn_s", [6])])
    if not const_scale:
        params = params[1:]
    outs = ["y"] + [f"o{i}" for i in range(1, outputs)]
    nodes = [helper.make_node("BatchNormalization", ["x", "bn_s", "bn_b", "bn_m", "bn_v"], outs, **bn_attrs)]
    nodes += [helper.make_node("Identity", [o], [f"{o}_out"]) for o in outs[1:]]
    m = float_model(nodes, ins, "y", params, opset=15)
    for o in outs[1:]:
        m.graph.output.append(helper.make_tensor_value_info(f"{o}_out", 1, None))
    g = import_model(m)
    infer_graph(g)
    return g


def test_rewrite_counts_and_reasons() -> None:
    g = _graph({})
    n, missed = bn_to_affine.rewrite(g)  # type: ignore[arg-type]
    assert n == 1 and not missed and [x.op_type for x in g.nodes] == ["Mul", "Add"]  # type: ignore[attr-defined]
    a = g.initializers[g.nodes[0].inputs[1]]  # type: ignore[attr-defined]
    assert a.shape == (6, 1, 1) and a.dtype == np.float32
    for graph, why in ((_graph({}, const_scale=False), "not a constant"),
                       (_graph({"training_mode": 1}, outputs=3), "training_mode=1"),
                       (_graph({}, rank=None), "rank >= 2")):
        n, missed = bn_to_affine.rewrite(graph)  # type: ignore[arg-type]
        assert n == 0 and len(missed) == 1 and why in missed[0], missed
        assert [x.op_type for x in graph.nodes][0] == "BatchNormalization"  # type: ignore[attr-defined]


def test_rewrite_keeps_the_kernels_numbers_and_nan() -> None:
    """y = x * a + c with a, c in float32 is the BatchNormalization kernel's own formula: equal to
    ORT's values, and a NaN or infinity in X comes out as ORT gives it (the Relu stays in numpy)."""
    m = _preact(64, 32)
    x1, x2 = _f32(1, 32, 32, 32), _f32(1, 32, 32, 32)
    x1[0, 3, 4, 5], x1[0, 7, 0, 0], x2[0, 1, 2, 3] = np.nan, np.inf, -np.inf
    # the NaN reaches the output through the 1x1 conv; compare the chain's output directly
    nodes = list(m.graph.node)[:3]
    m2 = float_model(nodes, [("x1", [1, 32, 32, 32]), ("x2", [1, 32, 32, 32])], "r", list(m.graph.initializer)[:4])
    cm = compile_model(m2)
    assert [n.op_type for n in cm.graph.nodes] == ["Concat", "ElementwiseChain"]
    lm = LoadedModel.from_compiled(cm)
    got = lm.run_dict({"x1": x1, "x2": x2})[0]
    want = run_ort(m2, {"x1": x1, "x2": x2})[0]
    from pycann.kernels.providers import onednn

    if onednn.available():  # the chain's Mul + Add head ran as a oneDNN primitive, the Relu after it
        steps = [st for v in lm.executor._cache.values() for st in v.plan.steps if st.node.op_type == "ElementwiseChain"]
        assert len(steps) == 1 and steps[0].bound is not None and steps[0].bound.impl.startswith(("jit", "ref"))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.isnan(got[0, 3, 4, 5]) and got[0, 32 + 1, 2, 3] == 0.0


def test_torch_exported_preactivation_block() -> None:
    """The same block from PyTorch's exporter (TorchScript): BatchNorm2d + ReLU after torch.cat."""
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(64)
            self.conv = torch.nn.Conv2d(64, 16, 1, bias=False)

        def forward(self, a: object, b: object) -> object:
            return self.conv(torch.relu(self.bn(torch.cat([a, b], 1))))

    blk = Block().eval()
    with torch.no_grad():
        blk.bn.running_mean.uniform_(-1, 1)
        blk.bn.running_var.uniform_(0.5, 2)
        blk.bn.weight.uniform_(-2, 2)
    a, b = torch.randn(1, 32, 32, 32), torch.randn(1, 32, 32, 32)
    buf = io.BytesIO()
    torch.onnx.export(blk, (a, b), buf, input_names=["a", "b"], output_names=["y"], opset_version=17, dynamo=False)
    import onnx

    m = onnx.load_from_string(buf.getvalue())
    feeds = {"a": a.numpy(), "b": b.numpy()}
    check_compiled(m, feeds, {"ElementwiseChain": 1}, absent=("BatchNormalization", "Relu"), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run_ort(m, feeds)[0], blk(a, b).detach().numpy(), rtol=1e-4, atol=1e-4)
