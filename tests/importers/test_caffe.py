"""atc --framework=0 on Caffe nets written here (prototxt text + random caffemodel blobs), against
OpenCV dnn's Caffe reader (BVLC semantics, including ceil-mode pooling) and numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pycann.errors import ModelError, UnsupportedOpError
from pycann.ge.compile.importers.caffe import load_caffe
from pycann.ge.run.model import LoadedModel
from pycann.tools.atc import main as atc
from tests.importers.caffe_nets import NETS, RESBLOCK, CaffeNet, write_net
from tests.importers.conftest import rel_err

pytest.importorskip("grpc_tools")
TOL = 1e-4


def _compile(tmp_path: Path, proto: Path, weights: Path, *extra: str) -> LoadedModel:
    out = tmp_path / "m"
    rc = atc([f"--model={proto}", f"--weight={weights}", "--framework=0", f"--output={out}",
              "--soc_version=Ascend310P3", *extra])
    assert rc == 0
    return LoadedModel.from_file(str(out) + ".om")


@pytest.mark.parametrize("net", NETS, ids=[n.name for n in NETS])
def test_net_matches_opencv(net: CaffeNet, tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    if not hasattr(cv2.dnn, "readNetFromCaffe"):
        pytest.skip("this OpenCV has no Caffe reader (OpenCV 5 removed it): opencv-python-headless<5")
    proto, weights = write_net(net, tmp_path)
    x = np.random.default_rng(1).normal(0, 1, net.input_shape).astype(np.float32)
    ref_net = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    ref_net.setInput(x)
    refs = ref_net.forward(net.outputs)
    got = _compile(tmp_path, proto, weights).run([x])
    assert len(got) == len(refs)
    for g, r in zip(got, refs):
        assert g.shape == r.shape
        assert rel_err(g, r) < TOL


def _caffe_avg_pool(x: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """BVLC pooling_layer.cpp AVE, restated: ceil output size, the divisor counts pad cells but not
    the cells past the padded input."""
    h = x.shape[2]
    out = -(-(h + 2 * p - k) // s) + 1
    if (out - 1) * s >= h + p:
        out -= 1
    y = np.zeros(x.shape[:2] + (out, out), np.float64)
    for i in range(out):
        for j in range(out):
            hs, ws = i * s - p, j * s - p
            he, we = min(hs + k, h + p), min(ws + k, h + p)
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, h)
            y[:, :, i, j] = x[:, :, hs:he, ws:we].sum(axis=(2, 3)) / size
    return y


def test_ceil_mode_average_pooling_matches_caffe_arithmetic(tmp_path: Path) -> None:
    proto, weights = write_net(RESBLOCK, tmp_path)
    g = load_caffe(proto, weights, [("relu2", 0), ("pool", 0)])
    x = np.random.default_rng(2).normal(0, 1, RESBLOCK.input_shape).astype(np.float32)
    from pycann.ge.compile.compiler import compile_model

    before, pooled = LoadedModel.from_compiled(compile_model(g)).run([x])
    assert pooled.shape == (1, 8, 9, 9)  # 16 -> ceil((16 + 2 - 3) / 2) + 1 = 9
    np.testing.assert_allclose(pooled, _caffe_avg_pool(before, 3, 2, 1), rtol=1e-5, atol=1e-6)


def test_every_unsupported_layer_listed_at_once(tmp_path: Path) -> None:
    proto = tmp_path / "n.prototxt"
    proto.write_text('input: "data"\ninput_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
                     'layer { name: "pb" type: "PriorBox" bottom: "data" top: "pb" }\n'
                     'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }\n'
                     'layer { name: "det" type: "DetectionOutput" bottom: "r" top: "det" }\n')
    with pytest.raises(UnsupportedOpError) as ei:
        load_caffe(proto, None)
    assert ei.value.code == "E19010"
    assert "pb (PriorBox)" in str(ei.value) and "det (DetectionOutput)" in str(ei.value)


def test_wrong_or_missing_blobs_name_the_layer(tmp_path: Path) -> None:
    proto, weights = write_net(RESBLOCK, tmp_path)
    other = write_net(NETS[0], tmp_path / "other")[1]  # LeNet's caffemodel: conv1 has other shapes
    with pytest.raises(ModelError, match=r"layer conv1 \(Convolution\): blob weights has 500 values"):
        load_caffe(proto, other)
    partial = CaffeNet(RESBLOCK.name, RESBLOCK.prototxt, {k: v for k, v in RESBLOCK.blobs.items() if k != "sc2"},
                       RESBLOCK.input_shape)
    weights2 = write_net(partial, tmp_path / "partial")[1]
    with pytest.raises(ModelError, match=r"layer sc2 \(Scale\): blob 0 \(scale\) is missing"):
        load_caffe(proto, weights2)
    assert load_caffe(proto, weights).outputs == ["prob"]


def test_v1_layers_format(tmp_path: Path) -> None:
    """Old prototxts (``layers { type: CONVOLUTION }``, V1LayerParameter) import the same way."""
    net = NETS[0]
    proto, weights = write_net(net, tmp_path)
    v1 = tmp_path / "v1.prototxt"
    text = proto.read_text().replace("layer {", "layers {")
    for new, old in (('"Convolution"', "CONVOLUTION"), ('"Pooling"', "POOLING"), ('"InnerProduct"', "INNER_PRODUCT"),
                     ('"ReLU"', "RELU"), ('"Softmax"', "SOFTMAX")):
        text = text.replace(f"type: {new}", f"type: {old}")
    v1.write_text(text)
    x = np.random.default_rng(3).normal(0, 1, net.input_shape).astype(np.float32)
    a = _compile(tmp_path, proto, weights).run([x])[0]
    b = _compile(tmp_path / "b", v1, weights).run([x])[0]
    np.testing.assert_array_equal(a, b)


def test_input_shape_and_out_nodes_by_caffe_names(tmp_path: Path) -> None:
    net = NETS[2]  # the fire module: fully convolutional up to the global pooling
    proto, weights = write_net(net, tmp_path)
    m = _compile(tmp_path, proto, weights, "--input_shape=data:2,3,41,41", "--out_nodes=concat:0;prob:0")
    x = np.random.default_rng(4).normal(0, 1, (2, 3, 41, 41)).astype(np.float32)
    concat, prob = m.run([x])
    assert concat.shape == (2, 16, 10, 10) and prob.shape == (2, 10)
    np.testing.assert_allclose(prob.sum(axis=1), 1.0, rtol=1e-5)


def test_bias_and_power_layers_match_numpy(tmp_path: Path) -> None:
    """Bias (OpenCV has no reader for it) and Power against Caffe's formulas restated in numpy."""
    net = CaffeNet("bias_power", 'input: "data"\ninput_shape { dim: 2 dim: 3 dim: 4 }\n'
                   'layer { name: "b" type: "Bias" bottom: "data" top: "b" bias_param { axis: 1 } }\n'
                   'layer { name: "p" type: "Power" bottom: "b" top: "p" power_param { power: 3 scale: 0.5 shift: -1 } }\n',
                   {"b": [(3, 4)]}, (2, 3, 4))
    proto, weights = write_net(net, tmp_path)
    x = np.random.default_rng(5).normal(0, 1, net.input_shape).astype(np.float32)
    from pycann.ge.compile.importers.caffe import blob_array
    from pycann.ge.compile.importers.caffe_proto import read_caffemodel

    bias = blob_array(read_caffemodel(weights).layer[0].blobs[0])
    (got,) = _compile(tmp_path, proto, weights).run([x])
    np.testing.assert_allclose(got, (-1 + 0.5 * (x + bias)) ** 3, rtol=1e-5, atol=1e-6)


