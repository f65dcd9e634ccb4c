"""The ``hccl`` backend of torch.distributed: ``init_process_group(backend="hccl")``.

``ProcessGroupHCCL`` is a Python ``torch.distributed.ProcessGroup`` (torch 2.x lets a Python
subclass stand in for the whole group; its ``Backend`` class has no Python constructor) that
carries every collective over a gloo group through ``pycann.hccl.collectives`` — with HCCL's
dtype and reduce-op rules, per-call signature checks and the fault diagnosis of
``pycann.hccl.comm``. It registers for the ``npu`` and ``cpu`` devices.

Tensors on another device (``npu``) reach gloo by the device-agnostic route: a host copy
(``tensor.cpu()``) in, a ``copy_`` back out — or, if the device's owner registered one with
``register_host_view``, a zero-copy host view of the same memory. CPU tensors go to gloo as
they are.

Timeouts: the ``timeout`` of ``init_process_group`` bounds joining and each collective, unless
``HCCL_CONNECT_TIMEOUT`` / ``HCCL_EXEC_TIMEOUT`` say otherwise.
"""

# mypy: disable-error-code="override,assignment,call-arg"
# (torch's stubs describe ProcessGroup's Python-facing overloads; the trampoline calls these shapes)
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from pycann import config
from pycann.hccl import collectives as C
from pycann.hccl.comm import Communicator
from pycann.hccl.constants import Collective, HcclReduceOp, HcclResult
from pycann.hccl.env import read_env
from pycann.hccl.errors import HcclError, HcclTimeout

BACKEND = "hccl"
DEVICES = ["npu", "cpu"]

_REDUCE_OPS = {
    dist.ReduceOp.SUM: HcclReduceOp.HCCL_REDUCE_SUM, dist.ReduceOp.PRODUCT: HcclReduceOp.HCCL_REDUCE_PROD,
    dist.ReduceOp.MAX: HcclReduceOp.HCCL_REDUCE_MAX, dist.ReduceOp.MIN: HcclReduceOp.HCCL_REDUCE_MIN,
}
# reduced as int32 by allreduce / reduce (torch_npu's ProcessGroupHCCL casts them so; HCCL has no bool
# or uint8 reduction)
_WIDENED = (torch.bool, torch.uint8)
# device type -> fn(tensor) -> a contiguous CPU tensor sharing the tensor's memory, or None
_HOST_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor | None]] = {}


def register_host_view(device_type: str, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> None:
    """Let tensors of ``device_type`` reach gloo without copies: ``fn(t)`` returns a CPU tensor
    over the same bytes (or ``None`` to fall back to copying). For the owner of the device."""
    _HOST_VIEWS[device_type] = fn


def reduce_op(op: Any) -> HcclReduceOp:
    """HCCL's op for a torch ``ReduceOp``. ``AVG``, ``PREMUL_SUM`` and the bitwise ops raise
    ``HcclError(HCCL_E_NOT_SUPPORT)``: HCCL reduces with sum, prod, max and min only."""
    for k, v in _REDUCE_OPS.items():
        if op == k:
            return v
    name = getattr(getattr(op, "op", op), "name", str(op))
    raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT,
                    f"reduce op {name} is not supported by HCCL (it has SUM, PRODUCT, MAX, MIN); for AVG "
                    "all_reduce with SUM and divide by the world size")


