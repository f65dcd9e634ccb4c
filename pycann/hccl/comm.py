"""The communicator: a gloo process group, its store, per-call signatures and fault diagnosis.

One ``Communicator`` backs both faces of pycann's HCCL — the ``hccl`` torch.distributed backend
and the C-style ``Hccl*`` functions. Data moves with gloo (``torch.distributed.ProcessGroupGloo``,
TCP); this module adds what HCCL users miss most:

* **Join with a deadline.** Every rank announces itself in the store, then waits at most
  ``connect_timeout`` seconds (``HCCL_CONNECT_TIMEOUT``) for the others; the error names the ranks
  that never joined.
* **Signatures.** Before each collective the ranks all-gather a 16-int64 header
  (``pycann.hccl.signature``); a mismatch raises ``HcclMismatch`` with both ranks' calls.
* **Heartbeats and diagnosis.** A daemon thread publishes ``<beat> <seq> <state> <call>`` to the
  store every ``HEARTBEAT_S``. When a collective fails or times out (``exec_timeout``,
  ``HCCL_EXEC_TIMEOUT``), the failing rank reads its peers' heartbeats and says which rank is
  missing and why: it never called this collective (and what it last ran), or its heartbeat
  stopped (the process died or hangs holding the GIL). The communicator is then broken: later
  calls fail at once with the first error.
* **A clean exit.** ``destroy()`` — and, for scripts that never call it, an ``atexit`` hook — waits
  for the gloo work still in flight and then releases the gloo group, whose destructor joins its
  worker threads, while Python is still alive (see ``Communicator.destroy``).
"""

from __future__ import annotations

import atexit
import collections
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from pycann import config
from pycann.hccl.constants import Collective, HcclResult
from pycann.hccl.errors import HcclError, HcclMismatch, HcclRemoteError, HcclTimeout
from pycann.hccl.signature import HEADER_LEN, CallSignature, find_mismatch

HEARTBEAT_S = 0.25
DIAGNOSE_S = 4 * HEARTBEAT_S
#: How long ``destroy()`` waits for gloo work still in flight before it gives up on a clean release.
DRAIN_S = 30.0
_POLL_S = 0.01
# Every communicator not yet destroyed, held strongly: a gloo worker thread must never drop the last
# reference to one (a future callback's closure can hold it), or gloo's group would be destroyed on
# its own worker thread, which then joins itself (std::system_error in a destructor: abort).
_LIVE: set[Communicator] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _destroy_all() -> None:
    # Python, once finalizing, pthread_exit's any other thread that takes the GIL. A gloo worker
    # thread takes it to release a tensor whose Python object died while gloo still held it, or to
    # run (and drop) a future callback; unwinding through its C++ destructors then aborts the
    # process ("terminate called without an active exception") after the script has finished.
    # atexit runs before finalization: release every gloo group here, so its workers are joined.
    with _LIVE_LOCK:
        live = list(_LIVE)
    for c in live:
        c.destroy()


def _finished(pending: Any) -> bool:
    # is_completed() alone is not enough: the work gloo's reduce_scatter returns never sets it,
    # even after wait() (which, on a finished work, returns or raises at once)
    return bool(pending.completed or pending.work.is_completed())


def check_enabled() -> bool:
    """Per-call signature checks are on unless ``PYCANN_HCCL_CHECK=0`` (``pycann.config``)."""
    from pycann.config import hccl_check

    return hccl_check()


def _generation(store: dist.Store, rank: int) -> dist.Store:
    """``store`` under a prefix new for each communicator made on it, the same on every rank: the
    n-th communicator of a rank on this store gets ``n/``. A process group destroyed and created
    again (``destroy_process_group`` then ``init_process_group``, which reuses the rendezvous
    store and the group's name) would otherwise find the old group's keys: ranks counted as
    joined at once, and gloo connecting to the old group's closed addresses."""
    n = store.add(f"generation/{rank}", 1)
    return dist.PrefixStore(f"{n}/", store)


