"""HCCL's C API in Python: ``HcclCommInitRootInfo``, ``HcclAllReduce``, ... (cann-interfaces.md §8).

The call shapes follow pyACL's convention (cann-interfaces.md §1.1): C output parameters come
back first, the ``HcclResult`` last — ``root_info, ret = HcclGetRootInfo()``,
``comm, ret = HcclCommInitRootInfo(n_ranks, root_info, rank)``,
``ret = HcclAllReduce(send_buf, recv_buf, count, data_type, op, comm, stream)``. Communicators
are handle ints; buffers are device pointers from ``acl.rt.malloc``; ``stream`` is an
``acl.rt.create_stream`` handle (0: the default stream).

As in CANN the collectives are asynchronous: the arguments are checked at the call (a bad one
returns its code at once), the transfer runs when the stream reaches it, and a failure there
(a peer's timeout, a mismatch) fails ``acl.rt.synchronize_stream`` and is kept for
``HcclGetCommAsyncError``. Data moves through ``pycann.hccl.collectives`` on zero-copy torch
views of the device buffers.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from pycann import config
from pycann.hccl import collectives as C
from pycann.hccl.comm import Communicator
from pycann.hccl.constants import (
    DTYPE_NAMES,
    DTYPE_SIZES,
    HCCL_ROOT_INFO_BYTES,
    HcclDataType,
    HcclReduceOp,
    HcclResult,
)
from pycann.hccl.env import read_env, whitelist
from pycann.hccl.errors import HcclError
from pycann.hccl.ranktable import load_rank_table

log = logging.getLogger("pycann.hccl")
F = TypeVar("F", bound=Callable[..., Any])
_lock = threading.Lock()
_comms: dict[int, _Comm] = {}
_servers: dict[str, dist.TCPStore] = {}  # root-info id -> the store this process hosts
_handles = itertools.count(1)
_last_error = threading.local()


class _Comm:
    """A communicator handle's state: the ``Communicator`` and the first asynchronous error."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.async_error: HcclError | None = None


def _api(fn: F) -> F:
    """Return ``HcclResult`` codes instead of raising (the last element for tuple results)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HcclError as e:
            code, msg = e.code, str(e)
        except Exception as e:  # noqa: BLE001 - every failure becomes a code, as in C
            code, msg = _code_of(e), f"{type(e).__name__}: {e}"
        _last_error.msg = f"{fn.__name__}: {msg}"
        log.error("%s", _last_error.msg)
        outs = _OUTS.get(fn.__name__)
        return code if outs is None else (*outs, code)
    return wrapper  # type: ignore[return-value]


_OUTS: dict[str, tuple[Any, ...]] = {
    "HcclGetRootInfo": (b"",), "HcclCommInitRootInfo": (0,), "HcclCommInitClusterInfo": (0,),
    "HcclGetRankSize": (0,), "HcclGetRankId": (0,), "HcclGetCommAsyncError": (HcclResult.HCCL_SUCCESS,),
}


def _code_of(e: BaseException) -> HcclResult:
    from pycann.runtime import errors as rt

    if isinstance(e, (rt.InvalidPointer, rt.UseAfterFree, rt.OutOfBounds, rt.KindMismatch, rt.ReadOnly)):
        return HcclResult.HCCL_E_PTR
    if isinstance(e, rt.RtError):
        return HcclResult.HCCL_E_RUNTIME
    if isinstance(e, (TypeError, ValueError)):
        return HcclResult.HCCL_E_PARA
    return HcclResult.HCCL_E_INTERNAL


def last_error() -> str:
    """pycann extension: the message of this thread's last failed ``Hccl*`` call."""
    return getattr(_last_error, "msg", "")


def HcclGetErrorString(code: int) -> str:  # noqa: N802 - HCCL's names
    """The name of an ``HcclResult`` code (``HCCL_E_TIMEOUT`` ...)."""
    try:
        return HcclResult(int(code)).name
    except ValueError:
        return f"unknown HcclResult {code}"


