"""The seeded-bug corpus: every kernel's bug is reported with the kernel's file:line and rule."""

from __future__ import annotations

import pytest

from pycann.ascendc.diagnostics import Rule
from tests.ascendc import corpus_memory, corpus_queue, corpus_sync
from tests.ascendc.kit import BugCase, marker_line

ALL: list[BugCase] = corpus_memory.CASES + corpus_queue.CASES + corpus_sync.CASES


def test_corpus_size_and_classes() -> None:
    assert len(ALL) >= 40
    assert len({c.rule for c in ALL}) >= 10
    assert len({c.name for c in ALL}) == len(ALL)


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_bug_is_caught_at_its_line(case: BugCase) -> None:
    res = case.run()
    where = marker_line(case.kernel, case.name)
    hits = [f for f in res.findings if f.rule == case.rule]
    assert hits, f"{case.name}: expected {case.rule.code}, got {[str(f) for f in res.findings]}"
    assert any(f.where == where for f in hits), (
        f"{case.name}: {case.rule.code} reported at {[f.where for f in hits]}, expected {where}")
    f = next(f for f in hits if f.where == where)
    assert f.api and f.message and str(f).startswith(where)


def test_rules_have_codes() -> None:
    assert len({r.code for r in Rule}) == len(Rule)
