"""CacheAppend's plan kernel (kernels/kv_cache.py) and GE's rewrite that puts it in the shape-generic plan
(ge/run/kv_alias.py): every result equals numpy's concatenate (the golden: ONNX Concat), appends
happen in place only where no view a caller holds can see the rows written, and views are read-only."""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import OperandError
from pycann.ge.ir import Graph, Node
from pycann.ge.run import kv_alias
from pycann.kernels import kv_cache
from pycann.kernels.kv_cache import RESERVE_ROWS, cache_view, k_cache_append
from tests.forking import fork_while_held, run_script

AX = {"axis": 2}


def _rows(rng: np.random.Generator, n: int, batch: int = 1) -> np.ndarray:
    return rng.standard_normal((batch, 3, n, 4)).astype(np.float32)


def test_appends_in_place_and_every_view_keeps_its_rows() -> None:
    rng = np.random.default_rng(0)
    past = np.zeros((1, 3, 0, 4), np.float32)
    chunks = [_rows(rng, 5)] + [_rows(rng, 1) for _ in range(6)]
    views, want = [], past
    for c in chunks:
        (past,) = k_cache_append([past, c], AX)
        want = np.concatenate([want, c], axis=2)
        np.testing.assert_array_equal(past, want)
        views.append((past, want))
    base = views[0][0].base
    assert all(v.base is base for v, _ in views), "each step after the first appended in place"
    for v, w in views:  # earlier views still hold exactly their rows
        np.testing.assert_array_equal(v, w)
        assert not v.flags.writeable and cache_view(v)
    with pytest.raises(ValueError, match="read-only"):
        views[-1][0][0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="WRITEABLE"):  # the buffer is read-only too: no way to write the rows
        views[-1][0].flags.writeable = True


def test_an_older_past_fed_again_gets_a_copy_and_leaves_the_newer_view_alone() -> None:
    """Beam search / speculative decoding: the same past continued twice."""
    rng = np.random.default_rng(1)
    (p0,) = k_cache_append([np.zeros((2, 3, 0, 4), np.float32), _rows(rng, 4, 2)], AX)
    a, b = _rows(rng, 1, 2), _rows(rng, 1, 2)
    (pa,) = k_cache_append([p0, a], AX)
    (pb,) = k_cache_append([p0, b], AX)  # p0 is no longer the filled prefix: copied
    np.testing.assert_array_equal(pa, np.concatenate([p0, a], axis=2))
    np.testing.assert_array_equal(pb, np.concatenate([p0, b], axis=2))
    assert pa.base is p0.base and pb.base is not p0.base
    (pc,) = k_cache_append([pa[:, :, 1:], a], AX)  # a trimmed view (sliding window): copied too
    np.testing.assert_array_equal(pc, np.concatenate([pa[:, :, 1:], a], axis=2))
    assert pc.base is not pa.base


def test_reserve_rows() -> None:
    for need, cap in ((1, 65), (8, 72), (256, 320), (400, 500)):
        (p,) = k_cache_append([np.zeros((1, 1, 0, 2), np.float32), np.ones((1, 1, need, 2), np.float32)], AX)
        assert p.base.shape[2] == cap, need
    assert RESERVE_ROWS == 64


def test_growing_past_the_capacity_moves_to_a_new_buffer() -> None:
    rng = np.random.default_rng(2)
    (p,) = k_cache_append([np.zeros((1, 3, 0, 4), np.float32), _rows(rng, 4)], AX)
    cap = p.base.shape[2]
    assert cap == 4 + RESERVE_ROWS
    want = np.array(p)
    bases = {id(p.base)}
    for _ in range(cap):  # one step more than the room left
        c = _rows(rng, 1)
        (p,) = k_cache_append([p, c], AX)
        want = np.concatenate([want, c], axis=2)
        bases.add(id(p.base))
    np.testing.assert_array_equal(p, want)
    assert len(bases) == 2