# ---------------------------------------------------------------- communicators
def _host_ip() -> str:
    env = read_env()
    if env.if_ip:
        return env.if_ip
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@_api
def HcclGetRootInfo() -> tuple[bytes, int]:  # noqa: N802
    """``root_info, ret``: run on the root rank; it hosts the rendezvous (a TCP store on
    ``HCCL_IF_IP``, port ``HCCL_IF_BASE_PORT`` if set, else a free one). ``root_info`` is
    ``HCCL_ROOT_INFO_BYTES`` bytes to hand to every rank (by any channel) for
    ``HcclCommInitRootInfo``."""
    env = read_env()
    ip = _host_ip()
    port = env.if_base_port if _env_set("HCCL_IF_BASE_PORT") else 0
    server = dist.TCPStore(ip, port, None, True, timeout=timedelta(seconds=env.connect_timeout),
                           wait_for_workers=False)
    ident = uuid.uuid4().hex
    with _lock:
        _servers[ident] = server
    info = json.dumps({"ip": ip, "port": server.port, "id": ident}).encode()
    return info.ljust(HCCL_ROOT_INFO_BYTES, b"\0"), HcclResult.HCCL_SUCCESS


def _parse_root(root_info: bytes) -> dict[str, Any]:
    try:
        data = json.loads(bytes(root_info).rstrip(b"\0").decode())
        return {"ip": str(data["ip"]), "port": int(data["port"]), "id": str(data["id"])}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise HcclError(HcclResult.HCCL_E_PARA, "root_info is not the output of HcclGetRootInfo") from None


def _env_set(name: str) -> bool:
    return config.flag(name)


def _new_comm(ip: str, port: int, ident: str, n_ranks: int, rank: int, server: dist.TCPStore | None) -> int:
    env = read_env()
    allowed = whitelist(env)
    if allowed is not None and ip not in allowed:
        raise HcclError(HcclResult.HCCL_E_PARA, f"the root {ip} is not in HCCL_WHITELIST_FILE={env.whitelist_file}")
    try:
        store = server if server is not None else dist.TCPStore(
            ip, port, None, False, timeout=timedelta(seconds=env.connect_timeout))
    except Exception as e:  # noqa: BLE001
        raise HcclError(HcclResult.HCCL_E_TCP_CONNECT,
                        f"rank {rank} cannot reach the root at {ip}:{port} within HCCL_CONNECT_TIMEOUT="
                        f"{env.connect_timeout:g} s: {e}") from None
    comm = Communicator(dist.PrefixStore(f"hccl/{ident}/", store), rank, n_ranks, name=f"{ident[:8]}",
                        connect_timeout=env.connect_timeout, exec_timeout=env.exec_timeout or 1800.0)
    h = 0x4C00_0000 + next(_handles) * 0x10
    with _lock:
        _comms[h] = _Comm(comm)
    return h


@_api
def HcclCommInitRootInfo(n_ranks: int, root_info: bytes, rank: int) -> tuple[int, int]:  # noqa: N802
    """``comm, ret``: join the ``n_ranks``-rank communicator of ``root_info`` as ``rank``.
    Blocks until all ranks joined (``HCCL_CONNECT_TIMEOUT``; the error names who is missing)."""
    _positive(n_ranks, "nRanks")
    r = _parse_root(root_info)
    with _lock:
        server = _servers.get(r["id"])
    return _new_comm(r["ip"], r["port"], r["id"], int(n_ranks), int(rank), server), HcclResult.HCCL_SUCCESS


@_api
def HcclCommInitClusterInfo(cluster_info: str, rank: int) -> tuple[int, int]:  # noqa: N802
    """``comm, ret``: the communicator of a rank table file (``RANK_TABLE_FILE``, versions 1.0,
    1.2 and 2.0). Rank 0's host (its ``host_ip``, else ``server_id``, else ``HCCL_IF_IP``) hosts
    the rendezvous on ``HCCL_IF_BASE_PORT`` (default 60000)."""
    table = load_rank_table(cluster_info)
    rank = int(rank)
    if not 0 <= rank < table.rank_size:
        raise HcclError(HcclResult.HCCL_E_PARA, f"rank {rank} is not in {cluster_info} ({table.rank_size} ranks)")
    env = read_env()
    master = table.master_address(env.if_ip)
    server = None
    if rank == 0:
        server = dist.TCPStore(_host_ip() if env.if_ip else "0.0.0.0", env.if_base_port, None, True,
                               timeout=timedelta(seconds=env.connect_timeout), wait_for_workers=False)
    return _new_comm(master, env.if_base_port, "ranktable", table.rank_size, rank, server), HcclResult.HCCL_SUCCESS


def _comm(h: Any) -> _Comm:
    with _lock:
        c = _comms.get(int(h)) if isinstance(h, (int, np.integer)) else None
    if c is None:
        raise HcclError(HcclResult.HCCL_E_PARA, f"comm {h!r} is not a live communicator handle")
    return c


