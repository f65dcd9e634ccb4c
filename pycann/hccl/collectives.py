"""The collectives on host (CPU) torch tensors, over a ``Communicator``'s gloo group.

Each function checks HCCL's dtype and reduce-op support, starts the call (signature exchange),
launches gloo and returns a ``Pending`` whose ``wait()`` finishes it. Where gloo lacks a dtype
HCCL has, the data travels in a form gloo takes: moving collectives send the bytes (``uint8``
views, exact for every type), reductions of int16 run in int32 and wrap back to int16 (the same
result as int16 arithmetic, which wraps too). Tensors must be contiguous CPU tensors; the torch
backend and the C-style API make them so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    AllToAllOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from pycann.hccl.comm import Communicator
from pycann.hccl.constants import Collective, HcclReduceOp, HcclResult, check_dtype
from pycann.hccl.errors import HcclError, HcclMismatch
from pycann.hccl.signature import CallSignature, check_alltoallv

GLOO_NATIVE = frozenset({torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                         torch.float32, torch.float64, torch.bool})
_GLOO_OPS: dict[HcclReduceOp, Any] = {
    HcclReduceOp.HCCL_REDUCE_SUM: dist.ReduceOp.SUM, HcclReduceOp.HCCL_REDUCE_PROD: dist.ReduceOp.PRODUCT,
    HcclReduceOp.HCCL_REDUCE_MAX: dist.ReduceOp.MAX, HcclReduceOp.HCCL_REDUCE_MIN: dist.ReduceOp.MIN,
}


def dtype_name(t: torch.Tensor) -> str:
    """``float32``, ``bfloat16``, ... (numpy-style names, as the support tables use)."""
    return str(t.dtype).removeprefix("torch.")


class Pending:
    """A collective, launched or queued for launch (``start``); ``wait()`` blocks until it is done
    (raising the diagnosed error, or the signature exchange's mismatch)."""

    def __init__(self, comm: Communicator, sig: CallSignature, work: Any = None,
                 finish: Callable[[], None] | None = None, queued: bool = False) -> None:
        self.comm, self.sig, self.work, self.finish = comm, sig, work, finish
        self.completed = False
        self.error: HcclError | None = None
        self.ready = threading.Event()  # set once the exchange is done and gloo's work launched (or failed)
        if not queued:
            self.ready.set()
            if work is not None:
                comm.track(self)

    def launched(self) -> None:
        """Wait for the launch (the signature exchange, then gloo's work); raise its error."""
        self.ready.wait()
        if self.error is not None:
            raise self.error

    def wait(self) -> None:
        self.launched()
        if self.work is not None and not self.completed:
            self.comm.wait(self.work, self.sig)
        self.complete()

    def complete(self) -> None:
        """The steps after gloo's work is done (copies back); runs once. Never waits on gloo, so it
        is safe inside gloo's future callbacks, which run before gloo marks the work complete."""
        if not self.completed:
            self.completed = True
            if self.finish is not None:
                self.finish()
            self.comm.done(self.sig)

    def failed(self, error: BaseException) -> BaseException:
        """The diagnosed error for gloo's ``error`` (breaks the communicator)."""
        return self.comm._break(self.comm.diagnose(self.sig, error))


def start(comm: Communicator, coll: Collective, dtype: str = "", count: int = 0, shape: Sequence[int] = (),
          op: int = -1, root: int = -1, refuse: HcclError | None = None,
          launch: Callable[[CallSignature], Any] | None = None, finish: Callable[[], None] | None = None) -> Pending:
    """Number the call now and queue its signature exchange and ``launch(sig)`` (gloo's work, or
    ``None``) on the communicator's launcher thread (``Communicator.submit``); returns at once. A
    mismatch, a refusal or a launch failure is raised by the ``Pending``'s ``wait``."""
    sig = comm.open(coll, dtype, count, shape, op, root, refuse)
    p = Pending(comm, sig, None, finish, queued=True)

    def job() -> None:
        try:
            comm.exchange(sig, refuse)
            p.work = launch(sig) if launch is not None else None
            if p.work is not None:
                comm.track(p)
        except HcclError as e:
            p.error = e
        except Exception as e:  # noqa: BLE001 - gloo refused to launch: diagnosed, breaks the communicator
            p.error = comm._break(comm.diagnose(sig, e))
        finally:
            p.ready.set()
    comm.submit(job)
    return p


def _require(t: torch.Tensor, what: str) -> None:
    if t.device.type != "cpu" or not t.is_contiguous():
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what}: expected a contiguous host tensor, got "
                        f"{t.device} {'contiguous' if t.is_contiguous() else 'strided'}")


