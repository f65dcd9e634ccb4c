"""Adversarial cases of GE's KV-cache rewrite (ge/run/kv_alias.py) and of CacheAppend's kernel
(kernels/kv_cache.py): only Concats that can be a fed-back cache are rewritten."""

from __future__ import annotations

import pytest
from onnx import TensorProto

from pycann.dtypes import TensorDesc
from pycann.ge.ir import Graph, Node
from pycann.ge.run import kv_alias

F32 = int(TensorProto.FLOAT)


def _graph(nodes: list[Node], outputs: list[str], past_shape: tuple[int | str, ...] | None) -> Graph:
    descs = {} if past_shape is None else {"past": TensorDesc(F32, past_shape)}
    return Graph(name="g", nodes=nodes, inputs=["x", "past"], outputs=outputs, initializers={}, descs=descs)


K = Node("Relu", ["x"], ["k"], name="k")
CAT = Node("Concat", ["past", "k"], ["present"], {"axis": 2}, name="cat")


@pytest.mark.parametrize(("case", "rewritten"), [
    ("symbolic_axis", True),
    ("shape_read", True),  # positions from the past's length (Shape, ShapeOf): still a cache
    ("static_axis", False),  # the past's length on the axis is fixed: it cannot be a growing cache
    ("read_by_value", False),  # the past also feeds another op: not only a cache
    ("read_by_subgraph", False),  # an If branch reads it from the outer scope
])
def test_alias_takes_only_concats_of_a_cache(case: str, rewritten: bool) -> None:
    nodes, outs, shape = [K, CAT], ["present"], ("B", 3, "P", 4)
    if case == "shape_read":
        nodes += [Node("Shape", ["past"], ["s"], name="s"), Node("ShapeOf", ["past"], ["s2"], domain="pycann", name="s2")]
        outs += ["s", "s2"]
    elif case == "static_axis":
        shape = ("B", 3, 7, 4)
    elif case == "read_by_value":
        nodes += [Node("Relu", ["past"], ["y"], name="y")]
        outs += ["y"]
    elif case == "read_by_subgraph":
        branch = Graph(name="b", nodes=[Node("Relu", ["past"], ["z"], name="z")], inputs=[], outputs=["z"], initializers={})
        nodes += [Node("If", ["c"], ["y"], {"then_branch": branch, "else_branch": branch}, name="if")]
        outs += ["y"]
    g, n = kv_alias.alias(_graph(nodes, outs, shape))
    assert n == int(rewritten)
    assert [x.op_type for x in g.nodes][1] == ("CacheAppend" if rewritten else "Concat")
