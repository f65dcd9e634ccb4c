"""The tiled MatMul: twin result vs numpy, synthetic trace == twin trace, the tiling contrast."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.ascendc.enums import Pipe
from pycann.costmodel import profile_records
from pycann.costmodel.matmul_sample import MatmulTiling, run_matmul
from pycann.costmodel.matmul_trace import matmul_records

SOC = "Ascend910B2"


@pytest.mark.parametrize("shape,t", [((256, 128, 256), MatmulTiling(64, 64, 64, 4)),
                                     ((128, 64, 128), MatmulTiling(32, 64, 32, 3, 1))])
def test_synthetic_trace_matches_the_twin(shape, t):
    got, want, recs = run_matmul(*shape, t, SOC)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    syn = matmul_records(*shape, t)
    assert [(r.core, r.pipe, r.api, r.params) for r in recs] == [(r.core, r.pipe, r.api, r.params) for r in syn]
    strip = [tuple((o.position, o.nbytes, o.addr, o.is_output) for o in r.operands) for r in recs]
    assert strip == [tuple((o.position, o.nbytes, o.addr, o.is_output) for o in r.operands) for r in syn]
    p1, p2 = profile_records(recs, SOC, t.block_dim), profile_records(syn, SOC, t.block_dim)
    assert p1.total_cycles == p2.total_cycles
    assert p1.ratios == p2.ratios


def test_illegal_tiling_is_refused():
    with pytest.raises(ValueError, match="L0C overflow"):
        matmul_records(1024, 512, 2048, MatmulTiling(256, 256, 16, 24))
    with pytest.raises(ValueError, match="multiples of 16"):
        matmul_records(1024, 512, 2048, MatmulTiling(100, 128, 64, 24))


def test_seed_contrast_well_vs_badly_tiled():
    """1024x512 x 512x2048 fp16: a well-tiled kernel keeps the cube ~2x busier than a badly tiled one."""
    good = profile_records(matmul_records(1024, 512, 2048, MatmulTiling(128, 128, 128, 24)), SOC, 24)
    bad = profile_records(matmul_records(1024, 512, 2048, MatmulTiling(64, 64, 64, 24)), SOC, 24)
    assert 0.55 <= good.ratio(Pipe.PIPE_M) <= 0.85
    assert 0.2 <= bad.ratio(Pipe.PIPE_M) <= 0.4
    assert bad.time_us > 1.5 * good.time_us
    assert good.flops == bad.flops == 2 * 1024 * 512 * 2048


def test_calibration_1024_cubed_within_25_percent():
    from pycann.costmodel.calibrate import PUBLISHED, predict_gemm
    a = PUBLISHED[0]
    p = predict_gemm(a.m, a.k, a.n, a.soc_version)
    assert abs(p.cube_efficiency / a.efficiency - 1) <= 0.25