def _check(coll: Collective, tensors: Sequence[torch.Tensor], op: HcclReduceOp | None = None) -> str:
    dt = dtype_name(tensors[0])
    for t in tensors:
        _require(t, coll.hccl_name)
        if dtype_name(t) != dt:
            raise HcclError(HcclResult.HCCL_E_PARA, f"{coll.hccl_name}: tensors mix {dt} and {dtype_name(t)}")
    why = check_dtype(coll, dt)
    if why is not None:
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, why)
    if op is not None and op not in _GLOO_OPS:
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"{coll.hccl_name}: unsupported reduce op {op!r}")
    return dt


def _refusal(*checks: Callable[[], object]) -> HcclError | None:
    """The ``HcclError`` the first failing check raises, else ``None``: a rank's verdict on its own
    arguments, which ``Communicator.begin`` shares with the peers before anything is launched."""
    try:
        for c in checks:
            c()
    except HcclError as e:
        return e
    return None


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if gloo moves its dtype, else its bytes (a uint8 view)."""
    return t if t.dtype in GLOO_NATIVE else t.reshape(-1).view(torch.uint8)


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """``_bytes`` of ``t`` as one dimension: gloo's all-gather wants every buffer shaped alike."""
    return _bytes(t.reshape(-1))


def _reducible(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None] | None]:
    """(what gloo reduces, how to copy the result back)."""
    if t.dtype in GLOO_NATIVE:
        return t, None
    wide = t.to(torch.int32)  # only int16 gets here (check_dtype)

    def back() -> None:
        t.copy_(wide.to(t.dtype))
    return wide, back


def _then(*steps: Callable[[], None] | None) -> Callable[[], None] | None:
    live = [s for s in steps if s is not None]
    if not live:
        return None

    def run() -> None:
        for s in live:
            s()
    return run


def all_reduce(comm: Communicator, t: torch.Tensor, op: HcclReduceOp) -> Pending:
    """In place: every rank's ``t`` becomes the reduction of all ranks' ``t`` (``HcclAllReduce``)."""
    bad = _refusal(lambda: _check(Collective.ALL_REDUCE, [t], op))
    if bad is not None:
        return start(comm, Collective.ALL_REDUCE, dtype_name(t), t.numel(), t.shape, int(op), refuse=bad)
    g, back = _reducible(t)
    o = AllreduceOptions()
    o.reduceOp = _GLOO_OPS[op]
    return start(comm, Collective.ALL_REDUCE, dtype_name(t), t.numel(), t.shape, int(op),
                 launch=lambda sig: comm.pg.allreduce([g], o), finish=back)


def broadcast(comm: Communicator, t: torch.Tensor, root: int) -> Pending:
    """In place: every rank's ``t`` becomes rank ``root``'s (``HcclBroadcast``)."""
    bad = _refusal(lambda: _check(Collective.BROADCAST, [t]), lambda: _root(comm, root, Collective.BROADCAST))
    o = BroadcastOptions()
    o.rootRank, o.rootTensor = root, 0
    return start(comm, Collective.BROADCAST, dtype_name(t), t.numel(), t.shape, root=root, refuse=bad,
                 launch=lambda sig: comm.pg.broadcast([_bytes(t)], o))