def test_threads_feeding_one_past_each_get_their_own_result() -> None:
    rng = np.random.default_rng(3)
    (p0,) = k_cache_append([np.zeros((1, 3, 0, 4), np.float32), _rows(rng, 8)], AX)
    news = [_rows(rng, 1) for _ in range(8)]
    got: list[np.ndarray | None] = [None] * len(news)
    start = threading.Barrier(len(news))

    def work(i: int) -> None:
        start.wait()
        got[i] = k_cache_append([p0, news[i]], AX)[0]

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(news))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g, c in zip(got, news):
        np.testing.assert_array_equal(g, np.concatenate([p0, c], axis=2))
    assert sum(g is not None and g.base is p0.base for g in got) == 1, "exactly one thread appended in place"


def test_negative_axis_other_axes_and_dtypes() -> None:
    rng = np.random.default_rng(4)
    for dtype in (np.float16, np.int64):
        past = rng.integers(0, 9, (2, 0, 5)).astype(dtype)
        for axis in (1, -2):
            p = past
            for n in (3, 1, 2):
                c = rng.integers(0, 9, (2, n, 5)).astype(dtype)
                want = np.concatenate([p, c], axis=1)
                (p,) = k_cache_append([p, c], {"axis": axis})
                np.testing.assert_array_equal(p, want)
                assert p.dtype == dtype


@pytest.mark.parametrize(("past", "new", "match"), [
    (np.zeros((1, 3, 2, 4), np.float32), np.zeros((1, 3, 1, 4), np.float16), "dtype"),
    (np.zeros((1, 3, 2, 4), np.float32), np.zeros((1, 2, 1, 4), np.float32), "non-concat axis 1"),
    (np.zeros((1, 3, 2, 4), np.float32), np.zeros((3, 1, 4), np.float32), "ranks"),
])
def test_operands_concat_refuses_raise(past: np.ndarray, new: np.ndarray, match: str) -> None:
    with pytest.raises(OperandError, match=match):
        k_cache_append([past, new], AX)
    (p,) = k_cache_append([past, np.zeros((1, 3, 1, 4), np.float32)], AX)
    with pytest.raises(OperandError, match=match):  # the in-place path checks ``new`` too
        k_cache_append([p, new], AX)


def test_buffers_go_with_their_last_view() -> None:
    gc.collect()
    before = kv_cache.live_buffers()
    (p,) = k_cache_append([np.zeros((1, 3, 0, 4), np.float32), np.ones((1, 3, 2, 4), np.float32)], AX)
    assert kv_cache.live_buffers() == before + 1
    del p
    gc.collect()
    assert kv_cache.live_buffers() == before
    assert not cache_view(np.zeros(3)) and not cache_view(np.zeros(3)[1:])


# -------------------------------------------------------------------------------------- the rewrite
def _graph(nodes: list[Node], inputs: list[str], outputs: list[str], inits: dict[str, np.ndarray] | None = None) -> Graph:
    return Graph(name="g", nodes=nodes, inputs=inputs, outputs=outputs, initializers=inits or {})


def test_alias_rewrites_the_cache_concat_only() -> None:
    k_new = Node("Relu", ["x"], ["k"], name="k")
    cat = Node("Concat", ["past", "k"], ["present"], {"axis": 2}, name="cat")
    read = Node("Transpose", ["present"], ["kt"], {"perm": [0, 1, 3, 2]}, name="t")
    g, n = kv_alias.alias(_graph([k_new, cat, read], ["x", "past"], ["kt", "present"]))
    assert n == 1 and [x.op_type for x in g.nodes] == ["Relu", "CacheAppend", "Transpose"]
    node = g.nodes[1]
    assert (node.domain, node.inputs, node.outputs, node.attrs, node.name) == (
        "pycann", ["past", "k"], ["present"], {"axis": 2}, "cat")


@pytest.mark.parametrize("case", ["not_output", "past_computed", "past_initializer", "three_inputs", "new_is_input"])
def test_alias_leaves_other_concats(case: str) -> None:
    k_new = Node("Relu", ["x"], ["k"], name="k")
    ins, outs, inits = ["x", "past"], ["present"], {}
    cat = Node("Concat", ["past", "k"], ["present"], {"axis": 2}, name="cat")
    extra: list[Node] = []
    if case == "not_output":
        outs = ["y"]
        extra = [Node("Relu", ["present"], ["y"], name="r")]
    elif case == "past_computed":
        cat = Node("Concat", ["k", "k"], ["present"], {"axis": 2}, name="cat")
    elif case == "past_initializer":
        inits = {"past": np.zeros((1, 3, 2, 4), np.float32)}
    elif case == "three_inputs":
        cat = Node("Concat", ["past", "k", "k"], ["present"], {"axis": 2}, name="cat")
    elif case == "new_is_input":
        cat = Node("Concat", ["past", "x"], ["present"], {"axis": 2}, name="cat")
    g = _graph([k_new, cat, *extra], ins, outs, inits)
    out, n = kv_alias.alias(g)
    assert n == 0 and out is g