@_api
def HcclGetRankSize(comm: int) -> tuple[int, int]:  # noqa: N802
    """``rank_size, ret``."""
    return _comm(comm).comm.size, HcclResult.HCCL_SUCCESS


@_api
def HcclGetRankId(comm: int) -> tuple[int, int]:  # noqa: N802
    """``rank, ret``: this process's rank in ``comm``."""
    return _comm(comm).comm.rank, HcclResult.HCCL_SUCCESS


@_api
def HcclGetCommAsyncError(comm: int) -> tuple[int, int]:  # noqa: N802
    """``async_error, ret``: the code of the first collective that failed on its stream."""
    e = _comm(comm).async_error
    return (e.code if e is not None else HcclResult.HCCL_SUCCESS), HcclResult.HCCL_SUCCESS


@_api
def HcclCommDestroy(comm: int) -> int:  # noqa: N802
    """Release the communicator (its gloo connections and heartbeat)."""
    c = _comm(comm)
    with _lock:
        _comms.pop(int(comm), None)
    c.comm.destroy()
    return HcclResult.HCCL_SUCCESS


# ---------------------------------------------------------------- buffers and streams
def _positive(n: Any, what: str) -> int:
    if not isinstance(n, (int, np.integer)) or int(n) <= 0:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} must be a positive int, not {n!r}")
    return int(n)


def _count(n: Any, what: str = "count") -> int:
    if not isinstance(n, (int, np.integer)) or int(n) < 0:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} must be an int >= 0, not {n!r}")
    return int(n)


def _rank_arg(c: _Comm, r: Any, what: str, peer: bool = False) -> None:
    ok = isinstance(r, (int, np.integer)) and 0 <= int(r) < c.comm.size and not (peer and int(r) == c.comm.rank)
    if not ok:
        other = " other than this one" if peer else ""
        raise HcclError(HcclResult.HCCL_E_PARA, f"{what} {r!r} must be a rank{other} in [0, {c.comm.size})")


def _dtype(data_type: Any) -> tuple[str, torch.dtype]:
    try:
        name = DTYPE_NAMES[HcclDataType(int(data_type))]
    except (ValueError, TypeError, KeyError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"unknown HcclDataType {data_type!r}") from None
    return name, getattr(torch, name)


def _op(op: Any) -> HcclReduceOp:
    try:
        return HcclReduceOp(int(op))
    except (ValueError, TypeError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"unknown HcclReduceOp {op!r} (SUM 0, PROD 1, MAX 2, MIN 3)") from None


class _Buf:
    """A device buffer checked now and viewed (pinned) when the stream runs."""

    def __init__(self, ptr: Any, nbytes: int, write: bool, what: str) -> None:
        from pycann.acl import _state
        from pycann.runtime.memory import DEVICE_KINDS

        self.space, self.kinds = _state.space, DEVICE_KINDS
        if not isinstance(ptr, (int, np.integer)):
            raise HcclError(HcclResult.HCCL_E_PTR, f"{what} must be a device pointer int, not {type(ptr).__name__}")
        self.ptr, self.nbytes, self.write, self.what = int(ptr), nbytes, write, what
        if nbytes:
            self.space.resolve(self.ptr, nbytes, DEVICE_KINDS, write, what)

    def tensor(self, stack: Any, dtype: torch.dtype) -> torch.Tensor:
        if not self.nbytes:
            return torch.empty(0, dtype=dtype)
        view = stack.enter_context(self.space.access(self.ptr, self.nbytes, self.kinds, self.write, self.what))
        return torch.from_numpy(view).view(dtype)


def _stream(stream: Any) -> Any:
    from pycann.acl import rt

    return rt.stream_of(stream)


def _enqueue(c: _Comm, stream: Any, name: str, bufs: Sequence[tuple[_Buf, torch.dtype]],
             body: Callable[..., C.Pending | None]) -> int:
    """Queue ``body(*tensors)`` on ``stream``; errors there are kept for ``HcclGetCommAsyncError``."""
    import contextlib

    st = _stream(stream)

    def task() -> None:
        try:
            with contextlib.ExitStack() as stack:
                ts = [b.tensor(stack, dt) for b, dt in bufs]
                p = body(*ts)
                if p is not None:
                    p.wait()
        except HcclError as e:
            c.async_error = c.async_error or e
            raise
    st.submit(task, name)
    return HcclResult.HCCL_SUCCESS


