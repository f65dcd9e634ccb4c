"""atc --framework=3 on frozen graphs made by TensorFlow (scripts/make_tf_models.py), against
TensorFlow's own outputs and, where OpenCV's TensorFlow reader takes the graph, OpenCV dnn's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pycann.ge.run.model import LoadedModel
from pycann.tools.atc import main as atc
from tests.importers.conftest import TF_MODELS, load_case, rel_err

TOL = 1e-4


def _compile(tmp_path: Path, model: Path, *extra: str) -> LoadedModel:
    out = tmp_path / "m"
    rc = atc([f"--model={model}", "--framework=3", f"--output={out}", "--soc_version=Ascend310P3", *extra])
    assert rc == 0
    return LoadedModel.from_file(str(out) + ".om")


def _out_nodes(meta: dict) -> str:
    return ";".join(meta["outputs"])  # "name:index" pairs, TF's tensor names


@pytest.mark.parametrize("name", TF_MODELS)
def test_model_matches_tensorflow(name: str, tf_models: Path, tmp_path: Path) -> None:
    meta, io = load_case(tf_models / name)
    m = _compile(tmp_path, tf_models / name / "model.pb", f"--out_nodes={_out_nodes(meta)}")
    assert [i.name for i in m.inputs] == meta["inputs"]
    got = m.run([io[f"in:{i}"] for i in meta["inputs"]])
    for o, g in zip(meta["outputs"], got):
        assert rel_err(g, io[f"out:{o}"]) < TOL, o
    if name == "tf1_cond":  # the other branch
        feeds = [io[f"in:{i}"] if i != "flag" else np.array(False) for i in meta["inputs"]]
        for o, g in zip(meta["outputs"], m.run(feeds)):
            assert rel_err(g, io[f"out2:{o}"]) < TOL


def test_control_flow_becomes_if_and_loop(tf_models: Path) -> None:
    from pycann.ge.compile.importers.tensorflow import load_tensorflow

    g = load_tensorflow(tf_models / "tf1_while" / "model.pb")
    ops = g.op_counts()
    assert ops.get("Loop") == 1, ops
    body = next(n for n in g.nodes if n.op_type == "Loop").attrs["body"]
    assert "If" in body.op_counts()  # the tf.cond inside the loop body
    assert sorted(g.outputs) == ["acc:0", "h:0"]


def test_loop_count_changes_result(tf_models: Path, tmp_path: Path) -> None:
    """n is a run-time input: a different trip count gives TensorFlow's other answer (0 trips: x)."""
    meta, io = load_case(tf_models / "tf1_while")
    m = _compile(tmp_path, tf_models / "tf1_while" / "model.pb", "--out_nodes=h:0;acc:0")
    h, acc = m.run([io["in:x"], np.array(0, np.int32)])
    np.testing.assert_array_equal(h, io["in:x"])
    np.testing.assert_array_equal(acc, np.zeros_like(io["in:x"]))


def test_saved_model_with_frozen_graph(tf_models: Path, tmp_path: Path) -> None:
    meta, io = load_case(tf_models / "tf1_cond")
    m = _compile(tmp_path, tf_models / "tf1_cond" / "saved_model" / "saved_model.pb", "--out_nodes=y:0")
    got = m.run([io["in:x"], io["in:flag"]])[0]
    assert rel_err(got, io["out:y:0"]) < TOL


def test_mobilenet_matches_opencv(tf_models: Path, tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    meta, io = load_case(tf_models / "tf_mobilenet_v2")
    pb = tf_models / "tf_mobilenet_v2" / "model.pb"
    net = cv2.dnn.readNetFromTensorflow(str(pb))
    x = io["in:input"]
    net.setInput(x.transpose(0, 3, 1, 2))  # OpenCV takes NCHW blobs
    ref = net.forward()
    got = _compile(tmp_path, pb).run([x])[0]
    assert rel_err(got, ref.reshape(got.shape)) < TOL


def test_out_nodes_and_input_shape_by_tf_names(tf_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from pycann.ge.compile.importers.tensorflow_proto import read_graph_def

    pb = tf_models / "tf_mobilenet_v2" / "model.pb"
    inner = next(n.name for n in read_graph_def(pb).node if n.op == "Relu6" and "block_3" in n.name)
    m = _compile(tmp_path, pb, f"--out_nodes={inner}:0", "--input_shape=input:2,96,96,3", "--input_format=NHWC")
    assert list(m.inputs[0].shape) == [2, 96, 96, 3]
    x = np.random.default_rng(0).normal(0, 1, (2, 96, 96, 3)).astype(np.float32)
    (y,) = m.run([x])
    assert y.shape[0] == 2 and y.shape[-1] == 144  # an NHWC feature map of block 3's expansion
    capsys.readouterr()
    rc = atc([f"--model={pb}", "--framework=3", f"--output={tmp_path / 'x'}", "--soc_version=Ascend310P3",
              "--out_nodes=no/such/node:0"])
    assert rc == 1 and "E10016" in capsys.readouterr().out


def test_nhwc_input_format_drives_image_size_gears(tf_models: Path, tmp_path: Path) -> None:
    """--input_format=NHWC (TF's default) puts H and W at dims 1 and 2 for --dynamic_image_size."""
    meta, io = load_case(tf_models / "tf_mobilenet_v2")
    m = _compile(tmp_path, tf_models / "tf_mobilenet_v2" / "model.pb", "--input_shape=input:1,-1,-1,3",
                 "--dynamic_image_size=96,96;128,128", "--input_format=NHWC")
    assert rel_err(m.run([io["in:input"]])[0], io[f"out:{meta['outputs'][0]}"]) < TOL
    big = np.random.default_rng(0).normal(0, 1, (1, 128, 128, 3)).astype(np.float32)
    assert m.run([big])[0].shape == (1, 100)


def test_aipp_on_an_nhwc_tensorflow_input(tf_models: Path, tmp_path: Path) -> None:
    """--insert_op_conf on a TF model: the uint8 NHWC image is normalised by AIPP before the graph."""
    meta, io = load_case(tf_models / "tf_mobilenet_v2")
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n min_chn_0 : 127.5\n min_chn_1 : 127.5\n"
                   " min_chn_2 : 127.5\n var_reci_chn_0 : 0.0078125\n var_reci_chn_1 : 0.0078125\n"
                   " var_reci_chn_2 : 0.0078125\n}\n")
    pb = tf_models / "tf_mobilenet_v2" / "model.pb"
    with_aipp = _compile(tmp_path, pb, f"--insert_op_conf={cfg}")
    plain = _compile(tmp_path / "plain", pb)
    img = np.random.default_rng(3).integers(0, 256, (1, 96, 96, 3), dtype=np.uint8)
    got = with_aipp.run([img])[0]
    ref = plain.run([((img.astype(np.float32) - 127.5) * 0.0078125)])[0]
    assert rel_err(got, ref) < TOL


def test_tf2_functional_control_flow_becomes_loop_and_if(tf_models: Path) -> None:
    from pycann.ge.compile.importers.tensorflow import load_tensorflow
    from pycann.ge.compile.importers.tensorflow_proto import read_graph_def

    pb = tf_models / "tf2_functional" / "model.pb"
    assert "StatelessWhile" in {n.op for n in read_graph_def(pb).node}  # not lowered by freezing
    g = load_tensorflow(pb)
    loop = next(n for n in g.nodes if n.op_type == "Loop")
    assert "If" in loop.attrs["body"].op_counts()
