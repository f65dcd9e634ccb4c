"""``pycann compare``: layer-by-layer accuracy comparison of a pycann model with ONNX Runtime
(the role of CANN's msaccucmp on dump data; dump config: cann-interfaces.md §1.9).

ONNX Runtime runs the original model with every intermediate value exposed as a graph output
(graph optimisations off); pycann runs the .om (or the ONNX compiled in memory) with a tensor
capture (``pycann.profiler.dump.TensorCapture``). Each executed pycann node is matched to the
ONNX node that produces the same value: a fused node (``Node.origin`` lists the original nodes)
outputs the value of the LAST original node it covers, so that value is compared. Per node:
cosine similarity, max absolute error, max relative error (``|a-b| / max(|ref|, atol)``), the
relative L2 error and a status; a node agrees when ``cosine >= --cosine`` (0.999) and the
relative L2 error ``<= --rtol`` (1e-4: above fp32 rounding noise of ordinary layers, below fp16
rounding), or when every element is within ``--atol`` (1e-6).
The first node (in execution order) that does not agree is named: upstream of it everything
agrees, so it is where the loss starts.

``pycann compare --model m.onnx --om m.om [--input a.npy,b.npy] [--output DIR]`` prints a table
and writes ``compare_result_<time>.csv``. Exit status: 0 all agree, 1 a node disagrees, 2 error.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

CSV_COLUMNS = ["Index", "pycann Node", "pycann OP Type", "Origin Ops", "ONNX Node", "ONNX OP Type", "Value",
               "Shape", "DType", "Cosine Similarity", "Max Absolute Error", "Max Relative Error", "Relative L2 Error", "Status"]


@dataclass
class Row:
    """One comparison (or one ONNX node without a pycann counterpart: status fused / folded)."""

    index: int
    node: str
    op_type: str
    origin: list[str]
    onnx_node: str
    onnx_type: str
    value: str
    shape: tuple[int, ...] = ()
    dtype: str = ""
    cosine: float = float("nan")
    max_abs: float = float("nan")
    max_rel: float = float("nan")
    rel_l2: float = float("nan")
    status: str = "ok"


@dataclass
class CompareResult:
    """All rows in pycann's execution order; ``first_bad`` is the first disagreeing one."""

    rows: list[Row] = field(default_factory=list)
    others: list[Row] = field(default_factory=list)

    @property
    def compared(self) -> list[Row]:
        return [r for r in self.rows if r.status in ("ok", "MISMATCH", "shape")]

    @property
    def first_bad(self) -> Row | None:
        return next((r for r in self.compared if r.status != "ok"), None)

    def write_csv(self, path: str) -> None:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(CSV_COLUMNS)
            for r in self.rows + self.others:
                w.writerow([r.index, r.node, r.op_type, ";".join(r.origin), r.onnx_node, r.onnx_type, r.value,
                            ",".join(map(str, r.shape)), r.dtype, f"{r.cosine:.6f}", f"{r.max_abs:.6g}",
                            f"{r.max_rel:.6g}", f"{r.rel_l2:.6g}", r.status])

    def table(self, max_rows: int = 50) -> str:
        rows = self.compared
        bad = self.first_bad
        if len(rows) > max_rows:
            stop = rows.index(bad) + 5 if bad is not None else max_rows
            rows = rows[max(0, stop - max_rows):stop]
        lines = [f"{'#':>4} {'pycann node':<28} {'OP Type':<16} {'ONNX node':<24} {'cosine':>9} {'max abs':>10} "
                 f"{'max rel':>10} {'rel L2':>10}  status"]
        for r in rows:
            lines.append(f"{r.index:>4} {r.node[:28]:<28} {r.op_type[:16]:<16} {r.onnx_node[:24]:<24} {r.cosine:>9.6f} "
                         f"{r.max_abs:>10.3g} {r.max_rel:>10.3g} {r.rel_l2:>10.3g}  {r.status}")
        if len(rows) < len(self.compared):
            lines.append(f"     ({len(self.compared) - len(rows)} more rows in the CSV)")
        return "\n".join(lines)


