"""Async calls issued in different orders on the ranks (subprocesses with timeouts):
tests/hccl/workers/async_order.py."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("case", ["two_groups", "one_group"])
def test_async_calls_in_opposite_orders(case: str) -> None:
    """two_groups: two communicators used in opposite orders complete with the right sums (each
    rank blocked in the other group's signature exchange before: a hang until the timeout).
    one_group: opposite orders on one communicator raise HcclMismatch naming both calls, at once."""
    res = run_ranks("async_order.py", 2, case, timeout=60)
    check_ok(res)
    assert all(f"{case} ok" in r.out for r in res), [r.out for r in res]
