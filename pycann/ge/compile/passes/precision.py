"""PrecisionMode: the dtype each node computes in, per ``--precision_mode`` (docs/precision.md).

Design: the pass only inserts ``Cast`` nodes (and converted copies of weights); kernels stay
as they are. A node that runs in float16 reads float16 tensors, and float16 is what it
stores, exactly as on the NPU. The matrix kernels (Conv, ConvTranspose, MatMul, Gemm and the
fused ops) already widen float16/bfloat16 operands to float32, accumulate in float32 and round
the result to the operand dtype — the cube unit's behaviour — so no kernel needs a "compute
dtype" attribute. ``force_fp32`` (float16 operands, float32 result) feeds the matrix op float32
tensors whose values were rounded to float16 (``Cast`` to float16 and back: exact).

Every value keeps its name for its original dtype: when a producer now writes float16, its
output is renamed ``<name>_fp16`` and a ``Cast`` back to ``<name>`` is added only where a
consumer (or a graph output) needs the original dtype. Graph inputs and outputs keep their
dtypes unless ``--input_fp16_nodes`` / ``--output_type`` say otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pycann.dtypes import DType, TensorDesc, to_numpy
from pycann.errors import OptionError
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.dead_code import is_identity
from pycann.ge.compile.passes.flushing_casts import clear_flushing_casts, mark_flushing_casts
from pycann.ge.compile.passes.hoist_casts import hoist_casts
from pycann.ge.compile.passes.infer_shapes import const_desc
from pycann.ge.compile.precision_config import MIXED_MODES, PrecisionSettings, matches
from pycann.ge.compile.precision_lists import (
    FIXED_INPUTS,
    MATRIX_OPERANDS,
    MATRIX_OPS,
    SHAPE_READERS,
    chain_class,
)
from pycann.ge.ir import Graph, Node, free_names
from pycann.kernels.providers.onednn_bf16 import kernel_note
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup

name = "PrecisionMode"

F32, F16, BF16, F64 = int(DType.FLOAT), int(DType.FLOAT16), int(DType.BFLOAT16), int(DType.DOUBLE)
FLOATS = (F32, F16, BF16)
SHORT = {F32: "fp32", F16: "fp16", BF16: "bf16", F64: "fp64"}
FP16_MAX = 65504.0
# (storage dtype, dtype the values are rounded to first; 0 = none). ANY: whatever version exists.
Key = tuple[int, int]
ANY: Key = (0, 0)
# Widening conversions that are exact: Cast(Cast(x, wide), t) == Cast(x, t).
_EXACT_WIDENING = {(F16, F32), (F16, F64), (BF16, F32), (BF16, F64), (F32, F64)}


# Fused matrix ops whose non-operand inputs come from an absorbed vector op (not the matrix op's own
# bias or residual, which the cube's fixpipe adds in the result dtype): kept in their dtype where
# only matrix ops are reduced.
VECTOR_OPERANDS_KEPT = frozenset({"FusedAttention"})


@dataclass
class _Plan:
    """How one node runs: the version (Key) each listed input reads, and its output dtypes."""

    inputs: dict[int, Key] = field(default_factory=dict)
    outputs: dict[int, int] = field(default_factory=dict)  # output index -> dtype to store
    label: str = ""


def convert_constant(arr: np.ndarray, key: Key, clip: bool = True) -> np.ndarray:
    """A weight in another dtype: ``key`` = (storage dtype, rounded-to dtype or 0).

    float16 weights are clipped to +-65504 first when ``clip`` (CANN's ``--is_weight_clip``, on by
    default), so a large weight does not become inf.
    """
    dt, rnd = key
    out = arr
    for target in ((rnd, dt) if rnd else (dt,)):
        if target == F16 and clip and out.dtype.kind == "f" and out.dtype.itemsize > 2:
            out = np.clip(out, -FP16_MAX, FP16_MAX)
        with np.errstate(over="ignore"):
            out = out.astype(to_numpy(target))
    return np.ascontiguousarray(out)


class _Rewriter:
    """One run of the pass over a top-level graph (subgraph bodies keep their dtypes)."""

    def __init__(self, g: Graph, s: PrecisionSettings, log: Callable[[str], None],
                 outer: dict[str, TensorDesc] | None = None, used: set[str] | None = None) -> None:
        self.g, self.s, self.log = g, s, log
        descs = {**(outer or {}), **{k: d for k, d in g.descs.items() if d is not None}}
        descs.update({k: const_desc(v) for k, v in g.initializers.items() if k not in descs})
        self.orig = {k: d.dtype for k, d in descs.items()}
        self.shape = {k: d.shape for k, d in descs.items()}
        self.producer = {o: n for n in g.nodes for o in n.outputs if o}
        self.home: dict[str, int] = {}
        self.names: dict[str, dict[Key, str]] = {}
        self.reserved: dict[str, Key] = {}
        self.used = used if used is not None else set()
        self.used |= set(g.descs) | set(g.initializers) | {o for n in g.nodes for o in n.outputs} | \
            {n.name for n in g.nodes} | set(g.inputs)
        self.out: list[Node] = []
        self.casts = 0
        self.by_dtype: dict[str, int] = {}
        self.missed: list[str] = []
        self.keep_hits: set[str] = set()
        # graph inputs, weights and (in a subgraph) outer-scope values: stored in their own dtype
        for v in [*g.inputs, *g.initializers, *(free_names(g) if outer is not None else ())]:
            dt = self.orig.get(v, 0)
            self.home[v] = dt
            self.names[v] = {(dt, 0): v}

    # ------------------------------------------------------------------------- names, versions
    def fresh(self, base: str) -> str:
        i, cand = 0, base
        while cand in self.used:
            i += 1
            cand = f"{base}_{i}"
        self.used.add(cand)
        return cand

    def set_desc(self, v: str, dt: int, like: str) -> None:
        self.g.descs[v] = TensorDesc(dt, self.shape.get(like))

    def version(self, v: str, key: Key) -> str:
        """The name of ``v`` stored as ``key``, adding a Cast (or a converted weight) if needed."""
        vs = self.names.get(v)
        if not v or vs is None or self.home.get(v, 0) not in FLOATS:
            return v
        if key == ANY:
            return vs[(self.home[v], 0)]
        if key in vs:
            return vs[key]
        dt, rnd = key
        if v in self.g.initializers and v not in self.producer:
            new = self.fresh(f"{v}_{SHORT.get(dt, dt)}" + (f"r{SHORT.get(rnd, rnd)}" if rnd else ""))
            self.g.initializers[new] = convert_constant(self.g.initializers[v], key, self.s.weight_clip)
            self.set_desc(new, dt, v)
            vs[key] = new
            return new
        if rnd:
            if self.home[v] == rnd:
                vs[key] = self.version(v, (dt, 0))  # widening a float16 value is exact: same version
                return vs[key]
            src = self.version(v, (rnd, 0))
            vs[key] = self._cast(src, dt, self.fresh(f"{v}_{SHORT[rnd]}_{SHORT.get(dt, dt)}"), v)
            return vs[key]
        src = vs[(self.home[v], 0)]
        target = v if self.reserved.get(v, (self.orig.get(v, 0), 0)) == key and v not in vs.values() else \
            self.fresh(f"{v}_{SHORT.get(dt, dt)}")
        vs[key] = self._cast(src, dt, target, v)
        if self.home[v] == F16 and dt in (F32, F64):
            vs.setdefault((dt, F16), vs[key])  # a widened float16 value is already rounded
        return vs[key]

    def _cast(self, src: str, dt: int, out: str, like: str) -> str:
        self.out.append(Node("Cast", [src], [out], {"to": dt}, name=self.fresh(f"{out}_Cast"), opset=19))
        self.set_desc(out, dt, like)
        self.used.add(out)
        self.casts += 1
        return out

    # ------------------------------------------------------------------------- decisions
    def _float_inputs(self, n: Node) -> list[int]:
        fixed = FIXED_INPUTS.get(n.op_type, ())
        return [i for i, v in enumerate(n.inputs) if v and self.orig.get(v) in FLOATS and i not in fixed]

    def _custom(self, n: Node) -> dict[str, list[int]] | None:
        """The --customize_dtypes entry for this node (a name entry wins over a type entry)."""
        hits = sorted((k.startswith("OpType::"), k) for k in self.s.customize if matches(k, n.name, n.op_type, n.origin))
        return self.s.customize[hits[0][1]] if hits else None

    def _keep(self, n: Node) -> bool:
        hits = [e for e in self.s.keep_dtype if matches(e, n.name, n.op_type, n.origin)]
        self.keep_hits.update(hits)
        return bool(hits)

    def plan(self, n: Node) -> _Plan | None:
        """The node's plan, or None: it runs in its original dtypes."""
        if n.op_type in SHAPE_READERS:
            return _Plan({i: ANY for i in range(len(n.inputs))}, label="")
        fins = self._float_inputs(n)
        if n.subgraphs or not fins:
            return None
        custom = self._custom(n)
        if custom is not None:
            ins = {i: (dt, 0) for i, dt in zip(fins, custom["inputs"])}
            return _Plan(ins, dict(enumerate(custom["outputs"])), label="customize_dtypes")
        mode = self.s.mode
        if mode == "must_keep_origin_dtype" or self._keep(n):
            return None
        od = self.orig[n.inputs[fins[0]]]
        op = n.op_type
        cls = chain_class(n.attrs.get("steps", []), self.s.lists) if op == "ElementwiseChain" else self.s.lists.classify(op)
        if not cls and op not in MATRIX_OPS:
            if mode in ("force_fp16", *MIXED_MODES) and od in (F32, BF16) and op != "Cast":
                self.missed.append(f"{n.label()}: no reduced-precision model for {op}; kept {SHORT.get(od, od)}")
            return None
        target: int | None = None
        if mode == "force_fp16":
            target = F16 if od in (F32, BF16) else None
        elif mode == "allow_fp32_to_fp16":
            target = F16 if op in MATRIX_OPS and od == F32 else None
        elif mode == "force_fp32":
            if op in MATRIX_OPS:
                ops = set(MATRIX_OPERANDS[op])
                return _Plan({i: ((F32, F16) if i in ops else (F32, 0)) for i in fins}, label="fp16in_fp32out")
            target = F32 if od in (F16, BF16) else None
        elif mode in MIXED_MODES:
            low = F16 if mode == "allow_mix_precision_fp16" else BF16
            reducible = (F32, BF16) if low == F16 else (F32,)
            if cls == "white":
                target = low if od in reducible else None
            elif cls == "gray":
                fathers = [n.inputs[i] for i in fins if n.inputs[i] not in self.g.initializers]
                target = low if fathers and self.home.get(fathers[0]) == low and od in reducible else None
        elif mode == "allow_fp32_to_bf16":
            # CANN keeps float32 wherever the device has a float32 kernel and lowers the rest to
            # bfloat16; the cube unit's matrix ops are what lack one (as for allow_fp32_to_fp16)
            target = BF16 if op in MATRIX_OPS and od == F32 else None
        if target is None or target == od and all(self.home.get(n.inputs[i]) == od for i in fins):
            return None
        if op in VECTOR_OPERANDS_KEPT and mode in ("allow_fp32_to_fp16", "allow_fp32_to_bf16"):
            # FusedAttention's mask is the operand of the Add the fusion absorbed: a vector op, which
            # these modes keep in float32 (the kernel adds it to float32 scores). Narrowed, a
            # finfo(float32).min mask became -inf and a fully masked row NaN, where the unfused graph
            # (and ONNX Runtime) give a finite row; a position bias lost its low bits.
            narrowed = MATRIX_OPERANDS[op]
            return _Plan({i: ((target, 0) if i in narrowed else (self.orig[n.inputs[i]], 0)) for i in fins},
                         label=SHORT[target])
        return _Plan({i: (target, 0) for i in fins}, label=SHORT[target])

    # ------------------------------------------------------------------------- rewrite
    def _infer(self, n: Node) -> list[TensorDesc]:
        op = lookup(n.op_type, n.domain, n.opset or self.g.opsets.get(n.domain), n.label())
        attrs = op.with_defaults(n.attrs, f"node {n.label()}")
        attrs["_n_outputs"] = len(n.outputs)
        ins = [self._desc(i) if i else None for i in n.inputs]
        ctx = InferContext(n.name, n.op_type, attrs, ins,
                           [self.g.initializers.get(i) if i else None for i in n.inputs], n.opset, len(n.outputs))
        return list(op.infer(ctx))

    def _desc(self, v: str) -> TensorDesc | None:
        """The desc of a value: this graph's, a weight's, or (in a body) the enclosing scope's."""
        if v in self.g.descs:
            return self.g.descs[v]
        if v in self.g.initializers:
            return const_desc(self.g.initializers[v])
        return TensorDesc(self.orig[v], self.shape.get(v)) if v in self.orig else None

    def _input_fp16_nodes(self) -> None:
        consumers = {i: n for n in self.g.nodes for i in n.inputs}
        for v in self.s.input_fp16_nodes:
            if v not in self.g.inputs:
                raise OptionError(f"E10016: input [{v}] in --input_fp16_nodes is not an input of the model; the "
                                  f"inputs are: {', '.join(self.g.inputs)}", code="E10016")
            c = consumers.get(v)
            if c is not None and c.op_type == "Aipp":
                raise OptionError(f"E10001: Value [{v}] for parameter [--input_fp16_nodes] is invalid. Reason: the "
                                  "input has AIPP (--insert_op_conf); the two cannot be combined on one input.")
            if self.orig.get(v) not in FLOATS:
                raise OptionError(f"E10001: Value [{v}] for parameter [--input_fp16_nodes] is invalid. Reason: the "
                                  "input is not a float tensor.")
            self.home[v] = F16
            self.names[v] = {(F16, 0): v}
            self.reserved[v] = (F16, 0)
            self.set_desc(v, F16, v)

    def _output_types(self) -> None:
        """--output_type: a graph output's name belongs to the version in the requested dtype (the
        compiler's own --output_type step then has nothing left to do for it). The settings are
        keyed by output value (compiler._output_type_by_value resolves the model's node names)."""
        for v in self.g.outputs:
            want = self.s.output_type.get(v)
            if want is None and self.orig.get(v) in FLOATS:
                want = self.s.output_type.get("")
            if want:
                self.reserved[v] = (int(want), 0)

    def rewrite(self, top: bool = True) -> None:
        """Rewrite the nodes; ``top`` (the main graph) also applies --input_fp16_nodes and --output_type."""
        if top:
            self._input_fp16_nodes()
            self._output_types()
        for n in self.g.nodes:
            p = self.plan(n)
            keys = p.inputs if p is not None else {}
            for i, v in enumerate(n.inputs):
                n.inputs[i] = self.version(v, keys.get(i, (self.orig.get(v, 0), 0)))
            for v in sorted(set().union(*(free_names(g) for g in n.subgraphs.values()))):
                if self.version(v, (self.orig.get(v, 0), 0)) != v:
                    self.missed.append(f"{n.label()}: its subgraph reads '{v}', stored in another dtype")
            for body in n.subgraphs.values():
                self._body(body)
            self.out.append(n)
            self._outputs(n, p)
        for v in self.g.outputs:
            got = self.version(v, self.reserved.get(v, (self.orig.get(v, 0), 0)))
            if got != v:
                self.missed.append(f"graph output '{v}' could not keep its name")
        self.g.nodes = self.out

    def warn_unused_keep(self) -> None:
        for e in self.s.keep_dtype:
            if e not in self.keep_hits and self.s.mode != "must_keep_origin_dtype":
                self.log(f"[{name}] W: --keep_dtype entry '{e}' matches no node of the graph")

    def _body(self, body: Graph) -> None:
        """Rewrite an If/Loop/Scan body the same way; its inputs, outputs and outer-scope reads keep
        their dtypes (the node itself runs in its original dtypes)."""
        outer = {k: TensorDesc(dt, self.shape.get(k)) for k, dt in self.orig.items()}
        child = _Rewriter(body, self.s, self.log, outer, self.used)
        child.rewrite(top=False)
        self.casts += child.casts
        self.missed += child.missed
        self.keep_hits |= child.keep_hits
        for k, v in child.by_dtype.items():
            self.by_dtype[k] = self.by_dtype.get(k, 0) + v

    def _outputs(self, n: Node, p: _Plan | None) -> None:
        descs = self._infer(n) if p is not None and p.label else None
        if p is not None and p.label:
            self.by_dtype[p.label] = self.by_dtype.get(p.label, 0) + 1
        elif n.op_type not in SHAPE_READERS and self._float_inputs(n):
            lab = SHORT.get(self.orig[n.inputs[self._float_inputs(n)[0]]], "other")
            self.by_dtype[lab] = self.by_dtype.get(lab, 0) + 1
        for j, o in enumerate(n.outputs):
            if not o:
                continue
            od = self.orig.get(o, 0)
            nd = descs[j].dtype if descs is not None and j < len(descs) and descs[j].dtype else od
            if (nd, 0) != self.reserved.get(o, (od, 0)):  # the name belongs to another version
                n.outputs[j] = self.fresh(f"{o}_{SHORT.get(nd, nd)}")
                self.used.discard(o)
            if nd != od:
                self.g.descs[n.outputs[j]] = TensorDesc(nd, descs[j].shape if descs else self.shape.get(o))
            self.home[o] = nd
            self.names[o] = {(nd, 0): n.outputs[j]}
            want = p.outputs.get(j) if p is not None else None
            if want and want != nd:
                cast = self.version(o, (want, 0))
                self.home[o] = want
                self.names[o] = {(want, 0): cast}


