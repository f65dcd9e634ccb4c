"""ais_bench-compatible inference benchmark (cann-interfaces.md §6.2)::

    python -m pycann.tools.bench --model x.om --loop 100 --batchsize 1 \\
        [--input a.npy,dir2] [--output out] [--outfmt NPY|BIN|TXT] [--warmup_count 1] \\
        [--dymBatch 4 | --dymHW 224,224 | --dymDims "x:1,3,224,224" | --dymShape "x:1,3,224,224"] \\
        [--outputSize 100000] [--display_all_summary true] [--pure_data_type zero|random]

Prints ais_bench's "Performance Summary" (min / max / mean / median / 99th percentile, and the
throughput ``1000 * batchsize / mean compute ms``). ``NPU_compute_time`` is the model run on the
CPU device; ``H2D_latency`` / ``D2H_latency`` (``--display_all_summary``) time the copies of the
inputs / outputs through pycann's device memory pool. Options that mean nothing on the CPU
(``--profiler``, ``--dump``, ``--energy_consumption``, ...) are accepted with a warning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.acl.session import InferSession, latency_stats
from pycann.dtypes import to_numpy
from pycann.runtime import MemKind, Runtime

IGNORED = ("--profiler", "--dump", "--energy_consumption", "--npu_id", "--output_batchsize_axis",
           "--auto_set_dymshape_mode", "--auto_set_dymdims_mode", "--dymShape_range", "--run_mode",
           "--backend", "--perf", "--pipeline", "--threads", "--aipp_config")
WARMUP_BUILD_TIMEOUT_S = 120.0  # how long the warm-up waits for the background plan builds it queued


def str2bool(v: str | bool) -> bool:
    if isinstance(v, bool):
        return v
    if v.lower() in ("1", "true", "yes", "y", "t"):
        return True
    if v.lower() in ("0", "false", "no", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"boolean value expected, got '{v}'")


def _int_at_least(low: int) -> Any:
    """argparse type: an int >= ``low`` (ais_bench's check_positive_integer / _nonnegative_)."""
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{v}' is not an integer") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{n} is invalid: it must be {'positive' if low else 'non-negative'}")
        return n
    return parse


def _devices(v: str) -> list[int]:
    """--device: ais_bench's comma-separated device ids (``0`` or ``0,1``), each an int >= 0."""
    parts = [d.strip() for d in str(v).split(",")]
    try:
        ids = [int(d) for d in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{v}' is invalid: give device ids as integers, e.g. 0 or 0,1") from None
    if any(d < 0 for d in ids):
        raise argparse.ArgumentTypeError(f"'{v}' is invalid: a device id is >= 0")
    return ids


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pycann-bench", description="ais_bench-compatible benchmark on pycann")
    p.add_argument("--model", "-m", required=True, help="the .om (or .onnx) model")
    p.add_argument("--input", "-i", default=None, help="comma-separated .npy/.bin files or dirs, one per input")
    p.add_argument("--output", "-o", default=None, help="directory for outputs and the summary json")
    p.add_argument("--output_dirname", default=None, help="subdirectory name (default: a timestamp)")
    p.add_argument("--outfmt", default="BIN", choices=["NPY", "BIN", "TXT"])
    p.add_argument("--loop", "-l", type=_int_at_least(1), default=1, help="inferences per input set (>= 1)")
    p.add_argument("--warmup_count", type=_int_at_least(0), default=1)
    p.add_argument("--device", "-d", type=_devices, default=[0], help="device id(s), e.g. 0 or 0,1 (the first is used)")
    p.add_argument("--debug", type=str2bool, nargs="?", const=True, default=False)
    p.add_argument("--display_all_summary", type=str2bool, nargs="?", const=True, default=False)
    p.add_argument("--batchsize", type=_int_at_least(1), default=None)
    p.add_argument("--pure_data_type", default="zero", choices=["zero", "random"])
    p.add_argument("--dymBatch", type=int, default=0)
    p.add_argument("--dymHW", default=None)
    p.add_argument("--dymDims", default=None)
    p.add_argument("--dymShape", default=None)
    p.add_argument("--outputSize", default=None)
    p.add_argument("--acl_json_path", default=None)
    for opt in IGNORED:
        p.add_argument(opt, default=None, help=argparse.SUPPRESS)
    return p


def info(msg: str) -> None:
    print(f"[INFO] {msg}", flush=True)


def _configure(sess: InferSession, args: argparse.Namespace) -> tuple[str, Any]:
    """Apply --dym* options; returns (infer mode, custom_sizes)."""
    if args.dymBatch:
        sess.set_dynamic_batchsize(args.dymBatch)
        return "dymbatch", None
    if args.dymHW:
        h, w = (int(v) for v in args.dymHW.split(","))
        sess.set_dynamic_hw(w, h)
        return "dymhw", None
    if args.dymDims:
        sess.set_dynamic_dims(args.dymDims)
        return "dymdims", None
    if args.dymShape:
        sess.set_dynamic_shape(args.dymShape)
        sizes: Any = [int(s) for s in args.outputSize.split(",")] if args.outputSize else 1 << 62
        return "dymshape", sizes
    return "static", None


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith((".npy", ".bin")))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input {path} does not exist")
    return [path]


def _load(path: str, dtype: np.dtype, shape: list[int], name: str = "") -> np.ndarray:
    """One input file: a .npy as saved, or a .bin of raw ``dtype`` values in ``shape`` (one -1 allowed)."""
    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    raw = np.fromfile(path, dtype=dtype)
    if shape.count(-1) > 1:
        raise ValueError(f"{path}: a .bin input needs its shape: set --dymBatch/--dymHW/--dymDims/--dymShape")
    known = int(np.prod([d for d in shape if d >= 0]))
    if raw.size % max(known, 1) or (-1 not in shape and raw.size != known):
        # (numpy's "cannot reshape array of size 7 into shape (2,3,32,32)" named neither file nor input)
        need = f"{known * dtype.itemsize} bytes" if -1 not in shape else f"a multiple of {known * dtype.itemsize} bytes"
        raise ValueError(f"{path}: {raw.nbytes} bytes, but input '{name}' {dtype}[{','.join(map(str, shape))}] "
                         f"takes {need} of raw {dtype} (a .bin holds the input's values and nothing else)")
    return raw.reshape(shape)


def _gear_hint(gears: dict[str, Any] | None) -> str:
    """The bench option that selects the first gear of a gear model ("" for other models): a model
    compiled with --dynamic_batch_size runs a gear, which --dymShape with a made-up size would miss."""
    if not gears or not gears["profiles"]:
        return ""
    first = gears["profiles"][0]
    listed = "; ".join(",".join(str(v) for v in p) for p in gears["profiles"])
    if gears["kind"] == "batch":
        return f"--dymBatch {first[0]} (the model's {gears['option']} gears: {listed})"
    if gears["kind"] == "image_size":
        return f"--dymHW {first[0]},{first[1]} (the model's {gears['option']} gears: {listed})"
    dims = ";".join(f"{k}:{','.join(str(v) for v in shape)}" for k, shape in gears["shapes"][0].items())
    return f'--dymDims "{dims}" (the model\'s {gears["option"]} gears: {listed})'


def _pure(name: str, shape: list[int], dtype: np.dtype, kind: str, rng: np.random.Generator,
          gear_hint: str = "") -> np.ndarray:
    if any(d < 0 for d in shape):
        # batch 1 for a dynamic dim 0, 640 for the others: an example to edit, not a guess of the right size
        example = ",".join(str(d) if d >= 0 else ("1" if i == 0 else "640") for i, d in enumerate(shape))
        hint = gear_hint or f'--dymShape "{name}:{example}"'
        if shape == [-2]:  # (CANN's unknown rank: the example cannot know how many dims to give)
            hint = f'--dymShape "{name}:1,3,640,640" (its rank is unknown: give every dim)'
        raise ValueError(f"input '{name}' has shape {shape} with dynamic dims: set --dymBatch/--dymHW/--dymDims/"
                         f"--dymShape, e.g. {hint} (atc --mode=6 lists the inputs)")
    if kind == "zero":
        return np.zeros(shape, dtype)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(0, 10, shape).astype(dtype)


def feed_sets(sess: InferSession, args: argparse.Namespace) -> list[tuple[str, list[np.ndarray]]]:
    """(name, feeds) for each input set: the i-th file of each --input entry, or pure data."""
    infos, shapes = sess.get_inputs(), sess.input_shapes()
    dtypes = [to_numpy(i.dtype) for i in infos]
    if not args.input:
        rng = np.random.default_rng(0)
        hint = _gear_hint(sess.model.dynamic_gears())
        return [("pure_infer_data", [_pure(i.name, s, d, args.pure_data_type, rng, hint)
                                        for i, s, d in zip(infos, shapes, dtypes)])]
    paths = [p for p in args.input.split(",") if p]
    if len(paths) != len(infos):
        raise ValueError(f"--input has {len(paths)} entries; the model has {len(infos)} inputs")
    lists = [_files(p) for p in paths]
    n = min(len(x) for x in lists)
    out = []
    for k in range(n):
        feeds = [_load(lst[k], d, s, i.name) for lst, d, s, i in zip(lists, dtypes, shapes, infos)]
        out.append((os.path.splitext(os.path.basename(lists[0][k]))[0], feeds))
    return out


def _copy_times(rt: Runtime, arrays: Sequence[np.ndarray], to_device: bool) -> float:
    """ms to copy ``arrays`` into (or, having put them there, out of) device memory."""
    ptrs = [rt.malloc(max(1, a.nbytes)).base for a in arrays]
    try:
        if not to_device:
            for p, a in zip(ptrs, arrays):
                rt.space.write(p, a)
        t0 = time.perf_counter()
        for p, a in zip(ptrs, arrays):
            if to_device:
                rt.space.write(p, a)
            else:
                rt.space.read(p, a.nbytes)
        return (time.perf_counter() - t0) * 1e3
    finally:
        for p in ptrs:
            rt.space.free(p, frozenset({MemKind.DEVICE}))


def _save(outs: Sequence[np.ndarray], out_dir: str, stem: str, fmt: str) -> None:
    for j, o in enumerate(outs):
        path = os.path.join(out_dir, f"{stem}_{j}.{fmt.lower()}")
        if fmt == "NPY":
            np.save(path, o)
        elif fmt == "TXT":
            np.savetxt(path, np.asarray(o).reshape(-1, o.shape[-1]) if o.ndim > 1 else np.atleast_1d(o))
        else:
            np.ascontiguousarray(o).tofile(path)


def summary_lines(compute: Sequence[float], h2d: Sequence[float], d2h: Sequence[float], batchsize: int,
                  show_all: bool) -> tuple[list[str], dict[str, Any]]:
    """ais_bench's summary lines (without the ``[INFO] `` prefix) and the summary.json dict."""
    def line(name: str, st: dict[str, float]) -> str:
        return (f"{name} (ms): min = {st['min']:.3f}, max = {st['max']:.3f}, mean = {st['mean']:.3f}, "
                f"median = {st['median']:.3f}, percentile(99%) = {st['p99']:.3f}")

    c, h, d = latency_stats(compute), latency_stats(h2d), latency_stats(d2h)
    tput = 1000.0 * batchsize / c["mean"] if c["mean"] > 0 else 0.0
    lines = ["-----------------Performance Summary------------------"]
    if show_all:
        lines.append(line("H2D_latency", h))
    lines.append(line("NPU_compute_time", c))
    if show_all:
        lines.append(line("D2H_latency", d))
    lines += [f"throughput 1000*batchsize.mean({batchsize})/NPU_compute_time.mean({c['mean']:.3f}): {tput:.3f}",
              "------------------------------------------------------"]
    return lines, {"NPU_compute_time": c, "H2D_latency": h, "D2H_latency": d, "throughput": tput}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for opt in IGNORED:
        if getattr(args, opt.lstrip("-"), None) is not None:
            print(f"[WARNING] {opt} has no effect on pycann's CPU device; ignored", flush=True)
    if args.output:
        from pycann.paths import folder_problem

        why = folder_problem(args.output)
        if why:
            print(f"[ERROR] --output {args.output} is invalid: {why}", file=sys.stderr, flush=True)
            return 1
    devices: list[int] = args.device
    if len(devices) > 1:
        print(f"[WARNING] multi-device runs are not supported; using device {devices[0]}", flush=True)
    try:
        sess = InferSession(devices[0], args.model, args.acl_json_path, args.debug)
        info(f"load model {args.model} success")
        mode, sizes = _configure(sess, args)
        sets = feed_sets(sess, args)
        for _ in range(args.warmup_count):
            sess.infer(sets[0][1], mode, sizes if sizes is not None else 100000)
        if args.warmup_count:
            # a dynamic model's warm-up ran the shape-generic plan and queued the shape's specialised
            # plan for the background builder: let it finish, or the timed loop measures the build
            # (calls 9-16 of a shape run beside it) and the generic plan's calls before it
            executor = sess.model.executor
            executor.wait_builds(WARMUP_BUILD_TIMEOUT_S)
            if executor.cache_len() == 0:
                # a graph without convolutions gets a shape's plan on the shape's second call
                # (docs/dynamic-shapes.md, policy auto): make that call here, untimed, or the first
                # timed call builds the plan
                sess.infer(sets[0][1], mode, sizes if sizes is not None else 100000)
                executor.wait_builds(WARMUP_BUILD_TIMEOUT_S)
        sess.reset_summaryinfo()
        rt = Runtime(device_count=1)
        rt.set_device(0)
        h2d: list[float] = []
        d2h: list[float] = []
        out_dir = None
        if args.output:
            out_dir = os.path.join(args.output, args.output_dirname or time.strftime("%Y_%m_%d-%H_%M_%S"))
            os.makedirs(out_dir, exist_ok=True)
        for stem, feeds in sets:
            for _ in range(args.loop):
                if args.display_all_summary:
                    h2d.append(_copy_times(rt, feeds, True))
                outs = sess.infer(feeds, mode, sizes if sizes is not None else 100000)
                if args.display_all_summary:
                    d2h.append(_copy_times(rt, outs, False))
            if out_dir:
                _save(outs, out_dir, stem, args.outfmt)
        rt.shutdown()
    except Exception as e:  # noqa: BLE001 - a CLI reports and exits non-zero
        print(f"[ERROR] {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    batch = args.batchsize or (int(np.shape(sets[0][1][0])[0]) if sets[0][1] and np.ndim(sets[0][1][0]) else 1)
    lines, summary = summary_lines(sess.summary().times_ms(), h2d, d2h, batch, args.display_all_summary)
    for text in lines:
        info(text)
    if args.output:
        path = os.path.join(args.output, time.strftime("%Y_%m_%d-%H_%M_%S") + "_summary.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
