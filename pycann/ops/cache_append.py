"""GE's CacheAppend: the ``Concat`` of a KV cache, ``present = Concat(past, new, axis)``, as its own op.

``pycann.CacheAppend(past, new; axis, round_to=0) -> present`` has Concat's semantics for two inputs
(ONNX Operators.md, Concat): ``present`` is ``past`` followed by ``new`` along ``axis`` (negative
counts from the end); the other dims must agree. With ``round_to`` (an ONNX dtype, float16 or
bfloat16) ``past`` is first cast to it and back (ONNX Cast), as a reduced-precision mode's
``Cast(Concat(Cast(past, lo), new), f32)`` computes it (``new`` is then the exact widening of a ``lo``
value). The reference kernel here is exactly that.

Why an op of its own: an exported decoder appends each step's key and value to the past it was fed
and returns the result as a graph output (``present``), which the caller feeds back as the next
step's ``past``. Concat copies the whole past on every step. The plan kernel of CacheAppend
(``kernels/kv_cache.py``) writes ``present`` into a cache buffer with room to spare and, when the
``past`` it is fed is that buffer's filled prefix, appends ``new`` in place: ``present`` is then a
(read-only) view of the buffer, and no step copies the past. ``ge/run/kv_alias.py`` puts this op in
the shape-generic plan's graph (the one a decode step runs); compiled graphs never contain it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.ops.opdef import REQUIRED, OpDef
from pycann.ops.tensor import _infer_concat, _k_concat

DOMAIN = "pycann"


def rounded_past(past: np.ndarray, round_to: int) -> np.ndarray:
    """``past`` cast to ONNX dtype ``round_to`` and back (ONNX Cast both ways); ``past`` when 0."""
    if not round_to:
        return past
    # (imported here: ops.cast loads ml_dtypes, which a model without such Casts never needs; the
    # kernels' table imports this module on every load, tests/ge/test_compiled_plan_reuse.py)
    from pycann.ops.cast import cast_array

    return cast_array(past, round_to).astype(past.dtype)  # (widening back is exact)


def _k_cache_append(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return _k_concat([rounded_past(inputs[0], int(attrs.get("round_to", 0))), inputs[1]], {"axis": attrs["axis"]})


OPS: list[OpDef] = [
    # not foldable: a compiled graph never holds it, and its plan kernel hands out views of a buffer
    OpDef("CacheAppend", _infer_concat, _k_cache_append, domain=DOMAIN, attrs={"axis": REQUIRED, "round_to": 0},
          foldable=False),
]
