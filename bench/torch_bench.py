"""pycann's PyTorch adaptor, side by side in one process (docs/torch.md).

``eager``: eager ResNet-50 (torchvision layout, ``scripts/torch_models.build_resnet50``) on the npu
device vs the same model on torch's CPU device; rounds alternate CPU and npu so that load on the
machine hits both alike; prints each side's median of round medians and the ratio (target <= 1.1).

``compile``: ``torch.compile(model, backend="npu")`` vs ONNX Runtime on the same model exported
with ``torch.onnx.export`` (TorchScript exporter, opset 17): ResNet-50, BERT-base, GPT-2-6L
(``scripts/torch_models``); compile time (first call, Dynamo + lowering + GE) is printed too.

    python bench/torch_bench.py eager [--rounds 7] [--iters 5] [--batch 1] [--threads N]
    python bench/torch_bench.py compile [--models resnet50 bert_base gpt2_6l] [--iters 20]

Run with and without ``OPENBLAS_CORETYPE=Haswell`` (pycann's GE kernels use OpenBLAS; torch's
kernels do not). Prints markdown rows for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402

import pycann.torch  # noqa: E402,F401


def _median_ms(fn: Callable[[], Any], iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def eager(rounds: int, iters: int, batch: int) -> None:
    import torch_models

    cpu = torch_models.build_resnet50(seed=0).eval()
    npu = torch_models.build_resnet50(seed=0).eval()
    npu.load_state_dict(cpu.state_dict())
    npu = npu.npu()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    xn = x.npu()
    with torch.no_grad():
        diff = float((cpu(x) - npu(xn).cpu()).abs().max())
        for _ in range(2):
            cpu(x)
            npu(xn)
        pycann.torch.reset()
        c_meds, n_meds = [], []
        for _ in range(rounds):
            c_meds.append(_median_ms(lambda: cpu(x), iters))
            n_meds.append(_median_ms(lambda: npu(xn), iters))
    c, n = statistics.median(c_meds), statistics.median(n_meds)
    r = pycann.torch.report()
    fb = ", ".join(s.name for s in r.fallbacks) or "none"
    print(f"| resnet50 eager | {batch} | {torch.get_num_threads()} | {c:.1f} | {n:.1f} | {n / c:.3f}x | "
          f"{min(c_meds):.1f} / {min(n_meds):.1f} | {diff:.1e} | {fb} |")
    print(r.format(only_fallbacks=False), file=sys.stderr)


def _model(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    import torch_models

    gen = torch.Generator().manual_seed(0)
    if name == "resnet50":
        return torch_models.build_resnet50(seed=0).eval(), (torch.randn(1, 3, 224, 224, generator=gen),)
    if name == "bert_base":
        ids = torch.randint(0, 30522, (1, 128), generator=gen)
        return torch_models.build_bert_base(seed=0).eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids))
    if name == "gpt2_6l":
        return torch_models.build_gpt2_6l(seed=0).eval(), (torch.randint(0, 50257, (1, 128), generator=gen),)
    raise SystemExit(f"unknown model {name!r}: resnet50, bert_base, gpt2_6l")


def compile_vs_ort(models: Sequence[str], iters: int) -> None:
    import onnxruntime as ort

    from pycann.torch.compile import graph_report, reset_graph_report

    for name in models:
        model, args = _model(name)
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, buf, dynamo=False, opset_version=17, do_constant_folding=True,
                              input_names=[f"i{k}" for k in range(len(args))])
        so = ort.SessionOptions()
        sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
        feeds = {f"i{k}": a.numpy() for k, a in enumerate(args)}
        with torch.no_grad():
            ref = model(*args)
            ref = ref[0] if isinstance(ref, (tuple, list)) else ref
            reset_graph_report()
            compiled = torch.compile(model.npu(), backend="npu")
            nargs = tuple(a.npu() for a in args)
            t0 = time.perf_counter()
            out = compiled(*nargs)
            first = time.perf_counter() - t0
            out = out[0] if isinstance(out, (tuple, list)) else out
            diff = float((out.cpu() - ref).abs().max())
            sess.run(None, feeds)
            o_meds, p_meds = [], []
            for _ in range(3):
                # a pause after each block: ORT's pool threads spin for a while after a run and
                # would take the cores from the next block (this host has two)
                o_meds.append(_median_ms(lambda s=sess, f=feeds: s.run(None, f), iters))
                time.sleep(0.3)
                p_meds.append(_median_ms(lambda c=compiled, a=nargs: c(*a), iters))
                time.sleep(0.3)
        recs = graph_report()
        ge = sum(1 for g in recs if g.compiled)
        comp = sum(g.compile_seconds for g in recs)
        o, p = statistics.median(o_meds), statistics.median(p_meds)
        print(f"| {name} | {o:.1f} | {p:.1f} | {p / o:.3f}x | {ge}/{len(recs)} | {comp:.2f} | {first:.2f} | "
              f"{diff:.1e} |")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["eager", "compile"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base", "gpt2_6l"])
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.what == "eager":
        print("| model | batch | threads | torch CPU ms | npu ms | npu/CPU | best CPU / npu ms | max abs diff | "
              "fallbacks |\n|---|---:|---:|---:|---:|---:|---:|---:|---|")
        eager(a.rounds, a.iters, a.batch)
    else:
        print("| model | ORT ms | compile(backend='npu') ms | pycann/ORT | graphs on GE | compile s | "
              "first call s | max abs diff |\n|---|---:|---:|---:|---:|---:|---:|---:|")
        compile_vs_ort(a.models, a.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
