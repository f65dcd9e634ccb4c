"""Where a ``torch.compile(backend="npu")`` call spends its time beyond its GE plan (ResNet-50, one process).

Three sides, interleaved in rounds that each start when the machine is idle (< 8 % busy CPU over
0.4 s, waiting up to 10 s; the busy fraction is printed per round): ONNX Runtime on the model's
ONNX export, the compiled call, and the GE plan the backend built (``LoadedModel.run``, captured
from ``pycann.torch.compile``) called directly with the same input. ``compiled - plan`` is the
cost of the torch.compile path (Dynamo's guards and prologue, the backend's tensor conversions);
the per-round ratios to ORT are robust against load that hits all sides alike. The CPU time the
calling thread spends in Dynamo before the backend's callable starts is measured separately
(``thread_time``, so it does not depend on load).

    python bench/compile_path_ab.py [--threads 2] [--rounds 6] [--plain-guards]

Wrap in ``flock /tmp/pycann-bench.lock`` and record ``cat /proc/loadavg`` (bench/RESULTS.md).
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

apply_omp_wait_policy()  # before torch loads its libgomp

import torch  # noqa: E402
import torch_bench  # noqa: E402  (bench/, this script's folder)

import pycann.torch  # noqa: E402, F401  (the npu device and backend)
import pycann.torch.compile as npu_compile  # noqa: E402
from pycann.ge.run import model as ge_model  # noqa: E402


def _idle(threshold: float = 0.08, wait_s: float = 10.0) -> float:
    """Wait until the machine's busy CPU fraction over 0.4 s is below ``threshold`` (or ``wait_s``
    passed); return the last fraction seen."""
    def sample() -> list[int]:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]

    end, busy = time.time() + wait_s, 1.0
    while time.time() < end:
        a = sample()
        time.sleep(0.4)
        d = [j - i for i, j in zip(a, sample())]
        busy = 1.0 - (d[3] + d[4]) / max(1, sum(d))
        if busy < threshold:
            break
    return busy


def _median_ms(fn: Callable[[], Any], iters: int = 7) -> float:
    """torch_bench's median of ``iters`` calls, after one warm-up call."""
    fn()
    return torch_bench._median_ms(fn, iters)


def main(argv: Sequence[str] | None = None) -> int:
    """Print per-round ms and ratios, and the CPU time of the Dynamo path per call."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--plain-guards", action="store_true",
                    help="Dynamo's default guards (without the backend's recursive dict tags), for an A/B")
    a = ap.parse_args(argv)
    if a.plain_guards:
        npu_compile._cheap_module_guards = lambda: None
    import onnxruntime as ort
    import torch_models
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(a.threads)
    threadpool_limits(a.threads, user_api="blas")
    torch.set_grad_enabled(False)
    plans: list[Any] = []
    entered: list[float] = []
    from_compiled, backend = ge_model.LoadedModel.from_compiled, npu_compile.npu_backend

    def capture_plan(cm: Any, *args: Any, **kw: Any) -> Any:
        plans.append(from_compiled(cm, *args, **kw))
        return plans[-1]

    def timed_backend(gm: Any, example: Any, **kw: Any) -> Callable[..., Any]:
        fn = backend(gm, example, **kw)

        def call(*args: Any) -> Any:
            entered.append(time.thread_time())
            return fn(*args)
        return call

    ge_model.LoadedModel.from_compiled = staticmethod(capture_plan)  # type: ignore[method-assign, assignment]
    npu_compile.npu_backend = timed_backend  # type: ignore[assignment]  # register()'s torch.compile wrapper looks it up per call
    model = torch_models.build_resnet50(seed=0).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf,  # type: ignore[arg-type]  # the exporter writes file objects too
                          dynamo=False, opset_version=17, do_constant_folding=True, input_names=["i0"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
    xn, xf = x.npu(), x.numpy()  # type: ignore[attr-defined]  # pycann.torch's Tensor.npu
    compiled = torch.compile(model.npu(), backend="npu")
    compiled(xn)
    plan = plans[-1]
    sides: dict[str, Callable[[], Any]] = {"ort": lambda: sess.run(None, {"i0": xf}),
                                           "plan": lambda: plan.run([xf]), "compiled": lambda: compiled(xn)}
    res: dict[str, list[float]] = {k: [] for k in sides}
    busy = []
    for _ in range(a.rounds):
        busy.append(_idle())
        for k, fn in sides.items():
            res[k].append(_median_ms(fn))
            time.sleep(0.1)
    pre = []
    for _ in range(20):
        t0 = time.thread_time()
        compiled(xn)
        pre.append(entered[-1] - t0)
    print(f"threads {a.threads}{', plain guards' if a.plain_guards else ''}; busy CPU at each round's start: {[round(b, 2) for b in busy]}")
    for k, v in res.items():
        print(f"{k:9s} ms per round: {[round(t, 2) for t in v]} (median {statistics.median(v):.2f})")
    for k in ("plan", "compiled"):
        r = [p / o for p, o in zip(res[k], res["ort"])]
        print(f"{k}/ORT per round: {[round(t, 3) for t in r]} (median {statistics.median(r):.3f})")
    gap = [c - p for c, p in zip(res["compiled"], res["plan"])]
    print(f"compiled - plan ms per round: {[round(g, 2) for g in gap]} (median {statistics.median(gap):.2f})")
    print(f"Dynamo path before the backend's callable: {statistics.median(pre) * 1e3:.3f} ms CPU per call (median of 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