# ---------------------------------------------------------------- collectives
@_api
def HcclAllReduce(send_buf: int, recv_buf: int, count: int, data_type: int, op: int,  # noqa: N802
                  comm: int, stream: int) -> int:
    """``recv_buf`` (``count`` elements) = the reduction over ranks of their ``send_buf``."""
    c, n, (dt, td), o = _comm(comm), _count(count), _dtype(data_type), _op(op)
    nb = n * DTYPE_SIZES[dt]
    s, r = _Buf(send_buf, nb, False, "sendBuf"), _Buf(recv_buf, nb, True, "recvBuf")

    def body(src: torch.Tensor, dst: torch.Tensor) -> C.Pending:
        if s.ptr != r.ptr:
            dst.copy_(src)
        return C.all_reduce(c.comm, dst, o)
    return _enqueue(c, stream, "HcclAllReduce", [(s, td), (r, td)], body)


@_api
def HcclBroadcast(buf: int, count: int, data_type: int, root: int, comm: int, stream: int) -> int:  # noqa: N802
    """``buf`` on every rank = ``buf`` of rank ``root``."""
    c, n, (dt, td) = _comm(comm), _count(count), _dtype(data_type)
    _rank_arg(c, root, "root")
    b = _Buf(buf, n * DTYPE_SIZES[dt], True, "buf")
    return _enqueue(c, stream, "HcclBroadcast", [(b, td)], lambda t: C.broadcast(c.comm, t, int(root)))


@_api
def HcclReduce(send_buf: int, recv_buf: int, count: int, data_type: int, op: int, root: int,  # noqa: N802
               comm: int, stream: int) -> int:
    """``recv_buf`` on ``root`` = the reduction of every rank's ``send_buf`` (``recv_buf`` is
    not written on other ranks)."""
    c, n, (dt, td), o = _comm(comm), _count(count), _dtype(data_type), _op(op)
    _rank_arg(c, root, "root")
    nb = n * DTYPE_SIZES[dt]
    s, r = _Buf(send_buf, nb, False, "sendBuf"), _Buf(recv_buf, nb, True, "recvBuf")

    def body(src: torch.Tensor, dst: torch.Tensor) -> C.Pending:
        work = src.clone()
        p = C.reduce(c.comm, work, o, int(root))

        def deliver() -> None:
            dst.copy_(work)
        if c.comm.rank == int(root):
            p.finish = C._then(p.finish, deliver)
        return p
    return _enqueue(c, stream, "HcclReduce", [(s, td), (r, td)], body)


@_api
def HcclAllGather(send_buf: int, recv_buf: int, send_count: int, data_type: int,  # noqa: N802
                  comm: int, stream: int) -> int:
    """``recv_buf`` = every rank's ``send_buf`` (``send_count`` elements each) in rank order."""
    c, n, (dt, td) = _comm(comm), _count(send_count, "sendCount"), _dtype(data_type)
    nb = n * DTYPE_SIZES[dt]
    s, r = _Buf(send_buf, nb, False, "sendBuf"), _Buf(recv_buf, nb * c.comm.size, True, "recvBuf")
    return _enqueue(c, stream, "HcclAllGather", [(s, td), (r, td)],
                    lambda src, dst: C.all_gather(c.comm, dst, src))


@_api
def HcclReduceScatter(send_buf: int, recv_buf: int, recv_count: int, data_type: int, op: int,  # noqa: N802
                      comm: int, stream: int) -> int:
    """``recv_buf`` on rank r (``recv_count`` elements) = the reduction of the ranks' r-th
    ``recv_count``-element chunk of ``send_buf``."""
    c, n, (dt, td), o = _comm(comm), _count(recv_count, "recvCount"), _dtype(data_type), _op(op)
    nb = n * DTYPE_SIZES[dt]
    s, r = _Buf(send_buf, nb * c.comm.size, False, "sendBuf"), _Buf(recv_buf, nb, True, "recvBuf")
    return _enqueue(c, stream, "HcclReduceScatter", [(s, td), (r, td)],
                    lambda src, dst: C.reduce_scatter(c.comm, dst, src, o))


