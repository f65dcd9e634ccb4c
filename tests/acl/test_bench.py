"""ais_bench compatibility: the bench CLI and InferSession's modes, summary, free_resource."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import pycann
from pycann.acl.session import InferSession, latency_stats, parse_dims
from pycann.errors import InputError
from pycann.tools import bench

from .conftest import small_ref

STAT = r"min = [\d.]+, max = [\d.]+, mean = [\d.]+, median = [\d.]+, percentile\(99%\) = [\d.]+"


def test_bench_static_summary(small_om: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["--model", str(small_om), "--loop", "5", "--batchsize", "2", "--output", str(tmp_path),
                     "--output_dirname", "run", "--outfmt", "NPY", "--display_all_summary", "true",
                     "--pure_data_type", "random"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("[INFO]")]
    i = lines.index("[INFO] -----------------Performance Summary------------------")
    assert re.fullmatch(r"\[INFO\] H2D_latency \(ms\): " + STAT, lines[i + 1])
    assert re.fullmatch(r"\[INFO\] NPU_compute_time \(ms\): " + STAT, lines[i + 2])
    assert re.fullmatch(r"\[INFO\] D2H_latency \(ms\): " + STAT, lines[i + 3])
    assert re.fullmatch(r"\[INFO\] throughput 1000\*batchsize\.mean\(2\)/NPU_compute_time\.mean\([\d.]+\): [\d.]+",
                        lines[i + 4])
    assert lines[i + 5] == "[INFO] ------------------------------------------------------"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["pure_infer_data_0.npy", "pure_infer_data_1.npy"]
    summary = json.loads(next(tmp_path.glob("*_summary.json")).read_text())
    assert summary["throughput"] > 0 and set(summary["NPU_compute_time"]) >= {"min", "max", "mean", "median", "p99"}


def test_bench_inputs_and_dynamic(dyn_om: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    indir = tmp_path / "in"
    indir.mkdir()
    xs = [np.random.default_rng(i).standard_normal((3, 4)).astype(np.float32) for i in range(2)]
    np.save(indir / "a.npy", xs[0])
    xs[1].tofile(indir / "b.bin")
    rc = bench.main(["--model", str(dyn_om), "--input", str(indir), "--dymBatch", "3", "--output", str(tmp_path),
                     "--output_dirname", "o", "--outfmt", "BIN", "--warmup_count", "0", "--profiler", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "--profiler has no effect" in out and "H2D_latency" not in out
    assert "throughput 1000*batchsize.mean(3)" in out
    for name, x in (("a", xs[0]), ("b", xs[1])):
        z = np.fromfile(tmp_path / "o" / f"{name}_1.bin", np.float32).reshape(3, 3)
        np.testing.assert_allclose(z, small_ref(x)[1], rtol=1e-6)
    rc = bench.main(["--model", str(dyn_om), "--dymShape", "x:5,4", "--outputSize", "100,100"])
    assert rc == 0
    rc = bench.main(["--model", str(dyn_om), "--dymShape", "x:5,4", "--outputSize", "10,10"])
    assert rc == 1 and "custom_sizes" in capsys.readouterr().err
    assert bench.main(["--model", str(dyn_om)]) == 1  # dynamic dims and nothing to set them
    assert bench.main(["--model", str(tmp_path / "missing.om")]) == 1


def test_session_modes(dyn_om: Path, small_om: Path) -> None:
    sess = InferSession(0, str(dyn_om), loop=2)
    x = np.ones((4, 4), np.float32)
    for mode in ("static", "dymbatch", "dymdims", "dymshape"):
        out = sess.infer([x], mode=mode)
        np.testing.assert_allclose(out[0], small_ref(x)[0], rtol=1e-6)
    assert sess.dym == {"shape": {"x": [4, 4]}} and sess.custom_outsize == [100000, 100000]
    sess.infer({"x": x}, mode="dymbatch")
    assert sess.dym == {"batch": 4} and sess.get_max_dym_batchsize() == 8
    with pytest.raises(RuntimeError, match="wrong infer_mode"):
        sess.infer([x], mode="fast")
    with pytest.raises(RuntimeError, match="4-D"):
        sess.infer([x], mode="dymhw")
    with pytest.raises(RuntimeError, match="custom_sizes"):
        sess.infer([x], mode="dymshape", custom_sizes=8)
    with pytest.raises(RuntimeError, match="type"):
        sess.infer([x], mode="dymshape", custom_sizes="big")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"custom_sizes gives 1 sizes for the model's 2 outputs"):
        sess.infer([x], mode="dymshape", custom_sizes=[100000])  # (the second output was never checked)
    assert len(sess.infer_pipeline([[x], [x]], mode="dymbatch")) == 2
    assert len(sess.summary().exec_time_list) == 2 * 8  # loop=2: 4 modes, dymbatch, dymshape overflow, 2 pipelined
    st = sess.summary().stats()
    assert st["min"] <= st["median"] <= st["max"] and st["p99"] <= st["max"]
    np.testing.assert_allclose(sess.run([x])[0], small_ref(x)[0], rtol=1e-6)  # ais_bench low-level run
    for flag in (True, False):  # ais_bench's run(feeds, out_array=...), the flag by name too
        np.testing.assert_allclose(sess.run([x], out_array=flag)[1], small_ref(x)[1], rtol=1e-6)
        np.testing.assert_allclose(sess.run([x], flag)[1], small_ref(x)[1], rtol=1e-6)
    with pytest.raises(TypeError, match="ais_bench's form"):
        sess.run(None, {"x": x}, out_array=True)
    assert sess.run(["z"], {"x": x})[0].shape == (4, 3)  # ONNX Runtime style
    sess.set_dynamic_hw(8, 6)
    sess.set_dynamic_dims("x:2,4")
    assert sess.input_shapes() == [[2, 4]]
    sess.reset_summaryinfo()
    assert sess.summary().exec_time_list == []
    sess.free_resource()
    with pytest.raises(RuntimeError, match="freed"):
        sess.infer([x])
    InferSession.finalize()
    static = InferSession(0, str(small_om))
    with pytest.raises(RuntimeError, match="static"):
        static.infer([np.ones((2, 4), np.float32)], mode="dymbatch")
    assert static.get_max_dym_batchsize() == -1


def test_helpers() -> None:
    assert parse_dims("x:1,3;y:2") == {"x": [1, 3], "y": [2]}
    with pytest.raises(ValueError):
        parse_dims("nonsense")
    assert latency_stats([]) == {"min": 0.0, "max": 0.0, "mean": 0.0, "median": 0.0, "p99": 0.0}
    assert latency_stats([1.0, 3.0])["mean"] == 2.0
    assert bench.str2bool("1") and not bench.str2bool("False")


def test_bench_times_a_dynamic_models_plan_not_its_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The warm-up call of a new shape runs the shape-generic plan and queues the shape's plan for
    the background builder: the bench waits for it, so every timed call runs that plan (before, the
    timed loop ran generic calls and the build beside them: PP-OCRv4 det 320x320 mean 27 ms against a
    median of 11)."""
    from tests.ge.test_plan_cache import _conv_model

    om = tmp_path / "convs.om"
    pycann.compile_model(_conv_model()).save(om)  # type: ignore[arg-type]
    monkeypatch.setenv("PYCANN_ADAPTIVE_THREADS", "off")  # (no smaller-team twins on a busy host)
    sessions: list[InferSession] = []

    class Recording(InferSession):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, **k)  # type: ignore[arg-type]
            sessions.append(self)

    monkeypatch.setattr(bench, "InferSession", Recording)
    assert bench.main(["--model", str(om), "--dymShape", "x:1,16,9,11", "--loop", "4"]) == 0, capsys.readouterr()
    st = sessions[0].model.plan_cache_stats()
    assert (st.generic_runs, st.built, st.hits) == (1, 1, 4)


