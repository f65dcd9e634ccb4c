"""The typed compile context (``Graph.context``, ge/ir/context.py) and its .om section: what the
compile decided (implementation mode, passes off, knowledge bank) survives save/load and reaches
run-time specialisation; .om files written before it (strings in ``graph.metadata``) still load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.specialize import specialize
from pycann.ge.ir import CompileContext
from pycann.ge.om import dumps_om, load_om, loads_om
from pycann.ge.om.serialize import decode_graph, encode_graph
from tests.ge.test_om_algorithms import OLD_OM, _old_model


def test_compile_records_the_context_and_the_om_keeps_it() -> None:
    model, _ = _old_model()
    opts = CompileOptions(op_select_implmode="high_precision", optypelist_for_implmode=["Conv"],
                          disabled_passes=["ConvActivationFusion"], tune_bank="off")
    cm = compile_model(model, opts)
    want = CompileContext("high_precision", ("Conv",), ("ConvActivationFusion",), "", False)
    assert cm.graph.context == want
    assert not cm.graph.context.approx_allowed("Conv") and cm.graph.context.approx_allowed("MatMul")
    assert not {"op_select_implmode", "disabled_passes", "kernel_bank"} & set(cm.graph.metadata)
    back = loads_om(dumps_om(cm.graph, cm.manifest)).graph
    assert back.context == want
    # run-time specialisation keeps it (KernelSelection and the fusions read it again)
    assert specialize(back, [(1, 16, 24, 24)]).context == want


def test_om_without_the_section_reads_the_old_metadata() -> None:
    """algo_strings_v1.om (main@5369ec7) has ``op_select_implmode`` / ``optypelist_for_implmode``
    strings in its metadata: they become the context and leave the metadata."""
    om = load_om(OLD_OM)
    assert om.graph.context == CompileContext()
    assert "op_select_implmode" not in om.graph.metadata and om.graph.metadata.get("ir_version") == "14"
    arrays: list[np.ndarray] = []

    def put(a: np.ndarray) -> tuple[int, int]:
        arrays.append(a)
        return len(arrays) - 1, a.nbytes

    obj = encode_graph(om.graph, put)
    del obj["compile"]
    obj["metadata"].update({"op_select_implmode": "high_precision", "disabled_passes": "A,B", "kernel_bank": "off",
                            "op_bank_path": "/banks"})
    g = decode_graph(obj, lambda dtype, shape, offset, nbytes: arrays[offset])
    assert g.context == CompileContext("high_precision", (), ("A", "B"), "/banks", False)


def test_a_bad_section_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="disabled_passes"):
        CompileContext.from_json({"disabled_passes": "ConvActivationFusion"})


def test_input_shape_is_stored_once(tmp_path: Path) -> None:
    model, _ = _old_model()
    cm = compile_model(model, CompileOptions(input_shape={"x": [1, 16, -1, -1]}))
    assert "input_shape" not in cm.manifest["options"]
    assert cm.manifest["input_ranges"] == {"x": [1, 16, -1, -1]}
    cm.save(tmp_path / "m.om")
    from pycann.ge.run.model import LoadedModel

    assert LoadedModel.from_file(tmp_path / "m.om").input_ranges == {"x": [1, 16, -1, -1]}


def test_precision_summary_goes_to_the_manifest_not_the_metadata() -> None:
    """PrecisionMode reports through ``PassContext.results``: the manifest's ``precision`` entry
    holds what it did; ``graph.metadata`` holds no JSON string of it."""
    model, _ = _old_model()
    cm = compile_model(model, CompileOptions(precision_mode="force_fp16"))
    entry = cm.manifest["precision"]
    assert entry == {"precision_mode": "force_fp16", "nodes": {"fp16": 5}, "casts": 2}
    assert "precision" not in cm.graph.metadata
