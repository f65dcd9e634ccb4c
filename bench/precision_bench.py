"""What the precision modes cost or save on this CPU (docs/precision.md, "Speed").

Two parts, printed as markdown tables (run from the repository root)::

    python bench/precision_bench.py                    # resnet50, batch 1, 10 timed runs per mode
    python bench/precision_bench.py --model bert_base --runs 5
    python bench/precision_bench.py --torch-bf16       # + a bfloat16 Conv through torch (prototype provider)

1. pycann end to end: the model compiled in each mode and run on its benchmark inputs (median).
2. The kernels a bfloat16 provider would use: matrix products and convolutions of the model's sizes
   in float32 and bfloat16 — numpy (ml_dtypes bfloat16 has no GEMM, so it widens to float32) and, if
   PyTorch is importable, torch (oneDNN: AVX512_BF16 / AMX where the CPU has them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import ml_dtypes
import numpy as np

try:
    from scripts.model_zoo import MODELS
except ImportError:
    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])
    from scripts.model_zoo import MODELS

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel

MODES = ("must_keep_origin_dtype", "allow_fp32_to_bf16", "allow_mix_precision_bf16", "allow_fp32_to_fp16",
         "allow_mix_precision_fp16", "force_fp16")


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 2) -> float:
    """Median wall time in ms of ``runs`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_modes(name: str, runs: int, modes: tuple[str, ...] = MODES) -> list[tuple[str, float]]:
    spec = MODELS[name]
    path = str(spec.ensure())
    feeds = spec.inputs(0, 1)
    out = []
    for mode in modes:
        cm = compile_model(path, CompileOptions(precision_mode=mode, soc_version="Ascend910B2",
                                                input_shape={k: list(v.shape) for k, v in feeds.items()}))
        m = LoadedModel.from_compiled(cm)
        out.append((mode, median_ms(lambda m=m: m.run_dict(feeds), runs)))
    return out


# (label, M, K, N): ResNet-50 convolutions as im2col GEMMs at batch 1, its FC, and BERT-base's FFN
GEMMS = [("conv3x3 64->64 @56x56", 3136, 576, 64), ("conv1x1 256->64 @56x56", 3136, 256, 64),
         ("conv3x3 256->256 @14x14", 196, 2304, 256), ("fc 2048->1000", 1, 2048, 1000),
         ("bert ffn 128x768x3072", 128, 768, 3072)]


def _time_product(a: np.ndarray, b: np.ndarray, torch: object, runs: int) -> tuple[float, float, float | None, float | None]:
    a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    np32 = median_ms(lambda: a @ b, runs)
    np16 = median_ms(lambda: (a16.astype(np.float32) @ b16.astype(np.float32)).astype(ml_dtypes.bfloat16), runs)
    if torch is None:
        return np32, np16, None, None
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)  # type: ignore[attr-defined]
    ta16, tb16 = ta.to(torch.bfloat16), tb.to(torch.bfloat16)  # type: ignore[attr-defined]
    with torch.inference_mode():  # type: ignore[attr-defined]
        return np32, np16, median_ms(lambda: ta @ tb, runs), median_ms(lambda: ta16 @ tb16, runs)


def bench_kernels(runs: int) -> list[tuple[str, float, float, float | None, float | None]]:
    """(shape, numpy fp32, numpy bf16, torch fp32, torch bf16) in ms."""
    try:
        import torch

        torch.set_num_threads(2)
    except ImportError:
        torch = None  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    rows = []
    for label, m, k, n in GEMMS:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        rows.append((label, *_time_product(a, b, torch, runs)))
    return rows


def install_torch_bf16_conv() -> bool:
    """Prototype of an optional provider: bfloat16 Conv / FusedConv through torch (oneDNN) in this
    process only (the op table entries are swapped; pycann's sources are unchanged). Returns False
    without torch. 2-D convolutions with symmetric pads; anything else keeps the numpy kernel."""
    try:
        import dataclasses

        import torch
        import torch.nn.functional as tnf
    except ImportError:
        return False
    from pycann.ops import fused
    from pycann.ops.registry import complete

    table = complete()  # (every family read: the op table fills per family on first lookup)

    def to_t(a: np.ndarray) -> object:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)

    def wrap(op: object, post: bool) -> object:
        plain = op.kernel  # type: ignore[attr-defined]

        def kernel(inputs: list, attrs: dict) -> list:
            x, w = inputs[0], inputs[1]
            pads = list(attrs.get("pads") or [0] * 4)
            if str(x.dtype) != "bfloat16" or x.ndim != 4 or pads[:2] != pads[2:] or attrs.get("auto_pad", "NOTSET") != "NOTSET":
                return plain(inputs, attrs)
            b = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            with torch.inference_mode():
                y = tnf.conv2d(to_t(x), to_t(w), None if b is None else to_t(b), tuple(attrs.get("strides") or (1, 1)),
                               tuple(pads[:2]), tuple(attrs.get("dilations") or (1, 1)), int(attrs.get("group", 1)))
                y32 = y.float().numpy()
            if post:
                fused._post(y32, [None, None, None, *(a.astype(np.float32) for a in inputs[3:4] if a is not None)], attrs)
            return [y32.astype(ml_dtypes.bfloat16)]

        return dataclasses.replace(op, kernel=kernel, out_kernel=None)  # type: ignore[type-var]

    for key, post in ((("pycann", "FusedConv"), True), (("", "Conv"), False)):
        table[key] = [wrap(op, post) for op in table[key]]
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--torch-bf16", action="store_true", help="also time bfloat16 convolutions through torch (prototype)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    try:
        import torch

        print(f"<!-- torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
              f"mkldnn bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()} -->")
    except (ImportError, AttributeError):
        print("<!-- torch not importable -->")
    rows = bench_modes(args.model, args.runs)
    base = rows[0][1]
    print(f"| {args.model} batch 1, pycann | median ms | vs fp32 |\n|---|---|---|")
    for mode, ms in rows:
        print(f"| {mode} | {ms:.1f} | {base / ms:.2f}x |")
    if args.torch_bf16 and install_torch_bf16_conv():
        for mode, ms in bench_modes(args.model, args.runs, ("allow_mix_precision_bf16",)):
            print(f"| {mode} + torch bf16 Conv (prototype) | {ms:.1f} | {base / ms:.2f}x |")
    print("\n| product (M x K x N) | numpy fp32 | numpy bf16 (widened) | torch fp32 | torch bf16 |\n|---|---|---|---|---|")
    for label, a, b, c, d in bench_kernels(args.runs):
        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}"
        print(f"| {label} | {a:.2f} | {b:.2f} | {f(c)} | {f(d)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
