"""Correct kernels: no finding at all (no false alarm) and results equal to numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ascendc.corpus_good import CASES, GoodCase


def test_enough_correct_kernels() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_correct_kernel_is_clean_and_right(case: GoodCase) -> None:
    res, got, want, exact = case.run()
    assert not res.findings, [str(f) for f in res.findings]
    assert not res.aborted_cores
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)
