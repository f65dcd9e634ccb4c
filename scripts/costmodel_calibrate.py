"""Print the cost model's calibration table (docs/costmodel.md): model vs published 910B GEMMs.

    python scripts/costmodel_calibrate.py     # ~75 s (4096³ is a 600k-instruction trace)
"""

from __future__ import annotations

from pycann.costmodel.calibrate import DEFAULT_TILING, PUBLISHED, predict_gemm


def main() -> None:
    print("| GEMM (fp16) | SoC | published % of peak | model % of peak | model/published | model aic_mac_ratio | bound |")
    print("|---|---|---|---|---|---|---|")
    for a in PUBLISHED:
        p = predict_gemm(a.m, a.k, a.n, a.soc_version, DEFAULT_TILING)
        e = p.cube_efficiency
        print(f"| {a.m}x{a.k}x{a.n} | {a.soc_version} | {a.efficiency:.1%} | {e:.1%} | {e / a.efficiency:.2f} | "
              f"{p.ratio(2):.1%} | {p.bound.value} |")


if __name__ == "__main__":
    main()
