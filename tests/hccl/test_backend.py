"""The hccl torch.distributed backend on CPU tensors: 2 and 4 processes, every collective and dtype."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_and_dtype(n: int) -> None:
    res = run_ranks("collectives.py", n, *(["--few-dtypes"] if n > 2 else []))
    check_ok(res)
    assert all("collectives ok" in r.out for r in res)