def test_bias_from_a_second_bottom_broadcasts_from_its_axis(tmp_path: Path) -> None:
    """Bias with the bias as a second bottom ([C], axis 1) adds per channel, as Caffe's bias_layer.cpp;
    it was added along the last axis (W == C here, so no shape error: a silently wrong answer)."""
    net = CaffeNet("bias2", 'input: "data"\ninput_shape { dim: 1 dim: 4 dim: 5 dim: 4 }\n'
                   'input: "b"\ninput_shape { dim: 4 }\n'
                   'layer { name: "bi" type: "Bias" bottom: "data" bottom: "b" top: "y" bias_param { axis: 1 } }\n',
                   {}, (1, 4, 5, 4))
    proto, weights = write_net(net, tmp_path)
    x = np.random.default_rng(6).normal(0, 1, net.input_shape).astype(np.float32)
    b = np.arange(4, dtype=np.float32)
    (got,) = _compile(tmp_path, proto, weights).run([x, b])
    np.testing.assert_array_equal(got, x + b[None, :, None, None])


@pytest.mark.parametrize("last", ["Dropout", "Split"])
def test_net_ending_in_a_pass_through_layer_keeps_its_output(last: str, tmp_path: Path) -> None:
    """A deploy net cut after an in-place Dropout (a feature extractor ending at drop7) or ending in a
    Split had no outputs at all: the pass-through's value counted as read by that same layer."""
    net = CaffeNet(f"ends_{last}", 'input: "data"\ninput_shape { dim: 1 dim: 4 dim: 5 dim: 4 }\n'
                   'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
                   'convolution_param { num_output: 3 kernel_size: 1 } }\n'
                   f'layer {{ name: "d" type: "{last}" bottom: "c" top: "c{"" if last == "Dropout" else 2}" }}\n',
                   {"c": [(3, 4, 1, 1), (3,)]}, (1, 4, 5, 4))
    proto, weights = write_net(net, tmp_path)
    x = np.random.default_rng(7).normal(0, 1, net.input_shape).astype(np.float32)
    g = load_caffe(proto, weights)
    assert len(g.outputs) == 1
    from pycann.ge.compile.importers.caffe import blob_array
    from pycann.ge.compile.importers.caffe_proto import read_caffemodel

    w, bias = (blob_array(b) for b in read_caffemodel(weights).layer[0].blobs)
    (got,) = _compile(tmp_path, proto, weights).run([x])
    np.testing.assert_allclose(got, np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + bias[None, :, None, None],
                               rtol=1e-5, atol=1e-5)


