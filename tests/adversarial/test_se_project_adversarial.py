"""Adversarial tests of SqueezeExciteProjectFusion (ge/compile/passes/fuse_se_project.py),
pycann.SqueezeExciteProject (ops/squeeze_excite.py), its bound kernel (kernels/squeeze_excite_project.py)
and the tiled gate multiply of SqueezeExcite (kernels/squeeze_excite.py ``GateMul``), against ONNX
Runtime on the original model (or numpy for the kernels alone).

No defect found. What was checked and holds:
* aliasing: the residual Z is X itself (M = C), X also a graph output or read after the projection,
  Z a graph input read again later, the projection's output a graph output and read elsewhere, a
  later Add of the same residual; the bound kernel called with its output over X, over Z, over a
  shifted window of X's buffer, Z = X, an NCHW arena view, a negative-stride X (no write over an input);
* shapes: N = 3, M = 1, C = 1, H * W = 4 M exactly (fused) and one pixel fewer (not), a prime H * W,
  H or W = 1, Bp absent (with and without residual), 3 chained blocks whose residuals are the previous
  block's output, weights shared by two projections;
* BatchNormalization after the projection (folded into Wp / Bp, then fused), Add(Z, P) spelled either
  way, the projection read from inside an If branch (outer scope), an SE block inside a branch;
* NaN / inf / 1e35 in X, gates of exactly 0 with inf in X: NaN where ORT has NaN; in the bound kernel
  alone NaN / inf in X, Wp, Bp, Z where the reference kernel has them;
* precision modes (fused only where dtypes stay float32), a dynamic model compiled with --input_shape
  (fused) and with gears (not fused), float16 models (not fused), the .om save / load round trip, one
  plan run from 4 threads at once, every model run twice (arena views again; the first run's outputs
  unchanged by the second), float16 --output_type, inputs fed as strided views; wrong input shapes raise InputError;
* GateMul: C = 1, H * W prime (the gate tiled over the whole image), N = 3, C >= TILE_ROW, output
  given as X itself, as an overlapping shifted window, as a view in the other layout.

Documented difference (ops/squeeze_excite.py says so): the kernel computes ``x (w g)`` where ORT computes
``(x g) w``; with an unbounded gate (ReLU) a gated value that overflows float32 while the scaled weight
does not gives ORT inf / NaN and the bound kernel a finite output, and the reverse; the reference kernel
(X not channels-last at run time) gates X first as ORT does; test_overflow_order_differs pins both. (Found along the way, not this commit's: with activations of 1e37 the channel sums of
SqueezeExcite can overflow in one summation order and not in ORT's, as in test_squeeze_excite_adversarial.)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.dtypes import TensorDesc
from pycann.errors import InputError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels import squeeze_excite_project as sep
from pycann.kernels.squeeze_excite import GateMul
from pycann.ops.squeeze_excite import _project
from tests.adversarial.threads import mismatches_from_threads
from tests.ge.onnx_graphs import append_if, const, to_float16
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(20261205)
ATTRS = {"act1": "Relu", "act1_alpha": 0.0, "act1_beta": 0.0, "act2": "Sigmoid", "act2_alpha": 0.0, "act2_beta": 0.0}
needs_onednn = pytest.mark.skipif(not providers.available("onednn"), reason="oneDNN not installed")


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _model(n: int = 1, c: int = 16, h: int = 20, w: int = 20, m: int = 8, r: int = 4, chain: bool = True,
           z: str | None = None, outs: Sequence[str] = ("q",), extra: Sequence[onnx.NodeProto] = (),
           extra_inits: Sequence[onnx.TensorProto] = (), extra_inputs: Sequence[tuple[str, list[int]]] = (),
           gate: str = "Sigmoid", bp: bool = True, wp: np.ndarray | None = None, w2: np.ndarray | None = None,
           b2: np.ndarray | None = None) -> onnx.ModelProto:
    """[x -> 3x3 Conv -> Relu =] x1 -> SE -> y -> 1x1 Conv(Wp[, Bp]) = p [+ z] = q (then ``extra``)."""
    inits = [const("W1", _f32(r, c, 1, 1, scale=0.3)), const("B1", _f32(r)),
             const("W2", _f32(c, r, 1, 1, scale=0.3) if w2 is None else w2), const("B2", _f32(c) if b2 is None else b2),
             const("Wp", _f32(m, c, 1, 1, scale=0.3) if wp is None else wp)]
    nodes = []
    if chain:
        inits.append(const("Wa", _f32(c, 3, 3, 3, scale=0.3)))
        nodes += [helper.make_node("Conv", ["x", "Wa"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["x1"])]
        ins = [("x", [n, 3, h, w])]
    else:
        ins = [("x1", [n, c, h, w])]
    nodes += [helper.make_node("GlobalAveragePool", ["x1"], ["s"]), helper.make_node("Conv", ["s", "W1", "B1"], ["z0"]),
              helper.make_node("Relu", ["z0"], ["z"]), helper.make_node("Conv", ["z", "W2", "B2"], ["g0"]),
              helper.make_node(gate, ["g0"], ["g"]), helper.make_node("Mul", ["x1", "g"], ["y"])]
    if bp:
        inits.append(const("Bp", _f32(m)))
    nodes.append(helper.make_node("Conv", ["y", "Wp", *(["Bp"] if bp else [])], ["p"]))
    if z is None:
        nodes.append(helper.make_node("Identity", ["p"], ["q"]))
    else:
        if z == "zin":
            ins.append(("zin", [n, m, h, w]))
        nodes.append(helper.make_node("Add", ["p", z], ["q"]))
    g = helper.make_graph([*nodes, *extra], "g",
                          [helper.make_tensor_value_info(a, TensorProto.FLOAT, s) for a, s in [*ins, *extra_inputs]],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], [*inits, *extra_inits])
    mm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mm.ir_version = 8
    return mm


def _feeds(m: onnx.ModelProto, scale: float = 1.0) -> dict[str, np.ndarray]:
    return {i.name: _f32(*[d.dim_value for d in i.type.tensor_type.shape.dim], scale=scale) for i in m.graph.input}


def _count(cm: object) -> int:
    return sum(n.op_type == "SqueezeExciteProject" for n in cm.graph.nodes)  # type: ignore[attr-defined]


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None, fused: int | None = 1,
           options: CompileOptions | None = None, tol: float = 1e-4, atol: float | None = None, runs: int = 2) -> None:
    """Compile, count the fused ops, run ``runs`` times and compare every output with ORT (NaN where ORT has NaN)."""
    feeds = _feeds(m) if feeds is None else feeds
    cm = compile_model(m, options) if options is not None else compile_model(m)
    if fused is not None:
        assert _count(cm) == fused
    lm = LoadedModel.from_compiled(cm)
    want = run_ort(m, feeds)
    for _ in range(runs):
        got = lm.run_dict(feeds)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * 0.1 if atol is None else atol)


# ------------------------------------------------------------------------------ aliasing in the graph
_ZIN = [("zin2", [1, 8, 20, 20])]


@pytest.mark.parametrize("chain", [True, False], ids=["nhwc_chain", "nchw_input"])
@pytest.mark.parametrize("case", ["z_is_x", "z_is_x_and_x_out", "z_input_read_later", "p_and_q_out", "x_out",
                                  "x_read_later", "q_read_later_and_out", "z_is_x_read_later", "add_z_first",
                                  "two_adds", "shared_wp"])
def test_aliasing_in_the_graph(case: str, chain: bool) -> None:
    src = "x1"
    kw: dict = {
        "z_is_x": dict(m=16, z=src),
        "z_is_x_and_x_out": dict(m=16, z=src, outs=("q", src)),
        "z_input_read_later": dict(z="zin", outs=("o",), extra=(helper.make_node("Add", ["q", "zin"], ["o"]),)),
        "p_and_q_out": dict(z="zin", outs=("q", "p")),
        "x_out": dict(outs=("q", src)),
        "x_read_later": dict(outs=("o",), extra=(helper.make_node("Conv", [src, "Wp"], ["t"]),
                                                   helper.make_node("Add", ["q", "t"], ["o"]))),
        "q_read_later_and_out": dict(outs=("q", "o"), extra=(helper.make_node("Relu", ["q"], ["o"]),)),
        "z_is_x_read_later": dict(m=16, z=src, outs=("o",), extra=(helper.make_node("Mul", ["q", src], ["o"]),)),
        "add_z_first": dict(outs=("o",), extra=(helper.make_node("Add", ["zin2", "q"], ["o"]),), extra_inputs=_ZIN),
        "two_adds": dict(z="zin", outs=("o",), extra=(helper.make_node("Add", ["q", "zin"], ["o"]),)),
        "shared_wp": dict(outs=("o",), extra=(helper.make_node("Conv", [src, "Wp", "Bp"], ["t"]),
                                                helper.make_node("Add", ["q", "t"], ["o"]))),
    }[case]
    _check(_model(chain=chain, **kw))


def test_two_blocks_with_the_same_weights() -> None:
    se2 = [helper.make_node("GlobalAveragePool", ["x1"], ["s_2"]), helper.make_node("Conv", ["s_2", "W1", "B1"], ["z0_2"]),
           helper.make_node("Relu", ["z0_2"], ["z_2"]), helper.make_node("Conv", ["z_2", "W2", "B2"], ["g0_2"]),
           helper.make_node("Sigmoid", ["g0_2"], ["g_2"]), helper.make_node("Mul", ["x1", "g_2"], ["y_2"]),
           helper.make_node("Conv", ["y_2", "Wp", "Bp"], ["p_2"]), helper.make_node("Add", ["q", "p_2"], ["o"])]
    _check(_model(n=2, outs=("o",), extra=se2), fused=2)


def _chained(n: int, c: int, hw: int, outs: Sequence[str]) -> onnx.ModelProto:
    """Three inverted-residual-like blocks: block i's residual is block i-1's output (read by its conv too)."""
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["x1"])]
    inits = [const("Wa", _f32(c, 3, 3, 3, scale=0.3))]
    prev = "x1"
    for i in (1, 2, 3):
        t = str(i)
        if i > 1:
            inits.append(const(f"Wc{t}", _f32(c, c, 3, 3, scale=0.1)))
            nodes += [helper.make_node("Conv", [prev, f"Wc{t}"], [f"a{t}"], pads=[1, 1, 1, 1]),
                      helper.make_node("Relu", [f"a{t}"], [f"x{t}"])]
        inits += [const(f"W1{t}", _f32(4, c, 1, 1, scale=0.3)), const(f"B1{t}", _f32(4)),
                  const(f"W2{t}", _f32(c, 4, 1, 1, scale=0.3)), const(f"B2{t}", _f32(c)),
                  const(f"Wp{t}", _f32(c, c, 1, 1, scale=0.3)), const(f"Bp{t}", _f32(c))]
        nodes += [helper.make_node("GlobalAveragePool", [f"x{t}"], [f"s{t}"]),
                  helper.make_node("Conv", [f"s{t}", f"W1{t}", f"B1{t}"], [f"z0{t}"]), helper.make_node("Relu", [f"z0{t}"], [f"z{t}"]),
                  helper.make_node("Conv", [f"z{t}", f"W2{t}", f"B2{t}"], [f"g0{t}"]), helper.make_node("Sigmoid", [f"g0{t}"], [f"g{t}"]),
                  helper.make_node("Mul", [f"x{t}", f"g{t}"], [f"y{t}"]), helper.make_node("Conv", [f"y{t}", f"Wp{t}", f"Bp{t}"], [f"p{t}"]),
                  helper.make_node("Add", [f"p{t}", prev], [f"q{t}"])]
        prev = f"q{t}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, hw, hw])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    mm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mm.ir_version = 8
    return mm


@pytest.mark.parametrize("outs", [("q3",), ("q3", "q1", "x2")])
def test_chained_blocks_with_residuals(outs: tuple[str, ...]) -> None:
    _check(_chained(2, 16, 20, outs), fused=3, runs=3)


def test_batch_norm_after_the_projection() -> None:
    bn = (const("bs", np.abs(_f32(8)) + 0.5), const("bb", _f32(8)), const("bm", _f32(8)), const("bv", np.abs(_f32(8)) + 0.5))
    m = _model(bp=False, outs=("o",), extra_inits=bn, extra_inputs=_ZIN,
               extra=(helper.make_node("BatchNormalization", ["q", "bs", "bb", "bm", "bv"], ["qb"]),
                      helper.make_node("Add", ["qb", "zin2"], ["o"])))
    _check(m)


def test_projection_read_from_an_if_branch() -> None:
    m = _model(n=2, z="zin", outs=("o",))
    append_if(m, helper.make_node("Add", ["q", "zin"], ["t_out"]), helper.make_node("Conv", ["x1", "Wp"], ["e_out"]), "o")
    cm = compile_model(m)
    assert _count(cm) == 1
    lm = LoadedModel.from_compiled(cm)
    base = {k: v for k, v in _feeds(m).items() if k != "flag"}
    for flag in (True, False, True):
        feeds = {**base, "flag": np.array(flag)}
        np.testing.assert_allclose(lm.run_dict(feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize(("kw", "fused"), [
    (dict(n=3), 1), (dict(m=1), 1), (dict(c=1, r=1, m=1), 1), (dict(c=1, r=1, m=4, h=4, w=4), 1),
    (dict(m=4, h=4, w=4), 1), (dict(m=5, h=4, w=4), 0), (dict(n=3, h=1, w=37, m=9), 1),
    (dict(n=3, c=5, r=2, m=3, h=7, w=11), 1), (dict(n=2, h=13, w=1, m=3, c=7, r=3), 1),
    (dict(bp=False), 1), (dict(bp=False, z="zin", n=2), 1), (dict(c=64, r=16, m=32, h=24, w=24, n=2, z="zin"), 1),
], ids=lambda v: str(v) if not isinstance(v, dict) else "-".join(f"{k}{v2}" for k, v2 in v.items()))
@pytest.mark.parametrize("chain", [True, False], ids=["nhwc_chain", "nchw_input"])
def test_shapes(kw: dict, fused: int, chain: bool) -> None:
    _check(_model(chain=chain, **kw), fused=fused)


@pytest.mark.parametrize("feed", ["nhwc_view", "negative_strides"])
def test_inputs_fed_as_strided_views(feed: str) -> None:
    m = _model(n=2, chain=False, z="zin")
    x = _f32(2, 20, 20, 16).transpose(0, 3, 1, 2) if feed == "nhwc_view" else _f32(2, 16, 20, 20)[:, :, ::-1, :]
    z = _f32(2, 20, 20, 8).transpose(0, 3, 1, 2) if feed == "nhwc_view" else _f32(2, 8, 20, 20)[:, ::-1]
    _check(m, {"x1": x, "zin": z})


def test_wrong_input_shapes_raise() -> None:
    lm = LoadedModel.from_compiled(compile_model(_model(z="zin")))
    with pytest.raises(InputError, match="dim 0 is 2, expected 1"):
        lm.run_dict({"x": _f32(2, 3, 20, 20), "zin": _f32(2, 8, 20, 20)})
    with pytest.raises(InputError, match="dim 3 is 21, expected 20"):
        lm.run_dict({"x": _f32(1, 3, 20, 20), "zin": _f32(1, 8, 20, 21)})


# ------------------------------------------------------------------------------ the bound kernel alone
@needs_onednn
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 4, 4), (3, 1, 1, 1, 1, 37), (3, 5, 2, 1, 7, 11), (2, 16, 4, 16, 8, 8),
                                   (1, 8, 2, 8, 1, 32), (3, 7, 3, 7, 13, 1)], ids=str)
@pytest.mark.parametrize("mode", ["fresh", "out_is_x", "out_is_z", "z_is_x", "z_nchw_out_is_z", "out_nchw",
                                  "out_overlaps_x", "x_negative_strides", "no_bias_no_residual"])
def test_bound_kernel_outputs_over_its_inputs(shape: tuple[int, ...], mode: str) -> None:
    n, c, r, m, h, w = shape
    if mode in ("out_is_x", "z_is_x") and c != m:
        pytest.skip("needs M = C")
    plain = mode == "no_bias_no_residual"
    x = _cl(_f32(n, c, h, w))
    ins: list = [x, _f32(r, c, 1, 1, scale=0.3), None if plain else _f32(r), _f32(c, r, 1, 1, scale=0.3),
                 None if plain else _f32(c), _f32(m, c, 1, 1, scale=0.3), None if plain else _f32(m),
                 None if plain else _cl(_f32(n, m, h, w))]
    descs = [TensorDesc(1, a.shape) if a is not None else None for a in ins]
    k = sep.prepare_squeeze_excite_project({**ATTRS, "_layout": "NHWC"}, descs, [None, *ins[1:7], None],
                                           [TensorDesc(1, (n, m, h, w))])
    assert k is not None
    if mode == "z_is_x":
        ins[7] = x
    elif mode == "z_nchw_out_is_z":
        ins[7] = np.ascontiguousarray(ins[7])
    elif mode == "x_negative_strides":
        ins[0] = _cl(x[:, :, ::-1, :].copy())[:, :, ::-1, :]
    elif mode == "out_overlaps_x":  # the output a window of X's buffer, 16 floats on
        buf = np.zeros(x.size + n * h * w * m + 16, np.float32)
        buf[:x.size] = x.transpose(0, 2, 3, 1).ravel()
        ins[0] = buf[:x.size].reshape(n, h, w, c).transpose(0, 3, 1, 2)
    want = _project([None if a is None else a.copy() for a in ins], ATTRS)[0].copy()
    out = {"out_is_x": lambda: ins[0], "z_is_x": lambda: ins[0], "out_is_z": lambda: ins[7],
           "z_nchw_out_is_z": lambda: ins[7], "out_nchw": lambda: np.full((n, m, h, w), np.nan, np.float32),
           "out_overlaps_x": lambda: buf[16:16 + n * h * w * m].reshape(n, h, w, m).transpose(0, 3, 1, 2)}.get(mode)
    o = None if out is None else out()
    got = k.run(ins, ATTRS, None if o is None else [o])[0]
    if o is not None:
        assert got is o
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ values
@pytest.mark.parametrize("case", ["nan", "inf", "1e35", "gate_zero_inf_x"])
def test_non_finite_x(case: str) -> None:
    kw: dict = {}
    if case == "gate_zero_inf_x":  # a ReLU gate of exactly 0 for channels 8.., 1 for 0..7
        b2 = np.full(16, -1.0, np.float32)
        b2[:8] = 1.0
        kw = dict(gate="Relu", w2=np.zeros((16, 4, 1, 1), np.float32), b2=b2)
    m = _model(n=2, chain=False, z="zin", **kw)
    feeds = _feeds(m)
    x = feeds["x1"]
    if case == "nan":
        x[0, 3, 4, 5] = np.nan
    elif case in ("inf", "gate_zero_inf_x"):
        x[1, 12, 1, 1] = np.inf
    else:
        feeds["x1"] = (np.abs(x) * np.float32(1e35)).astype(np.float32)  # sums of 400 stay finite (< 3.4e38)
    with np.errstate(all="ignore"):
        want = run_ort(m, feeds)[0]
        if case != "1e35":
            assert not np.isfinite(want).all()
        _check(m, feeds, tol=1e-4, atol=1e30 if case == "1e35" else None)


@needs_onednn
@pytest.mark.parametrize("case", ["x_nan", "x_inf", "gate_zero_x_inf", "wp_inf", "wp_nan", "z_nan", "bp_inf"])
def test_bound_kernel_non_finite_as_the_reference(case: str) -> None:
    """NaN / inf in X, Wp, Bp or Z through the bound kernel (oneDNN's matmul of X with the gated weights)
    where the reference (the unfused ops' order) has them; the finite values within float32 rounding."""
    n, c, r, m, h, w = 2, 16, 4, 8, 6, 6
    acts = dict(ATTRS)
    x, w2, b2, wp, bp, z = _f32(n, c, h, w), _f32(c, r, 1, 1), _f32(c), _f32(m, c, 1, 1), _f32(m), _f32(n, m, h, w)
    if case == "gate_zero_x_inf":  # a ReLU gate of exactly 0 for channel 5
        acts["act2"] = "Relu"
        w2[:] = 0
        b2[:] = 1.0
        b2[5] = -1.0
    {"x_nan": lambda: x.__setitem__((0, 3, 2, 2), np.nan), "x_inf": lambda: x.__setitem__((1, 5, 0, 1), np.inf),
     "gate_zero_x_inf": lambda: x.__setitem__((1, 5, 0, 1), np.inf), "wp_inf": lambda: wp.__setitem__((3, 2), np.inf),
     "wp_nan": lambda: wp.__setitem__((3, 2), np.nan), "z_nan": lambda: z.__setitem__((1, 2, 3, 3), np.nan),
     "bp_inf": lambda: bp.__setitem__(1, np.inf)}[case]()
    ins = [_cl(x), _f32(r, c, 1, 1), _f32(r), w2, b2, wp, bp, _cl(z)]
    descs = [TensorDesc(1, a.shape) for a in ins]
    k = sep.prepare_squeeze_excite_project({**acts, "_layout": "NHWC"}, descs, [None, *ins[1:7], None],
                                           [TensorDesc(1, (n, m, h, w))])
    assert k is not None
    with np.errstate(all="ignore"):
        got, want = k.run(ins, acts)[0], _project(ins, acts)[0]
    assert not np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # (NaN and inf where the reference has them)


@needs_onednn
@pytest.mark.parametrize("direction", ["ort_overflows", "bound_overflows"])
def test_overflow_order_differs(direction: str) -> None:
    """A ReLU gate of exactly 1e10 (W2 = 0, B2 = 1e10): ORT (and the reference kernel, which runs for X not
    laid out channels-last) gate X first, the bound kernel scales Wp first. X ~ 1e30, Wp ~ 1e-10: x g = 1e40
    overflows (inf - inf = NaN after the sum), x (w g) ~ 1e30 does not. X ~ 1e-30, Wp ~ 1e30: the reverse.
    The difference ops/squeeze_excite.py documents. (Which kernel runs depends on X's layout at run time:
    a conv before X that cannot prove its ReLU NaN-safe, kernels/providers/nan_guard.py, writes X NCHW.)"""
    big_x = direction == "ort_overflows"
    n, c, r, m, h, w = 2, 16, 4, 8, 6, 6
    x = _cl(_f32(n, c, h, w) * np.float32(1e30 if big_x else 1e-30))
    wp = _f32(m, c, 1, 1) * np.float32(1e-10 if big_x else 1e30)
    acts = {**ATTRS, "act2": "Relu"}
    ins = [x, _f32(r, c, 1, 1), _f32(r), np.zeros((c, r, 1, 1), np.float32), np.full(c, 1e10, np.float32), wp, None, None]
    descs = [TensorDesc(1, a.shape) if a is not None else None for a in ins]
    k = sep.prepare_squeeze_excite_project({**acts, "_layout": "NHWC"}, descs, [None, *ins[1:7], None],
                                           [TensorDesc(1, (n, m, h, w))])
    assert k is not None
    with np.errstate(all="ignore"):
        bound = k.run(ins, acts)[0]
        reference = _project(ins, acts)[0]
        exact = np.einsum("nchw,mc->nmhw", x.astype(np.float64) * 1e10, wp.reshape(m, c).astype(np.float64))
    finite, overflowed = (bound, reference) if big_x else (reference, bound)
    assert not np.isfinite(overflowed).all()
    assert np.isfinite(finite).all()
    np.testing.assert_allclose(finite, exact, rtol=1e-3, atol=1e-4 * np.abs(exact).max())


# ------------------------------------------------------------------------------ dtypes, precision, shapes at compile time
@pytest.mark.parametrize("mode", ["force_fp16", "allow_fp32_to_fp16", "allow_fp32_to_bf16", "allow_mix_precision",
                                  "allow_mix_precision_bf16", "force_fp32", "must_keep_origin_dtype"])
def test_precision_modes(mode: str) -> None:
    fused = 1 if mode == "must_keep_origin_dtype" else 0
    _check(_model(z="zin"), fused=fused, options=CompileOptions(precision_mode=mode, soc_version="CPU"), tol=3e-2, atol=3e-2)


def test_float16_model_is_not_fused() -> None:
    m = _model(chain=False)
    to_float16(m)
    _check(m, {"x1": _f32(1, 16, 20, 20).astype(np.float16)}, fused=0, tol=1e-2)


def _dynamic() -> onnx.ModelProto:
    m = _model(z="zin")
    for i in m.graph.input:
        for d, name in ((0, "n"), (2, "h"), (3, "w")):
            i.type.tensor_type.shape.dim[d].dim_param = name
    return m


def test_dynamic_model_static_compile_and_gears() -> None:
    m = _dynamic()
    feeds = {"x": _f32(2, 3, 20, 20), "zin": _f32(2, 8, 20, 20)}
    _check(m, feeds, fused=0)
    _check(m, feeds, fused=1, options=CompileOptions(input_shape={"x": [2, 3, 20, 20], "zin": [2, 8, 20, 20]}))
    cm = compile_model(m, CompileOptions(input_shape={"x": [-1, 3, 20, 20], "zin": [-1, 8, 20, 20]}, dynamic_batch_size=[1, 2]))
    assert _count(cm) == 0
    lm = LoadedModel.from_compiled(cm)
    for b in (1, 2):
        lm.set_dynamic_batch_size(b)
        f = {"x": _f32(b, 3, 20, 20), "zin": _f32(b, 8, 20, 20)}
        np.testing.assert_allclose(lm.run_dict(f)[0], run_ort(m, f)[0], rtol=1e-4, atol=1e-5)


def test_om_round_trip() -> None:
    m = _model(n=2, z="zin")
    feeds = _feeds(m)
    cm = compile_model(m)
    assert _count(cm) == 1
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.om")
        cm.save(path)
        lm = LoadedModel.from_file(path)
        want = run_ort(m, feeds)[0]
        for _ in range(2):
            np.testing.assert_allclose(lm.run_dict(feeds)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [dict(), dict(c=64, r=16, m=32, h=24, w=24)], ids=["small", "wide"])
def test_one_plan_from_four_threads(size: dict) -> None:
    m = _model(n=2, z="zin", **size)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert mismatches_from_threads(lm, m, [_feeds(m) for _ in range(6)]) == [0] * 4


@pytest.mark.parametrize("outs", [("q",), ("q", "p"), ("q", "x1")])
def test_outputs_of_one_run_survive_the_next(outs: tuple[str, ...]) -> None:
    """The arrays a run returns are not arena views the next run writes (the fused op writes its output there)."""
    m = _model(n=2, z="zin", outs=outs)
    lm = LoadedModel.from_compiled(compile_model(m))
    f1, f2 = _feeds(m), _feeds(m)
    first = lm.run_dict(f1)
    kept = [a.copy() for a in first]
    second = lm.run_dict(f2)
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)
    for got, want in ((first, run_ort(m, f1)), (second, run_ort(m, f2))):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_float16_output_type() -> None:
    m = _model(z="zin")
    cm = compile_model(m, CompileOptions(output_type={"": TensorProto.FLOAT16}))
    assert _count(cm) == 1
    feeds = _feeds(m)
    got = LoadedModel.from_compiled(cm).run_dict(feeds)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), run_ort(m, feeds)[0], rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------------------ GateMul (tiled gate multiply)
