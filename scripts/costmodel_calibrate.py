"""Print the cost model's calibration table (docs/costmodel.md): model vs published 910B GEMMs.

    python scripts/costmodel_calibrate.py           # GEMMs, contrast, FA: ~1 min in all (2026-12-03, load 1)
    python scripts/costmodel_calibrate.py contrast  # the seed's 1024x512 x 512x2048 contrast only (~35 s: a tiling search)
    python scripts/costmodel_calibrate.py fa        # FlashAttention anchors only, ~5 s (32768² is most of it)
"""

from __future__ import annotations

import sys

from pycann.costmodel.calibrate import DEFAULT_TILING, FA_PUBLISHED, PUBLISHED, predict_fa, predict_gemm


def fa_table() -> None:
    print("| FA forward (b, h, sq, sk, d) | SoC | published TFLOP/s (% of peak) | model device us | model us/call "
          "| model TFLOP/s (% of peak) | model/published | aic_mac_ratio | aiv_vec_ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a in FA_PUBLISHED:
        p = predict_fa(a.shape, a.soc_version)
        s = a.shape
        peak = p.tflops / p.efficiency
        print(f"| {s.batch}, {s.heads}, {s.sq}, {s.sk}, {s.d} | {a.soc_version} | {a.tflops} ({a.tflops / peak:.1%}) | "
              f"{p.kernel_us:.1f} | {p.time_us:.1f} | {p.tflops:.1f} ({p.efficiency:.1%}) | {p.tflops / a.tflops:.2f} | "
              f"{p.mac_ratio:.1%} | {p.vec_ratio:.1%} |")


def contrast_table() -> None:
    """The seed's contrast (1024x512 x 512x2048 fp16): the 128³ default, a 64³ tiling, and the best tiling
    the guided search finds (aoe's tune_tiling search, kernel time) with both metrics: the cube busy ratio
    (msprof's aic_mac_ratio, what people quote as utilisation) and the fraction of the chip's fp16 peak
    (launch included); plus what bounds the best one: tiles per core (waves over the cores) and launch."""
    from pycann.aoe.op_tuning import search_tiling
    from pycann.aoe.tiling import MatmulProblem, matmul_space, simulated_us, tiling_of
    from pycann.costmodel.matmul_sample import MatmulTiling

    m, k, n, soc = 1024, 512, 2048, "Ascend910B2"
    prob = MatmulProblem(m, k, n, soc)
    cache: dict = {}

    def obj(c):  # noqa: ANN001, ANN202
        if c not in cache:
            cache[c] = simulated_us(prob, c)
        return cache[c]

    res, _ = search_tiling(prob, matmul_space(prob), obj)
    best = tiling_of(res.best)
    print("| 1024x512 x 512x2048 fp16 tiling (bm x bn x bk, cores, buffers) | kernel us | us incl. launch | "
          "aic_mac_ratio | aic_mte2_ratio | % of chip peak (kernel only) | % of chip peak (with launch) | "
          "output tiles per core (max/mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for label, t in [("seed 'well tiled': 128x128x128, 24, 2", MatmulTiling(128, 128, 128, 24)),
                     ("seed 'badly tiled': 64x64x64, 24, 2", MatmulTiling(64, 64, 64, 24)),
                     (f"search best ({len(cache)} of {len(matmul_space(prob).legal())} simulated): "
                      f"{best.bm}x{best.bn}x{best.bk}, {best.block_dim}, {best.bufnum}", best)]:
        p = predict_gemm(m, k, n, soc, t)
        tiles = (m // t.bm) * (n // t.bn)
        kernel_only = p.cube_efficiency * p.time_us / p.kernel_us
        print(f"| {label} | {p.kernel_us:.2f} | {p.time_us:.2f} | {p.ratio(2):.1%} | {p.ratio(4):.1%} | "
              f"{kernel_only:.1%} | {p.cube_efficiency:.1%} | "
              f"{-(-tiles // t.block_dim)}/{tiles / t.block_dim:.2f} |")


def main() -> None:
    if sys.argv[1:] == ["fa"]:
        fa_table()
        return
    if sys.argv[1:] == ["contrast"]:
        contrast_table()
        return
    print("| GEMM (fp16) | SoC | published % of peak | model % of peak | model/published | model aic_mac_ratio | bound |")
    print("|---|---|---|---|---|---|---|")
    for a in PUBLISHED:
        p = predict_gemm(a.m, a.k, a.n, a.soc_version, DEFAULT_TILING)
        e = p.cube_efficiency
        print(f"| {a.m}x{a.k}x{a.n} | {a.soc_version} | {a.efficiency:.1%} | {e:.1%} | {e / a.efficiency:.2f} | "
              f"{p.ratio(2):.1%} | {p.bound.value} |")


    print()
    contrast_table()
    print()
    fa_table()


if __name__ == "__main__":
    main()
