"""TF1 control flow -> ONNX ``If`` / ``Loop`` (tf.compat.v1.cond / while_loop in graph form).

Every tensor gets a *frame context*: the stack of conditional branches (``Switch`` output 0 or
1 of a predicate) and while-loop frames (``Enter`` of a frame name) it is computed in; a
``Merge`` closes a branch, an ``Exit`` a loop. Control edges count for the context (a constant in
a branch hangs on the branch's pivot by a control edge) but not for data.

* A ``Merge`` joining the two branches of predicate ``p`` becomes one ``If(p)``: each branch's
  subgraph holds the nodes between the ``Switch`` outputs (which read the Switch's outer input)
  and the Merge input of that branch.
* A loop frame becomes ``Loop(M="", cond=c0, v...)``: ``c0`` is the loop condition computed on
  the initial values (the ``Enter`` inputs) in the outer graph; the body reads ``v_i`` where TF
  reads ``Merge_i`` / ``Switch_i:1``, returns the ``NextIteration`` inputs, and recomputes the
  condition on them (ONNX tests the condition a body returns before the next trip; TF tests it
  before each trip, so computing it once before the loop and at the end of each body agrees).
  Constant ``Enter`` s (``is_constant``) read the outer value. The ``Exit`` s are the Loop outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_emit import Emitter, tensor_ref
from pycann.ge.compile.importers.tensorflow_proto import TF_TO_DTYPE, attr
from pycann.ge.ir import Graph

CONTROL_OPS = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "RefSwitch",
                         "RefMerge", "RefEnter", "RefExit", "RefNextIteration"})
Frame = tuple[str, str, int]  # ("cond", predicate ref, branch) or ("loop", frame name, 0)
Context = tuple[Frame, ...]


def _op(n: Any) -> str:
    return str(n.op).removeprefix("Ref")


def _src(ref: str) -> str:
    return tensor_ref(ref.lstrip("^")).rpartition(":")[0]


def loop_closure(nodes: dict[str, Any], needed: set[str]) -> set[str]:
    """Every node of each while frame the needed nodes touch (a loop runs all its variables)."""
    frames = {attr(nodes[n], "frame_name") for n in needed if _op(nodes[n]) == "Enter"}
    if not frames:
        return set()
    extra: set[str] = set()
    enters = [n for n in nodes.values() if _op(n) == "Enter" and attr(n, "frame_name") in frames]
    readers: dict[str, list[Any]] = {}
    for n in nodes.values():
        for i in n.input:
            readers.setdefault(_src(i), []).append(n)
    # forward from the frame's Enters to its Exits, then every data ancestor of what was reached
    stack = [n.name for n in enters]
    while stack:
        name = stack.pop()
        if name in extra:
            continue
        extra.add(name)
        if _op(nodes[name]) != "Exit":
            stack.extend(r.name for r in readers.get(name, []))
    stack = list(extra)
    while stack:
        name = stack.pop()
        for i in nodes[name].input:
            s = _src(i)
            if not i.startswith("^") and s in nodes and s not in extra:
                extra.add(s)
                stack.append(s)
    return extra - needed


class Builder:
    """Contexts, topological order and the If/Loop construction for one GraphDef."""

    def __init__(self, nodes: dict[str, Any], convert: Callable[[Emitter, Any], None]) -> None:
        self.nodes = nodes
        self.convert = convert
        self.order = self._topo_order()
        self.ctx: dict[str, Context] = {}  # tensor ref -> context
        self.home: dict[str, Context] = {}  # node -> the context it is emitted in
        self._contexts()
        self.loop_done: set[tuple[Context, str]] = set()

    # ------------------------------------------------------------------ analysis
    def _topo_order(self) -> list[str]:
        nodes = self.nodes
        deps: dict[str, set[str]] = {}
        frame_enters: dict[str, list[str]] = {}
        for n in nodes.values():
            if _op(n) == "Enter":
                frame_enters.setdefault(attr(n, "frame_name"), []).append(n.name)
        for name in nodes:
            n = nodes[name]
            ds = {_src(i) for i in n.input if _src(i) in nodes}
            if _op(n) == "Merge":  # the NextIteration input is a back edge
                ds = {d for d in ds if _op(nodes[d]) != "NextIteration"}
            deps[name] = ds
        for n in nodes.values():
            if _op(n) == "Exit":
                frame = self._frame_of_exit(n)
                deps[n.name] |= set(frame_enters.get(frame, []))
        order: list[str] = []
        state: dict[str, int] = {}
        for root in nodes:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    state[name] = 2
                    order.append(name)
                    continue
                if state.get(name):
                    continue
                state[name] = 1
                stack.append((name, True))
                stack.extend((d, False) for d in deps[name] if not state.get(d))
        return order

    def _frame_of_exit(self, n: Any) -> str:
        seen = set()
        cur = n
        while cur is not None and cur.name not in seen:  # Exit <- Switch <- Merge <- Enter
            seen.add(cur.name)
            if _op(cur) == "Enter":
                return str(attr(cur, "frame_name"))
            ins = [i for i in cur.input if not i.startswith("^")]
            cur = self.nodes.get(_src(ins[0])) if ins else None
        return ""

    def _is_loop_switch(self, n: Any) -> bool:
        p = self.nodes.get(_src(n.input[1])) if len(n.input) > 1 else None
        return p is not None and _op(p) == "LoopCond"

    def _contexts(self) -> None:
        for name in self.order:
            n = self.nodes[name]
            op = _op(n)
            ins = [self.ctx.get(tensor_ref(i.lstrip("^")), ()) for i in n.input
                   if not (op == "Merge" and self._is_back_edge(i))]
            base = max(ins, key=len) if ins else ()
            if op == "Switch" and not self._is_loop_switch(n):
                pred = self.canon(n.input[1])
                self.home[name] = base
                for b in (0, 1):
                    self.ctx[f"{name}:{b}"] = (*base, ("cond", pred, b))
                continue
            if op == "Enter":
                self.home[name] = base
                self.ctx[f"{name}:0"] = (*base, ("loop", str(attr(n, "frame_name")), 0))
                continue
            if op == "Merge" and base and base[-1][0] == "cond" and not self._is_loop_merge(n):
                base = base[:-1]
            elif op == "Exit" and base and base[-1][0] == "loop":
                base = base[:-1]
            self.home[name] = base
            for i in range(max(1, self._n_outputs(n))):
                self.ctx[f"{name}:{i}"] = base

    def canon(self, ref: str) -> str:
        """A predicate through Identity chains (tf.cond switches data on ``pred_id = Identity(pred)``
        and its pivots on ``pred``: both name one predicate)."""
        ref = tensor_ref(ref)
        seen = set()
        while ref not in seen:
            seen.add(ref)
            n = self.nodes.get(ref.rpartition(":")[0])
            if n is None or n.op != "Identity" or not n.input:
                break
            ref = tensor_ref(n.input[0])
        return ref

    def _is_back_edge(self, ref: str) -> bool:
        s = self.nodes.get(_src(ref))
        return s is not None and _op(s) == "NextIteration"

    def _is_loop_merge(self, n: Any) -> bool:
        return any(self._is_back_edge(i) for i in n.input)

    @staticmethod
    def _n_outputs(n: Any) -> int:
        return {"Switch": 2, "Unpack": int(attr(n, "num", 1)), "Split": int(attr(n, "num_split", 1)),
                "SplitV": int(attr(n, "num_split", 1)), "TopKV2": 2, "IdentityN": len(n.input),
                "NonMaxSuppressionV4": 2, "NonMaxSuppressionV5": 3,
                "While": len(n.input), "StatelessWhile": len(n.input),
                "If": len(attr(n, "Tout", []) or []), "StatelessIf": len(attr(n, "Tout", []) or [])}.get(
            _op(n), 6 if _op(n).startswith("FusedBatchNorm") else 1)

    # ------------------------------------------------------------------ emission
    def emit_scope(self, e: Emitter, base: Context, allowed: set[str]) -> None:
        """Emit the ``allowed`` nodes that live in context ``base``; deeper ones through If/Loop."""
        for name in self.order:
            if name not in allowed:
                continue
            n = self.nodes[name]
            op = _op(n)
            if self.home.get(name) != base or op in ("Switch", "Enter", "NextIteration", "LoopCond"):
                continue
            n_out = self._n_outputs(n)  # (0 for a Split of num_split 0: its converter refuses it)
            if n_out and all(f"{name}:{i}" in e.values for i in range(n_out)):
                continue  # pre-mapped (loop Merges, constants, placeholders) or already emitted
            if op == "Merge" and not self._is_loop_merge(n):
                self._emit_if(e, base, n, allowed)
            elif op == "Merge":
                continue
            elif op == "Exit":
                self._emit_loop(e, base, n)
            else:
                self.convert(e, n)

    def _ancestors(self, refs: list[str], base: Context, stop: set[str]) -> set[str]:
        """Nodes computing ``refs`` inside ``base`` (outer values and ``stop`` refs end the walk)."""
        out: set[str] = set()
        stack = [tensor_ref(r) for r in refs]
        while stack:
            ref = stack.pop()
            src = ref.rpartition(":")[0]
            if ref in stop or src in out or src not in self.nodes:
                continue
            c = self.ctx.get(ref, ())
            if len(c) < len(base) or c[: len(base)] != base:
                continue
            out.add(src)
            n = self.nodes[src]
            # (through a nested loop's Exit/Switch/Merge to its Enter inputs; never along a back edge)
            stack.extend(tensor_ref(i) for i in n.input if not i.startswith("^") and not self._is_back_edge(i))
        return out

    def _sub(self, e: Emitter, graph: Graph, own: dict[str, str], tag: str) -> Emitter:
        return e.child(graph, own, suffix=e.names.fresh(tag).replace("/", "_"))

    def _emit_if(self, e: Emitter, base: Context, merge: Any, allowed: set[str]) -> None:
        e.node = merge
        ins = [tensor_ref(i) for i in merge.input if not i.startswith("^")]
        frames = [self.ctx.get(r, ()) for r in ins]
        deeper = [c[len(base)] for c in frames if len(c) > len(base) and c[len(base)][0] == "cond"]
        if len(ins) != 2 or not deeper:
            raise ModelError(f"{e.where()}: a Merge that joins no two branches of one tf.cond is not supported")
        pred = deeper[0][1]
        branch_of: dict[int, str] = {}
        for r, c in zip(ins, frames):
            if len(c) > len(base) and c[len(base)][:2] == ("cond", pred):
                branch_of[c[len(base)][2]] = r
        for r in ins:
            if r not in branch_of.values():
                branch_of[1 - next(iter(branch_of))] = r
        subgraphs = {}
        for b, key in ((1, "then_branch"), (0, "else_branch")):
            g = Graph(name=e.names.fresh(f"{merge.name}/{key}").replace("/", "_"))
            own = {}
            for name in self.order:  # this cond's Switches read their outer inputs in branch b
                sw = self.nodes[name]
                if _op(sw) == "Switch" and self.home.get(name) == base and self.canon(sw.input[1]) == pred:
                    own[f"{name}:{b}"] = e.resolve(sw.input[0])
            sub = self._sub(e, g, own, key)
            inner = (*base, ("cond", pred, b))
            self.emit_scope(sub, inner, self._ancestors([branch_of[b]], inner, set(own)))
            sub.node = merge
            g.outputs = [sub.add("Identity", [sub.resolve(branch_of[b])])]
            subgraphs[key] = g
        out = e.add("If", [e.resolve(pred)], e.out(), **subgraphs)
        e.values[f"{merge.name}:0"] = out
        # value_index: which Merge input arrived (int32), i.e. the taken branch's input position
        idx = [e.constant(np.int32(ins.index(branch_of[b])), "index") for b in (1, 0)]
        e.values[f"{merge.name}:1"] = e.add("Where", [e.resolve(pred), *idx])

    def _emit_loop(self, e: Emitter, base: Context, exit_node: Any) -> None:
        frame = self._frame_of_exit(exit_node)
        if (base, frame) in self.loop_done:
            return
        self.loop_done.add((base, frame))
        nodes = self.nodes
        enters = [n for n in nodes.values() if _op(n) == "Enter" and attr(n, "frame_name") == frame
                  and self.home.get(n.name) == base]
        inner = (*base, ("loop", frame, 0))
        readers: dict[str, list[Any]] = {}
        for n in nodes.values():
            for i in n.input:
                if not i.startswith("^"):
                    readers.setdefault(tensor_ref(i), []).append(n)
        consts: dict[str, str] = {}
        loop_vars: list[tuple[Any, Any, Any, Any, list[Any]]] = []  # enter, merge, switch, next_iter, exits
        cond_ref = ""
        for en in enters:
            if attr(en, "is_constant", False):
                consts[f"{en.name}:0"] = e.resolve(en.input[0])
                continue
            merge = next((r for r in readers.get(f"{en.name}:0", []) if _op(r) == "Merge"), None)
            if merge is None:
                raise ModelError(f"node {en.name} (Enter): loop variable without a Merge")
            switch = next((r for r in readers.get(f"{merge.name}:0", []) if _op(r) == "Switch"), None)
            nxt = next((nodes[_src(i)] for i in merge.input if self._is_back_edge(i)), None)
            if switch is None or nxt is None:
                raise ModelError(f"node {merge.name} (Merge): loop variable without Switch/NextIteration")
            lc = nodes[_src(switch.input[1])]
            cond_ref = tensor_ref(lc.input[0])
            exits = [r for r in readers.get(f"{switch.name}:0", []) if _op(r) == "Exit"]
            loop_vars.append((en, merge, switch, nxt, exits))
        e.node = exit_node
        # 1. the condition on the initial values, in the outer graph
        init = {f"{m.name}:0": e.resolve(en.input[0]) for en, m, _, _, _ in loop_vars}
        stop = set(init)
        c0e = self._sub(e, e.graph, {**consts, **init}, "cond_init")
        self.emit_scope(c0e, inner, self._ancestors([cond_ref], inner, stop))
        cond0 = c0e.resolve(cond_ref)
        # 2. the body: (iteration, cond, v...) -> (cond', v'...)
        body = Graph(name=e.names.fresh(f"{frame}/body").replace("/", "_"))
        it, cin = e.names.fresh(f"{frame}/iteration"), e.names.fresh(f"{frame}/cond_in")
        body.inputs = [it, cin]
        body.descs[it], body.descs[cin] = TensorDesc(DType.INT64, ()), TensorDesc(DType.BOOL, ())
        own = dict(consts)
        for en, m, sw, _, _ in loop_vars:
            v = e.names.fresh(f"{m.name}/v")
            body.inputs.append(v)
            dt = TF_TO_DTYPE.get(attr(en, "T"))
            if dt is not None:
                body.descs[v] = TensorDesc(dt, None)
            own[f"{m.name}:0"] = own[f"{sw.name}:1"] = v
        be = self._sub(e, body, own, "body")
        next_refs = [tensor_ref(nx.input[0]) for _, _, _, nx, _ in loop_vars]
        self.emit_scope(be, inner, self._ancestors(next_refs, inner, set(own)))
        be.node = exit_node
        new_vals = [be.add("Identity", [be.resolve(r)]) for r in next_refs]
        ce = self._sub(be, body, {f"{m.name}:0": nv for (_, m, _, _, _), nv in zip(loop_vars, new_vals)}, "cond_next")
        self.emit_scope(ce, inner, self._ancestors([cond_ref], inner, stop))
        ce.node = exit_node
        body.outputs = [ce.add("Identity", [ce.resolve(cond_ref)]), *new_vals]
        # 3. the Loop; its outputs are the Exits
        finals = [e.names.fresh(f"{frame}/final") for _ in loop_vars]
        e.add_node("Loop", ["", cond0, *[e.resolve(en.input[0]) for en, _, _, _, _ in loop_vars]], finals, body=body)
        for (_, _, _, _, exits), f in zip(loop_vars, finals):
            for x in exits:
                e.values[f"{x.name}:0"] = f
