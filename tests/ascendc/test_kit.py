"""Twin mechanics: the unmodified CANN sample, launch errors, device-faithful behaviours, trace, printf, SoC table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from pycann import ascendc as A
from pycann.ascendc.diagnostics import KernelCheckError, Rule
from pycann.ascendc.enums import Memory
from pycann.ascendc.rounding import cast_round
from tests.ascendc.kit import f32, half, launch
from tests.shared_paths import shared

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = shared("samples/ascendc/add_custom.py")
P = A.TPosition


@pytest.mark.skipif(not SAMPLE.exists(), reason="shared CANN sample not on this machine")
def test_add_custom_sample_runs_unmodified(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(SAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "add_custom: ok"


@pytest.mark.skipif(not SAMPLE.exists(), reason="shared CANN sample not on this machine")
def test_add_custom_sample_under_pycann_run(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "pycann.tools.run", str(SAMPLE)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "add_custom: ok"


def test_scalar_access_at_an_odd_offset_is_fine() -> None:
    def kern(x):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, 64)
        t = b.Get(A.half)
        t[3].SetValue(0, 2.5)
        assert float(t[3].GetValue(0)) == 2.5

    res, _ = launch(kern, 1, half(16))
    assert not res.findings


def test_tiled_matmul_sample_matches_numpy() -> None:
    from pycann.ascendc.samples import matmul_tiled

    records: list[A.InstrRecord] = []
    got, want = matmul_tiled.run(trace=records.append)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3)
    mmads = [r for r in records if r.api == "Mmad"]
    assert len(mmads) == matmul_tiled.BLOCK_DIM * (matmul_tiled.N // matmul_tiled.BN) * (matmul_tiled.K // matmul_tiled.BK)
    assert dict(mmads[0].params) == {"m": 128, "n": 128, "k": 64}
    assert {r.pipe for r in records} >= {A.PIPE_MTE2, A.PIPE_MTE1, A.PIPE_M, A.PIPE_FIX}
    assert {r.core for r in records} == set(range(8))


def _add_kernel(tile: int):
    def kern(x, y):
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        pipe.InitBuffer(q, 1, 512)
        gx, gy = A.GlobalTensor(A.half), A.GlobalTensor(A.half)
        gx.SetGlobalBuffer(x.As(A.half) + 128 * A.GetBlockIdx(), 128)
        gy.SetGlobalBuffer(y.As(A.half) + 128 * A.GetBlockIdx(), 128)
        t = q.AllocTensor(A.half)
        A.DataCopy(t, gx, tile)
        q.EnQue(t)
        t = q.DeQue(A.half)
        A.printf("tile %d first %.1f\n", tile, float(t.GetValue(0)))
        A.DataCopy(gy, t, tile)
        q.FreeTensor(t)
    return kern


def test_datacopy_rounds_length_down_like_the_device() -> None:
    xs = half(256, 1, 2)
    res, bufs = launch(_add_kernel(100), 1, xs, np.zeros(256, np.float16))
    got = bufs[1].numpy(np.float16)[:256]
    np.testing.assert_array_equal(got[:96], xs[:96])      # 192 B copied
    assert (got[96:] == 0).all()                          # the 8-byte tail never arrives
    assert Rule.ALIGN_LEN in res.rules()


def test_uninitialised_ub_reads_as_nan() -> None:
    def kern(y):
        pipe = A.TPipe()
        q = A.TQue(P.VECOUT, 1)
        pipe.InitBuffer(q, 1, 256)
        g = A.GlobalTensor(A.float)
        g.SetGlobalBuffer(y.As(A.float), 64)
        t = q.AllocTensor(A.float)
        q.EnQue(t)
        t = q.DeQue(A.float)
        A.DataCopy(g, t, 64)
        q.FreeTensor(t)

    res, bufs = launch(kern, 1, np.zeros(64, np.float32))
    assert np.isnan(bufs[0].numpy(np.float32)[:64]).all()
    assert res.rules() == {Rule.READ_UNINIT}


def test_icpu_run_kf_raises_with_file_line_and_printf_per_core(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = A.GmAlloc(512), A.GmAlloc(512)
    x.numpy(np.float16)[:] = 3.0  # 2 cores x 128 halves
    res = A.ICPU_RUN_KF(_add_kernel(128), 2, x, y)
    assert res.logs[1] == ["[core 1] tile 128 first 3.0\n"]
    assert "[core 0] tile 128 first 3.0" in capsys.readouterr().out
    with pytest.raises(KernelCheckError) as ei:
        A.ICPU_RUN_KF(_add_kernel(100), 1, x, y)
    msg = str(ei.value)
    assert f"{__file__}:" in msg and "DataCopy" in msg and "align-len" in msg
    assert ei.value.findings[0].rule == Rule.ALIGN_LEN


def test_kernel_outside_launch_and_bad_launches() -> None:
    @A.kernel
    def k(x):
        A.GetBlockIdx()

    with pytest.raises(RuntimeError, match="ICPU_RUN_KF"):
        k(A.GmAlloc(32))
    with pytest.raises(ValueError, match="blockDim"):
        A.run_kernel(k, 0, (A.GmAlloc(32),))
    with pytest.raises(ValueError, match="unknown soc_version"):
        A.run_kernel(k, 1, (A.GmAlloc(32),), soc_version="Ascend999")
    g = A.GmAlloc(32)
    A.GmFree(g)
    with pytest.raises(ValueError, match="already free"):
        A.GmFree(g)
    with pytest.raises(ValueError, match="GmFree"):
        A.run_kernel(k, 1, (g,))
    with pytest.raises(RuntimeError):
        A.GetBlockIdx()


def test_block_idx_and_num_per_core() -> None:
    def kern(y):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, 64)
        t = b.Get(A.int32_t)
        A.Duplicate(t, A.GetBlockIdx() * 100 + A.GetBlockNum(), 8)
        A.SetFlag(A.HardEvent.V_MTE3, 0)
        A.WaitFlag(A.HardEvent.V_MTE3, 0)
        g = A.GlobalTensor(A.int32_t)
        g.SetGlobalBuffer(y.As(A.int32_t) + 8 * A.GetBlockIdx(), 8)
        A.DataCopy(g, t, 8)

    res, bufs = launch(kern, 3, np.zeros(24, np.int32))
    assert not res.findings
    np.testing.assert_array_equal(bufs[0].numpy(np.int32)[:24], np.repeat([3, 103, 203], 8))


def test_aborted_core_does_not_stop_the_others() -> None:
    def kern(x):
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        pipe.InitBuffer(q, 1, 64)
        if A.GetBlockIdx() == 1:
            q.DeQue(A.half)

    res, _ = launch(kern, 3, half(16))
    assert res.aborted_cores == [1]
    assert [f.core for f in res.findings] == [1]


def test_soc_table_numbers() -> None:
    b1, p3, a3 = A.get_soc("Ascend910B1"), A.get_soc("Ascend310P3"), A.get_soc("Ascend910_93")
    assert (b1.capacity[Memory.UB], b1.ub_usable, b1.capacity[Memory.L1], b1.capacity[Memory.L0C]) == (
        192 * 1024, 184 * 1024, 512 * 1024, 128 * 1024)
    assert (p3.capacity[Memory.UB], p3.capacity[Memory.L1], p3.capacity[Memory.L0C]) == (256 * 1024, 1 << 20, 256 * 1024)
    assert (b1.aic_num, b1.aiv_num, A.get_soc("Ascend910B3").aic_num, A.get_soc("Ascend910B4").aiv_num) == (24, 48, 20, 40)
    assert a3.arch == 2201 and a3.split and not p3.split and p3.arch == 2002
    assert A.get_soc("Ascend910A").event_ids == 4 and b1.event_ids == 8
    assert b1.align[Memory.L0A] == 512 and b1.align[Memory.L0C] == 64 and b1.align[Memory.UB] == 32
    assert b1.data_copy_pad and not p3.data_copy_pad
    for name in ("Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310P3", "Ascend910_93"):
        assert name in A.SOCS


def test_cast_round_modes_against_exact_arithmetic() -> None:
    x = np.random.default_rng(0).uniform(-70000, 70000, 20000)
    x = np.concatenate([x, np.random.default_rng(1).uniform(-1, 1, 20000) * 1e-3])
    for dt in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        fin = np.abs(x) < 60000 if dt == np.float16 else np.ones(x.size, bool)
        lo, hi = cast_round(x, dt, A.RoundMode.CAST_FLOOR), cast_round(x, dt, A.RoundMode.CAST_CEIL)
        lo64, hi64 = lo.astype(np.float64)[fin], hi.astype(np.float64)[fin]
        assert (lo64 <= x[fin]).all() and (hi64 >= x[fin]).all()
        # neighbours: floor and ceil are equal (exact) or one ulp apart
        gap = hi64 - lo64
        with np.errstate(all="ignore"):
            ulp = np.spacing(np.abs(lo).astype(dt)).astype(np.float64)[fin]
            assert ((gap == 0) | (gap <= ulp * 1.0001)).all()
        t = cast_round(x, dt, A.RoundMode.CAST_TRUNC).astype(np.float64)[fin]
        assert (np.abs(t) <= np.abs(x[fin])).all()
        r = cast_round(x, dt, A.RoundMode.CAST_RINT)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(r, x.astype(dt))
    # ties: CAST_ROUND away from zero, CAST_RINT to even
    ties = np.array([0.5, 1.5, 2.5, -2.5, 2049.0, 2051.0])
    np.testing.assert_array_equal(cast_round(ties, np.dtype(np.int32), A.RoundMode.CAST_ROUND), [1, 2, 3, -3, 2049, 2051])
    np.testing.assert_array_equal(cast_round(ties[4:], np.dtype(np.float16), A.RoundMode.CAST_ROUND), [2050, 2052])
    np.testing.assert_array_equal(cast_round(ties[4:], np.dtype(np.float16), A.RoundMode.CAST_RINT), [2048, 2052])
    np.testing.assert_array_equal(cast_round(np.array([1e10, -1e10, np.nan]), np.dtype(np.int16), A.RoundMode.CAST_RINT),
                                  [32767, -32768, 0])


def test_fp16_add_rounds_once_per_instruction() -> None:
    xs, ys = half(4096, 1, 100), half(4096, 1, 100, seed=1)

    def kern(x, y, z):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, 3 * 8192)
        t = b.Get(A.half)
        for k, g_ in enumerate((x, y)):
            g = A.GlobalTensor(A.half)
            g.SetGlobalBuffer(g_.As(A.half), 4096)
            A.DataCopy(t[k * 4096], g, 4096)
        A.PipeBarrier(A.PIPE_ALL)
        A.Add(t[8192], t, t[4096], 4096)
        A.Mul(t[8192], t[8192], t[8192], 4096)
        A.PipeBarrier(A.PIPE_ALL)
        g = A.GlobalTensor(A.half)
        g.SetGlobalBuffer(z.As(A.half), 4096)
        A.DataCopy(g, t[8192], 4096)

    res, bufs = launch(kern, 1, xs, ys, np.zeros(4096, np.float16))
    assert not res.findings
    s = xs + ys
    np.testing.assert_array_equal(bufs[2].numpy(np.float16)[:4096], s * s)


def test_trace_records_are_typed() -> None:
    recs: list[A.InstrRecord] = []
    x, y = A.GmAlloc(512), A.GmAlloc(512)
    A.run_kernel(_add_kernel(128), 1, (x, y), trace=recs.append)
    apis = [r.api for r in recs]
    assert apis == ["DataCopy", "GetValue", "DataCopy"]
    r = recs[0]
    assert r.pipe == A.PIPE_MTE2 and r.dtype == "half" and r.core == 0 and r.where.startswith(__file__)
    assert [(o.position, o.nbytes, o.is_output) for o in r.operands] == [("GM", 256, False), ("VECIN", 256, True)]
    assert recs[2].pipe == A.PIPE_MTE3


def test_mmad_accumulates_in_fp32() -> None:
    # 1 + 1e-4 * 16 in fp16 steps would stay 1.0; fp32 accumulation keeps it
    def kern(c):
        pipe = A.TPipe()
        qa, qb, qc = A.TQue(P.A2, 1), A.TQue(P.B2, 1), A.TQue(P.CO1, 1)
        pipe.InitBuffer(qa, 1, 512)
        pipe.InitBuffer(qb, 1, 512)
        pipe.InitBuffer(qc, 1, 1024)
        a, b, co = qa.AllocTensor(A.half), qb.AllocTensor(A.half), qc.AllocTensor(A.float)
        av = np.full((16, 16), 1e-3, np.float16)
        av[:, 0] = 1
        a.view()[:] = av.reshape(-1)
        b.view()[:] = np.ones(256, np.float16)
        for t in (a, b):
            t.buf.mem.written[t.byte_offset: t.byte_offset + 512] = True
        A.Mmad(co, a, b, A.MmadParams(16, 16, 16))
        qc.EnQue(co)
        co = qc.DeQue(A.float)
        g = A.GlobalTensor(A.float)
        g.SetGlobalBuffer(c.As(A.float), 256)
        A.Fixpipe(g, co, A.FixpipeParamsV220(16, 16, 16, 16))
        qa.FreeTensor(a)
        qb.FreeTensor(b)
        qc.FreeTensor(co)

    res, bufs = launch(kern, 1, np.zeros(256, np.float32), mode=A.KernelMode.AIC_MODE)
    assert not res.findings
    want = np.float32(1) + np.float32(np.float16(1e-3)) * 15
    np.testing.assert_allclose(bufs[0].numpy(np.float32)[:256], want, rtol=1e-6)
    assert f32(1).dtype == np.float32


PDB_KERNEL = '''
import numpy as np
from pycann import ascendc as A

@A.kernel
def k(x):
    pipe = A.TPipe()
    b = A.TBuf(A.TPosition.VECCALC)
    pipe.InitBuffer(b, 64)
    t = b.Get(A.float)
    A.Duplicate(t, float(A.GetBlockIdx()), 8)
    breakpoint()

A.ICPU_RUN_KF(k, 2, A.GmAlloc(32))
'''


def test_pdb_stops_inside_the_kernel_per_core(tmp_path: Path) -> None:
    script = tmp_path / "k.py"
    script.write_text(PDB_KERNEL)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONBREAKPOINT="pdb.set_trace")
    cmds = "p ('core', A.GetBlockIdx(), t.numpy()[0])\nc\np ('core', A.GetBlockIdx(), t.numpy()[0])\nc\n"
    out = subprocess.run([sys.executable, str(script)], input=cmds, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "('core', 0, np.float32(0.0))" in out.stdout and "('core', 1, np.float32(1.0))" in out.stdout


def test_wrong_operand_types_are_clear_errors() -> None:
    def vec_on_gm(x):
        g = A.GlobalTensor(A.half)
        g.SetGlobalBuffer(x.As(A.half), 16)
        A.Add(g, g, g, 16)

    def copy_raw_addr(x):
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        pipe.InitBuffer(q, 1, 64)
        t = q.AllocTensor(A.half)
        A.DataCopy(t, x, 16)

    def bad_arity(x):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, 64)
        t = b.Get(A.half)
        A.Adds(t, t, 1.0, 16, 1)

    with pytest.raises(TypeError, match="Add: dst must be a LocalTensor"):
        launch(vec_on_gm, 1, half(16))
    with pytest.raises(TypeError, match="SetGlobalBuffer"):
        launch(copy_raw_addr, 1, half(16))
    with pytest.raises(TypeError, match="trailing arguments"):
        launch(bad_arity, 1, half(16))


def test_cast_round_modes_from_integers() -> None:
    """int32 -> float / half honours the directed modes too (values between two representable floats)."""
    x = np.array([16777217, -16777217, 16777219, 5], np.int64)
    f32 = np.dtype(np.float32)
    expect = {A.RoundMode.CAST_RINT: [16777216, -16777216, 16777220, 5],
              A.RoundMode.CAST_FLOOR: [16777216, -16777218, 16777218, 5],
              A.RoundMode.CAST_CEIL: [16777218, -16777216, 16777220, 5],
              A.RoundMode.CAST_TRUNC: [16777216, -16777216, 16777218, 5],
              A.RoundMode.CAST_ROUND: [16777218, -16777218, 16777220, 5]}
    for mode, ref in expect.items():
        got = cast_round(x, f32, mode)
        assert got.dtype == f32
        np.testing.assert_array_equal(got.astype(np.int64), ref, err_msg=mode.name)
    h = np.array([2049, 4097, -2049], np.int64)
    f16 = np.dtype(np.float16)
    np.testing.assert_array_equal(cast_round(h, f16, A.RoundMode.CAST_FLOOR).astype(np.int64), [2048, 4096, -2050])
    np.testing.assert_array_equal(cast_round(h, f16, A.RoundMode.CAST_CEIL).astype(np.int64), [2050, 4100, -2048])
    np.testing.assert_array_equal(cast_round(h, f16, A.RoundMode.CAST_ROUND).astype(np.int64), [2050, 4096, -2050])
    np.testing.assert_array_equal(cast_round(h, f16, A.RoundMode.CAST_RINT).astype(np.int64), [2048, 4096, -2048])
