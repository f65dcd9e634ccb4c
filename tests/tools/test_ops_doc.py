"""docs/ops.md (which UnsupportedOpError points users to) lists exactly the op table."""

from __future__ import annotations

from tests.tools.scripts import REPO, load_script


def test_ops_doc_is_in_step_with_the_op_table() -> None:
    mod = load_script("scripts/gen_ops_doc.py", "gen_ops_doc")
    assert (REPO / "docs" / "ops.md").read_text() == mod.render(), "rerun: python scripts/gen_ops_doc.py"
    assert "| RMSNormalization | 23 |" in mod.render()
