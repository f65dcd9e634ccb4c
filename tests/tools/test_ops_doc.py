"""docs/ops.md (which UnsupportedOpError points users to) lists exactly the op table."""

from __future__ import annotations

import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_ops_doc_is_in_step_with_the_op_table() -> None:
    spec = importlib.util.spec_from_file_location("gen_ops_doc", REPO / "scripts" / "gen_ops_doc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (REPO / "docs" / "ops.md").read_text() == mod.render(), "rerun: python scripts/gen_ops_doc.py"
    assert "| RMSNormalization | 23 |" in mod.render()