def simplify_casts(g: Graph) -> int:
    """Fold ``Cast(Cast(x, wide), t)`` into ``Cast(x, t)`` when the first Cast widens exactly
    (float16 -> float32, ...), and drop Casts nobody reads. Returns the number of Casts removed."""
    producers = g.producers()
    changed = 0
    for n in g.nodes:
        if n.op_type != "Cast" or n.domain:
            continue
        p = producers.get(n.inputs[0])
        if p is None or p.op_type != "Cast" or p.domain or not p.inputs[0]:
            continue
        src = g.descs.get(p.inputs[0])
        if src is not None and (src.dtype, int(p.attrs.get("to", 0))) in _EXACT_WIDENING:
            n.inputs[0] = p.inputs[0]
            changed += 1
    if not changed:
        return 0
    read = {i for n in g.nodes for i in n.inputs} | set(g.outputs)
    for n in g.nodes:
        read.update(*(free_names(s) for s in n.subgraphs.values()))
    before = len(g.nodes)
    g.nodes = [n for n in g.nodes if not (n.op_type == "Cast" and not n.domain and n.outputs[0] not in read)]
    return before - len(g.nodes)


def manifest_entry(ctx: PassContext, s: PrecisionSettings) -> dict[str, object]:
    """The .om manifest's ``precision`` entry: the settings and what the pass did (its
    ``ctx.results["precision"]``)."""
    done = ctx.results.get("precision")
    return dict(done) if done else s.describe()


