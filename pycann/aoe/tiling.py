"""The tiling space of the fp16 MatMul kernel (pycann/costmodel/matmul_sample.py) and its prices.

Axes: ``bm``, ``bn``, ``bk`` (tile sizes, powers of two from 32 dividing the shape), ``block_dim``
(cores launched) and ``bufnum`` (1: single buffer, 2: double buffering); a point is legal when
``MatmulTiling.check`` accepts it (L0A/L0B/L0C/L1 capacity and divisibility).

* ``simulated_us``: the objective, the cost model's kernel time (``profile_records`` on the
  synthetic trace; launch overhead left out, as it is the same for every tiling);
* ``estimated_us``: the prior, a roofline per k-step (Cube vs MTE2 vs MTE1, overlapped when
  double-buffered, summed with the GM latency when not) times the tiles per core, microseconds
  to compute; it ranks points for the guided search and is never stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pycann.aoe.space import Axis, Config, Space, powers_of_two
from pycann.costmodel.matmul_sample import MatmulTiling
from pycann.costmodel.matmul_trace import matmul_records
from pycann.costmodel.profile import profile_records
from pycann.costmodel.socs import CostSoc, get_cost_soc

TILE_MIN, TILE_MAX = 32, 256


@dataclass(frozen=True)
class MatmulProblem:
    """C[m x n] = A[m x k] · B[k x n], fp16, on ``soc_version``."""

    m: int
    k: int
    n: int
    soc_version: str = "Ascend910B2"

    def __post_init__(self) -> None:
        get_cost_soc(self.soc_version)  # ValueError naming the known socs
        if min(self.m, self.k, self.n) < 16 or any(d % 16 for d in (self.m, self.k, self.n)):
            raise ValueError(f"MatMul {self.m}x{self.k} x {self.k}x{self.n}: the fp16 tiling kernel needs every "
                             "dimension a multiple of 16 (pad the operands, or tune another shape)")


def block_dims(soc: CostSoc) -> tuple[int, ...]:
    """1, 2, 4, ... up to the cube core count, and the core count itself."""
    return tuple(sorted({*powers_of_two(1, soc.aic), soc.aic}))


def tiling_of(cfg: Config) -> MatmulTiling:
    d = dict(cfg)
    return MatmulTiling(d["bm"], d["bn"], d["bk"], d["block_dim"], d["bufnum"])


def matmul_space(p: MatmulProblem, tile_min: int = TILE_MIN, tile_max: int = TILE_MAX,
                 blocks: tuple[int, ...] | None = None) -> Space:
    """The tiling space of ``p`` (see the module docstring). ``ValueError`` if no tile fits a dim."""
    soc = get_cost_soc(p.soc_version)

    def tiles(dim: int) -> tuple[int, ...]:
        t = tuple(v for v in powers_of_two(tile_min, tile_max) if dim % v == 0)
        if not t:
            t = tuple(v for v in powers_of_two(16, tile_max) if dim % v == 0)
        return t

    axes = (Axis("bm", tiles(p.m)), Axis("bn", tiles(p.n)), Axis("bk", tiles(p.k)),
            Axis("block_dim", blocks or block_dims(soc)), Axis("bufnum", (1, 2)))
    return Space(axes, lambda c: MatmulTiling(c["bm"], c["bn"], c["bk"], c["block_dim"], c["bufnum"]).check(p.m, p.k, p.n))


def simulated_us(p: MatmulProblem, cfg: Config) -> float:
    """The cost model's kernel time of ``cfg`` (microseconds, launch excluded). ``ValueError`` if illegal."""
    t = tiling_of(cfg)
    prof = profile_records(matmul_records(p.m, p.k, p.n, t), p.soc_version, t.block_dim)
    return prof.kernel_us


def estimated_us(p: MatmulProblem, cfg: Config) -> float:
    """The roofline prior of ``cfg`` (microseconds; see the module docstring)."""
    soc = get_cost_soc(p.soc_version)
    t = tiling_of(cfg)
    active = min(t.block_dim, soc.aic)
    waves = math.ceil(t.block_dim / soc.aic)
    n_tiles = (p.m // t.bm) * (p.n // t.bn)
    tiles_per_core = math.ceil(n_tiles / t.block_dim) * waves
    ksteps = p.k // t.bk
    # reads repeat across tiles: the L2 serves all but the first (the simulator's L2State rule)
    read = n_tiles * ksteps * (t.bm + t.bn) * t.bk * 2
    unique = (p.m * p.k + p.k * p.n) * 2
    hit = 1.0 - unique / read if read else 0.0
    hbm = soc.hbm_share(active)
    rate = 1.0 / ((1.0 - hit) / hbm + hit / soc.l2_read_rate)
    mac = t.bm * t.bn * t.bk / 4096 + soc.cube_latency
    mte2 = (t.bm + t.bn) * t.bk * 2 / rate
    mte1 = t.bm * t.bk * 2 / soc.l1_to_l0a_rate + t.bk * t.bn * 2 / soc.l1_to_l0b_rate + 2 * soc.local_latency
    step = max(mac, mte2, mte1) if t.bufnum > 1 else mac + mte2 + mte1 + soc.gm_latency
    fix = t.bm * t.bn * 4 / soc.l0c_to_out_rate + t.bm * t.bn * 2 / hbm + soc.gm_latency
    per_tile = ksteps * step + fix + (0 if t.bufnum > 1 else soc.gm_latency)
    return tiles_per_core * per_tile / soc.clock_hz * 1e6


def default_tiling(p: MatmulProblem, space: Space) -> Config:
    """The untuned choice: 128-square tiles on every core, double-buffered, where legal; else the
    legal point nearest to it (what a hand-written tiling function would pick)."""
    soc = get_cost_soc(p.soc_version)
    want = {"bm": 128, "bn": 128, "bk": 128, "block_dim": soc.aic, "bufnum": 2}
    legal = space.legal()
    if not legal:
        raise ValueError(f"MatMul {p.m}x{p.k} x {p.k}x{p.n}: no legal tiling")

    def dist(c: Config) -> float:
        d = dict(c)
        return sum(abs(math.log2(d[k] / v)) for k, v in want.items())

    return min(legal, key=dist)
