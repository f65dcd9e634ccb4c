"""Send / Recv with a size check: a small header goes first, so a receive of another size or dtype
is a clear ``HcclMismatch`` instead of a silent partial fill (gloo accepts a shorter message into
a larger buffer) or a process abort (a longer one: gloo's ``EnforceNotMet`` in its I/O thread).

Wire protocol (signature checks on, ``PYCANN_HCCL_CHECK`` unset or 1): the sender sends a header
(``HEADER_LEN`` int64s: magic, dtype code, element count, bytes, rank and up to 4 dims) with the
user's tag (``0 <= tag < 2**30``), then the data with ``data_tag(tag)`` (``tag + 2**30``). The
receiver posts the header receive at once, and a thread of its own posts the data receive when the
header is in (whether or not the rank waits: a peer's send completes only once it is posted):
into the buffer when dtype and byte count agree, else into a scratch buffer of the announced size
(the sender's message is consumed, so the pair stays usable), and the receive's ``wait`` raises.
Receives from one source (or from any source) with one tag post their data receives in the order
their headers matched, so several in flight cannot swap payloads.

Cost: one 72-byte message and one short-lived thread per receive, and the data receive is posted
one header's latency later (tens of microseconds on one host; little next to a 64 KB payload).
``PYCANN_HCCL_CHECK=0`` turns it off with the collectives' signature check: send and recv are
then gloo's own (no header, no check). The sender cannot see the receiver's size: its send
completes, and only the receiving rank raises.
"""

from __future__ import annotations

import threading
from collections import deque

import torch

from pycann.hccl.collectives import Pending
from pycann.hccl.comm import Communicator
from pycann.hccl.constants import HcclResult
from pycann.hccl.errors import HcclError, HcclMismatch
from pycann.hccl.signature import _DTYPE_CODE, _DTYPES, CallSignature

MAGIC = 0x48503250  # "HP2P"
HEADER_LEN = 9
MAX_DIMS = 4


DATA_BIT = 1 << 30  # gloo takes tags 0..2**31-1: user tags below this, payload tags above


def data_tag(tag: int) -> int:
    """The tag the payload travels with: ``tag + 2**30``, never a user's (``0 <= tag < 2**30``) header tag."""
    return tag | DATA_BIT


def _header(t: torch.Tensor, dtype: str) -> torch.Tensor:
    dims = list(t.shape[:MAX_DIMS]) + [0] * (MAX_DIMS - min(t.dim(), MAX_DIMS))
    return torch.tensor([MAGIC, _DTYPE_CODE.get(dtype, 0), t.numel(), t.numel() * t.element_size(), t.dim(), *dims],
                        dtype=torch.int64)


def _describe(code: int, numel: int, nbytes: int, ndim: int, dims: list[int]) -> str:
    dt = _DTYPES[code - 1] if 0 < code <= len(_DTYPES) else f"dtype#{code}"
    shape = ", ".join(map(str, dims[: min(ndim, MAX_DIMS)])) + (", ..." if ndim > MAX_DIMS else "")
    return f"{dt}[{shape}] ({numel} elements, {nbytes} bytes)"


def _check_tag(tag: int, what: str) -> None:
    if not 0 <= tag < DATA_BIT:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what}: tag {tag} must be in [0, 2**30) (tags from 2**30 "
                        "carry the payload of pycann's size-checked send/recv)")


def send(comm: Communicator, payload: torch.Tensor, t: torch.Tensor, dtype: str, dst: int, tag: int,
         sig: CallSignature) -> Pending:
    """Post the header and the data (``payload``: ``t``'s bytes as gloo moves them); returns the
    ``Pending`` of the data, which keeps the header's alive until then."""
    _check_tag(tag, "HcclSend")
    head = Pending(comm, sig, comm.pg.send([_header(t, dtype)], dst, tag))
    p = Pending(comm, sig, comm.pg.send([payload], dst, data_tag(tag)))
    p.finish = lambda: head.complete()  # (never waits: the header went before the data)
    return p


