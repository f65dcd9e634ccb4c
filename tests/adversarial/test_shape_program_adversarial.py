"""Adversarial checks of the shape-generic plan's shape arithmetic (ge/run/shape_program.py): ONNX corner
cases of the ops it tracks, outer-scope reads from If/Loop bodies, zero-size dims and random chains,
each against ONNX Runtime at several shapes; and Slice's INT_MAX end with a negative step, which
ONNX Runtime reads as "through index 0" (found while fuzzing the chains)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.test_shape_program import _ops

I64, F32 = TensorProto.INT64, TensorProto.FLOAT
N = helper.make_node
INT64_MAX, INT32_MAX = 2**63 - 1, 2**31 - 1
SHAPES = [(2, 3, 4), (1, 1, 4), (5, 1, 4), (0, 2, 4)]
Feeds = Callable[[tuple[int, ...]], list[np.ndarray]]


def _c(name: str, v: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(v, dtype=dtype), name)


def _x(shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)]


def _model(nodes: list[onnx.NodeProto], outputs: list[str], inits: Sequence[onnx.TensorProto],
           inputs: list[onnx.ValueInfoProto] | None = None, float_out: Sequence[str] = ()) -> bytes:
    inputs = inputs or [helper.make_tensor_value_info("x", F32, ["a", "b", 4])]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F32 if o in float_out else I64, None)
                                               for o in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _check(model: bytes, shapes: Sequence[tuple[int, ...]] = SHAPES, feeds: Feeds = _x,
           policy: PlanPolicy = PlanPolicy.GENERIC) -> LoadedModel:
    """Outputs equal ORT's (exactly, dtype and shape included) at every shape; where ORT raises, pycann raises."""
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    lm = LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=policy))
    for shape in shapes:
        fs = feeds(shape)
        try:
            want = sess.run(None, dict(zip(names, fs)))
        except Exception:  # noqa: BLE001 - ORT rejects these inputs: so must pycann
            with pytest.raises(Exception):  # noqa: B017
                lm.run(fs)
            continue
        got = lm.run(fs)
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype, (shape, g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
    return lm


# --------------------------------------------------------------------------- Slice: INT_MAX ends, negative steps
@pytest.mark.parametrize("policy", [PlanPolicy.GENERIC, PlanPolicy.SPECIALIZE])
@pytest.mark.parametrize(("start", "end", "step", "dtype"), [
    (4, INT64_MAX, -1, np.int64), (4, INT32_MAX, -1, np.int32), (-1, INT32_MAX, -2, np.int64),
    (INT64_MAX, INT64_MAX, -1, np.int64), (1, INT32_MAX - 1, -1, np.int64), (0, INT64_MAX, 1, np.int64)])
def test_slice_int_max_end_with_negative_step_runs_through_index_0(start: int, end: int, step: int, dtype: type,
                                                                   policy: PlanPolicy) -> None:
    """ORT reads an end of INT32_MAX/INT64_MAX as "to the end in the step's direction" (x[4:MAX:-1] is
    x[4::-1]); pycann clamped it to d-1 and gave an empty slice."""
    ins = [_c("st", [start], dtype), _c("en", [end], dtype), _c("ax", [0], dtype), _c("sp", [step], dtype)]
    m = _model([N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], ["y"], ins, float_out=["y"])
    _check(m, [(5, 1, 4), (3, 2, 4), (1, 1, 4)], policy=policy)
    # and on a shape vector (the step stays a node in the generic plan)
    m = _model([N("Shape", ["x"], ["s"]), N("Slice", ["s", "st", "en", "ax", "sp"], ["y"])], ["y"], ins)
    _check(m, policy=policy)


# --------------------------------------------------------------------------- tracked ops: corner cases that hold
@pytest.mark.parametrize(("start", "end"), [(-1, None), (-2, -1), (-5, None), (0, 10), (2, 1), (-10, -5), (1, -1),
                                            (3, None)])
def test_shape_start_end_clamping(start: int, end: int | None) -> None:
    kw = {"start": start} if end is None else {"start": start, "end": end}
    _check(_model([N("Shape", ["x"], ["s"], **kw), N("Div", ["s", "one"], ["d"])], ["s", "d"], [_c("one", 1)]))


@pytest.mark.parametrize("idx", [-1, -3, [0, 0, 1], [-1, 0], [2, -2, -2], [], [[0, 1]]])
def test_gather_negative_repeated_and_list_indices(idx: object) -> None:
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "i"], ["g"], axis=-1), N("Div", ["g", "one"], ["d"])]
    _check(_model(nodes, ["g", "d"], [_c("i", idx), _c("one", 1)]))


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), [
    ([-2], [INT64_MAX], None, None), ([1], [100], None, None), ([2], [1], None, None), ([0], [3], [-1], None),
    ([-100], [2], [0], [1]), ([-1], [-100], [0], [-1]), ([0], [3], [0], [2]), ([1], [-(2**63)], [0], [-1])])
