"""The hccl torch.distributed backend: 2 and 4 processes, every collective and dtype, on CPU and npu tensors."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_and_dtype(n: int) -> None:
    res = run_ranks("collectives.py", n, *(["--few-dtypes"] if n > 2 else []))
    check_ok(res)
    assert all("collectives ok" in r.out for r in res)


def test_every_collective_on_npu_tensors() -> None:
    """The same collectives on pycann.torch's npu tensors (2 ranks), results in the npu tensors."""
    pytest.importorskip("pycann.torch")
    res = run_ranks("npu_collectives.py", 2, timeout=180)
    check_ok(res)
    assert all("npu collectives ok" in r.out for r in res)
