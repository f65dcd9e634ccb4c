"""Calibration of the cost model against published 910B GEMM figures (ascendc-davinci.md 6.1).

``PUBLISHED`` holds the anchors; ``predict_gemm`` simulates the tiled MatMul (synthetic trace) for a
square fp16 GEMM with the given tiling and returns the achieved fraction of cube peak (launch
included, as a host-timed torch.matmul is). scripts/costmodel_calibrate.py prints the table of
docs/costmodel.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycann.costmodel.matmul_sample import MatmulTiling
from pycann.costmodel.matmul_trace import matmul_records
from pycann.costmodel.profile import Profile, profile_records


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