class _Host:
    """Host stand-ins for the caller's tensors, and the copies back (``out=True`` ones)."""

    def __init__(self) -> None:
        self.back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, t: torch.Tensor, out: bool = False, inp: bool = True) -> torch.Tensor:
        if t.device.type == "cpu" and t.is_contiguous():
            return t
        view = _HOST_VIEWS.get(t.device.type)
        h = view(t) if view is not None else None
        if h is None:
            h = t.detach().to("cpu").contiguous() if inp else torch.empty(t.shape, dtype=t.dtype)
            if out:
                self.back.append((t, h))
        return h

    def reducible(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` for a reduction (as ``__call__(t, out=True)``), except that ``bool`` and ``uint8``
        tensors, which HCCL does not reduce, go as an int32 host copy written back after the call
        (torch_npu casts them to int32 the same way). The int32 result converts back as those
        types' own arithmetic would: a bool ``SUM`` is a logical or, uint8 wraps modulo 256."""
        if t.dtype not in _WIDENED:
            return self(t, out=True)
        wide = t.detach().to("cpu").to(torch.int32)
        self.back.append((t, wide))
        return wide

    def many(self, ts: Sequence[torch.Tensor], out: bool = False, inp: bool = True) -> list[torch.Tensor]:
        return [self(t, out, inp) for t in ts]

    def write_back(self) -> None:
        with torch.no_grad():
            for t, h in self.back:
                t.copy_(h)


class HcclWork(dist._Work):
    """torch's ``Work`` for one collective; ``wait`` and ``get_future`` finish it exactly once."""

    def __init__(self, pending: C.Pending, outputs: list[torch.Tensor], host: _Host) -> None:
        super().__init__()
        self.pending, self.outputs, self.host = pending, outputs, host
        self._lock = threading.Lock()
        self._done = False
        self._fut: torch.futures.Future | None = None

    def _complete(self) -> None:
        # the lock is never held while waiting on gloo: gloo runs future callbacks (which take it)
        # before it marks the work complete
        with self._lock:
            if not self._done:
                self.pending.complete()
                self.host.write_back()
                self._done = True

    def _finish(self) -> None:
        if not self._done:
            self.pending.launched()  # the signature exchange's mismatch, or a refusal, raises here
            if self.pending.work is not None:
                self.pending.comm.wait(self.pending.work, self.pending.sig)
            self._complete()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the collective is done (its error raised). With a ``timeout`` (torch's
        ``Work.wait(timeout)``, which gloo honours) ``HcclTimeout`` after that long; the
        collective goes on and may be waited for again."""
        secs = timeout.total_seconds() if timeout is not None else 0.0
        if secs > 0 and not self._done:
            deadline = time.monotonic() + secs
            while not self.is_completed():
                if time.monotonic() >= deadline:
                    raise HcclTimeout(f"{self.pending.sig.describe()} on communicator {self.pending.comm.name} "
                                      f"is not done after wait(timeout={secs:g} s); it goes on (wait again, "
                                      "or destroy the group)")
                time.sleep(0.002)
        self._finish()
        return True

    def is_completed(self) -> bool:
        """Whether the collective is done, without waiting (torch's polling form of ``wait``).
        When gloo's work is, the steps after it (copies back into the caller's tensors) run here,
        so the results are in place once this says True. A failed collective is completed too;
        ``wait()`` raises its error."""
        if self._done:
            return True
        if not self.pending.ready.is_set():  # still queued for launch (Communicator.submit)
            return False
        work = self.pending.work
        if work is not None and not work.is_completed():
            fut = _gloo_future(work)
            if fut is not None and not fut.done():
                return False
            # done, or a work that tells neither way (gloo's reduce_scatter: is_completed stays
            # False, no future): then this waits for it, which ends (done or timed out)
        try:
            self._finish()
        except HcclError:
            pass
        return True

    def result(self) -> list[torch.Tensor]:
        self._finish()
        return self.outputs

    def _source_rank(self) -> int:
        """The rank a receive from any source got its data from (torch's ``recv`` without
        ``src`` asks); finishes the receive first."""
        self._finish()
        source = getattr(self.pending, "source", None)  # a size-checked receive knows it from the header
        if source is not None:
            return int(source)
        if self.pending.work is None:
            raise HcclError(HcclResult.HCCL_E_PARA, "_source_rank: this work is not a receive from any source")
        return int(self.pending.work._source_rank())

    def get_future(self) -> torch.futures.Future:
        if self._fut is None:
            self.pending.ready.wait()  # launched (or refused): gloo's work to chain on exists now
            work = self.pending.work
            if self.pending.error is not None:
                failed: torch.futures.Future = torch.futures.Future()
                failed.set_exception(self.pending.error)
                self._fut = failed
            elif work is None or _gloo_future(work) is None or hasattr(self.pending, "advance"):
                # none to chain on (a size-checked receive's data is posted after its header): finish now
                self._finish()
                fut: torch.futures.Future = torch.futures.Future()
                fut.set_result(self.outputs)
                self._fut = fut
            else:
                def then(f: torch.futures.Future) -> list[torch.Tensor]:
                    try:
                        f.value()
                    except Exception as e:  # noqa: BLE001 - gloo's failure, diagnosed
                        raise self.pending.failed(e) from None
                    self._complete()
                    return self.outputs
                self._fut = work.get_future().then(then)
        return self._fut


def _gloo_future(work: Any) -> torch.futures.Future | None:
    """gloo's future of ``work``, or ``None`` for a work without one (its reduce_scatter)."""
    try:
        return work.get_future()
    except RuntimeError:
        return None


def _flat(ts: Sequence[Any] | torch.Tensor) -> list[Any]:
    if isinstance(ts, torch.Tensor):  # the ProcessGroup overloads that take one tensor (DDP's join hook)
        return [ts]
    if len(ts) != 1:
        raise HcclError(HcclResult.HCCL_E_PARA, f"the hccl backend takes one tensor per call, got {len(ts)}")
    return list(ts)


class ProcessGroupHCCL(ProcessGroup):
    """torch.distributed's group for ``backend="hccl"``, over gloo (see the module docstring)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        env = read_env()
        secs = timeout.total_seconds()
        self.comm = Communicator(dist.PrefixStore("hccl/", store), rank, size, name=BACKEND,
                                 connect_timeout=env.connect_timeout if _has("HCCL_CONNECT_TIMEOUT") else secs,
                                 exec_timeout=env.exec_timeout or secs)

    # new_group makes a new communicator; there is no ncclCommSplit-style split
    supports_splitting = False

    def _get_backend(self, device: Any) -> ProcessGroupHCCL:
        """This group, which is its own backend for every device. torch asks a group for its
        backend of a device in Python (``init_process_group(device_id=...)``, ``new_group``'s split
        source); the C++ lookup knows only backends registered there, and a Python group that
        stands in for the whole group registers none ("No backend type associated with device
        type npu")."""
        return self

    @property
    def _device_types(self) -> list[torch.device]:
        """The devices this group takes tensors of: the CPU and the npu. torch's own property lists
        the C++ backends registered with the group, and a Python group registers none, so it was
        empty and every helper that picks a group's device (``_get_pg_default_device``: FSDP's
        optimizer state dict, ``get_state_dict`` of an FSDP model; ``async_save``'s CPU check)
        raised "Default device not found, because no backend has been registered with this
        ProcessGroup". The CPU first: object collectives and default-device helpers keep host data
        on the host, as they did (an empty list meant "cpu" to them). The npu only once it exists
        (``pycann.torch`` imported: the PrivateUse1 device renamed "npu")."""
        if torch._C._get_privateuse1_backend_name() == "npu":
            return [torch.device("cpu"), torch.device("npu")]
        return [torch.device("cpu")]

    def _set_group_name(self, name: Any) -> None:
        """Keep the name torch gives the group (``init_process_group`` / ``new_group``). torch's
        ``ProcessGroup`` stores it in its registered C++ backends, and a Python group has none, so
        ``group_name`` raised "ProcessGroup name not set": ``DeviceMesh`` / ``init_device_mesh``
        (FSDP2's ``fully_shard``, tensor parallelism) failed on every hccl group."""
        self._hccl_group_name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        """The name ``_set_group_name`` kept (torch's error when there is none yet)."""
        name: str | None = getattr(self, "_hccl_group_name", None)
        if name is None:
            raise RuntimeError("ProcessGroup name not set")
        return name

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    def name(self) -> str:
        return BACKEND

    def _work(self, pending: C.Pending, outputs: list[torch.Tensor], host: _Host) -> HcclWork:
        return HcclWork(pending, outputs, host)

    def _op(self, opts: Any, coll: Collective, t: torch.Tensor) -> HcclReduceOp:
        """HCCL's op for ``opts.reduceOp`` (SUM without opts). One it lacks (AVG, ...) is refused
        on every rank at once (``Communicator.begin``'s ``refuse``): raised on this rank alone,
        the peers would wait out the timeout in a call it never makes."""
        try:
            # opts: AllreduceOptions-like, or a bare ReduceOp (the ``allreduce(tensor, op)`` overload)
            return reduce_op(dist.ReduceOp.SUM if opts is None else getattr(opts, "reduceOp", opts))
        except HcclError as e:
            self.comm.begin(coll, C.dtype_name(t), t.numel(), t.shape, refuse=e)
            raise

    # ----------------------------------------------------------- reductions
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        (t,) = _flat(tensors)
        op = self._op(opts, Collective.ALL_REDUCE, t)
        h = _Host()
        return self._work(C.all_reduce(self.comm, h.reducible(t), op), [t], h)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        op = reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if not tensors:
            raise HcclError(HcclResult.HCCL_E_PARA, "allreduce_coalesced needs at least one tensor")
        flat = torch.cat([t.detach().reshape(-1).cpu() for t in tensors])
        if flat.dtype in _WIDENED:  # as allreduce: int32, converted back by the copies below
            flat = flat.to(torch.int32)
        p = C.all_reduce(self.comm, flat, op)
        h = _Host()
        for t, piece in zip(tensors, flat.split([t.numel() for t in tensors])):
            h.back.append((t, piece.view(t.shape)))
        return self._work(p, list(tensors), h)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> HcclWork:
        (t,) = _flat(tensors)
        h = _Host()
        op = self._op(opts, Collective.REDUCE, t)
        return self._work(C.reduce(self.comm, h.reducible(t), op, opts.rootRank), [t], h)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> HcclWork:
        (o,) = _flat(outputs)
        ins = _flat(inputs)[0]
        h = _Host()
        op = self._op(opts, Collective.REDUCE_SCATTER, o)
        p = C.reduce_scatter(self.comm, h(o, out=True, inp=False), h.many(ins), op)
        return self._work(p, [o], h)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> HcclWork:
        h = _Host()
        op = self._op(opts, Collective.REDUCE_SCATTER, output)
        p = C.reduce_scatter(self.comm, h(output, out=True, inp=False), h(input), op)
        return self._work(p, [output], h)

    _reduce_scatter_base = reduce_scatter_single

    # ----------------------------------------------------------- data movement
    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> HcclWork:
        (t,) = _flat(tensors)
        h = _Host()
        root = opts if isinstance(opts, int) else opts.rootRank  # (the ``broadcast(tensor, root)`` overload)
        return self._work(C.broadcast(self.comm, h(t, out=True), root), [t], h)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> HcclWork:
        outs = _flat(outputs)[0]
        (t,) = _flat(inputs)
        h = _Host()
        if len({o.numel() for o in outs}) > 1:
            return self._work(self._allgather_uneven(outs, t, h), list(outs), h)
        p = C.all_gather(self.comm, h.many(outs, out=True, inp=False), h(t))
        return self._work(p, list(outs), h)

    def _allgather_uneven(self, outs: Sequence[torch.Tensor], t: torch.Tensor, h: _Host) -> C.Pending:
        """``all_gather`` into outputs of different sizes (rank i's input has ``outs[i].numel()``
        elements), as torch_npu and NCCL run it: one broadcast per rank, rank i's from rank i.
        HCCL's AllGather (and gloo's) moves equal blocks only. Returns the last broadcast, the
        earlier ones done."""
        size, rank = self.size(), self.rank()
        bad = None
        if len(outs) != size:
            bad = HcclError(HcclResult.HCCL_E_PARA,
                            f"all_gather: the output list has {len(outs)} entries, expected one per rank ({size})")
        elif outs[rank].numel() != t.numel():
            bad = HcclError(HcclResult.HCCL_E_PARA, f"all_gather: rank {rank}'s output entry has "
                            f"{outs[rank].numel()} elements, but its input {t.numel()}")
        if bad is not None:  # refused on every rank at once, in place of the first broadcast
            self.comm.begin(Collective.BROADCAST, C.dtype_name(t), outs[0].numel(), outs[0].shape, root=0,
                            refuse=bad)
        hs = h.many(outs, out=True, inp=False)
        with torch.no_grad():
            hs[rank].copy_(t.detach().to("cpu").reshape(hs[rank].shape))
        for i in range(size - 1):
            C.broadcast(self.comm, hs[i], i).wait()
        return C.broadcast(self.comm, hs[size - 1], size - 1)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> HcclWork:
        h = _Host()
        return self._work(C.all_gather(self.comm, h(output, out=True, inp=False), h(input)), [output], h)

    _allgather_base = all_gather_single

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> HcclWork:
        h = _Host()
        p = C.all_to_all_list(self.comm, h.many(outputs, out=True, inp=False), h.many(inputs))
        return self._work(p, list(outputs), h)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any = None) -> HcclWork:
        h = _Host()
        ho, hi = h(output, out=True, inp=False), h(input)
        if not output_split_sizes and not input_split_sizes:
            p = C.all_to_all(self.comm, ho, hi)
        else:
            p = C.all_to_all(self.comm, ho, hi, input_split_sizes or None, output_split_sizes or None)
        return self._work(p, [output], h)

    all_to_all_single = alltoall_base

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> HcclWork:
        (t,) = _flat(inputs)
        h = _Host()
        outs = h.many(outputs[0], out=True, inp=False) if outputs else None
        return self._work(C.gather(self.comm, outs, h(t), opts.rootRank), list(outputs[0]) if outputs else [], h)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> HcclWork:
        (t,) = _flat(outputs)
        h = _Host()
        ins = h.many(inputs[0]) if inputs else None
        return self._work(C.scatter(self.comm, h(t, out=True, inp=False), ins, opts.rootRank), [t], h)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> HcclWork:
        (t,) = _flat(tensors)
        h = _Host()
        return self._work(C.send(self.comm, h(t), dst, tag), [t], h)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> HcclWork:
        (t,) = _flat(tensors)
        h = _Host()
        return self._work(C.recv(self.comm, h(t, out=True, inp=False), src, tag), [t], h)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> HcclWork:
        (t,) = _flat(tensors)
        h = _Host()
        return self._work(C.recv_any(self.comm, h(t, out=True, inp=False), tag), [t], h)

    def barrier(self, opts: Any = None) -> HcclWork:
        return self._work(C.barrier(self.comm), [], _Host())

    def shutdown(self) -> None:
        self.comm.destroy()

    def abort(self) -> None:
        self.comm.destroy()


def _has(name: str) -> bool:
    return config.flag(name)


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> ProcessGroupHCCL:
    return ProcessGroupHCCL(store, rank, size, timeout)


_registered = False


def register() -> None:
    """Register ``hccl`` with torch.distributed (for the ``npu`` and ``cpu`` devices). Idempotent."""
    global _registered
    if _registered:
        return
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=DEVICES)
    if not hasattr(dist, "is_hccl_available"):  # torch_npu adds it to torch.distributed
        dist.is_hccl_available = is_hccl_available  # type: ignore[attr-defined]
    _registered = True


def is_hccl_available() -> bool:
    """``torch.distributed.is_hccl_available()`` as torch_npu defines it: whether the ``hccl``
    backend is registered."""
    return BACKEND.upper() in dist.Backend._plugins
