"""The instruction trace of ``matmul_sample.matmul_kernel`` generated without running the twin.

The twin computes every product (seconds for 1024x512x2048, minutes for 4096³); a tiling search or
a calibration against large published GEMMs only needs the instruction stream, which depends on
the shape and tiling alone. ``matmul_records`` emits the same ``InstrRecord`` sequence the twin
traces (tests/costmodel checks the simulated cycles agree exactly on small shapes).
"""

from __future__ import annotations

from pycann.ascendc.enums import Pipe
from pycann.ascendc.trace import InstrRecord, Operand
from pycann.costmodel.matmul_sample import FRACTAL, K0, MatmulTiling

_A, _B, _C = 1, 2, 3  # GM buffer ids of A, B and C within the synthetic launch


def matmul_records(m: int, k: int, n: int, t: MatmulTiling) -> list[InstrRecord]:
    """Trace of C[m x n] = A[m x k]·B[k x n] (fp16) with tiling ``t``; ``ValueError`` if illegal."""
    why = t.check(m, k, n)
    if why:
        raise ValueError(f"MatMul {m}x{k} x {k}x{n}: {why}")
    bm, bn, bk, nb = t.bm, t.bn, t.bk, t.bufnum
    a_sz, b_sz, c_sz = bm * bk * 2, bk * bn * 2, bm * bn * 4
    l1_a = [i * a_sz for i in range(nb)]
    l1_b = [nb * a_sz + i * b_sz for i in range(nb)]
    l0a = [i * a_sz for i in range(nb)]
    l0b = [i * b_sz for i in range(nb)]
    l0c = [i * c_sz for i in range(nb)]
    tiles_n = n // bn
    n_tiles = (m // bm) * tiles_n
    out: list[InstrRecord] = []
    where = "pycann/costmodel/matmul_sample.py"
    for core in range(t.block_dim):
        seq = 0
        ia = ib = ic = 0

        def rec(pipe: Pipe, api: str, dtype: str, ops: tuple[Operand, ...], params: tuple[tuple[str, int], ...],
                core: int = core) -> None:
            nonlocal seq
            seq += 1
            out.append(InstrRecord(core, seq, pipe, api, dtype, ops, where, params))

        for tile in range(core, n_tiles, t.block_dim):
            mt, nt = divmod(tile, tiles_n)
            c_off = l0c[ic % nb]
            ic += 1
            for kt in range(k // bk):
                a1, b1 = l1_a[ia % nb], l1_b[ib % nb]
                a2, b2 = l0a[ia % nb], l0b[ib % nb]
                ia += 1
                ib += 1
                rec(Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
                    (Operand("GM", "half", bm * bk, a_sz, False, (mt * bm * k + kt * bk) * 2, _A),
                     Operand("A1", "half", bm * bk, a_sz, True, a1)), (("n", bm), ("d", bk)))
                rec(Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
                    (Operand("GM", "half", bk * bn, b_sz, False, (kt * bk * n + nt * bn) * 2, _B),
                     Operand("B1", "half", bk * bn, b_sz, True, b1)), (("n", bk), ("d", bn)))
                rep = bk // K0
                for mi in range(bm // 16):
                    rec(Pipe.PIPE_MTE1, "LoadData", "half",
                        (Operand("A1", "half", rep * FRACTAL, rep * FRACTAL * 2, False, a1),
                         Operand("A2", "half", rep * FRACTAL, rep * FRACTAL * 2, True, a2 + mi * rep * FRACTAL * 2)),
                        (("repeat", rep),))
                rep = bn // 16
                for ki in range(bk // K0):
                    rec(Pipe.PIPE_MTE1, "LoadData", "half",
                        (Operand("B1", "half", rep * FRACTAL, rep * FRACTAL * 2, False, b1),
                         Operand("B2", "half", rep * FRACTAL, rep * FRACTAL * 2, True, b2 + ki * rep * FRACTAL * 2)),
                        (("repeat", rep),))
                rec(Pipe.PIPE_M, "Mmad", "half",
                    (Operand("A2", "half", bm * bk, a_sz, False, a2), Operand("B2", "half", bk * bn, b_sz, False, b2),
                     Operand("CO1", "float", bm * bn, c_sz, True, c_off)), (("m", bm), ("n", bn), ("k", bk)))
            rec(Pipe.PIPE_FIX, "Fixpipe", "half",
                (Operand("CO1", "float", bm * bn, c_sz, False, c_off),
                 Operand("GM", "half", bm * bn, bm * bn * 2, True)), (("m", bm), ("n", bn)))
    return out