def run(graph: Graph, ctx: PassContext) -> PassResult:
    """Apply ``ctx.options["precision"]`` (a ``PrecisionSettings``); a no-op for the model's own dtypes."""
    s: PrecisionSettings | None = ctx.options.get("precision")
    if s is None or not s.active:
        # (a model's own Cast may arrive marked: only this pass's verdict lets a Cast flush subnormals)
        cleared = clear_flushing_casts(graph)
        return PassResult(graph, bool(cleared), "must_keep_origin_dtype: the model's own dtypes")
    own = _converting_casts(graph)  # (the nodes, kept alive: counted by identity below)
    rw = _Rewriter(graph, s, ctx.log)
    rw.rewrite()
    rw.warn_unused_keep()
    simplify_casts(graph)
    moved = _move_casts(graph, s, rw)
    flushing = mark_flushing_casts(graph)  # (where oneDNN's conversion may serve: flushing_casts.py)
    # the Casts this pass added that remain (not "all Casts minus the model's own": the model's
    # Casts that simplify_casts folded away made that negative)
    mine = {id(n) for n in own}
    casts = sum(1 for n in _converting_casts(graph) if id(n) not in mine)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(rw.by_dtype.items()))
    ctx.results["precision"] = {**s.describe(), "nodes": dict(rw.by_dtype), "casts": casts,
                                **({"casts_readers_flush": flushing} if flushing else {})}
    note = kernel_note(set(rw.by_dtype))
    hoisted = f" ({moved} moved above data-moving ops)" if moved else ""
    hoisted += f"; {flushing} feed only bf16 matrix operands" if flushing else ""
    return PassResult(graph, True, f"{s.mode}: nodes by compute dtype: {counts}; {casts} Casts{hoisted}{note}",
                      rw.missed)