def test_pass_through_of_an_input_is_a_distinct_output(tmp_path: Path) -> None:
    """A Split of the input with two unread tops: two outputs, each its own value."""
    net = CaffeNet("split_in", 'input: "data"\ninput_shape { dim: 1 dim: 2 dim: 3 dim: 4 }\n'
                   'layer { name: "s" type: "Split" bottom: "data" top: "a" top: "b" }\n', {}, (1, 2, 3, 4))
    proto, weights = write_net(net, tmp_path)
    x = np.random.default_rng(8).normal(0, 1, net.input_shape).astype(np.float32)
    a, b = _compile(tmp_path, proto, weights).run([x])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x)


def test_net_without_layers_is_refused(tmp_path: Path) -> None:
    """Inputs and no layer: atc wrote an .om with no outputs (exit 0)."""
    net = CaffeNet("noout", 'input: "data"\ninput_shape { dim: 1 dim: 3 dim: 4 dim: 4 }\n', {}, (1, 3, 4, 4))
    proto, weights = write_net(net, tmp_path)
    with pytest.raises(ModelError, match="has no output"):
        load_caffe(proto, weights)


def test_input_shape_of_another_rank_is_e10001(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--input_shape data:1,3,28 for a 4-D input: E10001 naming the declared dims, as for ONNX and TF
    (the prototxt's dims were replaced first, so the error came later from the first Conv)."""
    proto, weights = write_net(NETS[0], tmp_path)
    rc = atc([f"--model={proto}", f"--weight={weights}", "--framework=0", f"--output={tmp_path / 'm'}",
              "--soc_version=Ascend310P3", "--input_shape=data:1,1,28"])
    out = capsys.readouterr()
    assert rc != 0
    assert "E10001: --input_shape gives input [data] rank 3 but the model declares 4 dims [1, 1, 28, 28]" in out.out + out.err