_FORK_APPEND = fork_while_held("""
import numpy as np
from pycann.kernels import kv_cache
past = np.zeros((1, 2, 0, 4), np.float32)
(present,) = kv_cache.k_cache_append([past, np.ones((1, 2, 3, 4), np.float32)], {"axis": 2})
buf = kv_cache._LIVE[id(present.base)]
""", "buf.lock", """
(nxt,) = kv_cache.k_cache_append([present, np.full((1, 2, 1, 4), 2, np.float32)], {"axis": 2})
want = np.concatenate([present, np.full((1, 2, 1, 4), 2, np.float32)], axis=2)
os._exit(0 if np.array_equal(nxt, want) else 3)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_appends_though_a_parent_thread_held_the_buffer_lock(tmp_path: Any) -> None:
    """A thread of the parent inside an append at the fork is not in the child: the buffer's lock it
    held is released there (``omp_fork.fork_safe``), so the child's decode step appends instead of
    waiting for ever."""
    out = run_script(tmp_path, _FORK_APPEND)
    assert "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])


@pytest.mark.parametrize("case", ["rewritten", "no_other_reader", "lo_past_read_twice", "present_not_f32",
                                  "concat_is_output"])
def test_alias_of_a_cache_concat_a_precision_mode_casts_around(case: str) -> None:
    """``present = Cast(Concat(Cast(past, f16), k), f32)`` (force_fp16) becomes CacheAppend(round_to=f16)
    with the Concat's float16 output a Cast of ``present``; other shapes of the pattern stay as they are."""
    nodes = [Node("Cast", ["past"], ["past16"], {"to": 10}, name="in"), Node("Relu", ["x"], ["k"], name="k"),
             Node("Concat", ["past16", "k"], ["cat16"], {"axis": 2}, name="cat"),
             Node("Cast", ["cat16"], ["present"], {"to": 10 if case == "present_not_f32" else 1}, name="out"),
             Node("Transpose", ["cat16"], ["kt"], {"perm": [0, 1, 3, 2]}, name="t")]
    outs = ["kt", "present"] + (["cat16"] if case == "concat_is_output" else [])
    if case == "no_other_reader":  # nothing reads the float16 Concat but the Cast to present: no Cast back
        nodes, outs = nodes[:4], ["present"]
    if case == "lo_past_read_twice":
        nodes.append(Node("Relu", ["past16"], ["r"], name="r"))
        outs.append("r")
    g = _graph(nodes, ["x", "past"], outs)
    g.descs["past"] = TensorDesc(DType.FLOAT, ("b", 3, "p", 4))
    out, n = kv_alias.alias(g)
    if case == "no_other_reader":
        assert n == 1 and [x.op_type for x in out.nodes] == ["Relu", "Cast", "CacheAppend"]
        return
    if case != "rewritten":
        assert n == 0 and out is g
        return
    assert n == 1 and [(x.op_type, x.inputs, x.outputs) for x in out.nodes] == [
        ("Relu", ["x"], ["k"]), ("Cast", ["k"], ["k_cache_f32"]),
        ("CacheAppend", ["past", "k_cache_f32"], ["present"]), ("Cast", ["present"], ["cat16"]),
        ("Transpose", ["cat16"], ["kt"])]
    assert out.nodes[2].attrs == {"axis": 2, "round_to": 10} and "k_cache_f32" not in g.descs  # g unchanged
    past = np.random.default_rng(0).standard_normal((1, 3, 2, 4)).astype(np.float32)
    new = np.ones((1, 3, 1, 4), np.float32)
    (present,) = k_cache_append([past, new], out.nodes[2].attrs)
    np.testing.assert_array_equal(present, np.concatenate([past.astype(np.float16).astype(np.float32), new], axis=2))