def reduce(comm: Communicator, t: torch.Tensor, op: HcclReduceOp, root: int) -> Pending:
    """In place on ``root``: the reduction of all ranks' ``t`` (``HcclReduce``); other ranks'
    ``t`` is left as it was."""
    bad = _refusal(lambda: _check(Collective.REDUCE, [t], op), lambda: _root(comm, root, Collective.REDUCE))
    if bad is not None:
        return start(comm, Collective.REDUCE, dtype_name(t), t.numel(), t.shape, int(op), root, refuse=bad)
    g, back = _reducible(t)
    keep = t.clone() if comm.rank != root else None  # gloo may scribble on non-root buffers
    o = ReduceOptions()
    o.reduceOp, o.rootRank, o.rootTensor = _GLOO_OPS[op], root, 0

    def finish() -> None:
        if keep is not None:
            t.copy_(keep)
        elif back is not None:
            back()
    return start(comm, Collective.REDUCE, dtype_name(t), t.numel(), t.shape, int(op), root,
                 launch=lambda sig: comm.pg.reduce([g], o), finish=finish)


def _parts_fit(whole: torch.Tensor | Sequence[torch.Tensor], parts: Sequence[torch.Tensor], size: int, each: int,
               what: str) -> None:
    """``whole`` holds ``size`` parts of ``each`` elements: as one tensor of ``size * each`` elements, or as a
    list of ``size`` tensors of ``each`` elements (``parts``); raises ``_numel``'s / ``_count``'s error naming
    ``what`` (all_gather's output, reduce_scatter's input)."""
    if isinstance(whole, torch.Tensor):
        _numel(whole, size * each, what)
        return
    _count(parts, size, f"{what} list")
    for p in parts:
        _numel(p, each, f"{what} list entry")

def all_gather(comm: Communicator, out: torch.Tensor | Sequence[torch.Tensor], t: torch.Tensor) -> Pending:
    """Rank r's ``t`` lands in ``out[r]`` (a list of ``size`` tensors of ``t.numel()`` elements)
    or in the r-th slice of an ``out`` of ``size * t.numel()`` elements (``HcclAllGather``). Only
    element counts matter, as in HCCL: ``out`` may be the concatenation or the stack of the
    inputs (torch's two forms), list entries any shape of that many elements."""
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    bad = _refusal(lambda: _check(Collective.ALL_GATHER, [t, *outs]),
                   lambda: _parts_fit(out, outs, comm.size, t.numel(), "HcclAllGather output"))
    if bad is not None:
        return start(comm, Collective.ALL_GATHER, dtype_name(t), t.numel(), t.shape, refuse=bad)

    def launch(sig: CallSignature) -> Any:
        if isinstance(out, torch.Tensor):
            return comm.pg._allgather_base(_flat_bytes(out), _flat_bytes(t))
        return comm.pg.allgather([[_flat_bytes(o) for o in outs]], [_flat_bytes(t)], AllgatherOptions())
    return start(comm, Collective.ALL_GATHER, dtype_name(t), t.numel(), t.shape, launch=launch)


