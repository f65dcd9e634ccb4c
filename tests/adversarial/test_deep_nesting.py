"""Input files nested deeper than Python's recursion limit (a damaged or hostile file): each reader
raises its own clear error naming the file and option, where json / protobuf's RecursionError
escaped as a traceback (atc printed no failure line and exited 1 by the uncaught exception)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pycann.errors import ModelError, OptionError
from pycann.tools.atc import main as atc

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _tf_model(tmp_path: Path) -> Path:
    pytest.importorskip("tensorboard")
    from tests.importers.test_tensorflow_graphdef import F32, G

    g = G()
    g.placeholder("x", (2, 3))
    g.node("Relu", "r", ["x"], T=("type", F32))
    pb = tmp_path / "m.pb"
    pb.write_bytes(g.gd.SerializeToString())
    return pb


@pytest.mark.parametrize(("option", "text", "needle"), [
    ("fusion_switch_file", "{" + '"a":{' * 100_000 + "}" * 100_001,
     "E10001: --fusion_switch_file [{path}]: its JSON nests deeper than Python's recursion limit"),
    ("modify_mixlist", DEEP_JSON, "Reason: its JSON nests deeper than Python's recursion limit"),
    ("insert_op_conf", "aipp_op {" * 5000 + "}" * 5000, "Reason: blocks nest deeper than 16 levels"),
])
def test_atc_option_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, text: str,
                          needle: str) -> None:
    f = tmp_path / "opt.txt"
    f.write_text(text)
    rc = atc([f"--model={_tf_model(tmp_path)}", "--framework=3", f"--output={tmp_path / 'o'}",
              "--soc_version=Ascend310P3", f"--{option}={f}", "--precision_mode=allow_mix_precision"])
    out = capsys.readouterr().out
    assert rc == 1 and "ATC run failed" in out and needle.format(path=f) in out, out


def test_caffe_prototxt(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    from pycann.ge.compile.importers.caffe import load_caffe

    proto, weights = tmp_path / "n.prototxt", tmp_path / "n.caffemodel"
    proto.write_text("layer { " * 5000 + "}" * 5000)
    weights.write_bytes(b"")
    with pytest.raises(ModelError, match="as a Caffe prototxt: its messages nest deeper than Python's recursion"):
        load_caffe(proto, weights)


def test_amct_config(tmp_path: Path) -> None:
    from pycann.amct.config import QuantConfig

    cfg = tmp_path / "c.json"
    cfg.write_text(DEEP_JSON)
    with pytest.raises(OptionError, match=r"AMCT config .*c\.json: its JSON nests deeper"):
        QuantConfig.load(cfg)
    cfg.write_text('{"version": 1, "batch_num": 2}')  # a sane one still loads
    assert QuantConfig.load(cfg).batch_num == 2
