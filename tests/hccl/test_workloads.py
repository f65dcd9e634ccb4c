"""Real workloads over hccl: DDP training equal to one process, tensor-parallel GPT-2 inference."""

import importlib.util

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


def _npu_ready() -> bool:
    return importlib.util.find_spec("pycann.torch") is not None


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_ddp_matches_one_process(n: int, device: str) -> None:
    if device == "npu" and not _npu_ready():
        pytest.skip("the npu device (pycann.torch, the torch helper's branch) is not in this tree yet")
    res = run_ranks("ddp.py", n, device, timeout=240)  # DDP imports torch._dynamo: slow on a busy host
    check_ok(res)
    assert "DDP ok" in res[0].out, res[0].out


def test_tensor_parallel_gpt2_matches_one_rank() -> None:
    res = run_ranks("tp_gpt2.py", 2, timeout=240)
    check_ok(res)
    assert "TP ok" in res[0].out, res[0].out
