"""Point to point with mismatched sizes and several receives in flight (2 ranks), checked against the
values sent. Prints ``p2p ok``."""

import datetime
import os

import torch
import torch.distributed as dist

import pycann.hccl as H
from pycann.hccl.errors import HcclMismatch

H.register()
r = int(os.environ["RANK"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20))
peer = 1 - r


def refused(sent: torch.Tensor, buf: torch.Tensor, want: str) -> None:
    """Rank 0 sends ``sent``; rank 1's receive into ``buf`` raises naming both, ``buf`` unchanged."""
    if r == 0:
        dist.send(sent, 1)
        return
    before = buf.clone()
    try:
        dist.recv(buf, 0)
        raise AssertionError(f"no error for {sent.dtype}{list(sent.shape)} into {buf.dtype}{list(buf.shape)}")
    except HcclMismatch as e:
        assert want in str(e) and "count and dataType must match" in str(e), str(e)
    assert torch.equal(buf, before), buf


# 4 bytes into a 12-byte buffer (gloo filled 4 of them and said nothing)
refused(torch.tensor([7.0]), torch.zeros(3), "sent float32[1] (1 elements, 4 bytes) but this receive's buffer is "
        "float32[3] (3 elements, 12 bytes)")
# 20 bytes into 12 (gloo's I/O thread aborted the process: EnforceNotMet, rc -6)
refused(torch.arange(5.0), torch.zeros(3), "sent float32[5] (5 elements, 20 bytes)")
# same bytes, another dtype
refused(torch.ones(3), torch.zeros(3, dtype=torch.int32), "sent float32[3]")
# the pair stays usable: a matching send/recv on the same tag, then a collective
x = torch.arange(3.0) + 10 * r
if r == 0:
    dist.send(x, 1)
else:
    y = torch.zeros(3)
    dist.recv(y, 0)
    assert y.tolist() == [0.0, 1.0, 2.0], y
# three receives in flight from one source and tag, waited last first: each gets its own message
if r == 0:
    for k in range(3):
        dist.send(torch.full((k + 1,), float(k)), 1)
else:
    bufs = [torch.zeros(k + 1) for k in range(3)]
    works = [dist.irecv(b, 0) for b in bufs]
    for wk in reversed(works):
        wk.wait()
    assert [b.tolist() for b in bufs] == [[0.0], [1.0, 1.0], [2.0, 2.0, 2.0]], bufs
# a ring exchange with batch_isend_irecv
out = torch.zeros(2)
ops = [dist.P2POp(dist.isend, torch.full((2,), float(r + 1)), peer), dist.P2POp(dist.irecv, out, peer)]
for wk in dist.batch_isend_irecv(ops):
    wk.wait()
assert out.tolist() == [float(peer + 1)] * 2, out
s = torch.ones(1)
dist.all_reduce(s)
assert s.tolist() == [2.0], s
print("p2p ok", flush=True)
dist.destroy_process_group()