def _move_casts(graph: Graph, s: PrecisionSettings, rw: _Rewriter) -> int:
    """Narrowing Casts moved above Concat / nearest Resize / Reshape ... (``hoist_casts``: exact,
    fewer bytes converted), not above an op the user pinned with ``--keep_dtype`` /
    ``--customize_dtypes`` or, in a mixed mode, a black-list op (``--modify_mixlist``): those stay
    float32. An op a Cast moved above is counted in ``rw.by_dtype`` under the narrow dtype it now
    computes in. Returns the number of ops moved over."""
    wide = {id(n) for n in graph.nodes if n.outputs and n.outputs[0]
            and getattr(graph.descs.get(n.outputs[0]), "dtype", None) == F32}
    moved = hoist_casts(graph, pinned=lambda n: any(matches(e, n.name, n.op_type, n.origin)
                                                    for e in (*s.keep_dtype, *s.customize))
                        or (s.mode in MIXED_MODES and s.lists.classify(n.op_type) == "black"))
    if not moved:
        return 0
    simplify_casts(graph)
    for n in graph.nodes:
        d = graph.descs.get(n.outputs[0]) if id(n) in wide else None
        if d is not None and d.dtype in (F16, BF16) and rw.by_dtype.get(SHORT[F32], 0) > 0:
            rw.by_dtype[SHORT[F32]] -= 1
            rw.by_dtype[SHORT[d.dtype]] = rw.by_dtype.get(SHORT[d.dtype], 0) + 1
    rw.by_dtype = {k: v for k, v in rw.by_dtype.items() if v}
    return moved


def _converting_casts(g: Graph) -> list[Node]:
    """Cast nodes that convert (a Cast to its input's own dtype is a copy that dead_code drops)."""
    return [n for n in g.nodes if n.op_type == "Cast" and not n.domain and not is_identity(g, n)]

