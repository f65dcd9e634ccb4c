"""Per-node dispatch overhead of the executor's plans: a chain of tiny elementwise nodes (the work
per node is ~nothing, so the time per node is the executor's), pycann checkouts side by side with
ONNX Runtime on the same model, interleaved round by round.

    flock /tmp/pycann-bench.lock python bench/node_overhead.py --pycann before=/path/old after=$PWD

Each pycann checkout runs in its own child process (``PYTHONPATH`` = that checkout); ORT in one
too. A child loads the model, warms up, then reports the median time of ``--calls`` calls split
into blocks; the table shows the median over rounds of microseconds per node. The chain runs on
the static-shape plan's generated straight-line code (the child checks ``Plan._fast``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def chain_model(nodes: int, width: int):  # noqa: ANN201 - onnx is imported lazily
    """``nodes`` nodes cycling Add(const) -> Relu -> Mul(const) on a (1, width) float32 tensor."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.full((1, width), 0.5, np.float32), "c")]
    ops, cur = [], "x"
    for i in range(nodes):
        out = "y" if i == nodes - 1 else f"t{i}"
        kind = ("Add", "Relu", "Mul")[i % 3]
        ops.append(helper.make_node(kind, [cur] if kind == "Relu" else [cur, "c"], [out], name=f"n{i}"))
        cur = out
    g = helper.make_graph(ops, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def child(engine: str, nodes: int, width: int, calls: int) -> dict[str, float | bool]:
    """Time one engine in this process: median microseconds per call over blocks of calls."""
    model = chain_model(nodes, width)
    x = np.random.default_rng(0).standard_normal((1, width)).astype(np.float32)
    fast = False
    if engine == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

        def call() -> object:
            return sess.run(None, {"x": x})
    else:
        from pycann.ge.compile.compiler import compile_model
        from pycann.ge.run.model import LoadedModel

        lm = LoadedModel.from_compiled(compile_model(model))
        fast = lm.executor.plan_for([x])[0]._fast is not None

        def call() -> object:
            return lm.run([x])
    for _ in range(50):
        call()
    blocks = []
    per_block = max(1, calls // 10)
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(per_block):
            call()
        blocks.append((time.perf_counter() - t0) / per_block * 1e6)
    return {"us_per_call": statistics.median(blocks), "fast_path": fast}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pycann", nargs="+", default=[f"this={os.getcwd()}"], help="label=checkout path, each a pycann")
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.nodes, a.width, a.calls)))
        return
    engines = [tuple(p.split("=", 1)) for p in a.pycann] + [("ort", "")]
    results: dict[str, list[float]] = {label: [] for label, _ in engines}
    fast: dict[str, bool] = {}
    with open("/proc/loadavg", encoding="utf-8") as f:
        load_before = f.read().split()[:3]
    for _ in range(a.rounds):
        for label, path in engines:
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "ort" if label == "ort" else "pycann", "--nodes", str(a.nodes),
                   "--width", str(a.width), "--calls", str(a.calls)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=path or None)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[label].append(r["us_per_call"] / a.nodes)
            fast[label] = bool(r["fast_path"])
    with open("/proc/loadavg", encoding="utf-8") as f:
        load_after = f.read().split()[:3]
    print(f"{a.nodes}-node chain of Add/Relu/Mul on (1, {a.width}) float32, {a.rounds} interleaved rounds, "
          f"load {' '.join(load_before)} -> {' '.join(load_after)}")
    print(f"{'engine':<10} {'us/node (median)':>17} {'min':>7} {'max':>7}  generated code")
    for label, _ in engines:
        v = results[label]
        gen = "-" if label == "ort" else ("yes" if fast[label] else "NO")
        print(f"{label:<10} {statistics.median(v):>17.3f} {min(v):>7.3f} {max(v):>7.3f}  {gen}")


if __name__ == "__main__":
    main()