class Communicator:
    """``size`` ranks over ``store`` (a ``torch.distributed.Store`` private to this communicator).

    Raises ``HcclTimeout`` when a rank does not join within ``connect_timeout`` seconds.
    """

    def __init__(self, store: dist.Store, rank: int, size: int, *, name: str = "hccl_world_group",
                 connect_timeout: float = 120.0, exec_timeout: float = 1800.0,
                 check: bool | None = None) -> None:
        if not 0 <= rank < size:
            raise HcclError(HcclResult.HCCL_E_PARA, f"rank {rank} is outside [0, {size}) on {name}")
        self.rank, self.size, self.name = rank, size, name
        self.store = _generation(store, rank)
        self.connect_timeout, self.exec_timeout = connect_timeout, exec_timeout
        self.check = check_enabled() if check is None else check
        self.seq = 0
        self.broken: HcclError | None = None
        self.destroyed = False
        self._works: list[Any] = []  # collectives launched, maybe not yet finished (see track)
        self._state = "idle"
        self._call = "(no collective yet)"
        self._beat = 0
        self._stop = threading.Event()
        self._jobs: collections.deque[Callable[[], None] | None] = collections.deque()
        self._jobs_cv = threading.Condition()
        self._launcher: threading.Thread | None = None
        # size-checked receives waiting to post their data, per (source or "any", tag): pycann.hccl.p2p
        self.p2p_recvs: dict[tuple[int | str, int], collections.deque[Any]] = {}
        self.p2p_lock = threading.Lock()
        self.p2p_locks: dict[tuple[int | str, int], threading.Lock] = {}
        self._join()
        # HCCL_SOCKET_IFNAME picks the host NIC in CANN; gloo reads GLOO_SOCKET_IFNAME for the same
        launcher = config.launcher_env()
        if launcher.get("HCCL_SOCKET_IFNAME") and not launcher.get("GLOO_SOCKET_IFNAME"):
            config.set_environ("GLOO_SOCKET_IFNAME", launcher["HCCL_SOCKET_IFNAME"])
        # Any: torch's stubs omit most of ProcessGroupGloo's bound collectives
        self.pg: Any = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", self.store), rank, size,
                                        timedelta(seconds=connect_timeout))
        self.pg.set_timeout(timedelta(seconds=exec_timeout))
        self._hb = threading.Thread(target=self._heartbeat, name=f"hccl-heartbeat-{name}", daemon=True)
        self._hb.start()
        with _LIVE_LOCK:
            _LIVE.add(self)

    # ------------------------------------------------------------------ joining
    def _join(self) -> None:
        host = socket.gethostname()
        self.store.set(f"joined/{self.rank}", f"{host} pid {os.getpid()}")
        keys = [f"joined/{r}" for r in range(self.size)]
        deadline = time.monotonic() + self.connect_timeout
        while not self.store.check(keys):
            if time.monotonic() > deadline:
                missing = [r for r in range(self.size) if not self.store.check([f"joined/{r}"])]
                raise HcclTimeout(
                    f"communicator {self.name}: rank(s) {', '.join(map(str, missing))} of {self.size} did not "
                    f"join within HCCL_CONNECT_TIMEOUT={self.connect_timeout:g} s (this is rank {self.rank}); "
                    "check that every rank was started with the same rendezvous address and world size")
            time.sleep(_POLL_S)

    # ------------------------------------------------------------------ heartbeats
    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._beat += 1
            try:
                self.store.set(f"hb/{self.rank}", f"{self._beat} {self.seq} {self._state} {self._call}")
            except Exception:  # noqa: BLE001 - the store's host is gone; diagnosis will say so
                return

    def _peer_states(self) -> dict[int, tuple[int, int, str, str] | None]:
        """Each peer's last heartbeat (``None``: it never published one). Raises if the store is gone."""
        out: dict[int, tuple[int, int, str, str] | None] = {}
        for r in range(self.size):
            if r == self.rank:
                continue
            if not self.store.check([f"hb/{r}"]):
                out[r] = None
                continue
            beat, seq, state, call = self.store.get(f"hb/{r}").decode().split(" ", 3)
            out[r] = (int(beat), int(seq), state, call)
        return out

    def diagnose(self, sig: CallSignature, error: BaseException) -> HcclError:
        """The error to raise for ``sig`` failing with gloo's ``error``: names the missing ranks.

        Two looks at the peers' heartbeats, ``DIAGNOSE_S`` apart: a peer whose beat did not move
        is dead or hung; one whose sequence number is behind never called this collective. If
        the store disappears in between (its host, rank 0, exited), the first look still counts.
        """
        what = f"{sig.describe()} on communicator {self.name} (rank {self.rank} of {self.size})"
        timed_out = "timed out" in str(error).lower() or "timeout" in str(error).lower()
        try:
            first = self._peer_states()
        except Exception as e:  # noqa: BLE001
            return HcclRemoteError(f"{what} failed ({error}); the rendezvous store is unreachable too ({e}): "
                                   "the rank hosting it (rank 0) has probably exited")
        time.sleep(DIAGNOSE_S)
        try:
            second: dict[int, tuple[int, int, str, str] | None] | None = self._peer_states()
        except Exception:  # noqa: BLE001
            second = None
        notes = []
        for r in sorted(first):
            a = first[r]
            b = second.get(r) if second is not None else a
            if b is None:
                notes.append(f"rank {r} has no heartbeat: it never started or died at once")
            elif second is not None and a is not None and a[0] == b[0]:
                notes.append(f"rank {r} stopped responding (no heartbeat for {DIAGNOSE_S:g} s): it died or "
                             f"hangs; its last call was {b[3]} ({b[2]})")
            elif b[1] < sig.seq:
                alive = "is alive but " if second is not None else ""
                notes.append(f"rank {r} {alive}has not called #{sig.seq}: its last call was {b[3]} ({b[2]})")
            elif b[1] > sig.seq:
                notes.append(f"rank {r} has gone on to {b[3]}")
        if second is None:
            notes.append("the rendezvous store went away during the diagnosis (rank 0 exited)")
        culprit = "; ".join(notes) if notes else "every peer is alive and in this call"
        if timed_out:
            msg = f"{what} timed out after HCCL_EXEC_TIMEOUT={self.exec_timeout:g} s: {culprit} (gloo: {error})"
            return HcclTimeout(msg)
        return HcclRemoteError(f"{what} failed: {culprit} (gloo: {error})")

    # ------------------------------------------------------------------ calls
    def begin(self, coll: Collective, dtype: str = "", count: int = 0, shape: Sequence[int] = (),
              op: int = -1, root: int = -1, refuse: HcclError | None = None) -> CallSignature:
        """Start call number ``seq + 1`` and wait for its signature exchange (``open`` then
        ``exchange``, after every call ``submit`` queued before it has launched): fails fast on a
        broken communicator, then (checks on) raises ``HcclMismatch`` if the ranks disagree.

        ``refuse`` is this rank's own verdict on its arguments (bad dtype, op, sizes, root), found
        before any data moves. The rank still takes part in the exchange, flagged, and every rank
        raises at once: this one ``refuse``, the others an ``HcclMismatch`` naming it. Raised
        before the exchange instead, the peers would wait out ``HCCL_EXEC_TIMEOUT`` in a call it
        never makes, or pair it with its next call. With checks off ``refuse`` is raised here."""
        self.drain()
        sig = self.open(coll, dtype, count, shape, op, root, refuse)
        self.exchange(sig, refuse)
        return sig

    def open(self, coll: Collective, dtype: str = "", count: int = 0, shape: Sequence[int] = (),
             op: int = -1, root: int = -1, refuse: HcclError | None = None) -> CallSignature:
        """Number call ``seq + 1`` (in issue order, on the caller's thread) without exchanging
        anything; raises at once on a broken or destroyed communicator, and ``refuse`` with checks off."""
        self._check_usable()
        if refuse is not None and not (self.check and self.size > 1):
            raise refuse
        self.seq += 1
        sig = CallSignature(self.seq, coll, dtype, int(count), tuple(int(s) for s in shape), int(op), int(root),
                            refused=refuse is not None)
        self._call, self._state = sig.describe(), "running"
        return sig

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise HcclError(self.broken.code, f"communicator {self.name} is unusable since an earlier "
                            f"failure (destroy it and create a new one): {self.broken.detail}")
        self.check_alive()

    def exchange(self, sig: CallSignature, refuse: HcclError | None = None) -> None:
        """All-gather the ranks' signatures of ``sig``'s call (checks on, more than one rank) and
        raise ``HcclMismatch`` (or ``refuse`` on the refusing rank) if they disagree."""
        self._check_usable()
        if not (self.check and self.size > 1):
            return
        mine = torch.tensor(sig.encode(), dtype=torch.int64)
        table = torch.empty(self.size * HEADER_LEN, dtype=torch.int64)
        self.wait(self.pg._allgather_base(table, mine), sig)
        rows = table.view(self.size, HEADER_LEN).tolist()
        try:
            sigs = [CallSignature.decode(r) for r in rows]
        except ValueError as e:
            raise self._break(HcclMismatch(f"{sig.describe()}: a peer sent a corrupt header ({e})")) from None
        problem = find_mismatch(sigs, self.name)
        refusers = [r for r, s in enumerate(sigs) if s.refused]
        if problem is None and refusers:
            problem = (f"{sig.describe()}: rank {', '.join(map(str, refusers))} refused the call (its "
                       "arguments are invalid there, see its error); no data moved")
        if problem is not None:
            self._state = "done"
            if refuse is not None:
                raise refuse
            raise HcclMismatch(f"rank {self.rank}: {problem}")

    # ------------------------------------------------------------------ ordered launches
    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` (which must not raise) on this communicator's launcher thread, after every
        job submitted before it. Collectives launch there (signature exchange, then gloo's work),
        so a call returns at once, as an async HCCL call does, and gloo still sees every rank's
        collectives in issue order (it pairs them by a counter). Two communicators used in
        opposite orders on two ranks then proceed instead of each rank blocking in the other's
        exchange."""
        with self._jobs_cv:
            if self._launcher is None:
                self._launcher = threading.Thread(target=self._launch_loop, name=f"hccl-launch-{self.name}",
                                                  daemon=True)
                self._launcher.start()
            self._jobs.append(job)
            self._jobs_cv.notify_all()

    def _launch_loop(self) -> None:
        while True:
            with self._jobs_cv:
                while not self._jobs:
                    self._jobs_cv.wait()
                job = self._jobs[0]
            if job is None:
                return
            try:
                job()
            finally:
                with self._jobs_cv:
                    self._jobs.popleft()
                    self._jobs_cv.notify_all()

    def drain(self) -> None:
        """Wait until every submitted job has run (their gloo works launched, maybe not done)."""
        if self._launcher is None or self._launcher is threading.current_thread():
            return
        with self._jobs_cv:
            while self._jobs and self._launcher.is_alive():
                self._jobs_cv.wait(0.1)

    def _break(self, err: HcclError) -> HcclError:
        self.broken = self.broken or err
        self._state = "failed"
        return err

    def wait(self, work: Any, sig: CallSignature) -> None:
        """Wait for gloo's ``work``; a failure becomes the diagnosed ``HcclError``."""
        try:
            work.wait()
        except Exception as e:  # noqa: BLE001 - gloo raises plain RuntimeErrors
            raise self._break(self.diagnose(sig, e)) from None

    def done(self, sig: CallSignature) -> None:
        """Mark ``sig`` finished (for the heartbeat's "last call")."""
        if sig.seq == self.seq:
            self._state = "done"

    def run(self, sig: CallSignature, launch: Callable[[], Any]) -> None:
        """Launch gloo work for ``sig`` and wait for it (the blocking path of the C-style API)."""
        try:
            work = launch()
        except HcclError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._break(self.diagnose(sig, e)) from None
        self.wait(work, sig)
        self.done(sig)

    def check_alive(self) -> None:
        """Raise ``HcclError(HCCL_E_PARA)`` if ``destroy()`` already ran."""
        if self.destroyed:
            raise HcclError(HcclResult.HCCL_E_PARA, f"communicator {self.name} was destroyed")

    def track(self, pending: Any) -> None:
        """Note a launched collective (``collectives.Pending``: ``.work``, ``.completed``) so that
        ``destroy()`` can wait for its gloo work."""
        if len(self._works) >= 64:
            self._works = [p for p in self._works if not _finished(p)]
        self._works.append(pending)

    def _drained(self, timeout: float) -> bool:
        """True once every tracked gloo work has finished (gloo has run its future callbacks by
        then); False if one may still be running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for p in self._works:
            if _finished(p):
                continue
            try:  # at least 1 ms: a zero timeout means "forever" to c10d
                p.work.wait(timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            except Exception:  # noqa: BLE001 - a failed work is finished too; one timed out is not
                if time.monotonic() >= deadline:
                    return False
        return True

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._hb.is_alive() and self._hb is not threading.current_thread():
            self._hb.join(timeout=5)

    def destroy(self, drain_timeout: float = DRAIN_S) -> None:
        """Stop the heartbeat, wait for gloo work in flight, then release the gloo group. Idempotent.

        Releasing the group runs its destructor now (torch releases the GIL for it), which joins
        gloo's worker threads after they have let go of every work, tensor and Python callback.
        Otherwise they would do that later — possibly while Python finalizes, which kills a thread
        taking the GIL inside C++ frames and so aborts the process after a successful run. If work
        is still running after ``drain_timeout`` seconds (no wait at all on a broken communicator,
        whose peer is gone, or on a second call), the group is only shut down and kept, because
        its destructor would wait for that work; the exit hook tries again without waiting. Called
        on a thread Python did not start (gloo's, running a future callback), the release is left
        to the exit hook: a thread cannot join itself.
        """
        first = not self.destroyed
        if first:
            self.destroyed = True
            self._stop_heartbeat()
            try:
                self.pg.shutdown()
            except Exception:  # noqa: BLE001 - a broken group may not shut down cleanly
                pass
            with self._jobs_cv:  # the launcher ends after the jobs queued (they fail: destroyed)
                self._jobs.append(None)
                self._jobs_cv.notify_all()
            launcher = self._launcher
            if launcher is not None and launcher is not threading.current_thread():
                # a job may be inside gloo (an exchange): a thread left there while Python
                # finalizes aborts the process, as gloo's workers would (see _destroy_all)
                launcher.join(timeout=drain_timeout if self.broken is None else 1.0)
        if self.pg is None or isinstance(threading.current_thread(), threading._DummyThread):
            return
        if self._drained(drain_timeout if first and self.broken is None else 0.0):
            self.pg = None  # the last reference: gloo's destructor joins its workers here
            self._works = []
            with _LIVE_LOCK:
                _LIVE.discard(self)
