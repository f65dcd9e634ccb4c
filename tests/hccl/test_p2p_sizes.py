"""Send/Recv of mismatched sizes (2 ranks, subprocesses with timeouts): tests/hccl/workers/p2p_sizes.py."""

import pytest

from tests.hccl.spawn import check_ok, run_ranks

pytest.importorskip("torch")


def test_mismatched_send_recv_is_a_clear_error() -> None:
    """A 4-byte send into a 12-byte receive filled 4 bytes silently; a 20-byte one aborted the
    receiving process (gloo's EnforceNotMet). Both, and a dtype mismatch, are HcclMismatch on the
    receiver naming both sizes, the buffer unchanged; the pair, several receives in flight and
    batch_isend_irecv work after."""
    res = run_ranks("p2p_sizes.py", 2, timeout=60)
    check_ok(res)
    assert all("p2p ok" in r.out for r in res), [r.out for r in res]