def test_dym_setting_with_an_unknown_input_name_names_it(dyn_om: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --dymShape / --dymDims naming no input of the model was ignored: the run then failed on
    the input it left unset ("input 'x' has shape [-1, 4] with dynamic dims: set --dymShape ..."),
    never saying that the name given was wrong."""
    sess = InferSession(0, str(dyn_om))
    for setter in (sess.set_dynamic_shape, sess.set_dynamic_dims):
        with pytest.raises(InputError, match=r"'y'.*no input.*\['x'\]"):
            setter("y:5,4")
    sess.set_dynamic_shape("x:5,4")  # the model's own name is still taken
    assert sess.input_shapes() == [[5, 4]]
    assert bench.main(["--model", str(dyn_om), "--dymShape", "y:5,4", "--outputSize", "100,100"]) == 1
    err = capsys.readouterr().err
    assert "'y'" in err and "['x']" in err, err


def test_bench_output_size_error_names_its_option(dyn_om: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bench's too-small --outputSize was reported as "pass a larger custom_sizes", the Python
    argument's name, which the command line does not have."""
    assert bench.main(["--model", str(dyn_om), "--dymShape", "x:5,4", "--outputSize", "10,10"]) == 1
    assert "--outputSize" in capsys.readouterr().err


def test_bench_timed_calls_of_a_dynamic_model_run_its_specialised_plan(dyn_om: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph without convolutions gets a shape's plan on the shape's second call (policy auto): the
    warm-up makes that call too, so the first timed call does not build the plan (it did: a miss)."""
    made: list[InferSession] = []

    class Recording(InferSession):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, **k)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(bench, "InferSession", Recording)
    assert bench.main(["--model", str(dyn_om), "--dymShape", "x:3,4", "--loop", "3"]) == 0
    stats = made[0].model.plan_cache_stats()
    assert stats.built == 1 and stats.plans == 1
    assert stats.hits == 3  # every timed call


def test_acl_json_path_starts_the_dump_it_configures(small_om: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """ais_bench passes acl_json_path to aclInit: its dump block dumps (it was parsed and ignored)."""
    import csv

    from pycann.acl import session as session_mod

    monkeypatch.setattr(session_mod, "_ACL_JSON_APPLIED", [False], raising=False)
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"dump": {"dump_path": str(tmp_path / "dump"), "dump_list": [], "dump_mode": "output"}}))
    sess = InferSession(0, str(small_om), acl_json_path=str(cfg))
    x = np.ones(tuple(sess.get_inputs()[0].shape), np.float32)
    out = sess.infer([x])
    InferSession.finalize()
    (index,) = list((tmp_path / "dump").glob("*/dump_index.csv"))
    with open(index, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["model_name"] for r in rows} == {small_om.stem}
    last = {r["value_name"]: r for r in rows}
    name = sess.get_outputs()[0].name
    np.testing.assert_array_equal(np.load(index.parent / last[name]["file"]), out[0])


def test_acl_json_path_applies_again_after_finalize(small_om: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """aclInit may follow aclFinalize: a session made after ``InferSession.finalize()`` starts its
    acl.json's dump again (it was applied once per process, so the second dump folder stayed empty)."""
    from pycann.acl import session as session_mod

    monkeypatch.setattr(session_mod, "_ACL_JSON_APPLIED", [False], raising=False)
    for run in ("a", "b"):
        cfg = tmp_path / f"acl_{run}.json"
        cfg.write_text(json.dumps({"dump": {"dump_path": str(tmp_path / run), "dump_list": [], "dump_mode": "output"}}))
        sess = InferSession(0, str(small_om), acl_json_path=str(cfg))
        sess.infer([np.ones(tuple(sess.get_inputs()[0].shape), np.float32)])
        InferSession.finalize()
        assert list((tmp_path / run).glob("*/dump_index.csv")), run


def test_session_infer_iteration(tmp_path: Path) -> None:
    """ais_bench's infer_iteration: outputs fed back as inputs (in_out_list), checked as ais_bench does."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"]), helper.make_node("Mul", ["x", "k"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    src = tmp_path / "it.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    sess = InferSession(0, str(src))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    k = np.full((2, 3), 2.0, np.float32)
    y, z = sess.infer_iteration([x, k], in_out_list=[0, -1], iteration_times=3)
    np.testing.assert_array_equal(y, x + 3)  # x -> x+1 -> x+2 -> x+3
    np.testing.assert_array_equal(z, (x + 2) * 2)  # the last run's x is x+2; k kept
    y, z = sess.infer_iteration({"x": x, "k": k}, in_out_list=[1, 1], iteration_times=2)
    np.testing.assert_array_equal(z, (x * 2) * (k * x))  # x and k both became the first run's z
    np.testing.assert_array_equal(sess.infer_iteration([x, k], [0, 0])[0], x + 1)  # once: plain infer
    with pytest.raises(RuntimeError, match="in_out_list"):
        sess.infer_iteration([x, k], [0], iteration_times=2)
    with pytest.raises(IndexError, match="out of range"):
        sess.infer_iteration([x, k], [0, 2], iteration_times=2)
    with pytest.raises(ValueError, match="out of range"):
        sess.infer_iteration([x, k], [0, -1], iteration_times=0)


def test_session_tensor_helpers_of_ais_bench(small_om: Path) -> None:
    """ais_bench apps move low-level results with convert_tensors_to_host / _to_arrays and make feeds
    with create_tensor_from_arrays_to_device (AttributeError before)."""
    sess = InferSession(0, str(small_om))
    x = np.arange(8, dtype=np.float32).reshape(4, 2).T.copy()  # (2, 4)
    feed = sess.create_tensor_from_arrays_to_device(np.asfortranarray(x))
    assert feed.flags.c_contiguous
    sess.set_context()
    outs = sess.infer([feed], out_array=False)
    sess.convert_tensors_to_host(outs)
    arrays = sess.convert_tensors_to_arrays(outs)
    np.testing.assert_allclose(arrays[0], small_ref(x)[0], rtol=1e-6)
    sess.free_resource()
    with pytest.raises(RuntimeError, match="freed"):
        sess.set_context()


@pytest.mark.parametrize("value", ["x", "", "0,a", "-1"])
def test_a_bad_device_option_is_refused_by_the_parser(value: str, small_om: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--device x` ended in a ValueError traceback (`--device ""` an IndexError): now exit 2 with
    argparse's line naming --device."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--model", str(small_om), "--device", value])
    assert e.value.code == 2
    assert "argument --device/-d" in capsys.readouterr().err


def test_device_lists_use_the_first_and_an_absent_device_is_an_error(small_om: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYCANN_DEVICE_COUNT", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert bench.main(["--model", str(small_om), "--loop", "1", "--device", "0, 1"]) == 0
    assert "multi-device runs are not supported; using device 0" in capsys.readouterr().out
    assert bench.main(["--model", str(small_om), "--loop", "1", "--device", "3"]) == 1
    assert "[ERROR] ValueError: device 3 does not exist" in capsys.readouterr().err


def test_gear_model_without_a_gear_option_names_the_gear_option(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A --dynamic_batch_size model run without --dymBatch was told to pass --dymShape "x:1,4" (a size
    the gears may not have); the hint names --dymBatch with a gear, and that command runs."""
    from tests.acl.conftest import small_onnx

    om = tmp_path / "gear.om"
    pycann.compile_model(small_onnx("N"), pycann.CompileOptions(input_shape={"x": [-1, 4]},
                                                                dynamic_batch_size=[2, 4])).save(om)
    assert bench.main(["--model", str(om), "--loop", "1"]) == 1
    out = "".join(capsys.readouterr())  # ([ERROR] lines go to stderr)
    assert "e.g. --dymBatch 2 (the model's --dynamic_batch_size gears: 2; 4)" in out, out
    assert bench.main(["--model", str(om), "--loop", "1", "--dymBatch", "2", "--output", str(tmp_path),
                       "--output_dirname", "o", "--outfmt", "NPY", "--pure_data_type", "random"]) == 0
    got = sorted((tmp_path / "o").glob("*.npy"))
    assert len(got) == 2
    x = np.random.default_rng(0).random((2, 4)).astype(np.float32)  # the bench's pure data (seed 0)
    np.testing.assert_allclose(np.load(got[0]), small_ref(x)[0], rtol=1e-6)


def test_a_bin_input_of_the_wrong_size_names_the_file_and_the_input(small_om: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """numpy's "cannot reshape array of size 7 into shape (2,4)" named neither the file nor the input."""
    bad = tmp_path / "bad.bin"
    np.ones(7, np.float32).tofile(bad)
    assert bench.main(["--model", str(small_om), "--input", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: 28 bytes, but input 'x' float32[2,4] takes 32 bytes of raw float32" in err, err
    good = tmp_path / "good.bin"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    x.tofile(good)
    assert bench.main(["--model", str(small_om), "--input", str(good), "--output", str(tmp_path),
                       "--output_dirname", "o", "--outfmt", "NPY"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o" / "good_0.npy"), small_ref(x)[0], rtol=1e-6)


def test_session_repr_names_the_model_and_its_tensors(dyn_om: Path) -> None:
    s = InferSession(0, dyn_om)
    assert repr(s) == f"<InferSession {str(dyn_om)!r} device 0: inputs x float32[-1,4]; outputs y float32[-1,3]; z float32[-1,3]>"
    s.free_resource()
    assert repr(s) == f"<InferSession {str(dyn_om)!r} (freed)>"
