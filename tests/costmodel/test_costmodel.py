"""The cost model's arithmetic on small hand-computed kernels (reference ascendc-davinci.md 3-7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pycann import ascendc as A
from pycann.ascendc.enums import Pipe
from pycann.ascendc.trace import InstrRecord, Operand
from pycann.costmodel import Bound, get_cost_soc, profile_kernel, profile_records
from tests.costmodel.kernels import add_kernel, copy_in_kernel, gm

SOC = "Ascend910B2"


def _events(prof, pipe, api):
    return [e for c in prof.cores for e in c.events if e.pipe == pipe and e.api == api]


@pytest.fixture(autouse=True)
def _aiv():
    A.SetKernelMode(A.KernelMode.AIV_MODE)
    yield


def test_soc_table_peaks_match_reference():
    s = get_cost_soc("Ascend910B2")
    assert s.cube_peak_flops() == pytest.approx(353.9e12, rel=1e-3)  # reference 3.2
    assert get_cost_soc("Ascend910B1").cube_peak_flops() == pytest.approx(363.7e12, rel=1e-3)
    assert get_cost_soc("Ascend910B2").cube_peak_flops("int8_t") == pytest.approx(707.8e12, rel=1e-3)
    with pytest.raises(ValueError, match="Ascend910B2"):
        get_cost_soc("Ascend999")


def test_one_datacopy_is_bytes_over_bandwidth_plus_latency():
    n = 4096
    x, z = gm(np.ones(n, np.float16)), gm(np.zeros(n, np.float16))
    prof = profile_kernel(copy_in_kernel(n), 1, (x, z), SOC)
    s = get_cost_soc(SOC)
    (mte2,) = _events(prof, Pipe.PIPE_MTE2, "DataCopy")
    (mte3,) = _events(prof, Pipe.PIPE_MTE3, "DataCopy")
    assert mte2.end - mte2.start == s.gm_latency + math.ceil(2 * n / s.ddr_rate)  # one core: ddr_rate caps it
    assert mte3.end - mte3.start == s.gm_latency + math.ceil(2 * n / s.ddr_rate)
    assert mte3.start >= mte2.end                    # the queue hand-over orders MTE3 after MTE2
    assert prof.total_cycles == mte3.end
    assert prof.time_us == pytest.approx(mte3.end / s.clock_hz * 1e6 + s.launch_us)
    assert prof.bound == Bound.SYNC                  # 8 KiB: the GM latency dominates
    big = 1 << 16
    x, z = gm(np.ones(big, np.float16)), gm(np.zeros(big, np.float16))
    assert profile_kernel(copy_in_kernel(big), 1, (x, z), SOC).bound == Bound.MEMORY


def test_vector_add_cycles():
    k = 2048
    xs = [gm(np.ones(k, np.float16)) for _ in range(3)]
    prof = profile_kernel(add_kernel(k, k, 1), 1, tuple(xs), SOC)
    s = get_cost_soc(SOC)
    (add,) = _events(prof, Pipe.PIPE_V, "Add")
    assert add.end - add.start == math.ceil(k * 2 / 256) + s.vec_latency  # 128 fp16 lanes per cycle
    last_in = max(e.end for e in _events(prof, Pipe.PIPE_MTE2, "DataCopy"))
    assert add.start == last_in                    # RAW on both inputs


def test_mmad_fractal_count():
    s = get_cost_soc(SOC)
    recs = [InstrRecord(0, 1, Pipe.PIPE_M, "Mmad", "half",
                        (Operand("A2", "half", 32 * 64, 32 * 64 * 2, False, 0),
                         Operand("B2", "half", 64 * 48, 64 * 48 * 2, False, 0),
                         Operand("CO1", "float", 32 * 48, 32 * 48 * 4, True, 0)),
                        "t", (("m", 32), ("n", 48), ("k", 64)))]
    prof = profile_records(recs, SOC, 1)
    assert prof.total_cycles == 2 * 3 * 4 + s.cube_latency + s.issue_cycles - s.issue_cycles
    assert prof.flops == 2 * 32 * 48 * 64
    int8 = [InstrRecord(0, 1, Pipe.PIPE_M, "Mmad", "int8_t", (), "t", (("m", 32), ("n", 48), ("k", 64)))]
    assert profile_records(int8, SOC, 1).total_cycles == 2 * 3 * 2 + s.cube_latency  # K0 = 32 for int8


def test_setflag_waitflag_orders_pipes():
    s = get_cost_soc(SOC)
    mte2 = InstrRecord(0, 1, Pipe.PIPE_MTE2, "DataCopy", "half",
                       (Operand("GM", "half", 512, 1024, False, 0, 1), Operand("VECIN", "half", 512, 1024, True, 0)), "t")
    setf = InstrRecord(0, 2, Pipe.PIPE_MTE2, "SetFlag", None, (), "t", (("event_id", 0), ("src", 4), ("dst", 1)))
    waitf = InstrRecord(0, 3, Pipe.PIPE_V, "WaitFlag", None, (), "t", (("event_id", 0), ("src", 4), ("dst", 1)))
    dup = InstrRecord(0, 4, Pipe.PIPE_V, "Duplicate", "half", (Operand("VECCALC", "half", 128, 256, True, 4096),), "t")
    prof = profile_records([mte2, setf, waitf, dup], SOC, 1)
    ev = {e.api: e for e in prof.cores[0].events}
    copy_end = s.gm_latency + math.ceil(1024 / s.ddr_rate)
    assert ev["DataCopy"].end == copy_end
    assert ev["SetFlag"].end == copy_end              # fires when the copy has completed
    assert ev["WaitFlag"].start == copy_end           # waits for SetFlag
    assert ev["Duplicate"].start == ev["WaitFlag"].end  # no data hazard, only the flag
    nosync = profile_records([mte2, dup], SOC, 1)
    assert {e.api: e for e in nosync.cores[0].events}["Duplicate"].start < copy_end


def test_double_buffering_overlaps_mte2_with_vector():
    total, tile = 16384, 1024

    def run(bufnum):
        xs = [gm(np.ones(total, np.float16)) for _ in range(3)]
        return profile_kernel(add_kernel(total, tile, bufnum, rounds=40), 1, tuple(xs), SOC)
    single, double = run(1), run(2)
    assert double.total_cycles < 0.8 * single.total_cycles
    # in the double-buffered run some Add executes while an MTE2 copy is in flight
    adds = _events(double, Pipe.PIPE_V, "Add")
    copies = _events(double, Pipe.PIPE_MTE2, "DataCopy")
    assert any(c.start < a.end and a.start < c.end for a in adds for c in copies)
    assert double.ratio(Pipe.PIPE_V) > single.ratio(Pipe.PIPE_V)


def test_cores_share_hbm_bandwidth():
    s = get_cost_soc(SOC)
    assert s.hbm_share(1) == s.ddr_rate
    assert s.hbm_share(48) == pytest.approx(1600e9 / 48 / s.clock_hz)
    total = 48 * 1024
    xs = [gm(np.ones(total, np.float16)) for _ in range(3)]
    prof = profile_kernel(add_kernel(total, 1024, 2, n_cores=48), 48, tuple(xs), SOC)
    c = _events(prof, Pipe.PIPE_MTE2, "DataCopy")[0]
    assert c.end - c.start == s.gm_latency + math.ceil(2048 / s.hbm_share(48))
    assert prof.core_kind == "AIV" and len(prof.cores) == 48


def _read(core: int, addr: int, nbytes: int = 8192, sharers: int = 0) -> InstrRecord:
    params = (("sharers", sharers),) if sharers else ()
    return InstrRecord(core, 1, Pipe.PIPE_MTE2, "DataCopy", "half",
                       (Operand("GM", "half", nbytes // 2, nbytes, False, addr, 1),
                        Operand("VECIN", "half", nbytes // 2, nbytes, True, 0)), "t.py:1", params)


def test_same_address_reads_are_serialised_on_the_hbm_side():
    """Reference 3.x: same-address GM reads from many cores lose ~10-20% (the model: 15%, HBM side only)."""
    from pycann.costmodel.simulate import L2State, simulate_core

    s = get_cost_soc(SOC)
    hbm = s.hbm_share(2)
    alone = [_read(0, 0), _read(1, 8192)]  # two cores, two ranges: nothing shared, no reuse
    l2 = L2State(s, alone)
    assert l2.rate(1, 0, 8192, hbm) == (hbm, 0.0, 1)
    shared = [_read(0, 0), _read(1, 0)]  # both cores read one range: one miss (serialised), one L2 hit
    l2 = L2State(s, shared)
    rate, share, reads = l2.rate(1, 0, 8192, hbm)
    assert (share, reads) == (0.5, 2) and rate == pytest.approx(1 / (0.5 / (hbm / 1.15) + 0.5 / s.l2_read_rate))
    one = [_read(0, 0, sharers=24)]  # one core's records, 24 cores read it (fa_trace's K/V): all misses, serialised
    tl = simulate_core(0, one, s, 24, L2State(s, one))
    (ev,) = tl.events
    assert ev.end - ev.start == s.gm_latency + math.ceil(8192 / (s.hbm_share(24) / 1.15))
    assert simulate_core(0, [_read(0, 0)], s, 24, L2State(s, [_read(0, 0)])).cycles == \
        s.gm_latency + math.ceil(8192 / s.hbm_share(24))


def test_msprof_outputs(tmp_path):
    import csv
    import json

    from pycann.costmodel.export import write_outputs
    total, tile = 4096, 1024
    xs = [gm(np.ones(total, np.float16)) for _ in range(3)]
    prof = profile_kernel(add_kernel(total, tile, 2, n_cores=2, rounds=3), 2, tuple(xs), SOC)
    paths = write_outputs(prof, tmp_path, "add_custom")
    tr = json.loads(paths["trace"].read_text())
    xev = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in xev} == {0, 1}
    assert len(xev) == sum(len(c.events) for c in prof.cores)
    assert {e["cat"] for e in xev} >= {"MTE2", "VECTOR", "MTE3"}
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert names == {"core0.veccore0", "core1.veccore0"}
    s = get_cost_soc(SOC)
    last = max(xev, key=lambda e: e["ts"] + e["dur"])
    assert last["ts"] + last["dur"] == pytest.approx(prof.total_cycles / s.clock_hz * 1e6, rel=1e-3)
    (row,) = list(csv.DictReader(paths["op_summary"].open()))
    assert row["Task Type"] == "AI_VECTOR_CORE" and row["Block Dim"] == "2"
    assert float(row["aiv_vec_ratio"]) == pytest.approx(prof.ratio(Pipe.PIPE_V), abs=1e-4)
    assert float(row["aiv_mte2_ratio"]) == pytest.approx(prof.ratio(Pipe.PIPE_MTE2), abs=1e-4)
    assert "aiv_mac_ratio" in row
    try:
        import matplotlib  # noqa: F401
        assert paths["png"].stat().st_size > 0
        # one chart per core, named as msprof names the cores' folders (core<N>)
        assert {k: v.name for k, v in paths.items() if k.startswith("png_core")} == \
            {"png_core0": "pipeline_core0.png", "png_core1": "pipeline_core1.png"}
        assert all(v.stat().st_size > 0 for k, v in paths.items() if k.startswith("png"))
    except ImportError:
        assert "png" not in paths


def test_trace_l2_field_is_the_priced_share_not_a_hit():
    """A range read once is all HBM (l2_share 0) - also a cold first read at ts 0; a range two cores
    read is priced half at the L2 rate, on both reads (the model averages; it does not order reads)."""
    import json

    from pycann.costmodel.export import chrome_trace

    prof = profile_records([_read(0, 0), _read(1, 0), _read(1, 16384)], SOC, 2)
    xev = [e for e in chrome_trace(prof)["traceEvents"] if e["ph"] == "X"]
    assert all("l2_hit" not in e["args"] for e in xev)
    got = sorted((e["pid"], e["args"]["l2_share"], e["args"]["gm_reads"]) for e in xev)
    assert got == [(0, 0.5, 2), (1, 0.0, 1), (1, 0.5, 2)], json.dumps(xev)


def _overlaps(xev):
    by: dict = {}
    for e in xev:
        by.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    return [(k, a, b) for k, v in by.items() for a, b in zip(sorted(v), sorted(v)[1:]) if b[0] < a[1] - 1e-9]


@pytest.mark.parametrize("bufnum", [1, 2])
def test_trace_slices_on_one_thread_never_overlap(bufnum):
    """Chrome/Perfetto draw one thread's slices nested or apart: transfers in flight together (MTE2
    latency is pipelined) go on sub-lanes of their pipe, named "<PIPE> #k"."""
    from pycann.costmodel.export import chrome_trace

    total, tile = 16384, 1024
    xs = [gm(np.ones(total, np.float16)) for _ in range(3)]
    prof = profile_kernel(add_kernel(total, tile, bufnum, rounds=8), 1, tuple(xs), SOC)
    tr = chrome_trace(prof)
    xev = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["dur"] > 0]
    assert not _overlaps(xev)
    raw = [(e.start, e.end) for e in prof.cores[0].events if e.pipe == Pipe.PIPE_MTE2]
    if any(b[0] < a[1] for a, b in zip(raw, raw[1:])):  # the pipe did have transfers in flight together
        names = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
        assert "MTE2 #1" in names
    assert len([e for e in tr["traceEvents"] if e["ph"] == "X"]) == len(prof.cores[0].events)


def test_pipeline_png_shows_single_and_double_buffering_apart(tmp_path):
    """The per-core PNG draws every instruction (alternating shades, sub-lanes for overlapping ones):
    the MTE2 rows of bufnum=1 and bufnum=2 differ in the drawn bars, not only in length."""
    pytest.importorskip("matplotlib")
    from pycann.costmodel.export import lane_rows

    total, tile = 16384, 1024
    rows = {}
    for bufnum in (1, 2):
        xs = [gm(np.ones(total, np.float16)) for _ in range(3)]
        prof = profile_kernel(add_kernel(total, tile, bufnum, rounds=8), 1, tuple(xs), SOC)
        rows[bufnum] = lane_rows(prof.cores[0])
        for bars in rows[bufnum].values():  # each row: its bars never overlap
            spans = sorted((b[0], b[0] + b[1]) for b in bars)
            assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))
    mte2 = {k: sum(len(v) for r, v in rows[k].items() if r[0] == Pipe.PIPE_MTE2) for k in rows}
    assert mte2[1] == mte2[2] > 1  # every transfer is its own bar


    def overlap(r):  # cycles in which an MTE2 bar and a VECTOR bar are drawn at once
        adds = [b for k, v in r.items() if k[0] == Pipe.PIPE_V for b in v]
        copies = [b for k, v in r.items() if k[0] == Pipe.PIPE_MTE2 for b in v]
        return sum(max(0, min(a[0] + a[1], c[0] + c[1]) - max(a[0], c[0])) for a in adds for c in copies)
    assert overlap(rows[2]) > 2 * overlap(rows[1])  # double buffering: the transfers drawn under the compute