class _Recv(Pending):
    """A receive whose data receive is posted once its header is in (``advance``), in the order
    of the receives queued with the same source and tag."""

    def __init__(self, comm: Communicator, sig: CallSignature, payload: torch.Tensor, t: torch.Tensor, dtype: str,
                 src: int | None, tag: int) -> None:
        _check_tag(tag, "HcclRecv")
        self.head = torch.zeros(HEADER_LEN, dtype=torch.int64)
        work = comm.pg.recv([self.head], src, tag) if src is not None else comm.pg.recv_anysource([self.head], tag)
        super().__init__(comm, sig, work)
        self.payload, self.t, self.dtype, self.tag = payload, t, dtype, tag
        self.source = src
        self.posted = False  # advance() took it off the queue
        self.posted_data = False  # its data receive (or the discarding one) is posted
        self.header_done = threading.Event()
        self.failure: HcclError | None = None  # the header's, or a size mismatch (raised after the drain)
        self.key = (src if src is not None else "any", tag)
        with comm.p2p_lock:
            comm.p2p_recvs.setdefault(self.key, deque()).append(self)
            self.key_lock = comm.p2p_locks.setdefault(self.key, threading.Lock())
        # the data receive is posted as soon as the header is in, whether or not this rank waits:
        # a peer's send completes only once it is posted (batch_isend_irecv waits its sends first)
        threading.Thread(target=self.advance, name=f"hccl-recv-{comm.name}", daemon=True).start()

    def launched(self) -> None:
        """Wait until the data receive is posted; a size mismatch waits for the discarded payload,
        then raises ``HcclMismatch``."""
        super().launched()
        self.header_done.wait()  # (the thread started in __init__ posts the data receive)
        if self.failure is not None:
            if self.work is not None and not self.completed and self.posted_data:
                self.comm.wait(self.work, self.sig)
                self.complete()
            raise self.failure

    def advance(self) -> None:
        """Post the data receives of the receives queued before this one (same source and tag),
        then this one's; each waits for its header."""
        with self.key_lock:
            q = self.comm.p2p_recvs[self.key]
            while not self.posted and q:
                q.popleft()._post()

    def _post(self) -> None:
        self.posted = True
        try:
            self._post_data()
        except HcclError as e:  # the header's failure: diagnosed, the communicator broken
            self.failure = e
        except Exception as e:  # noqa: BLE001 - gloo refused the data receive (a destroyed group)
            self.failure = self.comm._break(self.comm.diagnose(self.sig, e))
        finally:
            self.header_done.set()

    def _post_data(self) -> None:
        comm, t = self.comm, self.t
        comm.wait(self.work, self.sig)  # the header
        h = [int(v) for v in self.head.tolist()]
        peer = self.source if self.source is not None else int(self.work._source_rank())
        self.source = peer
        if h[0] != MAGIC:
            self.failure = comm._break(HcclMismatch(
                f"{self.sig.describe()} from rank {peer}: the message is not a pycann send header: the sender "
                "runs with signature checks off (PYCANN_HCCL_CHECK=0) and this rank with them on; set it alike"))
            return
        mine = (_DTYPE_CODE.get(self.dtype, 0), t.numel() * t.element_size())
        target = self.payload
        if (h[1], h[3]) != mine:
            self.failure = HcclMismatch(
                f"rank {comm.rank}: HcclRecv from rank {peer} (tag {self.tag}): the sender sent "
                f"{_describe(h[1], h[2], h[3], h[4], h[5:])} but this receive's buffer is "
                f"{_describe(mine[0], t.numel(), mine[1], t.dim(), list(t.shape))}; HcclSend's and HcclRecv's "
                "count and dataType must match. The message was discarded and the buffer left unchanged")
            target = torch.empty(max(h[3], 0), dtype=torch.uint8)
        self.work = comm.pg.recv([target], peer, data_tag(self.tag))
        self.posted_data = True
        comm.track(self)


def recv(comm: Communicator, payload: torch.Tensor, t: torch.Tensor, dtype: str, src: int | None, tag: int,
         sig: CallSignature) -> Pending:
    """Post the header receive from ``src`` (``None``: any source); the data receive is posted by
    the returned ``Pending``'s ``launched()`` (its ``wait()``), in header order."""
    return _Recv(comm, sig, payload, t, dtype, src, tag)
