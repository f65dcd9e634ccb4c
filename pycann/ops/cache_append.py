"""GE's CacheAppend: the ``Concat`` of a KV cache, ``present = Concat(past, new, axis)``, as its own op.

``pycann.CacheAppend(past, new; axis) -> present`` has Concat's semantics for two inputs (ONNX
Operators.md, Concat): ``present`` is ``past`` followed by ``new`` along ``axis`` (negative counts
from the end); the other dims must agree. The reference kernel here is exactly that.

Why an op of its own: an exported decoder appends each step's key and value to the past it was fed
and returns the result as a graph output (``present``), which the caller feeds back as the next
step's ``past``. Concat copies the whole past on every step. The plan kernel of CacheAppend
(``kernels/kv_cache.py``) writes ``present`` into a cache buffer with room to spare and, when the
``past`` it is fed is that buffer's filled prefix, appends ``new`` in place: ``present`` is then a
(read-only) view of the buffer, and no step copies the past. ``ge/run/kv_alias.py`` puts this op in
the shape-generic plan's graph (the one a decode step runs); compiled graphs never contain it.
"""

from __future__ import annotations

from pycann.ops.opdef import REQUIRED, OpDef
from pycann.ops.tensor import _infer_concat, _k_concat

DOMAIN = "pycann"

OPS: list[OpDef] = [
    # not foldable: a compiled graph never holds it, and its plan kernel hands out views of a buffer
    OpDef("CacheAppend", _infer_concat, _k_concat, domain=DOMAIN, attrs={"axis": REQUIRED}, foldable=False),
]
