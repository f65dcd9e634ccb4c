"""Kernel choices across the .om boundary: inside the process a node's ``_algo`` is a typed
``pycann.kernels.algorithm.Algorithm``; the manifest stores its ``"provider:name"`` key, exactly as
files written before typed algorithms did, so those files load unchanged.

``tests/data/om/algo_strings_v1.om`` was written by pycann at commit 5369ec7 (before the kernels
layer) with ``tests/data/om/make_algo_strings_om.py``: a Conv -> Relu -> 1x1 Conv -> pool -> MatMul
model whose nodes carry ``_algo`` strings and ``_layout = "NHWC"``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from pycann.ge.om import dumps_om, load_om, loads_om
from pycann.ge.om.serialize import decode_graph, encode_graph
from pycann.ge.run.model import LoadedModel
from pycann.kernels.algorithm import BY_KEY, Algorithm
from tests.data.om.make_algo_strings_om import old_model
from tests.ops.oracle import run_ort

OLD_OM = Path(__file__).resolve().parents[1] / "data" / "om" / "algo_strings_v1.om"


def _old_model() -> tuple[onnx.ModelProto, np.ndarray]:
    """The ONNX model and input the fixture was made from (make_algo_strings_om.old_model)."""
    return old_model()


def test_om_with_algorithm_strings_loads_typed_and_runs() -> None:
    om = load_om(OLD_OM)
    algos = {n.name: n.attrs["_algo"] for n in om.graph.nodes if "_algo" in n.attrs}
    assert algos == {"conv1_fused": BY_KEY["onednn:conv_nhwc"], "conv2": BY_KEY["onednn:conv_nhwc"],
                     "fc": BY_KEY["onednn:matmul"]}
    assert all(isinstance(a, Algorithm) for a in algos.values())
    model, x = _old_model()
    want = run_ort(model, {"x": x})[0]
    got = LoadedModel.from_file(OLD_OM).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_saving_writes_the_same_keys_back() -> None:
    """Typed in the process, ``"provider:name"`` in the file: old and new pycann read each other's."""
    om = load_om(OLD_OM)
    raw = dumps_om(om.graph, om.manifest)
    assert b'"v": "onednn:conv_nhwc"' in raw or b'"v":"onednn:conv_nhwc"' in raw
    back = loads_om(raw).graph
    assert [n.attrs.get("_algo") for n in back.nodes] == [n.attrs.get("_algo") for n in om.graph.nodes]


def test_unknown_algorithm_key_takes_the_default(caplog: pytest.LogCaptureFixture) -> None:
    """A key this pycann does not know (a file from a newer one) is dropped with an INFO line; the
    node then takes the static choice and the model still computes the right values."""
    om = load_om(OLD_OM)
    arrays: list[np.ndarray] = []

    def put(a: np.ndarray) -> tuple[int, int]:
        arrays.append(a)
        return len(arrays) - 1, a.nbytes

    obj = encode_graph(om.graph, put)
    fc_json = next(n for n in obj["nodes"] if n["name"] == "fc")
    assert fc_json["attrs"]["_algo"] == {"t": "str", "v": "onednn:matmul"}
    fc_json["attrs"]["_algo"]["v"] = "onednn:matmux"
    with caplog.at_level("INFO", logger="pycann.kernels"):
        g = decode_graph(obj, lambda dtype, shape, offset, nbytes: arrays[offset])
    fc = next(n for n in g.nodes if n.name == "fc")
    assert "_algo" not in fc.attrs
    assert any("onednn:matmux" in r.getMessage() for r in caplog.records)


def test_a_string_in_process_is_a_clear_error() -> None:
    """Inside the process the attribute is typed; a stray string names the fix."""
    from pycann.kernels import algorithm

    with pytest.raises(TypeError, match="algorithm.parse"):
        algorithm.of({"_algo": "onednn:conv_nhwc"})
