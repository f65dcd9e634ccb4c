"""Cases a torch_npu script ported to pycann's hccl backend runs into (2 ranks, subprocesses with
timeouts), each checked against torch's documented values: tests/hccl/workers/user_port.py."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")
pytest.importorskip("pycann.torch")


def _run(case: str) -> None:
    res = run_ranks("user_port.py", 2, case, timeout=60)
    check_ok(res)
    assert all(f"{case} ok" in r.out for r in res), [r.out for r in res]


def test_bool_and_uint8_reductions_as_torch_npu() -> None:
    """all_reduce / reduce of bool and uint8 tensors (torch_npu runs them in int32; HCCL_E_NOT_SUPPORT before)."""
    _run("bool_uint8")


def test_all_gather_outputs_shaped_unlike_the_input() -> None:
    """all_gather_into_tensor into the stacked (world, *shape) form torch documents, and all_gather
    into entries of the same element count but another shape (gloo's shape check raised before)."""
    _run("gather_shapes")


def test_all_gather_into_a_list_of_different_sizes() -> None:
    """torch_npu's all_gather takes per-rank outputs of different sizes (HcclMismatch before)."""
    _run("gather_uneven")


def test_recv_from_any_source() -> None:
    """dist.recv / irecv without src return the sender (3 ranks); before: 'No backend type
    associated with device type npu' on the receiver and the sender hung until the timeout."""
    res = run_ranks("user_port.py", 3, "recv_any", timeout=60)
    check_ok(res)
    assert all("recv_any ok" in r.out for r in res), [r.out for r in res]


def test_gather_and_scatter_entries_shaped_unlike_the_input() -> None:
    """gloo's shape check raised on the root only, and the other ranks waited out the timeout."""
    _run("gather_scatter_shapes")


def test_init_with_device_id_and_is_hccl_available() -> None:
    """init_process_group(device_id=npu:N) raised 'No backend type associated with device type
    npu'; torch.distributed.is_hccl_available (torch_npu's) was missing. 3 ranks, a subgroup."""
    res = run_ranks("user_port.py", 3, "device_id", timeout=60)
    check_ok(res)
    assert all("device_id ok" in r.out for r in res), [r.out for r in res]


def test_init_again_after_destroy_on_the_same_store() -> None:
    """destroy_process_group then init_process_group on the same store (torchrun's): the new gloo
    group read the old one's addresses ('Gloo connectFullMesh failed ... Connection refused')."""
    _run("reinit")


def test_one_rank_with_invalid_arguments_fails_every_rank_at_once() -> None:
    """A dtype, op, size or list one rank alone gets wrong: that rank raises its own error, the
    others HcclMismatch naming it, and the group goes on (3 ranks). Before, the peers waited out
    the timeout or paired the call with the bad rank's next one and returned wrong data."""
    res = run_ranks("user_port.py", 3, "refusals", timeout=90)
    check_ok(res)
    assert all("refusals ok" in r.out for r in res), [r.out for r in res]


def test_async_work_polled_with_is_completed() -> None:
    """is_completed() stayed False until wait() was called, so a polling loop never ended."""
    _run("poll")


def test_torch_npu_distributed_uneven_collectives() -> None:
    """import torch_npu.distributed (is_hccl_available, all_gather_into_tensor_uneven,
    reduce_scatter_tensor_uneven) under pycann-run's torchrun, 3 ranks: the module was missing."""
    import subprocess
    import sys

    from tests.hccl.spawn import ROOT, WORKERS, free_port

    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
    r = subprocess.run([sys.executable, "-m", "pycann.tools.run", "-m", "torch.distributed.run", "--nproc_per_node=3",
                        f"--master_port={free_port()}", str(WORKERS / "npu_uneven.py")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.count("npu uneven ok") == 3, r.stdout[-2000:] + r.stderr[-4000:]


def test_work_wait_honours_its_timeout() -> None:
    """work.wait(timeout=0.3 s) with a peer 2.5 s late waited for the peer (up to the group's
    timeout); gloo raises once the timeout expires. Signature checks off: with them the launch
    itself waits for the peers (their header exchange)."""
    res = run_ranks("user_port.py", 2, "wait_timeout", env={"PYCANN_HCCL_CHECK": "0"}, timeout=60)
    check_ok(res)
    assert all("wait_timeout ok" in r.out for r in res), [r.out for r in res]
