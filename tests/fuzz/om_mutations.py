"""Mutations of compiled .om files for the fuzzer: JSON-level edits of the manifest (set a value
anywhere in the tree, delete a key, duplicate a list entry) written back with valid checksums, and
raw byte edits (with or without the checksums fixed up afterwards). A ``Mutation`` is plain data,
so a failing one is kept as a JSON file in tests/fuzz/corpus/om/ and replayed by the tests."""

from __future__ import annotations

import copy
import functools
import json
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import pycann
from pycann.ge import om
from pycann.ge.om import dumps_om

BASES = ("chain", "gears")


@dataclass(frozen=True)
class Mutation:
    base: str  # one of BASES
    kind: str  # "json" | "bytes" | "bytes_crc" (bytes, then every checksum recomputed)
    path: list[Any] = field(default_factory=list)  # json: keys / indices from the manifest root
    op: str = "set"  # json: "set" | "delete" | "dup"
    value: Any = None  # json "set": the new value
    edits: list[list[int]] = field(default_factory=list)  # bytes: [offset, byte] pairs

    @staticmethod
    def from_json(d: dict[str, Any]) -> Mutation:
        return Mutation(**{k: v for k, v in d.items() if k in Mutation.__dataclass_fields__})

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def _chain() -> onnx.ModelProto:
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 10
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu"),
             helper.make_node("Mul", ["y", "two"], ["z"], name="mul"), helper.make_node("Softmax", ["z"], ["s"], name="sm")]
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _conv() -> onnx.ModelProto:
    w = np.linspace(-1, 1, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@functools.cache
def base_file(name: str) -> bytes:
    """The unmutated .om (deterministic bytes: the time fields are pinned)."""
    if name == "chain":
        cm = pycann.compile_model(_chain())
    else:
        cm = pycann.compile_model(_conv(), pycann.CompileOptions(input_shape={"x": [-1, 3, 8, 8]},
                                                                 dynamic_batch_size=[1, 2]))
    cm.manifest["compile_seconds"] = 0.0
    cm.manifest["created"] = "2026-01-01T00:00:00+00:00"
    return dumps_om(cm.graph, cm.manifest)


def feeds(name: str) -> list[np.ndarray]:
    if name == "chain":
        return [np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)]
    return [np.linspace(-1, 1, 2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8)]


@functools.cache
def _manifest(name: str) -> dict[str, Any]:
    data = base_file(name)
    f = om._HEAD.unpack_from(data)
    out: dict[str, Any] = json.loads(data[f[6]:f[6] + f[7]])
    return out


def rewrite(data: bytes, manifest: bytes) -> bytes:
    """``data`` with its manifest replaced and every offset and checksum made consistent."""
    f = list(om._HEAD.unpack_from(data))
    wbytes = data[f[8]:]
    new_wo = om._align(om.HEADER_SIZE + len(manifest))
    f[5], f[7], f[8], f[9], f[10], f[11] = (zlib.crc32(manifest), len(manifest), new_wo, len(wbytes),
                                            new_wo + len(wbytes), zlib.crc32(wbytes))
    head = om._HEAD.pack(*f)
    return head + om._CRC.pack(zlib.crc32(head)) + manifest + bytes(new_wo - om.HEADER_SIZE - len(manifest)) + wbytes


def _fix_crcs(data: bytes) -> bytes:
    """Recompute the three checksums of a byte-edited file (so edits reach the decoder)."""
    if len(data) < om.HEADER_SIZE:
        return data
    f = list(om._HEAD.unpack_from(data))
    mo, ml, wo = f[6], f[7], f[8]
    if 0 <= mo <= mo + ml <= len(data):
        f[5] = zlib.crc32(data[mo:mo + ml])
    if 0 <= wo <= len(data):
        f[11] = zlib.crc32(data[wo:])
    head = om._HEAD.pack(*f)
    return head + om._CRC.pack(zlib.crc32(head)) + data[om.HEADER_SIZE:]


def apply(m: Mutation) -> bytes:
    data = base_file(m.base)
    if m.kind == "json":
        man = copy.deepcopy(_manifest(m.base))
        parent: Any = None
        node: Any = man
        for k in m.path[:-1]:
            node = node[k]
        key = m.path[-1] if m.path else None
        if m.path:
            parent = node
            node = parent.get(key) if isinstance(parent, dict) else parent[key]
        if m.op == "set":
            if parent is None:
                man = m.value
            else:
                parent[key] = m.value
        elif m.op == "delete" and parent is not None:
            del parent[key]
        elif m.op == "dup" and isinstance(node, list) and node:
            node.append(copy.deepcopy(node[0]))
        return rewrite(data, json.dumps(man).encode())
    buf = bytearray(data)
    for off, byte in m.edits:
        if 0 <= off < len(buf):
            buf[off] = byte & 0xFF
    return _fix_crcs(bytes(buf)) if m.kind == "bytes_crc" else bytes(buf)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(["", "x", "W", "mm", "Relu", "nan", "batch", "static", "dynamic"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["t", "v", "kind", "x"]), children,
                                                                      max_size=3),
    max_leaves=6,
)


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    base = draw(st.sampled_from(BASES))
    kind = draw(st.sampled_from(["json", "json", "json", "bytes", "bytes_crc"]))
    if kind != "json":
        size = len(base_file(base))
        edits = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)).map(list), min_size=1, max_size=6))
        return Mutation(base, kind, edits=edits)
    node: Any = _manifest(base)
    path: list[Any] = []
    while isinstance(node, (dict, list)) and node and (not path or draw(st.integers(0, 4)) > 0):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    op = draw(st.sampled_from(["set", "set", "delete", "dup"]))
    value = draw(JSON_VALUES) if op == "set" else None
    return Mutation(base, kind, path, op, value)