@_api
def HcclAlltoAll(send_buf: int, send_count: int, send_type: int, recv_buf: int, recv_count: int,  # noqa: N802
                 recv_type: int, comm: int, stream: int) -> int:
    """Block j (``send_count`` elements) of rank i's ``send_buf`` -> block i of rank j's ``recv_buf``."""
    c, sn, rn = _comm(comm), _count(send_count, "sendCount"), _count(recv_count, "recvCount")
    (sd, td), (rd, _) = _dtype(send_type), _dtype(recv_type)
    if sd != rd or sn != rn:
        raise HcclError(HcclResult.HCCL_E_PARA, f"HcclAlltoAll: send ({sn} x {sd}) and receive ({rn} x {rd}) "
                        "blocks must have the same count and type")
    nb = sn * DTYPE_SIZES[sd] * c.comm.size
    s, r = _Buf(send_buf, nb, False, "sendBuf"), _Buf(recv_buf, nb, True, "recvBuf")
    return _enqueue(c, stream, "HcclAlltoAll", [(s, td), (r, td)], lambda src, dst: C.all_to_all(c.comm, dst, src))


@_api
def HcclAlltoAllV(send_buf: int, send_counts: Sequence[int], sdispls: Sequence[int], send_type: int,  # noqa: N802
                  recv_buf: int, recv_counts: Sequence[int], rdispls: Sequence[int], recv_type: int,
                  comm: int, stream: int) -> int:
    """Rank i sends ``send_counts[j]`` elements at offset ``sdispls[j]`` to rank j, which stores
    them at its ``rdispls[i]`` (``recv_counts[i]`` elements). Counts are checked across ranks."""
    c = _comm(comm)
    (sd, td), (rd, _) = _dtype(send_type), _dtype(recv_type)
    if sd != rd:
        raise HcclError(HcclResult.HCCL_E_PARA, f"HcclAlltoAllV: sendType {sd} differs from recvType {rd}")
    size = c.comm.size
    lists = [list(map(int, x)) for x in (send_counts, sdispls, recv_counts, rdispls)]
    for vals, what in zip(lists, ("sendCounts", "sdispls", "recvCounts", "rdispls")):
        if len(vals) != size or min(vals) < 0:
            raise HcclError(HcclResult.HCCL_E_PARA, f"HcclAlltoAllV: {what} needs {size} values >= 0, got {vals}")
    sc, sdp, rc, rdp = lists
    es = DTYPE_SIZES[sd]
    s = _Buf(send_buf, max(d + n for d, n in zip(sdp, sc)) * es, False, "sendBuf")
    r = _Buf(recv_buf, max(d + n for d, n in zip(rdp, rc)) * es, True, "recvBuf")

    def body(src: torch.Tensor, dst: torch.Tensor) -> C.Pending:
        packed = torch.cat([src[d : d + n] for d, n in zip(sdp, sc)])
        out = torch.empty(sum(rc), dtype=td)
        p = C.all_to_all(c.comm, out, packed, sc, rc)

        def unpack() -> None:
            for d, piece in zip(rdp, out.split(rc)):
                dst[d : d + piece.numel()].copy_(piece)
        p.finish = C._then(p.finish, unpack)
        return p
    return _enqueue(c, stream, "HcclAlltoAllV", [(s, td), (r, td)], body)


@_api
def HcclSend(send_buf: int, count: int, data_type: int, dest_rank: int, comm: int, stream: int) -> int:  # noqa: N802
    """Send ``count`` elements to ``dest_rank`` (which calls ``HcclRecv``)."""
    c, n, (dt, td) = _comm(comm), _count(count), _dtype(data_type)
    _rank_arg(c, dest_rank, "destRank", peer=True)
    s = _Buf(send_buf, n * DTYPE_SIZES[dt], False, "sendBuf")
    return _enqueue(c, stream, "HcclSend", [(s, td)], lambda t: C.send(c.comm, t, int(dest_rank)))


@_api
def HcclRecv(recv_buf: int, count: int, data_type: int, src_rank: int, comm: int, stream: int) -> int:  # noqa: N802
    """Receive ``count`` elements from ``src_rank``."""
    c, n, (dt, td) = _comm(comm), _count(count), _dtype(data_type)
    _rank_arg(c, src_rank, "srcRank", peer=True)
    r = _Buf(recv_buf, n * DTYPE_SIZES[dt], True, "recvBuf")
    return _enqueue(c, stream, "HcclRecv", [(r, td)], lambda t: C.recv(c.comm, t, int(src_rank)))


@_api
def HcclBarrier(comm: int, stream: int) -> int:  # noqa: N802
    """The stream waits here until every rank's stream has reached its ``HcclBarrier``."""
    c = _comm(comm)
    return _enqueue(c, stream, "HcclBarrier", [], lambda: C.barrier(c.comm))