def test_slice_of_a_shape(starts: list[int], ends: list[int], axes: list[int] | None,
                          steps: list[int] | None) -> None:
    ins, inits = ["s", "st", "en"], [_c("st", starts), _c("en", ends)]
    if axes is not None or steps is not None:
        ins.append("ax")
        inits.append(_c("ax", axes if axes is not None else [0]))
    if steps is not None:
        ins.append("sp")
        inits.append(_c("sp", steps))
    nodes = [N("Shape", ["x"], ["s"]), N("Slice", ins, ["g"]), N("Div", ["g", "one"], ["d"])]
    _check(_model(nodes, ["g", "d"], [*inits, _c("one", 1)]))


def test_squeeze_unsqueeze_forms_and_broadcasting_arithmetic() -> None:
    """Squeeze without axes / axes [-1], Unsqueeze [-1] of a scalar, scalar/one-element/empty broadcasting
    in Add, Sub and Mul by constants, feeding a Reshape, a Range and outputs."""
    nodes = [N("Shape", ["x"], ["s"]),
             N("Slice", ["s", "z", "o"], ["s0"]),  # [a]
             N("Squeeze", ["s0"], ["a"]),  # no axes
             N("Slice", ["s", "o", "t"], ["s1"]),  # [b]
             N("Squeeze", ["s1", "m1"], ["b"]),
             N("Unsqueeze", ["b", "m1"], ["b1"]),
             N("Slice", ["s", "t", "t"], ["e"]),  # []
             N("Add", ["a", "s"], ["as"]),  # scalar + vector
             N("Sub", ["s1", "s"], ["bs"]),  # one-element - vector
             N("Mul", ["e", "s0"], ["ee"]),  # empty * one-element
             N("Mul", ["k3", "b"], ["b3"]),
             N("Sub", ["b3", "b"], ["b2"]),  # 2b
             N("Range", ["zz", "b2", "one"], ["r"]),
             N("Concat", ["b1", "m1", "e"], ["tgt"], axis=-1),
             N("Reshape", ["x", "tgt"], ["y"])]
    inits = [_c("z", [0]), _c("o", [1]), _c("t", [2]), _c("m1", [-1]), _c("k3", 3), _c("zz", 0), _c("one", 1)]
    lm = _check(_model(nodes, ["as", "bs", "ee", "r", "y"], inits, float_out=["y"]), [(2, 3, 4), (1, 1, 4), (3, 2, 4)])
    assert "Squeeze" not in _ops(lm) and "Concat" not in _ops(lm)


def test_squeeze_without_axes_of_a_symbolic_tensor_then_shape() -> None:
    """The rank of Squeeze(x) depends on which dims are 1: Shape of it must read the tensor."""
    nodes = [N("Squeeze", ["x"], ["q"]), N("Shape", ["q"], ["s"]), N("Shape", ["q"], ["s1"], start=-1)]
    _check(_model(nodes, ["s", "s1"], []), [(2, 3, 4), (1, 3, 4), (2, 1, 4), (1, 1, 4), (0, 2, 4)])


def _branch(name: str, node: onnx.NodeProto, out: str, inits: Sequence[onnx.TensorProto] = ()) -> onnx.GraphProto:
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(out, I64, None)], list(inits))


def test_if_bodies_read_tracked_values_and_duplicates() -> None:
    """t, t2 and t3 are the same program: t and t2 are read only inside If bodies (kept under their names),
    t3 by a Reshape."""
    def target(k: str) -> list[onnx.NodeProto]:
        return [N("Shape", ["x"], [f"s{k}"]), N("Gather", [f"s{k}", "i"], [f"g{k}"]),
                N("Unsqueeze", [f"g{k}", "ax"], [f"u{k}"]), N("Concat", [f"u{k}", "m1"], [f"t{k}"], axis=0)]
    nodes = [*target(""), *target("2"), *target("3"),
             N("If", ["cnd"], ["io"], then_branch=_branch("th", N("Add", ["t", "one"], ["o1"]), "o1", [_c("one", 1)]),
               else_branch=_branch("el", N("Identity", ["t2"], ["o2"]), "o2")),
             N("Reshape", ["x", "t3"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", F32, ["a", "b", 4]), helper.make_tensor_value_info("cnd", TensorProto.BOOL, [])]
    m = _model(nodes, ["io", "y"], [_c("i", 0), _c("ax", [0]), _c("m1", [-1])], inputs, float_out=["y"])
    lm = _check(m, [(2, 3, 4), (1, 3, 4), (3, 1, 4)],
                feeds=lambda s: [np.ones(s, np.float32), np.array(s[0] > 1)])
    assert _ops(lm) == ["ShapeOf", "ShapeOf", "If", "Reshape"]


def test_loop_trip_count_and_body_read_tracked_values() -> None:
    body = helper.make_graph(
        [N("Identity", ["c_in"], ["c_out"]), N("Add", ["acc", "g"], ["acc2"]), N("Add", ["acc2", "t"], ["scan"])], "lb",
        [helper.make_tensor_value_info("it", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", I64, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc2", I64, None),
         helper.make_tensor_value_info("scan", I64, None)])
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "i0"], ["g"]), N("Gather", ["s", "i1"], ["g1"]),
             N("Unsqueeze", ["g1", "ax"], ["t"]), N("Loop", ["g", "", "z"], ["accf", "scans"], body=body)]
    # (zero trips left out: pycann's scan output is (0, 1) there, ORT's (0,), independent of this rewrite)
    _check(_model(nodes, ["accf", "scans"], [_c("i0", 0), _c("i1", 1), _c("ax", [0]), _c("z", 0)]),
           [(2, 3, 4), (1, 3, 4), (3, 1, 4)])