def reduce_scatter(comm: Communicator, out: torch.Tensor, inp: torch.Tensor | Sequence[torch.Tensor],
                   op: HcclReduceOp) -> Pending:
    """``out`` on rank r becomes the reduction over ranks of their r-th chunk of ``inp`` (a flat
    tensor of ``size * out.numel()`` elements, or a list of ``size`` tensors like ``out``)
    (``HcclReduceScatter``)."""
    ins = [inp] if isinstance(inp, torch.Tensor) else list(inp)
    bad = _refusal(lambda: _check(Collective.REDUCE_SCATTER, [out, *ins], op),
                   lambda: _parts_fit(inp, ins, comm.size, out.numel(), "HcclReduceScatter input"))
    if bad is not None:
        return start(comm, Collective.REDUCE_SCATTER, dtype_name(out), out.numel(), out.shape, int(op), refuse=bad)
    if isinstance(inp, torch.Tensor):
        chunks = list(inp.reshape(-1).chunk(comm.size))
    else:
        chunks = [c.reshape(-1) for c in ins]
    g, back = _reducible(out)
    src = chunks if g is out else [c.to(g.dtype) for c in chunks]
    o = ReduceScatterOptions()
    o.reduceOp = _GLOO_OPS[op]
    flat = g.reshape(-1)
    return start(comm, Collective.REDUCE_SCATTER, dtype_name(out), out.numel(), out.shape, int(op),
                 launch=lambda sig: comm.pg.reduce_scatter([flat], [src], o), finish=back)


