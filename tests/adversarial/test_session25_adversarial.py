"""Session 25 adversarial tests: Casts hoisted above data-moving ops (PrecisionMode), the 16-bit
oneDNN channel concat, and the generic plan's pointwise convs made at load."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import precision
from pycann.ge.run.model import LoadedModel

RNG = np.random.default_rng(2525)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], outputs: list[str],
           inputs: list[onnx.ValueInfoProto] | None = None, opset: int = 17) -> onnx.ModelProto:
    ins = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compile(m: onnx.ModelProto, mode: str, hoist: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as mp:
        if not hoist:
            mp.setattr(precision, "hoist_casts", lambda g, **kw: 0)
        return compile_model(m, CompileOptions(precision_mode=mode, soc_version="CPU"))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _same_bits(m: onnx.ModelProto, mode: str, feeds: list[list[np.ndarray]], monkeypatch: pytest.MonkeyPatch) -> Any:
    on, off = _compile(m, mode, True, monkeypatch), _compile(m, mode, False, monkeypatch)
    a, b = LoadedModel.from_compiled(on), LoadedModel.from_compiled(off)
    for f in feeds:
        got, want = a.run(f), b.run(f)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(_bits(g), _bits(w))  # bit for bit, NaN payloads too
    return on, off


# --- 1. hoist_casts ---------------------------------------------------------------------------


def test_precision_casts_count_is_not_negative_when_the_models_own_casts_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three bfloat16 inputs, each Cast to float32 by the model, concatenated before a conv: the
    inserted Cast moves above the Concat and folds with the model's own Casts, which go. The
    manifest's ``casts`` (Casts the pass added) counted "all Casts minus the model's own": -2."""
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.BFLOAT16, [1, 4, 6, 6]) for i in range(3)]
    nodes = [helper.make_node("Cast", [f"x{i}"], [f"f{i}"], to=TensorProto.FLOAT) for i in range(3)]
    nodes += [helper.make_node("Concat", ["f0", "f1", "f2"], ["c"], axis=1),
              helper.make_node("Conv", ["c", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, {"w": _w(4, 12, 3, 3)}, ["y"], inputs=ins)
    on, off = _compile(m, "allow_fp32_to_bf16", True, monkeypatch), _compile(m, "allow_fp32_to_bf16", False, monkeypatch)
    added_on = on.manifest["precision"]["casts"]
    assert added_on >= 0
    assert added_on == sum(1 for n in on.graph.nodes if n.op_type == "Cast")  # (the model's own Casts all went)
    assert off.manifest["precision"]["casts"] == 2  # one before the conv, one back to float32


_SC = np.array([1, 1, 2, 2], np.float32)
_FRAC = np.array([1, 1, 1.7, 0.6], np.float32)


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
@pytest.mark.parametrize("ct", ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_nearest_resize_variants_bit_exact(opset: int, ct: str, nearest: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every nearest_mode / coordinate_transformation_mode, fractional scales and sizes: the
    Resize running on bfloat16 picks the same pixels as on float32."""
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    roi = "" if opset >= 13 else "roi"
    for extra, inits in ((["s"], {"s": _FRAC}), (["", "z"], {"z": _i64(1, 8, 11, 4)})):
        nodes = [helper.make_node("Mul", ["x", "x"], ["m"]),
                 helper.make_node("Resize", ["m", roi] + (["e", "z"] if extra[0] == "" and roi else extra), ["r"],
                                  mode="nearest", coordinate_transformation_mode=ct, nearest_mode=nearest),
                 helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
        m = _model(nodes, {"w": _w(4, 8, 3, 3), "roi": np.zeros(0, np.float32), "e": np.zeros(0, np.float32), **inits},
                   ["y"], opset=opset)
        _same_bits(m, "allow_fp32_to_bf16", [[x]], monkeypatch)


@pytest.mark.parametrize("opset", [18, 19])
def test_resize_axes_and_keep_aspect_ratio_bit_exact(opset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    for attrs in ({"axes": [2, 3]}, {"axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"},
                  {"axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller"}, {"antialias": 1}):
        nodes = [helper.make_node("Mul", ["x", "x"], ["m"]),
                 helper.make_node("Resize", ["m", "", "", "z"], ["r"], mode="nearest", **attrs),
                 helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
        z = _i64(1, 8, 9, 5) if "axes" not in attrs else _i64(9, 5)
        _same_bits(_model(nodes, {"w": _w(4, 8, 3, 3), "z": z}, ["y"], opset=opset), "allow_fp32_to_bf16", [[x]],
                   monkeypatch)


@pytest.mark.parametrize("mode", ["allow_fp32_to_bf16", "allow_fp32_to_fp16", "force_fp16", "allow_mix_precision"])
def test_dynamic_resize_concat_chain_through_om(mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Symbolic N/H/W, Resize -> Concat(r, r) and Concat(m, x) -> Resize, through an .om: the
    hoisted compile equals the unhoisted one bit for bit at every size."""
    dyn = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"])]
    nodes = [helper.make_node("Mul", ["x", "x"], ["m"]),
             helper.make_node("Resize", ["m", "", "sc"], ["r"], mode="nearest"),
             helper.make_node("Concat", ["r", "r"], ["c"], axis=1),
             helper.make_node("Concat", ["m", "x"], ["c2"], axis=1),
             helper.make_node("Resize", ["c2", "", "sc"], ["c3"], mode="nearest"),
             helper.make_node("Add", ["c", "c3"], ["c4"]),
             helper.make_node("Conv", ["c4", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, {"sc": _SC, "w": _w(4, 16, 3, 3)}, ["y"], inputs=dyn)
    on, off = _compile(m, mode, True, monkeypatch), _compile(m, mode, False, monkeypatch)
    assert on.manifest["precision"]["casts"] >= 0
    on.save(tmp_path / "on.om")
    a, b = LoadedModel.from_file(tmp_path / "on.om"), LoadedModel.from_compiled(off)
    for s in [(1, 8, 5, 7), (2, 8, 3, 3), (1, 8, 1, 1), (1, 8, 16, 9)]:
        x = RNG.standard_normal(s).astype(np.float32)
        x.flat[0] = np.nan
        for g, w in zip(a.run([x]), b.run([x])):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(_bits(g), _bits(w))


def test_slices_reshapes_and_graph_outputs_bit_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative Slice steps/axes, Reshape 0/-1 and allowzero, Concat(a, a) of a graph input, a
    Concat output that is also a graph output, a value read inside an If branch."""
    x = [RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)]
    mul = helper.make_node("Mul", ["x", "x"], ["m"])
    _same_bits(_model([mul, helper.make_node("Slice", ["m", "st", "en", "ax", "sp"], ["s"]),
                       helper.make_node("Conv", ["s", "w"], ["y"], pads=[1, 1, 1, 1])],
                      {"w": _w(4, 8, 3, 3), "st": _i64(-1, 7), "en": _i64(-100, -9), "ax": _i64(-1, -3),
                       "sp": _i64(-2, -1)}, ["y"]), "allow_fp32_to_bf16", [x], monkeypatch)
    for allowzero, shape in ((0, _i64(0, 0, -1)), (1, _i64(1, 8, -1))):
        _same_bits(_model([mul, helper.make_node("Reshape", ["m", "sh"], ["r"], allowzero=allowzero),
                           helper.make_node("MatMul", ["r", "mw"], ["y"])], {"sh": shape, "mw": _w(36, 5)}, ["y"],
                          opset=14), "allow_fp32_to_bf16", [x], monkeypatch)
    _same_bits(_model([helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
                       helper.make_node("Conv", ["c", "w"], ["y"])], {"w": _w(4, 16, 1, 1)}, ["y"]),
               "allow_fp32_to_fp16", [x], monkeypatch)
    _same_bits(_model([mul, helper.make_node("Concat", ["m", "x"], ["c"], axis=1),
                       helper.make_node("Conv", ["c", "w"], ["y"])], {"w": _w(4, 16, 1, 1)}, ["y", "c"]),
               "allow_fp32_to_bf16", [x], monkeypatch)
    then = helper.make_graph([helper.make_node("Identity", ["r"], ["o"])], "t", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["r"], ["o"])], "e", [],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    m = _model([mul, helper.make_node("Resize", ["m", "", "sc"], ["r"], mode="nearest"),
                helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1]),
                helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["b"]),
                helper.make_node("If", ["b"], ["io"], then_branch=then, else_branch=other)],
               {"sc": _SC, "w": _w(4, 8, 3, 3), "z": np.array(0, np.float32)}, ["y", "io"])
    _same_bits(m, "allow_fp32_to_bf16", [x, [-np.abs(x[0])]], monkeypatch)


@pytest.mark.parametrize("pin", [{"keep_dtype": ["cat"]}, {"keep_dtype": ["OpType::Concat"]},
                                 {"keep_dtype": ["rs", "cat"]},
                                 {"customize_dtypes": {"cat": {"inputs": [1, 1], "outputs": [1]}}}])
def test_an_op_pinned_by_keep_dtype_or_customize_dtypes_keeps_float32(pin: dict[str, Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--keep_dtype cat``: the Concat must run in float32 (the manifest counts it as fp32), yet
    the Cast before the conv moved above it (and above the Resize): the Concat ran on bfloat16."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["m"], name="mul"),
             helper.make_node("Resize", ["m", "", "sc"], ["r"], mode="nearest", name="rs"),
             helper.make_node("Concat", ["r", "r"], ["c"], axis=1, name="cat"),
             helper.make_node("Conv", ["c", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    m = _model(nodes, {"sc": _SC, "w": _w(4, 16, 3, 3)}, ["y"])
    cm = compile_model(m, CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="CPU", **pin))
    g = cm.graph
    pinned = {"rs", "cat"} if pin.get("keep_dtype") == ["rs", "cat"] else {"cat"}
    for n in g.nodes:
        if n.name in pinned:
            assert {g.descs[i].dtype for i in n.inputs[:1]} == {TensorProto.FLOAT}, n.name
            assert g.descs[n.outputs[0]].dtype == TensorProto.FLOAT, n.name
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    with monkeypatch.context() as mp:
        mp.setattr(precision, "hoist_casts", lambda g, **kw: 0)
        off = compile_model(m, CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="CPU", **pin))
    np.testing.assert_array_equal(_bits(LoadedModel.from_compiled(cm).run([x])[0]),
                                  _bits(LoadedModel.from_compiled(off).run([x])[0]))


# --- 2. the 16-bit oneDNN concat (bind_onednn._concat) ----------------------------------------


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", [16, 10])
@pytest.mark.parametrize("axis", [0, 2, 3, -1])
def test_sixteen_bit_concat_on_other_axes_copies_the_bits(dtype: int, axis: int) -> None:
    """Batch / height / width concats of bfloat16 and float16 channels-last maps, big enough for
    the primitive: every 16-bit pattern (signalling NaN payloads, subnormals) copied as it is, into
    a new array, the arena view, a strided sub-view of a larger arena, and from plain inputs."""
    from pycann.dtypes import TensorDesc, to_numpy
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN
    from pycann.kernels.providers import onednn

    if not onednn.available():
        pytest.skip("no oneDNN")
    np_dt, a4 = to_numpy(dtype), axis % 4
    shapes = [(1, 8, 256, 256), (1, 8, 256, 256)]
    shapes = [tuple(d + i if k == a4 else d for k, d in enumerate(s)) for i, s in enumerate(shapes)]
    out = list(shapes[0])
    out[a4] = sum(s[a4] for s in shapes)
    attrs = {"axis": axis, "_layout": "NHWC"}
    k = PREPARE_ONEDNN[("", "Concat")](attrs, [TensorDesc(dtype, s) for s in shapes], [None, None],
                                       [TensorDesc(dtype, tuple(out))])
    bits = [RNG.integers(0, 1 << 16, s, dtype=np.uint16) for s in shapes]
    bits[0].flat[:65536] = np.arange(65536, dtype=np.uint16)
    want = np.concatenate(bits, axis=a4)
    xs = [_cl(b).view(np_dt) for b in bits]
    np.testing.assert_array_equal(k(xs, attrs)[0].view(np.uint16), want)
    arena = _cl(np.zeros(want.shape, np.uint16)).view(np_dt)
    assert k(xs, attrs, [arena])[0] is arena
    np.testing.assert_array_equal(arena.view(np.uint16), want)
    if a4 != 1:
        big = _cl(np.zeros((1, out[1] + 8, *out[2:]), np.uint16)).view(np_dt)[:, 4:4 + out[1]]
        big = big if a4 != 0 else _cl(np.zeros(out, np.uint16)).view(np_dt)
        k(xs, attrs, [big])
        np.testing.assert_array_equal(big.view(np.uint16), want)
    plain = [np.ascontiguousarray(b).view(np_dt) for b in bits]
    np.testing.assert_array_equal(k(plain, attrs)[0].view(np.uint16), want)


# --- 3. the generic plan's pointwise convs made at load (bind_generic_conv._prepare_pointwise) --


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    from tests.ops.oracle import run_ort

    return np.asarray(run_ort(m, {"x": x})[0])


def _generic(m: onnx.ModelProto) -> LoadedModel:
    from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy

    return LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                 build=PlanBuild.INLINE))


def _pw_model(conv_attrs: dict[str, Any], w_shape: tuple[int, ...], x_shape: list[Any],
              tail: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if tail else "y"], **conv_attrs), *(tail or [])]
    return _model(nodes, {"w": _w(*w_shape), "b": _w(w_shape[0])}, ["y"],
                  inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], opset=18)


_CASES: dict[str, tuple[dict[str, Any], tuple[int, ...], list[Any], list[onnx.NodeProto] | None]] = {
    "same_upper": ({"auto_pad": "SAME_UPPER"}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "valid": ({"auto_pad": "VALID"}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "explicit": ({"strides": [1, 1], "pads": [0, 0, 0, 0], "kernel_shape": [1, 1]}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "dilated": ({"dilations": [2, 3]}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "stride2": ({"strides": [2, 2]}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "padded": ({"pads": [1, 0, 0, 1]}, (8, 16, 1, 1), ["n", 16, "h", "w"], None),
    "group2": ({"group": 2}, (8, 8, 1, 1), ["n", 16, "h", "w"], None),
    "conv1d": ({}, (8, 16, 1), ["n", 16, "l"], None),
    "conv3d": ({}, (8, 16, 1, 1, 1), ["n", 16, "d", "h", "w"], None),
    "h_known": ({}, (8, 16, 1, 1), ["n", 16, 32, "w"], None),
    "h_known_1": ({}, (8, 16, 1, 1), ["n", 16, 1, "w"], None),
    "leaky": ({}, (8, 16, 1, 1), ["n", 16, "h", "w"], [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.3)]),
    "mish": ({}, (8, 16, 1, 1), ["n", 16, "h", "w"], [helper.make_node("Mish", ["c"], ["y"])]),
    "residual": ({}, (16, 16, 1, 1), ["n", 16, "h", "w"],
                 [helper.make_node("Add", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]),
    "shared_weight": ({}, (16, 16, 1, 1), ["n", 16, "h", "w"],
                      [helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w"], ["c2"]),
                       helper.make_node("Sigmoid", ["c2"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"])]),
}


@pytest.mark.usefixtures("default_providers")
@pytest.mark.parametrize("case", sorted(_CASES))
def test_generic_plan_one_by_one_convs_match_ort(case: str) -> None:
    attrs, w_shape, x_shape, tail = _CASES[case]
    m = _pw_model(attrs, w_shape, x_shape, tail)
    a, b = _generic(m), _generic(m)  # loaded twice: the second finds the first's matmuls
    for extent in (1, 7, 12):
        shape = tuple(d if isinstance(d, int) else (2 if d == "n" else extent) for d in x_shape)
        x = RNG.standard_normal(shape).astype(np.float32)
        x.flat[0] = np.nan
        want = _ort(m, x)
        for lm in (a, b):
            np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("default_providers")
def test_generic_plan_pointwise_conv_runs_in_a_forked_child() -> None:
    """Loaded (its matmuls made) in the parent, run first in a forked child: ORT's values, no hang."""
    import os
    import select

    attrs, w_shape, x_shape, tail = _CASES["shared_weight"]
    m = _pw_model(attrs, w_shape, x_shape, tail)
    lm = _generic(m)
    x = RNG.standard_normal((1, 16, 40, 48)).astype(np.float32)
    want = _ort(m, x)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ok = np.allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 120)
    got = os.read(r, 8) if ready else b"hang"
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(r)
    assert got == b"1"
    np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)


def test_the_manifest_counts_a_moved_op_in_its_new_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mul -> nearest Resize -> Concat -> Conv in bf16: the Resize and the Concat run on bfloat16
    once the Cast moved above them; "nodes by compute dtype" still counted them fp32."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["m"]),
             helper.make_node("Resize", ["m", "", "sc"], ["r"], mode="nearest"),
             helper.make_node("Concat", ["r", "r"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, {"sc": _SC, "w": _w(4, 16, 3, 3)}, ["y"])
    for mode, low in (("allow_fp32_to_bf16", "bf16"), ("allow_fp32_to_fp16", "fp16")):
        on, off = _compile(m, mode, True, monkeypatch), _compile(m, mode, False, monkeypatch)
        assert off.manifest["precision"]["nodes"] == {"fp32": 3, low: 1}
        assert on.manifest["precision"]["nodes"] == {"fp32": 1, low: 3}
        g = on.graph
        assert {g.descs[n.inputs[0]].dtype for n in g.nodes if n.op_type in ("Resize", "Concat")} == \
            {TensorProto.BFLOAT16 if low == "bf16" else TensorProto.FLOAT16}


@pytest.mark.parametrize("mode", ["allow_mix_precision", "allow_mix_precision_bf16"])
def test_an_op_the_user_black_listed_keeps_float32(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--modify_mixlist`` puts Resize and Concat on the black list ("keeps float32"): after a
    black Exp they stay float32 without the rewrite, but the Cast before the conv moved above both."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["x0"], pads=[1, 1, 1, 1]),
             helper.make_node("Exp", ["x0"], ["m"]),
             helper.make_node("Resize", ["m", "", "sc"], ["r"], mode="nearest"),
             helper.make_node("Concat", ["r", "r"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, {"sc": _SC, "w": _w(4, 16, 3, 3), "w0": _w(8, 8, 3, 3)}, ["y"])
    opts = CompileOptions(precision_mode=mode, soc_version="CPU",
                          modify_mixlist={"black-list": {"to-add": ["Concat", "Resize"]}})
    cm = compile_model(m, opts)
    g = cm.graph
    assert {g.descs[n.inputs[0]].dtype for n in g.nodes if n.op_type in ("Resize", "Concat")} == {TensorProto.FLOAT}
    with monkeypatch.context() as mp:
        mp.setattr(precision, "hoist_casts", lambda g, **kw: 0)
        off = compile_model(m, opts)
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(_bits(LoadedModel.from_compiled(cm).run([x])[0]),
                                  _bits(LoadedModel.from_compiled(off).run([x])[0]))
