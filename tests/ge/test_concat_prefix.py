"""ConcatPrefixReuse (ge/compile/passes/concat_prefix.py): a Concat whose first inputs are another
Concat's inputs reads that Concat's output (DenseNet's per-layer concatenation of every feature map);
what is not such a prefix stays (negative); every compiled graph computes what ONNX Runtime computes
on the original model (equivalence), in a channels-last conv chain and outside one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(23)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _dense_block(layers: int = 4, c0: int = 8, growth: int = 4, hw: int = 9, axis: int = 1,
                 convs: bool = True) -> onnx.ModelProto:
    """x -> [Concat(x, f1, ..., fk) -> Relu -> conv -> f(k+1)] * layers, then Concat of all (DenseNet's
    block as torchvision exports it); ``convs=False``: Neg in place of each conv (no NHWC chain)."""
    nodes, inits, feats = [], [], ["x"]
    for k in range(layers):
        cat = f"cat{k}"
        nodes.append(helper.make_node("Concat", list(feats), [cat], axis=axis))
        nodes.append(helper.make_node("Relu", [cat], [f"r{k}"]))
        if convs:
            inits.append(const(f"W{k}", _f32(growth, c0 + growth * k, 3, 3) * 0.2))
            nodes.append(helper.make_node("Conv", [f"r{k}", f"W{k}"], [f"f{k}"], pads=[1, 1, 1, 1]))
        else:
            nodes.append(helper.make_node("Neg", [f"r{k}"], [f"f{k}"]))
        feats.append(f"f{k}")
    nodes.append(helper.make_node("Concat", list(feats), ["y"], axis=axis))
    return float_model(nodes, [("x", [1, c0, hw, hw])], "y", inits)


def _concats(cm: object) -> list[list[str]]:
    return [list(n.inputs) for n in cm.graph.nodes if n.op_type == "Concat"]  # type: ignore[attr-defined]


def _check(m: onnx.ModelProto, cm: object, x: np.ndarray) -> None:
    lm = LoadedModel.from_compiled(cm)  # type: ignore[arg-type]
    want = run_ort(m, {"x": x})[0]
    for _ in range(2):  # the arena views again
        np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("convs", [True, False], ids=["nhwc_chain", "no_convs"])
@pytest.mark.parametrize("axis", [1, -3])
def test_dense_block_concats_read_the_previous_concat(convs: bool, axis: int) -> None:
    m = _dense_block(axis=axis, convs=convs, c0=8 if convs else 3)
    cm = compile_model(m)
    cats = _concats(cm)
    assert len(cats) == 5
    assert len(cats[0]) == 1 and cats[1] == ["x", "f0"]  # (a two-input Concat is nobody's prefix of 2+)
    for k in range(2, 5):  # each one: the previous Concat's output, then the newest feature map
        assert len(cats[k]) == 2 and cats[k][1] == f"f{k - 1}", cats
    x = _f32(1, 8 if convs else 3, 9, 9)
    _check(m, cm, x)


def test_the_pass_can_be_switched_off() -> None:
    cm = compile_model(_dense_block(), CompileOptions(disabled_passes=["ConcatPrefixReuse"]))
    assert [len(c) for c in _concats(cm)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("case", ["other_axis", "not_first", "reordered"])
def test_what_is_not_a_prefix_stays(case: str) -> None:
    a, b, c = (f"v{i}" for i in range(3))
    nodes = [helper.make_node("Relu", ["x"], [a]), helper.make_node("Neg", ["x"], [b]), helper.make_node("Abs", ["x"], [c])]
    if case == "other_axis":
        nodes += [helper.make_node("Concat", [a, b], ["t"], axis=2), helper.make_node("Concat", [a, b, c], ["u"], axis=1)]
    elif case == "not_first":  # the earlier inputs appear, but not as the first ones
        nodes += [helper.make_node("Concat", [a, b], ["t"], axis=1), helper.make_node("Concat", [c, a, b], ["u"], axis=1)]
    else:  # the same inputs in another order
        nodes += [helper.make_node("Concat", [a, b], ["t"], axis=1), helper.make_node("Concat", [b, a, c], ["u"], axis=1)]
    nodes += [helper.make_node("Flatten", ["t"], ["tf"]), helper.make_node("Flatten", ["u"], ["uf"]),
              helper.make_node("Concat", ["tf", "uf"], ["y"], axis=1)]
    m = float_model(nodes, [("x", [1, 2, 3, 3])], "y")
    cm = compile_model(m)
    assert all(not (len(c) == 2 and c[0] == "t") for c in _concats(cm)), _concats(cm)
    _check(m, cm, _f32(1, 2, 3, 3))


@pytest.mark.models
@pytest.mark.parametrize("name", ["tv_densenet121", "tv_densenet121_dynamo"])
def test_densenet_concats_from_both_exporters(name: str, tmp_path: Path) -> None:
    from scripts.model_zoo import ZOO

    s = ZOO[name]
    if not s.path.is_file():
        pytest.skip(f"{name} is not exported (python scripts/export_torch_models.py --zoo)")
    feeds = s.test_inputs(0)
    cm = compile_model(str(s.path), CompileOptions(input_shape={k: list(v.shape) for k, v in feeds.items()}))
    assert max(len(c) for c in _concats(cm)) == 2  # every dense layer: previous Concat + newest map
    s.assert_close(LoadedModel.from_compiled(cm).run_dict(feeds), run_ort(onnx.load(str(s.path)), feeds))
