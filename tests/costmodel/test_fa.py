"""FlashAttention forward records (fa_trace.py): hand-counted arithmetic and the 6.2 calibration."""

from __future__ import annotations

from collections import Counter

import pytest

from pycann.ascendc.enums import Pipe
from pycann.costmodel.calibrate import FA_HOST_FLOOR_US, FA_PUBLISHED, predict_fa
from pycann.costmodel.costs import param
from pycann.costmodel.fa_trace import CROSS_CORE_LATENCY, FaShape, FaTiling, fa_records
from pycann.costmodel.simulate import L2State, simulate_core
from pycann.costmodel.socs import get_cost_soc

SOC = "Ascend910B2"
TINY, ONE = FaShape(1, 1, 128, 256), FaTiling(128, 128, 1)  # one Q block, two KV blocks, one pair


def test_tiny_case_instruction_counts_and_flops():
    recs = fa_records(TINY, ONE)
    by_side = Counter(param(r, "side") for r in recs)
    # AIC: Q load+LoadData 2; per KV block QK (MTE2, MTE1, Mmad, Fixpipe, 2 SetFlag) 6 and
    # PV (2 WaitFlag, MTE2 P, MTE1, MTE2 V, MTE1, Mmad, Fixpipe, 2 SetFlag) 10 -> 2 + 2*16 = 34
    assert by_side[0] == 34
    # each AIV: softmax (WaitFlag, MTE2, 11 vector ops, MTE3, SetFlag) 15 x2, O update 3 + 4, final 3 -> 40
    assert by_side[1] == by_side[2] == 40
    mm = [r for r in recs if r.api == "Mmad"]
    assert [(param(r, "m"), param(r, "n"), param(r, "k")) for r in mm] == [(128, 128, 128)] * 4
    assert sum(2 * param(r, "m") * param(r, "n") * param(r, "k") for r in mm) == TINY.flops == 4 * 128 * 256 * 128
    gm_in = Counter((o.space, o.nbytes) for r in recs for o in r.operands
                    if o.position == "GM" and not o.is_output and not param(r, "l2ws"))
    assert gm_in == {(1, 128 * 128 * 2): 1, (2, 128 * 128 * 2): 2, (3, 128 * 128 * 2): 2}  # Q once, K and V blocks
    out = [o for r in recs for o in r.operands if o.position == "GM" and o.is_output and o.space == 4]
    assert sum(o.nbytes for o in out) == 128 * 128 * 2


def test_tiny_case_pipe_cycles_and_cross_core_latency():
    soc = get_cost_soc(SOC)
    recs = fa_records(TINY, ONE)
    tl = simulate_core(0, recs, soc, 1, L2State(soc, recs))
    assert tl.busy[Pipe.PIPE_M] == 4 * (8 * 8 * 8 + soc.cube_latency)  # 4 Mmads of 8x8x8 fractals
    exps = [e for e in tl.events if e.api == "Exp" and e.end - e.start > 100]  # the 64x128 fp32 S halves
    assert len(exps) == 4 and all(e.end - e.start == 128 * soc.slow_vec_factor + soc.vec_latency for e in exps)
    fix0 = next(e for e in tl.events if e.api == "Fixpipe")
    aiv_load = next(e for e in tl.events if e.pipe == Pipe.PIPE_MTE2 and e.api == "DataCopy")
    assert aiv_load.start == fix0.end + CROSS_CORE_LATENCY + 1  # flag fires at FixPipe's end, +1 the WaitFlag


def test_illegal_tiling_is_refused():
    with pytest.raises(ValueError, match="L0C overflow"):
        fa_records(FaShape(1, 1, 256, 256), FaTiling(256, 256, 1))
    with pytest.raises(ValueError, match="multiples"):
        fa_records(FaShape(1, 1, 100, 256), FaTiling(128, 128, 1))


def test_kv_reads_name_the_pairs_that_share_them():
    """K and V of one head are read by every pair that has one of its Q blocks: min(Q blocks, pairs)."""
    for shape, t, want in ((FaShape(1, 1, 3072, 256), FaTiling(128, 128, 24), 24),
                           (FaShape(1, 1, 1024, 256), FaTiling(128, 128, 24), 8)):
        recs = fa_records(shape, t, cores=[0])
        kv = [r for r in recs if any(o.position == "GM" and o.space in (2, 3) for o in r.operands)]
        assert kv and all(param(r, "sharers") == want for r in kv)


@pytest.mark.parametrize("i", [0, 1, 2, 3, 6, 7])  # 16384/32768 (~1 s / ~6 s) are in scripts/costmodel_calibrate.py
def test_fa_anchor_within_25_percent(i):
    a = FA_PUBLISHED[i]
    p = predict_fa(a.shape, a.soc_version)
    assert p.time_us >= FA_HOST_FLOOR_US
    assert abs(p.tflops / a.tflops - 1) <= 0.25, (a.shape, p.tflops, a.tflops)
