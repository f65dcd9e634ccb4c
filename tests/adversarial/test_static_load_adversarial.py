"""Adversarial checks of the static .om load path (issue 23 item 5): the plan built on the compiled
graph when the manifest's ``kernel_env`` matches (ge/run/specializer.py), the NaN guard's weight
bounds seeded from the manifest (``weight_bounds``), the weights' CRC on a thread
(``load_om(verify="background")``) and in-place residual convs loaded from an .om (threads, the CRC
thread, the collector and ``blas_threads``: test_static_load_threads_adversarial.py).

Files are edited after ``atc`` with valid checksums (a deliberate edit, ``tests.ge.test_om.rewrite``).
The contract checked: a load either fails with an ``OmFormatError`` / ``ShapeError`` naming the
problem, or its values equal ONNX Runtime's on the graph the file describes; a hint the loader reads
(``_algo``, ``_layout``, ``weight_bounds``) may cost speed when it lies, never a value, a NaN that
ONNX Runtime keeps, or a crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

import pycann.ge.om as om
from pycann.errors import ShapeError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.om import OmFormatError
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels.providers import onednn_wino
from tests.ge.test_om import rewrite
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(2312)
F = TensorProto.FLOAT
needs_dnnl = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")


def _model(nodes: list[Any], inits: dict[str, np.ndarray], x_shape: tuple[int, ...],
           outs: dict[str, tuple[int, ...]], extra_inputs: tuple[str, ...] = ()) -> ModelProto:
    ins = [helper.make_tensor_value_info("x", F, list(x_shape))]
    ins += [helper.make_tensor_value_info(n, F, list(inits[n].shape)) for n in extra_inputs]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(k, F, list(v)) for k, v in outs.items()],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _w(*shape: int, scale: float = 0.1) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def residual_net() -> ModelProto:
    """Conv -> Relu -> Conv + x -> Relu -> GAP -> Gemm (fused convs, NHWC, a residual graph input)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]), helper.make_node("GlobalAveragePool", ["e"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    return _model(nodes, {"w1": _w(16, 16, 3, 3), "w2": _w(16, 16, 3, 3), "fc": _w(10, 16, scale=1.0)},
                  (2, 16, 12, 12), {"y": (2, 10)})


def conv_relu() -> ModelProto:
    """One Conv + Relu big enough for oneDNN (a fused ReLU the NaN guard checks), output as is."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["y"])]
    return _model(nodes, {"w": _w(32, 32, 3, 3, scale=1.0)}, (1, 32, 16, 16), {"y": (1, 32, 16, 16)})


def _manifest(data: bytes) -> dict[str, Any]:
    f = om._HEAD.unpack_from(data)
    return json.loads(data[f[6]:f[6] + f[7]])  # type: ignore[no-any-return]


def _edited(tmp_path: Path, model: ModelProto, edit: Callable[[dict[str, Any]], None], name: str = "m") -> Path:
    """``model`` compiled to an .om whose manifest ``edit`` changed (checksums recomputed)."""
    src = tmp_path / f"{name}_src.om"
    compile_model(model).save(src)
    data = src.read_bytes()
    man = _manifest(data)
    edit(man)
    out = tmp_path / f"{name}.om"
    out.write_bytes(rewrite(data, manifest=man))
    return out


def _assert_ort(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (int(np.isnan(got).sum()), int(np.isnan(want).sum()))


# --------------------------------------------------------------------------- weight_bounds that lie
def _non_finite_feeds() -> list[np.ndarray]:
    x = RNG.standard_normal((1, 32, 16, 16)).astype(np.float32)
    inf = x.copy()
    inf[0, 3, 2, 2], inf[0, 3, 2, 3] = np.inf, -np.inf  # inf - inf in the sums: NaN that ReLU must keep
    nan = x.copy()
    nan[0, 5, 7, 7] = np.nan
    return [x, inf, nan]


@needs_dnnl
@pytest.mark.parametrize("bound", [-1.0, float("-inf"), -1e-30, 0.0, 1e-30, float("nan"), float("inf")])
def test_a_lying_weight_bound_keeps_non_finite_inputs_as_ort(tmp_path: Path, bound: float) -> None:
    """A bound is a hint: a negative one made ``|x| * bound`` negative for an inf input, so the guard
    took the fused ReLU, which maps NaN to 0. Whatever number the file holds, NaN and inf inputs come
    out as ONNX Runtime gives them (only finite inputs whose sums overflow rely on the bound being
    the weights' own: the file's weights and bounds are one CRC-protected record from ``atc``)."""
    m = conv_relu()
    lm = LoadedModel.from_file(_edited(tmp_path, m, lambda man: man.__setitem__("weight_bounds", [["w", False, bound]])))
    for feed in _non_finite_feeds():
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])


@pytest.mark.parametrize("table", [
    [["w", False, 10 ** 400]],  # an int no float holds
    [["w", True, 1.0], ["w", "no", 1.0], ["w", False, None], ["w", False, [1.0]], ["w", False, {"v": 1}]],
    [["w", False, True]],  # a bool is no bound
    [["w", False, 1.0, "extra"]], {"w": 1.0}, "w", 3.5, None, [[["w"], False, 1.0]],
    [["w", False, 1.0]] * 100_000,  # a huge list: each entry is taken or ignored, the load still works
])
def test_malformed_weight_bounds_are_ignored(tmp_path: Path, table: Any) -> None:
    m = conv_relu()
    lm = LoadedModel.from_file(_edited(tmp_path, m, lambda man: man.__setitem__("weight_bounds", table)))
    for feed in _non_finite_feeds():
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])


# --------------------------------------------------------------------------- graphs whose hints lie
def _set_attr(i: int, key: str, kind: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(man: dict[str, Any]) -> None:
        man["graph"]["nodes"][i]["attrs"][key] = {"t": kind, "v": value}
    return edit


def _desc(name: str, field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(man: dict[str, Any]) -> None:
        man["graph"]["descs"][name][field] = value
    return edit


HINTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "in_place_no_residual": _set_attr(0, "_in_place", "int", 1),
    "in_place_graph_input_residual": _set_attr(1, "_in_place", "int", 1),
    "layout_nchw": _set_attr(0, "_layout", "str", "NCHW"),
    "layout_nchw_residual": _set_attr(1, "_layout", "str", "NCHW"),
    "layout_unknown": _set_attr(0, "_layout", "str", "XYZW"),
    "algo_unknown": _set_attr(0, "_algo", "str", "bogus:kernel"),
    "algo_torch": _set_attr(0, "_algo", "str", "torch:conv2d_nhwc"),
    "algo_winograd_residual": _set_attr(1, "_algo", "str", "onednn:conv_winograd"),
    "algo_numpy_conv": _set_attr(1, "_algo", "str", "numpy:gemm_1x1"),
    "algo_other_family_conv": _set_attr(0, "_algo", "str", "onednn:matmul"),
    "algo_other_family_matmul": _set_attr(4, "_algo", "str", "numpy:gemm"),
    "algo_conv_on_matmul": _set_attr(4, "_algo", "str", "onednn:conv_nhwc"),
    "desc_shape": _desc("b", "shape", [2, 16, 6, 6]),
    "desc_dtype": _desc("b", "dtype", 11),
    "desc_output": _desc("y", "shape", [2, 5]),
}


@pytest.mark.parametrize("reuse", [True, False], ids=["compiled_plan", "specialised"])
@pytest.mark.parametrize("hint", sorted(HINTS))
def test_edited_hints_keep_ort_values(tmp_path: Path, hint: str, reuse: bool) -> None:
    """Internal attributes and value descs edited after atc, with a matching ``kernel_env`` (the plan
    is built on the file's graph as it is) and without (run-time specialisation): ORT's values."""
    m = residual_net()

    def edit(man: dict[str, Any]) -> None:
        HINTS[hint](man)
        if not reuse:
            man.pop("kernel_env")

    lm = LoadedModel.from_file(_edited(tmp_path, m, edit))
    assert lm.specializer.compiled_reused == (1 if reuse else 0)
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    for _ in range(2):
        _assert_ort(lm.run([x])[0], run_ort(m, {"x": x})[0])


def _init(name: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(man: dict[str, Any]) -> None:
        for t in man["graph"]["initializers"]:
            if t["name"] == name:
                t.update(fields)
    return edit


@pytest.mark.parametrize("reuse", [True, False], ids=["compiled_plan", "specialised"])
@pytest.mark.parametrize("edit", [
    _init("w2", shape=[16, 16, 1, 1], nbytes=1024),  # a smaller kernel: the residual no longer fits
    _init("w2", dtype=10, shape=[16, 16, 3, 6]),  # float16 read over the same bytes
    _init("w2", dtype=11, shape=[16, 8, 3, 3]),  # float64: half the input channels
    _init("fc_matmul", shape=[10, 16]),  # the head's weight transposed back
], ids=["kernel_1x1", "float16", "float64", "head_transposed"])
def test_an_initializer_of_another_shape_fails_the_load(tmp_path: Path, edit: Any, reuse: bool) -> None:
    def both(man: dict[str, Any]) -> None:
        edit(man)
        if not reuse:
            man.pop("kernel_env")

    with pytest.raises((ShapeError, OmFormatError)):
        LoadedModel.from_file(_edited(tmp_path, residual_net(), both))


@pytest.mark.parametrize("value", [None, [], "x", {"pycann": ["0.1.0"]}, {"numpy": float("nan")}])
def test_a_malformed_kernel_env_specialises(tmp_path: Path, value: Any) -> None:
    m = residual_net()
    lm = LoadedModel.from_file(_edited(tmp_path, m, lambda man: man.__setitem__("kernel_env", value)))
    assert (lm.specializer.compiled_reused, lm.specializer.pipeline_runs) == (0, 1)
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    _assert_ort(lm.run([x])[0], run_ort(m, {"x": x})[0])


# --------------------------------------------------------------------------- the environment moved
@pytest.mark.parametrize("change", ["numpy_only", "bank_written", "bank_path_is_a_file", "bank_off_at_compile"])
def test_environment_changes_between_compile_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      change: str) -> None:
    m = residual_net()
    bank = tmp_path / "bank"
    bank.mkdir()
    monkeypatch.setenv("TUNE_BANK_PATH", str(bank))
    if change == "bank_path_is_a_file":
        (tmp_path / "file").write_bytes(b"not a folder")
        monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path / "file"))
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    if change == "numpy_only":
        monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
        providers.reset()
    elif change == "bank_written":
        (bank / "bank.sqlite").write_bytes(b"")
    elif change == "bank_off_at_compile":
        monkeypatch.delenv("TUNE_BANK_PATH")
    lm = LoadedModel.from_file(path)
    if change in ("numpy_only", "bank_written"):
        assert lm.specializer.compiled_reused == 0
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    _assert_ort(lm.run([x])[0], run_ort(m, {"x": x})[0])


@pytest.mark.parametrize("broken", [("onednn",), ("onednn", "torch")])
def test_a_library_that_fails_its_self_check_after_compile(tmp_path: Path, broken: tuple[str, ...]) -> None:
    """``kernel_env`` sees the same library files, so the plan is built on the compiled graph; its
    oneDNN choices then fall back at bind time (``providers.resolve``), with ORT's values."""
    m = residual_net()
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    providers.reset()
    for name in broken:
        providers._available[name] = False  # present, but its self-check failed in this process
    lm = LoadedModel.from_file(path)
    assert lm.specializer.compiled_reused == 1
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    nan = x.copy()
    nan[0, 1, 2, 3] = np.nan
    for feed in (x, nan):
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])


# --------------------------------------------------------------------------- in-place residual convs
def _block(residual_twice: bool = False, residual_is_input: bool = False) -> ModelProto:
    """stem Conv+Relu -> h; Conv+Relu -> Conv + (h or x) -> Relu -> out (ResNet's basic block).
    ``residual_twice``: h is read again by a second Add after the block."""
    res = "x" if residual_is_input else "h"
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["s"], ["h"]),
             helper.make_node("Conv", ["h", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Add", ["c", res], ["d"]),
             helper.make_node("Relu", ["d"], ["e"])]
    out = "e"
    if residual_twice:
        nodes.append(helper.make_node("Add", ["e", res], ["e2"]))
        out = "e2"
    nodes.append(helper.make_node("Conv", [out, "w3"], ["y"], pads=[1, 1, 1, 1]))
    return _model(nodes, {f"w{i}": _w(32, 32, 3, 3) for i in range(4)}, (2, 32, 16, 16), {"y": (2, 32, 16, 16)})


@needs_dnnl
@pytest.mark.parametrize("shape", ["block_residual", "input_residual", "residual_twice"])
def test_in_place_residual_from_an_om_with_nan_and_inf(tmp_path: Path, shape: str, in_place_calls: dict[str, int],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The block's residual conv writes over its residual (the "sum" post-op) when the residual dies
    there; a graph input or a residual read again afterwards keeps its buffer."""
    monkeypatch.setattr(onednn_wino, "available", lambda: False)  # (the direct conv: the in-place form)
    m = _block(residual_twice=shape == "residual_twice", residual_is_input=shape == "input_residual")
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    lm = LoadedModel.from_file(path)
    assert lm.specializer.compiled_reused == 1
    x = RNG.standard_normal((2, 32, 16, 16)).astype(np.float32)
    nan, inf = x.copy(), x.copy()
    nan[0, 4, 5, 6] = np.nan
    inf[1, 2, 3, 3], inf[1, 2, 3, 4] = np.inf, -np.inf
    for feed in (x, nan, x, inf, x):  # a clean run after each non-finite one: no stale partial sums
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])
    assert (in_place_calls["n"] > 0) == (shape == "block_residual")


@needs_dnnl
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_round_trip_their_bound(tmp_path: Path, bad: float) -> None:
    """A weight holding NaN or inf has a NaN / inf bound: written to the manifest (JSON's NaN and
    Infinity), refused as a seed when loaded, recomputed by the guard, and every run takes the
    unfused path that keeps ORT's NaN."""
    m = conv_relu()
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[3, 1, 1, 1] = bad
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    lm = LoadedModel.from_file(path)
    for feed in _non_finite_feeds():
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])


@needs_dnnl
@pytest.mark.parametrize("algo", ["numpy:im2col_gemm", "numpy:gemm_1x1", "numpy:depthwise", "torch:conv2d",
                                  "torch:conv2d_nhwc", "onednn:conv_winograd", "onednn:conv_bf16", "layout:NCHW"])
def test_edited_kernel_of_the_in_place_conv(tmp_path: Path, algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The residual conv the plan writes over its residual, with another recorded kernel (one that
    cannot compute in place, one for other shapes) or layout: ORT's values, NaN included."""
    monkeypatch.setattr(onednn_wino, "available", lambda: False)
    m = _block()
    edit = _set_attr(2, "_layout", "str", "NCHW") if algo.startswith("layout:") else _set_attr(2, "_algo", "str", algo)
    lm = LoadedModel.from_file(_edited(tmp_path, m, edit))
    assert lm.specializer.compiled_reused == 1
    x = RNG.standard_normal((2, 32, 16, 16)).astype(np.float32)
    nan = x.copy()
    nan[0, 1, 2, 3] = np.nan
    for feed in (x, nan, x):
        with np.errstate(all="ignore"):
            _assert_ort(lm.run([feed])[0], run_ort(m, {"x": feed})[0])
