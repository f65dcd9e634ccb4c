"""TF2 functional control flow: ``If``/``StatelessIf`` and ``While``/``StatelessWhile`` whose
branches and bodies are ``FunctionDef`` s of the graph's library -> ONNX ``If`` / ``Loop``.

(Freezing with ``convert_variables_to_constants_v2`` lowers these to TF1 control flow by
default; they stay functional with ``lower_control_flow=False`` or from other tools.)

A function is *instantiated*: its nodes are copied with names prefixed by a unique instance name,
its input args become pre-mapped values, and inputs in function form (``node:out_arg:index``) are
rewritten to graph form (``node:flat_index``) with the output-arg layouts below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_emit import Emitter
from pycann.ge.ir import Graph

FUNCTIONAL_OPS = frozenset({"If", "StatelessIf", "While", "StatelessWhile"})
# Ops with several named output args: the flat index of each arg's first tensor
# (ops with one output arg, list-valued or not, map out_arg:i to i).
OUTPUT_ARGS: dict[str, list[str]] = {
    "FusedBatchNorm": ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"],
    "FusedBatchNormV2": ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"],
    "FusedBatchNormV3": ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
                         "reserve_space_3"],
    "TopKV2": ["values", "indices"], "Switch": ["output_false", "output_true"],
    "NonMaxSuppressionV4": ["selected_indices", "valid_outputs"],
    "NonMaxSuppressionV5": ["selected_indices", "selected_scores", "valid_outputs"],
    "Merge": ["output", "value_index"],
}

Convert = Callable[[Emitter, Any], None]
Emit = Callable[[Emitter, dict[str, Any]], None]


def func_attr(node: Any, name: str) -> str:
    if name not in node.attr or node.attr[name].WhichOneof("value") != "func":
        raise ModelError(f"node {node.name} ({node.op}): attribute {name} names no function")
    return str(node.attr[name].func.name)


def called_functions(node: Any) -> list[str]:
    """The library functions a functional control-flow node calls."""
    keys = ("then_branch", "else_branch") if node.op.endswith("If") else ("cond", "body")
    return [func_attr(node, k) for k in keys]


class Instance:
    """One copy of a FunctionDef: renamed nodes (graph form) and its outputs as tensor refs."""

    def __init__(self, fdef: Any, prefix: str) -> None:
        from tensorboard.compat.proto import node_def_pb2

        self.args = [a.name for a in fdef.signature.input_arg]
        local_ops = {n.name: n.op for n in fdef.node_def}
        self.nodes: dict[str, Any] = {}
        for n in fdef.node_def:
            c = node_def_pb2.NodeDef()
            c.CopyFrom(n)
            c.name = f"{prefix}/{n.name}"
            del c.input[:]
            c.input.extend(self._ref(i, prefix, local_ops) for i in n.input)
            self.nodes[c.name] = c
        self.outputs = [self._ref(fdef.ret[a.name], prefix, local_ops) for a in fdef.signature.output_arg]
        self.arg_refs = [f"{prefix}/{a}:0" for a in self.args]

    def _ref(self, ref: str, prefix: str, local_ops: dict[str, str]) -> str:
        ctrl = ref.startswith("^")
        parts = ref.lstrip("^").split(":")
        if len(parts) == 1:  # a function argument (or a control input on a node)
            name = f"{prefix}/{parts[0]}"
            return f"^{name}" if ctrl else f"{name}:0"
        node, arg, idx = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
        layout = OUTPUT_ARGS.get(local_ops.get(node, ""), [])
        flat = (layout.index(arg) if arg in layout else 0) + idx
        return f"^{prefix}/{node}" if ctrl else f"{prefix}/{node}:{flat}"


def emit_functional(e: Emitter, node: Any, library: dict[str, Any],
                    emit_instance: Callable[[Emitter, Instance, list[str]], list[str]]) -> list[str]:
    """Emit an If/While node; ``emit_instance(emitter, instance, arg values)`` imports a function
    body into ``emitter``'s graph and returns its output values."""
    e.node = node
    for f in called_functions(node):
        if f not in library:
            raise ModelError(f"{e.where()}: function {f} is not in the graph's library")
    ins = e.inputs()
    if node.op.endswith("If"):
        subgraphs = {}
        n_out = 0
        for key in ("then_branch", "else_branch"):
            inst = Instance(library[func_attr(node, key)], e.names.fresh(f"{node.name}/{key}"))
            g = Graph(name=e.names.fresh(f"{node.name}/{key}").replace("/", "_"))
            ge = e.child(g)
            outs = emit_instance(ge, inst, ins[1:])
            ge.node = node
            g.outputs = [ge.add("Identity", [o]) for o in outs]
            subgraphs[key] = g
            n_out = len(outs)
        e.node = node
        outs = [e.out(i) for i in range(n_out)]
        e.add_node("If", [ins[0]], outs, **subgraphs)
        return outs
    cond_f, body_f = (library[f] for f in called_functions(node))
    cond0 = emit_instance(e, Instance(cond_f, e.names.fresh(f"{node.name}/cond_init")), ins)[0]
    e.node = node
    body = Graph(name=e.names.fresh(f"{node.name}/body").replace("/", "_"))
    it, cin = e.names.fresh(f"{node.name}/iteration"), e.names.fresh(f"{node.name}/cond_in")
    vs = [e.names.fresh(f"{node.name}/v") for _ in ins]
    body.inputs = [it, cin, *vs]
    body.descs[it], body.descs[cin] = TensorDesc(DType.INT64, ()), TensorDesc(DType.BOOL, ())
    be = e.child(body)
    body_out = emit_instance(be, Instance(body_f, e.names.fresh(f"{node.name}/body")), vs)
    be.node = node
    new = [be.add("Identity", [v]) for v in body_out]
    if len(new) != len(ins):
        raise ModelError(f"{e.where()}: the body returns {len(new)} values for {len(ins)} loop variables")
    cond_next = emit_instance(be, Instance(cond_f, e.names.fresh(f"{node.name}/cond_next")), new)[0]
    be.node = node
    body.outputs = [be.add("Identity", [cond_next]), *new]
    e.node = node
    outs = [e.out(i) for i in range(len(ins))]
    e.add_node("Loop", ["", cond0, *ins], outs, body=body)
    return outs
