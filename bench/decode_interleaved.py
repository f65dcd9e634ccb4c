"""KV-cache decode, engines interleaved: one worker process per engine, taking turns at blocks of
greedy steps, so every engine sees the same moments of a shared machine (memory bandwidth on a VM
drifts by 2x within minutes, which one-process-per-cell runs cannot separate from a change).

Model and loop as ``bench/dynamic.py --part decode`` (``gpt2_6l_kv``, a 32-token prompt (``--prompt``), greedy
steps); each worker keeps its own cache and tokens, and the table says whether they equal the
first engine's. An engine is ``NAME[:VAR=VALUE,...][@ROOT]``: ``NAME`` one of bench/dynamic.py's
(``ort``, ``openvino``, ``pycann`` = the atc-compiled .om, ``pycann_onnx`` = the .onnx compiled
in the worker), environment variables for that worker, and a source tree to import pycann from
(a git worktree of another commit: an A/B in one run).

Usage (from the repository root)::

    python bench/decode_interleaved.py ort pycann_onnx
    python bench/decode_interleaved.py ort pycann_onnx pycann_onnx:GOMP_SPINCOUNT=20000 --batch 1
    python bench/decode_interleaved.py ort pycann_onnx@/path/to/worktree pycann_onnx --rounds 60
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
N_POSITIONS = 1024  # gpt2_6l_kv's position table (scripts/torch_models.GPT2Config)


def _worker(name: str, root: str, batch: int, prompt: int) -> None:
    """Serve blocks of decode steps: read a step count per line, answer the step times (s) as JSON."""
    sys.path[:0] = [root, str(pathlib.Path(root) / "bench")]
    for m in [k for k in sys.modules if k == "pycann" or k.startswith("pycann.")]:
        del sys.modules[m]  # an editable install imported another tree's pycann at start-up
    import dynamic  # bench/dynamic.py of that tree

    run, handle = dynamic.engine(name, dynamic.MODELS / "gpt2_6l_kv.onnx")
    ids = np.random.default_rng(0).integers(0, dynamic.VOCAB, (batch, prompt)).astype(np.int64)
    past = [np.zeros((batch, dynamic.HEADS, 0, dynamic.HEAD_DIM), np.float32) for _ in range(2 * dynamic.LAYERS)]
    out = run([ids, *past])
    tokens: list[list[int]] = []
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        times = []
        for _ in range(int(line)):
            nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
            tokens.append(nxt[:, 0].tolist())
            t0 = time.perf_counter()
            out = run([nxt, *out[1:]])
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)
    # runs a pycann worker made on its plan for fewer threads (the governor saw another process busy:
    # then the turn measured contention, not the engine)
    team = getattr(getattr(handle, "executor", None), "team_runs", None)
    print(json.dumps({"tokens": tokens, "team_runs": team}), flush=True)


def _spawn(spec: str, batch: int, prompt: int) -> subprocess.Popen[str]:
    rest, _, root = spec.partition("@")
    name, _, env_s = rest.partition(":")
    env = dict(os.environ)
    for kv in filter(None, env_s.split(",")):
        k, _, v = kv.partition("=")
        env[k] = v
    p = subprocess.Popen([sys.executable, __file__, "--worker", name, root or str(REPO), str(batch), str(prompt)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{spec}: worker did not start"
    return p


def _ask(p: subprocess.Popen[str], line: str) -> Any:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("engines", nargs="*", default=argparse.SUPPRESS, help="NAME[:VAR=VALUE,...][@ROOT], NAME one of ort, openvino, pycann (the "
                    "atc-compiled .om), pycann_onnx (the .onnx compiled in the worker); the first is the reference")
    ap.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens before the measured steps (the past length)")
    ap.add_argument("--block", type=int, default=4, help="steps an engine runs per turn")
    ap.add_argument("--rounds", type=int, default=40, help="turns per engine (steps = block x rounds)")
    ap.add_argument("--gap", type=float, default=0.05, help="idle seconds between turns (spinning pools settle)")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(a.worker[0], a.worker[1], int(a.worker[2]), int(a.worker[3]))
        return 0
    a.engines = getattr(a, "engines", [])  # (no "default: None" in --help)
    if not a.engines:
        ap.error("name at least one engine")
    import dynamic  # bench/dynamic.py: the engine names

    for e in a.engines:
        if (name := e.partition("@")[0].partition(":")[0]) not in dynamic.ENGINES:
            ap.error(f"engine {e!r}: {name!r} is not one of {', '.join(dynamic.ENGINES)}")
    if not 1 <= a.prompt <= N_POSITIONS - a.block * a.rounds:
        ap.error(f"--prompt {a.prompt}: the prompt needs at least 1 token, and prompt + block x rounds "
                 f"({a.block * a.rounds}) steps at most gpt2_6l_kv's {N_POSITIONS} positions")
    procs = {e: _spawn(e, a.batch, a.prompt) for e in a.engines}
    times: dict[str, list[float]] = {e: [] for e in a.engines}
    n = len(a.engines)
    for r in range(a.rounds):
        # rotate the order: over n rounds every engine takes every place in the turn (alternating
        # forward / reverse kept the middle engine of three in the middle, ~5 % faster there)
        for e in a.engines[r % n:] + a.engines[: r % n]:
            times[e] += _ask(procs[e], str(a.block))
            time.sleep(a.gap)
    ends = {e: _ask(p, "quit") for e, p in procs.items()}
    tokens = {e: r["tokens"] for e, r in ends.items()}
    for p in procs.values():
        p.wait()
    ref = a.engines[0]
    ref_ms = float(np.median(times[ref])) * 1e3
    load = os.getloadavg()[0]
    print(f"# {' '.join(['bench/decode_interleaved.py', *(argv or sys.argv[1:])])}  "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load:.1f})\n")
    print(f"gpt2_6l_kv, batch {a.batch}, prompt {a.prompt}, {a.block * a.rounds} steps per engine in turns of {a.block}\n")
    print(f"| engine | ms/token median | p10 | vs {ref} | tokens = {ref} | reduced-team runs |")
    print("|---|---:|---:|---:|---|---:|")
    for e in a.engines:
        t = np.array(times[e]) * 1e3
        team = ends[e]["team_runs"]
        print(f"| {e} | {np.median(t):.2f} | {np.percentile(t, 10):.2f} | {np.median(t) / ref_ms:.3f}x | "
              f"{tokens[e] == tokens[ref]} | {'-' if team is None else team} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
