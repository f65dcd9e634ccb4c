"""Faults: dead and absent ranks get a clear error naming them within the timeout; mismatched
collectives are reported with both ranks' calls at once, and the group survives them."""

import re

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


def _err(out: str) -> tuple[float, str]:
    m = re.search(r"^(?:ERROR|INIT-ERROR) ([\d.]+): (.*)", out, re.M | re.S)
    assert m, f"no error reported:\n{out}"
    return float(m.group(1)), m.group(2)


MISMATCHES = {
    "op": ["HcclAllReduce(float32[4]", "HcclBroadcast(float32[4]", "rank 1"],
    "dtype": ["float32[4]", "float16[4]"],
    "shape": ["count=4", "count=8"],
    "redop": ["op=sum", "op=max"],
    "root": ["root=0", "root=1"],
    "a2av": ["rank 1 sends 1 elements to rank 0", "expects 2"],
}


def test_mismatch_reported_with_both_calls() -> None:
    # a 60 s timeout: a mismatch found by waiting for it would take the six cases past the harness's 90 s
    res = run_ranks("faults.py", 2, ",".join(MISMATCHES), env={"T": "60"})
    check_ok(res)
    for r in res:
        for mode, needles in MISMATCHES.items():
            m = re.search(rf"^{mode} ERROR ([\d.]+): (.*)$", r.out, re.M)
            assert m, f"{mode}: no error reported by rank {r.rank}:\n{r.out}"
            secs, msg = float(m.group(1)), m.group(2)
            assert "HCCL_E_PARA" in msg, msg
            for n in needles:
                assert n in msg, (mode, n, msg)
            assert secs < 60, f"rank {r.rank} took {secs} s to report the {mode} mismatch"  # before the timeout
            assert f"{mode} STILL-OK" in r.out


def test_rank_that_never_calls_is_named() -> None:
    res = run_ranks("faults.py", 3, "sleep", env={"T": "2", "SLEEP": "6"})
    check_ok(res)
    for r in (res[0], res[2]):
        secs, msg = _err(r.out)
        assert "HCCL_E_TIMEOUT" in msg and "#2 HcclAllReduce(float32[4]" in msg, msg
        assert re.search(r"rank 1 (is alive but )?has not called #2", msg), msg
        assert "its last call was #1 HcclAllReduce" in msg, msg
        # the 2 s timeout fired (not earlier), then the diagnosis (one second of heartbeats) while rank 1
        # still slept (the message above); under 30 s: not a default timeout (HCCL_EXEC_TIMEOUT's 1800 s)
        assert 2 <= secs < 30, secs
        assert "unusable since an earlier failure" in r.out


def test_dead_rank_is_named() -> None:
    res = run_ranks("faults.py", 3, "die", env={"T": "3"})
    assert res[1].rc == 3
    for r in (res[0], res[2]):
        assert r.rc == 0, r.err
        secs, msg = _err(r.out)
        assert "#2 HcclAllReduce" in msg and "rank 1" in msg, msg
        assert "stopped responding" in msg or "has no heartbeat" in msg, msg
        assert secs < 30, secs  # not a default timeout (HCCL_EXEC_TIMEOUT's 1800 s)


def test_rank_that_never_joins_is_named() -> None:
    res = run_ranks("faults.py", 2, "join", env={"T": "2"}, ranks=[0])
    check_ok(res)
    secs, msg = _err(res[0].out)
    assert "rank(s) 1 of 2 did not join" in msg, msg
    assert 2 <= secs < 30, secs  # the 2 s join timeout fired, not HCCL_CONNECT_TIMEOUT's default 120 s
