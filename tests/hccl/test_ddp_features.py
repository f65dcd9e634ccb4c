"""DDP's features on the npu over hccl, each against one CPU process training on the whole batch
(workers/ddp_features.py): SyncBatchNorm, find_unused_parameters, static_graph,
FSDP NO_SHARD; FSDP's sharded strategies are refused with a clear error."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("scenario", ["syncbn", "unused", "static", "fsdp", "fsdp_offload", "fsdp_dcp", "fsdp_full_shard", "join_unused", "device_mesh"])
def test_ddp_feature_matches_one_process(scenario: str) -> None:
    res = run_ranks("ddp_features.py", 2, scenario, env={"PYCANN_TORCH_REPORT": "0"}, timeout=120)
    check_ok(res)
    assert f"{scenario} ok" in res[0].out, res[0].out
