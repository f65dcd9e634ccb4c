"""Print the cost model's calibration table (docs/costmodel.md): model vs published 910B GEMMs.

    python scripts/costmodel_calibrate.py        # GEMMs ~75 s (4096³ is a 600k-instruction trace)
    python scripts/costmodel_calibrate.py fa     # FlashAttention anchors only, ~50 s (32768² is 35 s)
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


def main() -> None:
    if sys.argv[1:] == ["fa"]:
        fa_table()
        return
    print("| GEMM (fp16) | SoC | published % of peak | model % of peak | model/published | model aic_mac_ratio | bound |")
    print("|---|---|---|---|---|---|---|")
    for a in PUBLISHED:
        p = predict_gemm(a.m, a.k, a.n, a.soc_version, DEFAULT_TILING)
        e = p.cube_efficiency
        print(f"| {a.m}x{a.k}x{a.n} | {a.soc_version} | {a.efficiency:.1%} | {e:.1%} | {e / a.efficiency:.2f} | "
              f"{p.ratio(2):.1%} | {p.bound.value} |")


    print()
    fa_table()


if __name__ == "__main__":
    main()
