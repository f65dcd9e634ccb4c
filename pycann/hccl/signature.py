"""Per-call signatures: what each rank is about to run, exchanged before the data moves.

Every collective call on a communicator gets a sequence number. Before its data moves, each rank
contributes a fixed-size header (16 int64s: magic, sequence number, collective, dtype, reduce op,
root, element count, rank count of the shape and up to 6 dims) to one small all-gather; every
rank then compares all headers and, if they disagree, raises ``HcclMismatch`` quoting the calls
of the ranks that differ — in the time of one small all-gather instead of a timeout minutes later.
Because every rank sees every header, all of them raise together and none starts the data
transfer, so the communicator stays usable after a mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pycann.hccl.constants import DTYPE_SIZES, Collective, HcclReduceOp

HEADER_LEN = 16
MAGIC = 0x4843434C  # "HCCL"
MAX_DIMS = 6
_DTYPES = sorted(DTYPE_SIZES)
_DTYPE_CODE = {n: i + 1 for i, n in enumerate(_DTYPES)}


@dataclass(frozen=True)
class CallSignature:
    """One rank's view of a collective call. ``op`` and ``root`` are -1 where they do not apply;
    ``count`` is the element count HCCL's API would be given (per rank for all-gather and
    reduce-scatter, as in ``HcclAllGather(sendCount)``)."""

    seq: int
    coll: Collective
    dtype: str = ""
    count: int = 0
    shape: tuple[int, ...] = ()
    op: int = -1
    root: int = -1
    # this rank found its own arguments invalid and launches nothing (Communicator.begin's refuse)
    refused: bool = False

    def encode(self) -> list[int]:
        """The 16-int64 header."""
        dims = list(self.shape[:MAX_DIMS]) + [0] * (MAX_DIMS - min(len(self.shape), MAX_DIMS))
        return [MAGIC, self.seq, int(self.coll), _DTYPE_CODE.get(self.dtype, 0), self.op, self.root,
                self.count, len(self.shape), *dims, int(self.refused), 0]

    @classmethod
    def decode(cls, row: Sequence[int]) -> CallSignature:
        """The signature of a header (raises ``ValueError`` for a foreign one)."""
        if int(row[0]) != MAGIC:
            raise ValueError(f"not an HCCL call header (magic 0x{int(row[0]):x})")
        code = int(row[3])
        ndim = int(row[7])
        return cls(seq=int(row[1]), coll=Collective(int(row[2])), dtype=_DTYPES[code - 1] if code else "",
                   op=int(row[4]), root=int(row[5]), count=int(row[6]),
                   shape=tuple(int(x) for x in row[8 : 8 + min(ndim, MAX_DIMS)]),
                   refused=bool(int(row[8 + MAX_DIMS])))

    def key(self) -> tuple[object, ...]:
        """The fields that must agree across ranks (shape may differ if counts agree, as in HCCL)."""
        if self.coll is Collective.BARRIER:
            return (self.seq, int(self.coll))
        if self.coll is Collective.ALL_TO_ALL_V:
            return (self.seq, int(self.coll), self.dtype)
        return (self.seq, int(self.coll), self.dtype, self.op, self.root, self.count)

    def describe(self) -> str:
        """E.g. ``#7 HcclAllReduce(float32[1024, 1024], count=1048576, op=sum)``."""
        args = []
        if self.coll is not Collective.BARRIER:
            args.append(f"{self.dtype}[{', '.join(map(str, self.shape))}]")
            args.append(f"count={self.count}")
        if self.op >= 0:
            args.append(f"op={HcclReduceOp(self.op).name.removeprefix('HCCL_REDUCE_').lower()}")
        if self.root >= 0:
            args.append(f"root={self.root}")
        return f"#{self.seq} {self.coll.hccl_name}({', '.join(args)})"


def find_mismatch(sigs: Sequence[CallSignature], group: str = "") -> str | None:
    """``None`` when every rank's signature agrees, else a message quoting the differing calls."""
    ref = sigs[0]
    bad = [r for r, s in enumerate(sigs) if s.key() != ref.key()]
    if not bad:
        return None
    where = f" on communicator {group}" if group else ""
    lines = [f"ranks called different collectives{where}:"]
    shown = [0] + bad[:3]
    lines += [f"  rank {r}: {sigs[r].describe()}" for r in shown]
    if len(bad) > 3:
        lines.append(f"  ... and {len(bad) - 3} more ranks differ from rank 0")
    lines.append("every rank must make the same collective calls in the same order, with the same "
                 "dtype, element count, reduce op and root")
    return "\n".join(lines)


def check_alltoallv(send: Sequence[Sequence[int]], recv: Sequence[Sequence[int]]) -> str | None:
    """``None`` when rank i's send count to j equals rank j's receive count from i for all i, j."""
    for i, row in enumerate(send):
        for j, n in enumerate(row):
            if recv[j][i] != n:
                return (f"HcclAlltoAllV: rank {i} sends {n} elements to rank {j}, but rank {j} expects "
                        f"{recv[j][i]} from rank {i} (sendCounts of each rank must equal the peers' recvCounts)")
    return None