@pytest.mark.parametrize("shape", [(3, 1, 1, 65537), (3, 1, 257, 257), (1, 16, 1, 4099), (3, 24, 50, 50), (2, 7, 97, 101),
                                   (1, 600, 11, 11), (1, 1, 1, 1), (2, 3, 128, 128), (1, 1000, 1, 1)], ids=str)
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("mode", ["none", "fresh_out", "x_in_place", "other_layout_out", "overlap"])
def test_gate_mul_odd_shapes_and_outputs(shape: tuple[int, ...], channels_last: bool, mode: str) -> None:
    n, c, h, w = shape
    mem = (n, h, w, c) if channels_last else shape

    def view(a: np.ndarray) -> np.ndarray:
        return a.transpose(0, 3, 1, 2) if channels_last else a

    gm = GateMul(shape, channels_last)
    base = _f32(*mem)
    x = view(base)
    g = _f32(n, c)
    want = x * g.reshape(n, c, 1, 1)
    o = None
    if mode == "fresh_out":
        o = view(np.empty(mem, np.float32))
    elif mode == "x_in_place":
        o = x
    elif mode == "other_layout_out":
        o = np.empty(shape, np.float32) if channels_last else np.empty((n, h, w, c), np.float32).transpose(0, 3, 1, 2)
    elif mode == "overlap":  # the output 8 floats further on in X's buffer
        buf = np.zeros(x.size + 8, np.float32)
        buf[:x.size] = base.ravel()
        x = view(buf[:x.size].reshape(mem))
        o = view(buf[8:].reshape(mem))
    y = gm(x, g, o)
    if o is not None and y is not o:
        o[...] = y  # (what the SqueezeExcite kernel does with a result it could not write into o)
        y = o
    assert y.shape == shape
    np.testing.assert_array_equal(y, want)
