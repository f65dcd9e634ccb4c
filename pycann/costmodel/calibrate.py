"""Calibration of the cost model against published 910B GEMM (ascendc-davinci.md 6.1) and
FlashAttention (6.2) figures.

``PUBLISHED`` holds the anchors; ``predict_gemm`` simulates the tiled MatMul (synthetic trace) for a
square fp16 GEMM with the given tiling and returns the achieved fraction of cube peak (launch
included, as a host-timed torch.matmul is). ``FA_PUBLISHED`` / ``predict_fa`` do the same for the
FlashAttention forward (fa_trace.py). scripts/costmodel_calibrate.py prints the table of
docs/costmodel.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycann.ascendc.enums import Pipe
from pycann.costmodel.fa_trace import FaShape, FaTiling, fa_records
from pycann.costmodel.matmul_sample import MatmulTiling
from pycann.costmodel.matmul_trace import matmul_records
from pycann.costmodel.profile import Profile, profile_records
from pycann.costmodel.simulate import L2State, simulate_core
from pycann.costmodel.socs import get_cost_soc


@dataclass(frozen=True)
class GemmAnchor:
    """A published GEMM: shape, soc, achieved fraction of the ini fp16 peak, source."""

    m: int
    k: int
    n: int
    soc_version: str
    efficiency: float
    source: str


_TORCH = "torch.matmul fp16, 910B2 (zzc0721/torch-performance-test-data#109)"
PUBLISHED = [
    GemmAnchor(1024, 1024, 1024, "Ascend910B2", 0.277, _TORCH),
    GemmAnchor(2048, 2048, 2048, "Ascend910B2", 0.709, _TORCH),
    GemmAnchor(4096, 4096, 4096, "Ascend910B2", 0.889, _TORCH),
]
DEFAULT_TILING = MatmulTiling(128, 128, 128, 24)


def predict_gemm(m: int, k: int, n: int, soc_version: str, tiling: MatmulTiling = DEFAULT_TILING) -> Profile:
    """The simulated profile of the fp16 MatMul (m, k, n) with ``tiling`` on ``soc_version``."""
    return profile_records(matmul_records(m, k, n, tiling), soc_version, tiling.block_dim)


# ---- FlashAttention (ascendc-davinci.md 6.2) ----

@dataclass(frozen=True)
class FaAnchor:
    """A published FlashAttention forward: shape, soc, achieved TFLOP/s (4·b·h·sq·sk·d convention), source."""

    shape: FaShape
    soc_version: str
    tflops: float
    source: str


_PTO_ISA = "torch_npu npu_fusion_attention, 910B2, b=1 h=1 d=128 (PTO-ISA README, pto-isa#105)"
_PTO_DSL = "torch_npu FA reference, 24 cores, d=128, b=h=1 assumed (huawei-csl/pto-dsl#126)"
FA_PUBLISHED = [
    *(FaAnchor(FaShape(1, 1, n, n), "Ascend910B2", tf, _PTO_ISA)
      for n, tf in ((1024, 9.2), (2048, 30.3), (4096, 72.6), (8192, 97.3), (16384, 122.9), (32768, 150.8))),
    FaAnchor(FaShape(1, 1, 3072, 8192), "Ascend910B2", 73.4, _PTO_DSL),
    FaAnchor(FaShape(1, 1, 3072, 16384), "Ascend910B2", 106.3, _PTO_DSL),
]
# Host-side floor of one torch_npu fused-attention call, timed back to back (launches are asynchronous,
# so a call costs max(host dispatch, device time)): the same benchmark's sq=128, sk=1024 call takes
# 70.338 us while its device work is ~20 us (PTO-ISA demos/torch_jit/flash/README.md) [V/D].
FA_HOST_FLOOR_US = 70.338
DEFAULT_FA_TILING = FaTiling(128, 128, 24)  # S1 base 128 x S2 base 128, one AIC/AIV pair per AIC [A]


@dataclass(frozen=True)
class FaPrediction:
    """The model's FlashAttention forward: device time, time per call, efficiency and pipe ratios."""

    shape: FaShape
    soc_version: str
    kernel_us: float      # slowest AIC/AIV pair, launch excluded
    time_us: float        # max(host floor, kernel + launch_us)
    efficiency: float     # 4·b·h·sq·sk·d / time over the chip's fp16 cube peak
    mac_ratio: float      # cube busy share of the slowest pair
    vec_ratio: float      # vector busy share, mean of its two AIVs
    mte2_ratio: float     # MTE2 busy share, mean over the AIC and its two AIVs

    @property
    def tflops(self) -> float:
        return self.shape.flops / (self.time_us * 1e-6) / 1e12


def predict_fa(s: FaShape, soc_version: str = "Ascend910B2", t: FaTiling = DEFAULT_FA_TILING,
               host_floor_us: float = FA_HOST_FLOOR_US) -> FaPrediction:
    """Simulate the FlashAttention forward ``s`` (fa_trace.py) on ``soc_version``.

    Only pair 0 is simulated: items go round-robin, so it has the most work and every pair runs the
    same instruction stream; all ``min(block_dim, items)`` pairs share HBM. ``ValueError`` for an
    illegal tiling or unknown soc."""
    soc = get_cost_soc(soc_version)
    recs = fa_records(s, t, cores=[0])
    items = s.batch * s.heads * (s.sq // t.br)
    tl = simulate_core(0, recs, soc, max(1, min(t.block_dim, items, soc.aic)), L2State(soc, recs))
    waves = -(-min(t.block_dim, items) // soc.aic)
    kernel_us = waves * tl.cycles / soc.clock_hz * 1e6
    time_us = max(host_floor_us, kernel_us + soc.launch_us)
    eff = s.flops / (time_us * 1e-6) / soc.cube_peak_flops("half")
    c = max(1, tl.cycles)
    return FaPrediction(s, soc_version, kernel_us, time_us, eff, tl.busy[Pipe.PIPE_M] / c,
                        tl.busy[Pipe.PIPE_V] / 2 / c, tl.busy[Pipe.PIPE_MTE2] / 3 / c)
