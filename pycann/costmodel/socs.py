"""Per-SoC cost tables for the Da Vinci AI Core model (numbers: shared/reference/ascendc-davinci.md 3-7).

Every field says where it comes from: [V] ini/doc value, [D] derived from one, [A] a model
assumption (no published figure; docs/costmodel.md lists them). Rates are bytes per cycle per core
(``[AICoreMemoryRates]`` of the CANN ini files) unless the name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CostSoc:
    """The cost-model view of one ``soc_version``."""

    name: str
    clock_mhz: float                  # cube/AI Core clock [V ini]
    aic: int                          # cube (or coupled AI) cores [V ini]
    aiv: int                          # vector cores (0: coupled parts, the AI Core has the vector unit) [V]
    # MAC per cycle per core by input dtype: fp16/bf16 16x16x16 = 4096, int8 16x32x16 = 8192 [V 3.4];
    # fp32 at 1/4 of fp16 [U 3.4, measured HF32 ratio]
    cube_macs: dict[str, int] = field(default_factory=lambda: {
        "half": 4096, "bfloat16_t": 4096, "int8_t": 8192, "uint8_t": 8192, "float": 1024})
    vec_bytes_per_cycle: int = 256    # vec_calc_size=128 fp16 lanes [V ini, D]
    ddr_rate: int = 32                # GM via MTE2/MTE3 per core, L2 miss [V ini]
    l2_read_rate: int = 110           # GM read that hits L2 [V ini]
    l2_write_rate: int = 86           # [V ini]
    l1_to_l0a_rate: int = 512         # [V ini]
    l1_to_l0b_rate: int = 256         # [V ini]
    l0c_to_out_rate: int = 256        # l0_c_to_ub_rate; used for FixPipe's L0C read [V ini]
    ub_to_ddr_rate: int = 64          # [V ini]
    ub_to_l1_rate: int = 128          # [V ini]
    hbm_gbs: float = 1600.0           # chip GM bandwidth shared by all cores, GB/s [V Huawei doc, 192 MiB-L2 chips]
    l2_mib: int = 192                 # [V ini]
    launch_us: float = 10.0           # launch + host dispatch; calibrated on torch.matmul 1024³ (docs) [A]
    gm_latency: int = 300             # cycles from an MTE2/MTE3/FixPipe issue to its first byte [A]
    local_latency: int = 20           # cycles for on-chip moves (MTE1, UB<->L1) [A]
    vec_latency: int = 8              # cycles of pipeline fill per vector instruction [A]
    cube_latency: int = 16            # cycles of pipeline fill per Mmad [A]
    issue_cycles: int = 1             # scalar cycles to dispatch any instruction [A]
    scalar_cycles: int = 4            # cycles of one scalar GetValue/SetValue [A]
    slow_vec_factor: int = 4          # Exp/Ln/Div/Sqrt/Reciprocal/Rsqrt cost vs Add [U 7.2, A]
    # GM reads of one address range by several cores of a launch are serialised, "~10-20% loss" [V 2201 arch
    # page, reference 3.x "Other per-core facts"]: such a read gets its rate / (1 + this), the range's midpoint
    same_address_loss: float = 0.15

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    def cube_peak_flops(self, dtype: str = "half") -> float:
        """Chip peak FLOP/s: cores x MAC/cycle x 2 x f (reference 3.2 formula)."""
        return self.aic * self.cube_macs[dtype] * 2 * self.clock_hz

    def hbm_share(self, active_cores: int) -> float:
        """GM bytes per cycle one core gets when ``active_cores`` stream at once: min(ddr_rate, HBM / n)."""
        per = self.hbm_gbs * 1e9 / max(1, active_cores) / self.clock_hz
        return min(float(self.ddr_rate), per)


def _a2(name: str, aic: int, mhz: float, l2: int = 192) -> CostSoc:
    return CostSoc(name, mhz, aic, 2 * aic, l2_mib=l2)


COST_SOCS: dict[str, CostSoc] = {
    "Ascend910B1": _a2("Ascend910B1", 24, 1850),
    "Ascend910B2": _a2("Ascend910B2", 24, 1800),
    "Ascend910B3": _a2("Ascend910B3", 20, 1800),
    "Ascend910B4": _a2("Ascend910B4", 20, 1500, l2=96),
    "Ascend910_9391": _a2("Ascend910_9391", 24, 1850),
    # original 910 (arch 1001): coupled cores, ~1 GHz from the official 256 TFLOPS; HBM2 [T]
    "Ascend910A": CostSoc("Ascend910A", 1000, 32, 0, hbm_gbs=1200.0, l2_mib=32),
    # 310P3: 8 AI Cores @ 1060 MHz, LPDDR4X ~204.8 GB/s, 16 MiB L2; AI Core ddr_rate 17 [V ini]
    "Ascend310P3": CostSoc("Ascend310P3", 1060, 8, 0, ddr_rate=17, l2_read_rate=114, l2_write_rate=114,
                           l0c_to_out_rate=512, ub_to_ddr_rate=17, ub_to_l1_rate=256, hbm_gbs=204.8, l2_mib=16),
}
COST_SOCS["Ascend910_93"] = COST_SOCS["Ascend910_9391"]


def get_cost_soc(name: str) -> CostSoc:
    """The cost table for ``name``; ``ValueError`` listing the known soc_versions."""
    try:
        return COST_SOCS[name]
    except KeyError:
        raise ValueError(f"no cost table for soc_version {name!r}; known: {', '.join(sorted(COST_SOCS))}") from None
