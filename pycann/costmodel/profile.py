"""A simulated profile of one kernel launch: total time, per-pipe utilisation, ratios, bound verdict."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pycann.ascendc.enums import N_PIPES, Pipe
from pycann.ascendc.trace import InstrRecord
from pycann.costmodel.simulate import CoreTimeline, simulate
from pycann.costmodel.socs import CostSoc, get_cost_soc


class Bound(enum.Enum):
    """What limits the kernel: the pipe with the largest busy share (MTE2+MTE3 together, as they share
    GM), or SYNC when no pipe is busy half the time (waits on flags, queues or GM latency)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    SCALAR = "scalar"
    SYNC = "sync"


SYNC_THRESHOLD = 0.5  # busiest pipe below half the run: pipes mostly wait on each other / latency [A]
PIPE_NAMES = {Pipe.PIPE_S: "scalar", Pipe.PIPE_V: "vec", Pipe.PIPE_M: "mac", Pipe.PIPE_MTE1: "mte1",
              Pipe.PIPE_MTE2: "mte2", Pipe.PIPE_MTE3: "mte3", Pipe.PIPE_FIX: "fixpipe"}


@dataclass
class Profile:
    """Simulated run of one launch (cycles at ``soc.clock_mhz``)."""

    soc: CostSoc
    block_dim: int
    core_kind: str                  # 'AIC', 'AIV' or 'AICore' (coupled parts)
    cores_per_wave: int
    cores: list[CoreTimeline]
    total_cycles: int               # sum over waves of the slowest core
    flops: float = 0.0              # cube FLOPs executed (2·m·n·k per Mmad)

    @property
    def kernel_us(self) -> float:
        return self.total_cycles / self.soc.clock_hz * 1e6

    @property
    def time_us(self) -> float:
        """Kernel time plus launch overhead, microseconds."""
        return self.kernel_us + self.soc.launch_us

    def ratio(self, pipe: Pipe) -> float:
        """Busy cycles of ``pipe`` / total cycles, averaged over cores (msprof's *_ratio)."""
        if not self.cores:
            return 0.0
        return sum(c.busy[pipe] / c.cycles for c in self.cores if c.cycles) / len(self.cores)

    @property
    def ratios(self) -> dict[str, float]:
        return {PIPE_NAMES[Pipe(p)]: self.ratio(Pipe(p)) for p in range(N_PIPES)}

    @property
    def cube_efficiency(self) -> float:
        """Achieved cube FLOP/s (incl. launch) over the chip's fp16 peak."""
        return self.flops / (self.time_us * 1e-6) / self.soc.cube_peak_flops("half") if self.flops else 0.0

    @property
    def memory_bound(self) -> float:
        """msprof's ``memory_bound`` = mte2_ratio / max(mac_ratio, vec_ratio)."""
        r = self.ratios
        comp = max(r["mac"], r["vec"])
        return r["mte2"] / comp if comp else float("inf")

    @property
    def bound(self) -> Bound:
        r = dict(self.ratios)
        r["gm"] = r.pop("mte2") + r.pop("mte3")  # MTE2 and MTE3 share the GM bandwidth (reference 7.4)
        name, top = max(r.items(), key=lambda kv: kv[1])
        if top < SYNC_THRESHOLD:
            return Bound.SYNC
        if name in ("mac", "vec"):
            return Bound.COMPUTE
        if name == "scalar":
            return Bound.SCALAR
        return Bound.MEMORY

    def summary(self) -> str:
        r = self.ratios
        parts = ", ".join(f"{k} {v:.1%}" for k, v in r.items())
        return (f"{self.soc.name} blockDim={self.block_dim} ({self.core_kind}): {self.total_cycles} cycles, "
                f"{self.time_us:.2f} us incl. {self.soc.launch_us} us launch; {parts}; bound: {self.bound.value}")


def profile_records(records: list[InstrRecord], soc_version: str, block_dim: int) -> Profile:
    """The simulated profile of a recorded trace (``block_dim`` cores of ``soc_version``)."""
    soc = get_cost_soc(soc_version)
    cores, kind, ncores = simulate(records, soc, block_dim)
    waves: dict[int, int] = {}
    for c in cores:
        waves[c.wave] = max(waves.get(c.wave, 0), c.cycles)
    flops = 0.0
    for r in records:
        if r.pipe == Pipe.PIPE_M:
            d = dict(r.params)
            flops += 2.0 * d.get("m", 0) * d.get("n", 0) * d.get("k", 0)
    return Profile(soc, block_dim, kind, ncores, cores, sum(waves.values()), flops)


def profile_kernel(fn: Callable[..., None], block_dim: int, args: tuple[Any, ...], soc_version: str = "Ascend910B2",
                   twin_soc: str | None = None) -> Profile:
    """Run ``fn`` on the Ascend C twin with a trace and simulate it; ``RuntimeError`` if the twin finds
    errors (a kernel the twin rejects has no meaningful timing). ``twin_soc`` defaults to ``soc_version``
    when the twin knows it."""
    from pycann.ascendc.soc import SOCS
    from pycann.ascendc.twin import run_kernel

    recs: list[InstrRecord] = []
    tsoc = twin_soc or (soc_version if soc_version in SOCS else "Ascend910B1")
    res = run_kernel(fn, block_dim, args, soc_version=tsoc, trace=recs.append)
    if res.errors:
        raise RuntimeError(f"the twin rejected the kernel; fix it before profiling: {res.errors[0]}")
    return profile_records(recs, soc_version, block_dim)