def all_to_all(comm: Communicator, out: torch.Tensor, inp: torch.Tensor,
               send_counts: Sequence[int] | None = None, recv_counts: Sequence[int] | None = None) -> Pending:
    """Rank i's j-th block of ``inp`` lands in rank j's i-th block of ``out``. Equal blocks
    (``HcclAlltoAll``) without counts; ``send_counts`` / ``recv_counts`` (elements per peer,
    along dim 0 for torch's splits) make it ``HcclAlltoAllV``."""
    dt = dtype_name(inp)
    if send_counts is None and recv_counts is None:
        def equal() -> None:
            if inp.numel() % comm.size or out.numel() != inp.numel():
                raise HcclError(HcclResult.HCCL_E_PARA, f"HcclAlltoAll: input of {inp.numel()} and output of "
                                f"{out.numel()} elements must be equal and divisible by {comm.size} ranks")
        bad = _refusal(lambda: _check(Collective.ALL_TO_ALL, [out, inp]), equal)
        return start(comm, Collective.ALL_TO_ALL, dt, inp.numel() // comm.size, inp.shape, refuse=bad,
                     launch=lambda sig: comm.pg.alltoall_base(_bytes(out), _bytes(inp), [], [], AllToAllOptions()))
    sc = list(send_counts) if send_counts is not None else [inp.shape[0] // comm.size] * comm.size
    rc = list(recv_counts) if recv_counts is not None else [out.shape[0] // comm.size] * comm.size

    def counts() -> None:
        _count(sc, comm.size, "HcclAlltoAllV sendCounts")
        _count(rc, comm.size, "HcclAlltoAllV recvCounts")
        if sum(sc) > inp.shape[0] or sum(rc) > out.shape[0]:
            raise HcclError(HcclResult.HCCL_E_PARA, f"HcclAlltoAllV: counts {sc} / {rc} exceed the input "
                            f"({inp.shape[0]}) or output ({out.shape[0]}) rows")
    bad = _refusal(lambda: _check(Collective.ALL_TO_ALL, [out, inp]), counts)
    if bad is not None:
        return start(comm, Collective.ALL_TO_ALL_V, dt, sum(sc), inp.shape, refuse=bad)
    if inp.dtype not in GLOO_NATIVE:  # splits count rows, which a byte view keeps
        width = inp.element_size()
        gin, gout = inp.view(torch.uint8), out.view(torch.uint8)
        if inp.dim() == 1:
            gin, gout = gin.view(-1, width), gout.view(-1, width)
    else:
        gin, gout = inp, out

    def launch(sig: CallSignature) -> Any:
        if comm.check and comm.size > 1:  # every rank's counts, checked before the data moves
            mine = torch.tensor(sc + rc, dtype=torch.int64)
            table = torch.empty(comm.size * 2 * comm.size, dtype=torch.int64)
            comm.wait(comm.pg._allgather_base(table, mine), sig)
            rows = table.view(comm.size, 2, comm.size).tolist()
            problem = check_alltoallv([r[0] for r in rows], [r[1] for r in rows])
            if problem is not None:
                comm.done(sig)
                raise HcclMismatch(f"rank {comm.rank}: {sig.describe()}: {problem}")
        return comm.pg.alltoall_base(gout, gin, rc, sc, AllToAllOptions())
    return start(comm, Collective.ALL_TO_ALL_V, dt, sum(sc), inp.shape, launch=launch)


def all_to_all_list(comm: Communicator, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor]) -> Pending:
    """``ins[j]`` goes to rank j, arriving in its ``outs[rank]`` (torch's ``all_to_all``; blocks may
    differ in size, as in ``HcclAlltoAllV``)."""
    bad = _refusal(lambda: _check(Collective.ALL_TO_ALL_V, [*outs, *ins]),
                   lambda: _count(ins, comm.size, "all_to_all input list"),
                   lambda: _count(outs, comm.size, "all_to_all output list"))
    if bad is not None:  # raises on every rank at once (see Communicator.begin)
        comm.begin(Collective.ALL_TO_ALL_V, dtype_name(ins[0]) if ins else "", sum(t.numel() for t in ins),
                   refuse=bad)
    sc, rc = [t.numel() for t in ins], [t.numel() for t in outs]
    flat_in = torch.cat([t.reshape(-1) for t in ins]) if ins else torch.empty(0)
    flat_out = torch.empty(sum(rc), dtype=outs[0].dtype)
    p = all_to_all(comm, flat_out, flat_in, sc, rc)

    def finish() -> None:
        for o, piece in zip(outs, flat_out.split(rc)):
            o.copy_(piece.view(o.shape))
    p.finish = _then(p.finish, finish)
    return p


def gather(comm: Communicator, outs: Sequence[torch.Tensor] | None, t: torch.Tensor, root: int) -> Pending:
    """Rank r's ``t`` lands in ``outs[r]`` on ``root`` (``outs`` only there; entries of
    ``t.numel()`` elements, any shape)."""
    bad = _refusal(lambda: _root(comm, root, Collective.GATHER),
                   lambda: _check(Collective.GATHER, [t, *(outs or [])]),
                   lambda: _root_list(comm, root, outs, t, "gather output list"))
    o = GatherOptions()
    o.rootRank = root
    targets = [[_flat_bytes(x) for x in outs]] if bad is None and comm.rank == root and outs is not None else []
    return start(comm, Collective.GATHER, dtype_name(t), t.numel(), t.shape, root=root, refuse=bad,
                 launch=lambda sig: comm.pg.gather(targets, [_flat_bytes(t)], o))


def scatter(comm: Communicator, t: torch.Tensor, ins: Sequence[torch.Tensor] | None, root: int) -> Pending:
    """``ins[r]`` on ``root`` lands in rank r's ``t`` (``HcclScatter``; element counts matter,
    not shapes)."""
    bad = _refusal(lambda: _root(comm, root, Collective.SCATTER),
                   lambda: _check(Collective.SCATTER, [t, *(ins or [])]),
                   lambda: _root_list(comm, root, ins, t, "scatter input list"))
    o = ScatterOptions()
    o.rootRank = root
    sources = [[_flat_bytes(x) for x in ins]] if bad is None and comm.rank == root and ins is not None else []
    return start(comm, Collective.SCATTER, dtype_name(t), t.numel(), t.shape, root=root, refuse=bad,
                 launch=lambda sig: comm.pg.scatter([_flat_bytes(t)], sources, o))


def barrier(comm: Communicator) -> Pending:
    """Returns when every rank has called it (``HcclBarrier``); the signature all-gather is the
    barrier itself when checks are on."""
    checked = comm.check and comm.size > 1
    return start(comm, Collective.BARRIER, launch=lambda sig: None if checked else comm.pg.barrier())


def send(comm: Communicator, t: torch.Tensor, dst: int, tag: int = 0) -> Pending:
    """Point to point to rank ``dst`` (``HcclSend``). No signature exchange: only two ranks take part."""
    _check(Collective.SEND, [t])
    _peer(comm, dst, "HcclSend destination")
    sig = CallSignature(comm.seq, Collective.SEND, dtype_name(t), t.numel(), tuple(t.shape), root=dst)
    if comm.check:  # a header first: the receiver checks the size (pycann.hccl.p2p)
        from pycann.hccl import p2p
        return _p2p(comm, sig, lambda: p2p.send(comm, _bytes(t), t, dtype_name(t), dst, tag, sig))
    return _p2p(comm, sig, lambda: Pending(comm, sig, comm.pg.send([_bytes(t)], dst, tag)))


def recv(comm: Communicator, t: torch.Tensor, src: int, tag: int = 0) -> Pending:
    """Point to point from rank ``src`` into ``t`` (``HcclRecv``)."""
    _check(Collective.RECV, [t])
    _peer(comm, src, "HcclRecv source")
    sig = CallSignature(comm.seq, Collective.RECV, dtype_name(t), t.numel(), tuple(t.shape), root=src)
    if comm.check:
        from pycann.hccl import p2p
        return _p2p(comm, sig, lambda: p2p.recv(comm, _bytes(t), t, dtype_name(t), src, tag, sig))
    return _p2p(comm, sig, lambda: Pending(comm, sig, comm.pg.recv([_bytes(t)], src, tag)))


def recv_any(comm: Communicator, t: torch.Tensor, tag: int = 0) -> Pending:
    """Point to point into ``t`` from whichever rank sends first (torch's ``recv`` without
    ``src``; HCCL has no such call, torch_npu's ``recvAnysource`` does it). The sender is the
    gloo work's ``_source_rank()`` once it is done."""
    _check(Collective.RECV, [t])
    sig = CallSignature(comm.seq, Collective.RECV, dtype_name(t), t.numel(), tuple(t.shape))
    if comm.check:
        from pycann.hccl import p2p
        return _p2p(comm, sig, lambda: p2p.recv(comm, _bytes(t), t, dtype_name(t), None, tag, sig))
    return _p2p(comm, sig, lambda: Pending(comm, sig, comm.pg.recv_anysource([_bytes(t)], tag)))


def _p2p(comm: Communicator, sig: CallSignature, launch: Callable[[], Pending]) -> Pending:
    if comm.broken is not None:
        raise HcclError(comm.broken.code, f"communicator {comm.name} is unusable: {comm.broken.detail}")
    comm.check_alive()
    try:
        return launch()
    except HcclError:
        raise
    except Exception as e:  # noqa: BLE001
        raise comm.diagnose(sig, e) from None


def _root(comm: Communicator, root: int, coll: Collective) -> None:
    if not 0 <= root < comm.size:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{coll.hccl_name}: root {root} is outside [0, {comm.size})")


def _root_list(comm: Communicator, root: int, ts: Sequence[torch.Tensor] | None, t: torch.Tensor,
               what: str) -> None:
    """On ``root``: ``ts`` is one tensor of ``t.numel()`` elements per rank (gather's outputs,
    scatter's inputs)."""
    if comm.rank != root:
        return
    if ts is None:
        raise HcclError(HcclResult.HCCL_E_PARA, f"the root needs a {what}")
    _count(ts, comm.size, what)
    for x in ts:
        _numel(x, t.numel(), f"{what} entry")


def _peer(comm: Communicator, peer: int, what: str) -> None:
    if not 0 <= peer < comm.size or peer == comm.rank:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} {peer} must be another rank in [0, {comm.size})")


def _numel(t: torch.Tensor, n: int, what: str) -> None:
    if t.numel() != n:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} has {t.numel()} elements, expected {n}")


def _count(xs: Sequence[Any], n: int, what: str) -> None:
    if len(xs) != n:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} has {len(xs)} entries, expected one per rank ({n})")
