"""pycann's PyTorch adaptor against its peers, side by side in one process (docs/torch.md).

One run measures, for each thread count given (``--threads 1 2``), in interleaved rounds so that
load on the machine hits every side alike:

* ``eager``: ResNet-50 (torchvision layout, ``scripts/torch_models.build_resnet50``) on torch's CPU
  device, and on the npu device with ``PYCANN_TORCH_KERNELS=pycann`` (pycann's op library, the
  default) and ``=host`` (torch's kernels on the npu's host memory); bar: npu <= 1.1x torch CPU.
* ``compile``: ``torch.compile(model, backend="npu")`` against ONNX Runtime on the same model
  exported with ``torch.onnx.export`` (TorchScript exporter, opset 17): ResNet-50, BERT-base,
  GPT-2-6L (``scripts/torch_models``); bar: <= ORT. Compile time (Dynamo + lowering + GE) and the
  first call are printed too.

Threads: ``torch.set_num_threads(n)`` (torch's OpenMP pool, which pycann's conv provider and GE's
oneDNN kernels share: one libgomp in the process), ``threadpoolctl`` for OpenBLAS, and ORT's
``intra_op_num_threads = n``. pycann's OpenMP wait policy is set before ``import torch`` (as
``pycann-run`` does), so torch's libgomp starts with it.

    python bench/torch_bench.py [--threads 1 2] [--rounds 5] [--iters 5] [--only eager|compile]
           [--models resnet50 bert_base gpt2_6l]

Prints markdown tables for bench/RESULTS.md; wrap in ``flock /tmp/pycann-bench.lock`` and record
``cat /proc/loadavg`` before and after.
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

from pycann.config import apply_omp_wait_policy  # noqa: E402

apply_omp_wait_policy()  # before torch loads its libgomp (it reads the policy once)

import torch  # noqa: E402

import pycann.torch  # noqa: E402
from pycann.torch import _dispatch  # noqa: E402


def _median_ms(fn: Callable[[], Any], iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _rounds(sides: dict[str, tuple[Callable[[], Any] | None, Callable[[], Any]]], rounds: int,
            iters: int) -> dict[str, tuple[float, float]]:
    """(median, best) over rounds of each side's median; the sides alternate within every round, with a
    pause between blocks (a pool's spinning threads would otherwise take the next block's cores).
    Each side is (setup before its block, e.g. the kernel setting, or None; the timed call)."""
    meds: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(rounds):
        for name, (setup, fn) in sides.items():
            if setup is not None:
                setup()
            fn()  # warm
            meds[name].append(_median_ms(fn, iters))
            time.sleep(0.2)
    return {k: (statistics.median(v), min(v)) for k, v in meds.items()}


def resnet50_pair() -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor, torch.Tensor]:
    """ResNet-50 (eval) on torch's CPU device and the same weights on the npu, with an input for each."""
    import torch_models

    cpu = torch_models.build_resnet50(seed=0).eval()
    npu = torch_models.build_resnet50(seed=0).eval()
    npu.load_state_dict(cpu.state_dict())
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return cpu, npu.npu(), x, x.npu()


def eager(threads: Sequence[int], rounds: int, iters: int) -> None:
    cpu, npu, x, xn = resnet50_pair()
    print("| threads | torch CPU ms | npu pycann ms | pycann/CPU | npu host ms | host/CPU | best of rounds: CPU / pycann / "
          "host ms | max abs diff (pycann) |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
    with torch.no_grad():
        ref = cpu(x)
        _dispatch.use_kernels("pycann")
        diff = float((npu(xn).cpu() - ref).abs().max())
        for n in threads:
            _set_threads(n)
            m = _rounds({"cpu": (None, lambda: cpu(x)),
                         "pycann": (lambda: _dispatch.use_kernels("pycann"), lambda: npu(xn)),
                         "host": (lambda: _dispatch.use_kernels("host"), lambda: npu(xn))}, rounds, iters)
            (c, cb), (p, pb), (h, hb) = m["cpu"], m["pycann"], m["host"]
            print(f"| {n} | {c:.1f} | {p:.1f} | {p / c:.3f}x | {h:.1f} | {h / c:.3f}x | {cb:.1f} / {pb:.1f} / {hb:.1f} | "
                  f"{diff:.1e} |", flush=True)
    _dispatch.use_kernels(None)


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


def compile_vs_ort(models: Sequence[str], threads: Sequence[int], rounds: int, iters: int) -> None:
    """Each model is compiled anew at each thread count (oneDNN fixes a primitive's threads when a
    plan binds it, so a plan built at 2 threads would still use 2 when the process is set to 1)."""
    import onnxruntime as ort

    from pycann.torch.compile import graph_report, reset_graph_report

    exported = {}
    for name in models:
        model, args = _model(name)
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, buf, dynamo=False, opset_version=17, do_constant_folding=True,
                              input_names=[f"i{k}" for k in range(len(args))])
        with torch.no_grad():
            ref = model(*args)
        exported[name] = (model, args, buf.getvalue(), ref[0] if isinstance(ref, (tuple, list)) else ref)
    print("| model | threads | ORT ms | compile(backend='npu') ms | pycann/ORT | best of rounds: ORT / npu ms | "
          "graphs on GE | compile s | first call s | max abs diff |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in threads:
        _set_threads(n)
        for name, (model, args, onnx_bytes, ref) in exported.items():
            torch._dynamo.reset()
            reset_graph_report()
            nargs = tuple(a.npu() for a in args)
            with torch.no_grad():
                compiled = torch.compile(model.npu(), backend="npu")
                t0 = time.perf_counter()
                out = compiled(*nargs)
                first = time.perf_counter() - t0
            out = out[0] if isinstance(out, (tuple, list)) else out
            diff = float((out.cpu() - ref).abs().max())
            recs = graph_report()
            ge, comp = sum(1 for g in recs if g.compiled), sum(g.compile_seconds for g in recs)
            for g in recs:
                if not g.compiled:  # an eager graph makes the row a different measurement: say why
                    print(f"warning: {name} graph {g.index} ran eagerly: {g.reason}", file=sys.stderr)
            so = ort.SessionOptions()
            so.intra_op_num_threads = n
            sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
            feeds = {f"i{k}": a.numpy() for k, a in enumerate(args)}
            with torch.no_grad():
                m = _rounds({"ort": (None, lambda s=sess, f=feeds: s.run(None, f)),
                             "npu": (None, lambda c=compiled, a=nargs: c(*a))}, rounds, iters)
            (o, ob), (p, pb) = m["ort"], m["npu"]
            print(f"| {name} | {n} | {o:.1f} | {p:.1f} | {p / o:.3f}x | {ob:.1f} / {pb:.1f} | {ge}/{len(recs)} | "
                  f"{comp:.2f} | {first:.2f} | {diff:.1e} |", flush=True)
            del sess, compiled


def _set_threads(n: int) -> None:
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(n)
    threadpool_limits(n, user_api="blas")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["eager", "compile"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base", "gpt2_6l"])
    a = ap.parse_args(argv)
    if pycann.torch.OMP_POLICY_LATE:
        print("note: torch's OpenMP runtime started before pycann set its wait policy", file=sys.stderr)
    if a.only != "compile":
        eager(a.threads, a.rounds, a.iters)
    if a.only != "eager":
        compile_vs_ort(a.models, a.threads, a.rounds, a.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