def metrics(got: np.ndarray, ref: np.ndarray, atol: float, rtol: float, min_cosine: float) -> tuple[float, float, float, float, bool]:
    """``(cosine, max_abs, max_rel, rel_l2, agrees)`` of ``got`` against ``ref`` (same shape).

    ``rel_l2 = ||got - ref|| / max(||ref||, atol * sqrt(n))``; the values agree when
    ``cosine >= min_cosine`` and ``rel_l2 <= rtol``, or when every element is within ``atol``.
    A non-finite value where the reference is finite (fp16 overflow) never agrees."""
    a = np.asarray(got).astype(np.float64).ravel()
    b = np.asarray(ref).astype(np.float64).ravel()
    if a.size == 0:
        return 1.0, 0.0, 0.0, 0.0, True
    with np.errstate(all="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        finite = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(np.isfinite(a), np.isfinite(b)):
            cos = float("nan")
        else:
            fa, fb = a[finite], b[finite]
            na, nb = float(np.linalg.norm(fa)), float(np.linalg.norm(fb))
            cos = 1.0 if na == nb == 0.0 else (float(fa @ fb) / (na * nb) if na and nb else 0.0)
        max_abs = float(diff.max())
        max_rel = float((diff / np.maximum(np.abs(np.where(finite, b, 0.0)), atol)).max())
        ref_norm = float(np.linalg.norm(np.where(finite, b, 0.0)))
        rel_l2 = float(np.linalg.norm(diff)) / max(ref_norm, atol * np.sqrt(a.size))
    # every element within atol agrees outright: near-zero values (a saturated Sigmoid) have a
    # tiny ||ref||, so their relative error means nothing
    agrees = bool((cos >= min_cosine and rel_l2 <= rtol) or max_abs <= atol)
    return cos, max_abs, max_rel, rel_l2, agrees


def expose_all(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs include every node output of the main graph."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    try:
        typed = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    except Exception:
        typed = {}
    have = {o.name for o in m.graph.output} | {i.name for i in m.graph.initializer}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                have.add(o)
                m.graph.output.append(typed[o] if o in typed else onnx.helper.make_empty_tensor_value_info(o))
    return m


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of the main graph, by name, from ONNX Runtime (CPU, optimisations off)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise RuntimeError("pycann compare needs ONNX Runtime: pip install onnxruntime") from e
    m = expose_all(model)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    outs = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return {n: np.asarray(v) for n, v in zip(names, outs) if isinstance(v, np.ndarray)}


def run_pycann(loaded: Any, feeds: Sequence[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
    """Run ``loaded`` (a ``LoadedModel``) capturing every top-level node output."""
    from pycann.profiler.dump import TensorCapture
    from pycann.profiler.hooks import observe

    cap = TensorCapture(loaded.graph.name)
    with observe(cap):
        outs = loaded.run(list(feeds))
    return cap, outs


def compare(model: onnx.ModelProto, loaded: Any, feeds: Mapping[str, np.ndarray], atol: float = 1e-6,
            rtol: float = 1e-4, min_cosine: float = 0.999) -> CompareResult:
    """Compare ``loaded`` (pycann ``LoadedModel``) with ONNX Runtime on ``model``, node by node."""
    ref = run_onnxruntime(model, feeds)
    cap, outs = run_pycann(loaded, [feeds[i.name] for i in loaded.inputs])
    producer = {o: n for n in model.graph.node for o in n.output if o}
    names = _onnx_node_names(model)
    onnx_pos = {id(n): i for i, n in enumerate(model.graph.node)}
    onnx_index = {names[i]: i for i in range(len(model.graph.node))}
    by_name = {names[i]: n for i, n in enumerate(model.graph.node)}
    res = CompareResult()
    covered: dict[str, str] = {}  # ONNX node -> pycann node standing for it
    made_by = {v: n for n in cap.nodes for v in n.outputs if v}
    for node in cap.nodes:
        for o in node.origin:
            covered.setdefault(o, node.name)
    for node in cap.nodes:
        for j, value in enumerate(node.outputs):
            if not value or value not in cap.values:
                continue
            key, inside = value, ""
            if key not in ref:  # renamed output: the last original node's j-th output
                last = max((o for o in node.origin if o in onnx_index), key=onnx_index.__getitem__, default=None)
                outs_last = list(by_name[last].output) if last is not None else []
                key = outs_last[j] if j < len(outs_last) else ""
                # a node of an inlined If branch (``<If>/inl<n>/...``; the branch's results take the If's
                # output names) or another node that computes part of one ONNX node: ONNX Runtime has no
                # value for it, and the ONNX node's own outputs are another pycann node's
                if last is not None and (node.name.startswith(f"{last}/inl")
                                         or (key in made_by and made_by[key] is not node)):
                    key, inside = "", f"inside {last}"
            src = producer.get(key)
            row = Row(len(res.rows), node.name, node.op_type, list(node.origin),
                      names[onnx_pos[id(src)]] if src else "-",
                      src.op_type if src else "-", value)
            got = cap.values[value]
            row.shape, row.dtype = tuple(got.shape), got.dtype.name
            if inside:
                row.status = inside  # (not compared: ONNX Runtime exposes no value inside an If)
            elif key not in ref:
                row.status = "no reference"
            elif ref[key].shape != got.shape:
                row.status = "shape"
            else:
                row.cosine, row.max_abs, row.max_rel, row.rel_l2, ok = metrics(got, ref[key], atol, rtol, min_cosine)
                row.status = "ok" if ok else "MISMATCH"
            res.rows.append(row)
    graph_outs = [o.name for o in model.graph.output]
    for i, (name, got) in enumerate(zip(loaded.graph.outputs, outs)):
        # (an output named as another ONNX value, e.g. one --out_nodes chose, is not ONNX's output i)
        if i < len(graph_outs) and name != graph_outs[i] and name not in ref and graph_outs[i] in ref \
                and isinstance(got, np.ndarray):
            row = Row(len(res.rows), f"output:{i}", "Output", [], graph_outs[i], "Output", name,
                      tuple(got.shape), got.dtype.name)
            if ref[graph_outs[i]].shape != got.shape:
                row.status = "shape"
            else:
                row.cosine, row.max_abs, row.max_rel, row.rel_l2, ok = metrics(got, ref[graph_outs[i]], atol, rtol, min_cosine)
                row.status = "ok" if ok else "MISMATCH"
            res.rows.append(row)
    compared_onnx = {r.onnx_node for r in res.rows}
    for name, n in zip(names, model.graph.node):
        if name not in compared_onnx:
            status = f"fused into {covered[name]}" if name in covered else "folded or removed"
            res.others.append(Row(-1, covered.get(name, "-"), "-", [], name, n.op_type,
                                  ",".join(n.output), status=status))
    return res


def _onnx_node_names(model: onnx.ModelProto) -> list[str]:
    """The name of each top-level ONNX node as pycann's importer knows it (``Node.origin``): its own
    name, or for an unnamed node the name the importer made up (e.g. ``MatMul_0_0``)."""
    names = [n.name for n in model.graph.node]
    if all(names):
        return names
    from pycann.ge.compile.importers.onnx import import_model

    pos = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
    try:
        graph = import_model(model)
    except Exception:  # noqa: BLE001 - the names are only for the report
        graph = None
    for node in graph.nodes if graph is not None else []:
        for o in node.outputs:
            i = pos.get(o)
            if i is not None and not names[i] and node.origin:
                names[i] = node.origin[0]
    return [name or f"{n.op_type}@{i}" for i, (name, n) in enumerate(zip(names, model.graph.node))]


def _feeds(loaded: Any, files: Sequence[str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    gears = loaded.dynamic_gears() if hasattr(loaded, "dynamic_gears") else None
    # a gear model's shapes are no guess: random data takes its first gear (a -1 dim would be refused)
    gear_shapes: dict[str, list[int]] = gears["shapes"][0] if gears and gears["shapes"] else {}
    for k, info in enumerate(loaded.inputs):
        dt = np.dtype(info.datatype)
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in info.shape]
        if k >= len(files) and info.name in gear_shapes:
            shape = list(gear_shapes[info.name])
        elif k >= len(files) and any(not isinstance(d, int) or d < 0 for d in info.shape):
            raise ValueError(f"input '{info.name}' has dynamic dims {info.shape}: give real data with "
                             "--input a.npy,... (random data of a guessed size rarely fits the model)")
        if k < len(files):
            f = files[k]
            arr = np.load(f) if f.endswith(".npy") else _bin(f, dt, shape, info)
        elif dt.kind == "f":
            arr = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            arr = rng.integers(0, 2, shape).astype(bool)
        else:
            arr = rng.integers(0, 8, shape).astype(dt)
        feeds[info.name] = arr
    return feeds


def _bin(path: str, dt: np.dtype, shape: list[int], info: Any) -> np.ndarray:
    """A raw .bin --input: the input's values in its static shape (numpy's reshape error named neither
    the file nor the input, and a dynamic dim was read as 1)."""
    if any(not isinstance(d, int) or d < 0 for d in info.shape):
        raise ValueError(f"{path}: input '{info.name}' has dynamic dims {info.shape}, which a .bin does not "
                         "carry: give a .npy (np.save) of the shape to compare")
    raw = np.fromfile(path, dtype=dt)
    if raw.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {raw.nbytes} bytes, but input '{info.name}' {dt}{list(shape)} takes "
                         f"{int(np.prod(shape)) * dt.itemsize} bytes of raw {dt}")
    return raw.reshape(shape)


def _checked(text: str, convert: type, ok: Callable[[Any], bool], why: str) -> Any:
    """``convert(text)`` when ``ok`` of it, else argparse's error naming the value (``why``)."""
    try:
        v = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if convert is int else 'a number'}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"{text!r}: {why}")
    return v


def _tolerance(text: str) -> float:
    """--rtol / --atol: a finite float >= 0 (a negative or NaN tolerance would make every node disagree)."""
    return float(_checked(text, float, lambda v: math.isfinite(v) and v >= 0, "a tolerance is a finite number >= 0"))


def _cosine(text: str) -> float:
    """--cosine: a cosine similarity, -1..1 (False for NaN too)."""
    return float(_checked(text, float, lambda v: -1.0 <= v <= 1.0, "a cosine similarity is between -1 and 1"))


def _rows(text: str) -> int:
    """--max_rows: an int >= 0 (a negative count printed no rows and a wrong "more rows" count)."""
    return int(_checked(text, int, lambda v: v >= 0, "a row count is >= 0"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pycann compare", description="Compare a pycann model with ONNX Runtime, node by node.")
    p.add_argument("--model", required=True, help="the original ONNX model")
    p.add_argument("--om", help="the pycann .om compiled from it (default: compile --model in memory)")
    p.add_argument("--input", default="", help="comma-separated .npy (or raw .bin) files, one per input; default random")
    p.add_argument("--output", default=".", help="folder for compare_result_<time>.csv")
    p.add_argument("--rtol", type=_tolerance, default=1e-4, help="maximum relative L2 error ||got-ref|| / ||ref||")
    p.add_argument("--atol", type=_tolerance, default=1e-6,
                   help="absolute agreement: every |got-ref| <= atol agrees; also the per-element floor of the L2 denominator")
    p.add_argument("--cosine", type=_cosine, default=0.999, help="minimum cosine similarity")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_rows", type=_rows, default=50, help="rows printed (all are in the CSV)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``pycann compare ...``; returns 0 (all agree), 1 (a node disagrees) or 2 (error)."""
    args = build_parser().parse_args(argv)
    from pycann.errors import PycannError
    from pycann.ge.run.model import LoadedModel
    from pycann.paths import folder_problem

    why = folder_problem(args.output)
    if why:
        print(f"[ERROR] pycann compare: --output {args.output} is invalid: {why}", file=sys.stderr)
        return 2
    try:
        model = onnx.load(args.model)
        loaded = LoadedModel.from_file(args.om or args.model)
        inits = {t.name for t in model.graph.initializer}
        onnx_inputs = [i.name for i in model.graph.input if i.name not in inits]
        om_inputs = [i.name for i in loaded.inputs]
        if loaded.aipp:  # its input is the raw image; ONNX Runtime's model takes the tensor AIPP makes
            raise ValueError(f"{args.om} has AIPP (--insert_op_conf), which the ONNX model does not: compare "
                             "an .om compiled without --insert_op_conf from the same model (AIPP itself is "
                             "checked against its config's arithmetic: docs/aipp.md)")
        if args.om and sorted(onnx_inputs) != sorted(om_inputs):
            raise ValueError(f"{args.om} was not compiled from {args.model}: its inputs are {om_inputs}, "
                             f"the ONNX model's are {onnx_inputs}")
        if args.om:
            _check_source(args.om, args.model, loaded.manifest)
        files = [f for f in args.input.split(",") if f]
        if len(files) > len(loaded.inputs):
            raise ValueError(f"{len(files)} --input files for a model with {len(loaded.inputs)} input(s) "
                             f"({', '.join(i.name for i in loaded.inputs)}): give one file per input, in that order")
        feeds = _feeds(loaded, files, args.seed)
        gears = loaded.dynamic_gears()
        if gears and len(files) < len(loaded.inputs):
            shapes = "; ".join(f"{k}:{list(v)}" for k, v in gears["shapes"][0].items())
            print(f"random inputs of the model's first {gears['option']} gear: {shapes} (--input for others)")
        # pycann's own input check first: it names the input, the expected and the received shape
        # (ONNX Runtime's internal message would come first otherwise)
        loaded.check_feeds([feeds[i.name] for i in loaded.inputs])
        res = compare(model, loaded, feeds, args.atol, args.rtol, args.cosine)
    except (OSError, PycannError, RuntimeError, ValueError) as e:
        print(f"[ERROR] pycann compare: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's own errors (e.g. .om and model disagree)
        hint = "; is the .om compiled from this model?" if args.om else ""
        print(f"[ERROR] pycann compare: ONNX Runtime could not run {args.model} on these inputs "
              f"({type(e).__name__}: {str(e).splitlines()[0][:300]}){hint}",
              file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, f"compare_result_{time.strftime('%Y%m%d%H%M%S')}.csv")
    res.write_csv(path)
    print(res.table(args.max_rows))
    fused = sum(1 for r in res.others if r.status.startswith("fused"))
    print(f"{len(res.compared)} values compared; {fused} ONNX nodes inside fused pycann nodes, "
          f"{len(res.others) - fused} folded or removed; CSV: {path}")
    bad = res.first_bad
    if bad is None:
        print("all compared nodes agree")
        return 0
    fused_from = f", fused from {', '.join(bad.origin)}" if len(bad.origin) > 1 else ""
    print(f"first disagreement: pycann node {bad.node} ({bad.op_type}{fused_from}) vs ONNX node {bad.onnx_node} "
          f"({bad.onnx_type}), value {bad.value}: cosine {bad.cosine:.6f}, max abs {bad.max_abs:.3g}, "
          f"max rel {bad.max_rel:.3g}, rel L2 {bad.rel_l2:.3g} [{bad.status}]")
    note = _reduced_precision_note(loaded.manifest, args.rtol)
    if note:
        print(note)
    return 1


def _check_source(om: str, model: str, manifest: dict) -> None:
    """Raise ValueError when the .om records the fingerprint of another source model than ``model``
    (``ge/ir/fingerprint.py``; an .om without one, or of another scheme, is not checked, nor one atc
    compiled from a TensorFlow or Caffe model: that fingerprint is of the other framework's graph, which
    no ONNX export of the model matches, and such an .om compared with its ONNX export before)."""
    from pycann.ge.compile.importers.onnx import load_onnx
    from pycann.ge.ir.fingerprint import ALGORITHM, graph_fingerprint

    rec = manifest.get("source_fingerprint")
    if not isinstance(rec, dict) or rec.get("algorithm") != ALGORITHM:
        return
    if manifest.get("framework_type", 5) != 5:
        return
    mine = graph_fingerprint(load_onnx(model, check=False))
    if mine != rec.get("sha256"):
        raise ValueError(f"{om} was not compiled from {model}: the model atc compiled had other weights, "
                         f"attributes or nodes (content fingerprint {str(rec.get('sha256'))[:12]}, this model's "
                         f"{mine[:12]}); compile it again: atc --model={model} --framework=5 ...")


def _reduced_precision_note(manifest: dict, rtol: float) -> str:
    """A hint when an .om built with a reduced-precision ``--precision_mode`` is compared at float32's
    default ``--rtol``: every node that computes in float16/bfloat16 then disagrees, the first one
    named only because it comes first."""
    prec = manifest.get("precision") or {}
    nodes = prec.get("nodes") or {}
    low = {k: v for k, v in nodes.items() if k in ("fp16", "bf16") and v}
    if rtol != build_parser().get_default("rtol"):
        return ""
    if not low:
        out_types = (manifest.get("options") or {}).get("output_type") or {}
        if not any(v in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16) for v in out_types.values()):
            return ""
        return ("note: the .om casts outputs to float16/bfloat16 (--output_type): their Cast nodes (*_output_type) "
                "disagree by that rounding alone; pass --rtol 1e-2 (bfloat16: 5e-2) to look past it")
    # the values carry the error of every node before them, so it grows with depth: on PP-OCRv4 det
    # these settings pass every node but the near-zero Sigmoid map of random input (bf16)
    suggest = "5e-2" if "bf16" in low else "1e-2"
    return (f"note: the .om was compiled with --precision_mode={prec.get('precision_mode', '?')} "
            f"({', '.join(f'{k} {v}' for k, v in low.items())} nodes): the default --rtol 1e-4 is float32 rounding "
            f"noise, so each of those nodes disagrees by its dtype's rounding alone; pass --rtol {suggest} (and "
            "--cosine 0.99) to find a node that goes wrong beyond it (docs/precision.md has the expected errors)")


if __name__ == "__main__":
    sys.exit(main())