# --------------------------------------------------------------------------- random chains
def _chain(r: random.Random) -> bytes | None:
    """A random chain of the tracked ops (and Cast to int32 and back) over Shape(x) and Shape(y); some values
    are graph outputs, some feed a Div (untracked). None when ONNX's checker rejects the draw."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    inputs = [helper.make_tensor_value_info("x", F32, ["a", "b", 4]), helper.make_tensor_value_info("y", F32, ["b", "c"])]
    vals: list[str] = []

    def const(v: object) -> str:
        name = f"c{len(inits)}"
        inits.append(_c(name, v))
        return name

    for src in ("x", "y", "x"):
        kw = {"start": r.randint(-4, 3)} if r.random() < 0.4 else {}
        nodes.append(N("Shape", [src], [f"v{len(nodes)}"], **kw))
        vals.append(nodes[-1].output[0])
    for _ in range(r.randint(3, 12)):
        v, o = r.choice(vals), f"v{len(nodes)}"
        op = r.choice(["Gather", "GatherList", "Unsqueeze", "Squeeze", "Concat", "Slice", "Add", "Sub", "Mul", "Const",
                       "Cast", "Identity"])
        if op == "Gather":
            nodes.append(N("Gather", [v, const(r.randint(-2, 1))], [o], axis=r.choice([0, -1])))
        elif op == "GatherList":
            nodes.append(N("Gather", [v, const([r.randint(-2, 1) for _ in range(r.randint(0, 3))])], [o]))
        elif op == "Unsqueeze":
            nodes.append(N("Unsqueeze", [v, const([r.choice([0, -1])])], [o]))
        elif op == "Squeeze":
            nodes.append(N("Squeeze", [v] if r.random() < 0.3 else [v, const([r.choice([0, -1])])], [o]))
        elif op == "Concat":
            nodes.append(N("Concat", [v, r.choice(vals), const([r.randint(-1, 5)])], [o], axis=r.choice([0, -1])))
        elif op == "Slice":
            ins = [v, const([r.randint(-5, 5)]), const([r.choice([r.randint(-5, 5), INT64_MAX, -(2**63)])]),
                   const([r.choice([0, -1])]), const([r.choice([1, 1, 2, -1])])]
            nodes.append(N("Slice", ins[:r.choice([3, 4, 5])], [o]))
        elif op in ("Add", "Sub", "Mul"):
            nodes.append(N(op, [v, r.choice(vals)], [o]))
        elif op == "Const":
            k = const(r.choice([r.randint(-3, 3), [r.randint(-3, 3)]]))
            nodes.append(N(r.choice(["Mul", "Add", "Sub"]), [k, v] if r.random() < 0.5 else [v, k], [o]))
        elif op == "Cast":
            nodes.append(N("Cast", [v], [o], to=r.choice([I64, TensorProto.INT32])))
            if nodes[-1].attribute[0].i == TensorProto.INT32:
                nodes.append(N("Cast", [o], [o + "_64"], to=I64))
                o += "_64"
        else:
            nodes.append(N("Identity", [v], [o]))
        g = helper.make_graph(nodes, "g", inputs, [], inits)
        try:
            onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                              strict_mode=True)
        except Exception:  # noqa: BLE001 - an invalid draw: drop it
            del nodes[-1 if not o.endswith("_64") else -2:]
            continue
        vals.append(o)
    outs: list[str] = []
    for v in vals[3:]:
        p = r.random()
        if p < 0.3:
            outs.append(v)
        elif p < 0.6:
            nodes.append(N("Div", [v, const(1)], [f"d{v}"]))
            outs.append(f"d{v}")
    if not outs:
        return None
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, I64, None) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("seed", range(24))
def test_random_chains_equal_onnxruntime(seed: int) -> None:
    m = _chain(random.Random(seed))
    if m is None:
        pytest.skip("empty draw")
    try:
        ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - ORT rejects the model statically
        pytest.skip("ORT rejects the draw")

    def feeds(s: tuple[int, ...]) -> list[np.ndarray]:
        return [np.zeros(s[:2] + (4,), np.float32), np.zeros((s[1], s[2]), np.float32)]
    _check(m, [(2, 3, 5), (1, 1, 1), (0, 4, 2), (6, 2, 0)], feeds=feeds)
