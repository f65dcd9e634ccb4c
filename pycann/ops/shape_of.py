"""GE's ShapeOf: a chain of shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat, Add ...) as one op.

``pycann.ShapeOf(X_1, ..., X_k; dims=[...], scalar=0|1) -> Y`` (int64): ``Y`` has one element per
entry of ``dims``, each ``const + sum(coeff * shape(X_src)[axis])``; ``scalar=1`` gives a 0-d ``Y``
(one entry). Only the shapes of the inputs are read, never their values. ``dims`` is flat:
``[const, n_terms, (src, axis, coeff) * n_terms, const, n_terms, ...]`` with ``src`` an input index.

Why: an exported transformer computes every Reshape's target shape at run time from ``Shape`` of
an activation (``Shape -> Gather -> Unsqueeze -> Concat``, 4-7 nodes per Reshape). A plan that
serves every shape (the shape-generic plan, ge/run/executor.py) ran them all, on tiny int64 arrays:
174 of the 304 steps of a GPT-2 6L decode step. ``ge/run/shape_program.py`` rewrites that plan's
graph so each value those chains feed is one ShapeOf step. Compiled graphs never contain it (a
specialised plan folds the chains into constants instead).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

DOMAIN = "pycann"


def decode(dims: Sequence[int]) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """``dims`` as (const, [(src, axis, coeff), ...]) per element; raises ValueError on a malformed list."""
    out: list[tuple[int, list[tuple[int, int, int]]]] = []
    i, n = 0, len(dims)
    while i < n:
        if i + 2 > n:
            raise ValueError(f"ShapeOf dims {list(dims)}: an element ends after its constant")
        const, k = int(dims[i]), int(dims[i + 1])
        i += 2
        if k < 0 or i + 3 * k > n:
            raise ValueError(f"ShapeOf dims {list(dims)}: element {len(out)} has {k} terms past the end")
        out.append((const, [(int(dims[j]), int(dims[j + 1]), int(dims[j + 2])) for j in range(i, i + 3 * k, 3)]))
        i += 3 * k
    return out


@functools.lru_cache(maxsize=4096)
def _program(dims: tuple[int, ...]) -> list[tuple[int, list[tuple[int, int, int]]]]:
    return decode(dims)


def _k_shape_of(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    shapes = [np.shape(x) for x in inputs]
    vals = []
    for const, terms in _program(tuple(attrs["dims"])):  # (decoded once per program: a decode step runs 26)
        v = const
        for src, axis, coeff in terms:
            v += coeff * shapes[src][axis]
        vals.append(v)
    if attrs["scalar"]:
        return [np.array(vals[0], dtype=np.int64)]
    return [np.array(vals, dtype=np.int64)]


def _infer(ctx: InferContext) -> list[TensorDesc]:
    try:
        elems = decode(ctx.attrs["dims"])  # type: ignore[arg-type]
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    for _, terms in elems:
        for src, axis, _c in terms:
            d = ctx.input(src)
            if d is None:
                raise ctx.fail(f"a term reads input {src}, which is missing")
            if d.shape is not None and not -len(d.shape) <= axis < len(d.shape):
                raise ctx.fail(f"a term reads axis {axis} of input {src}, of rank {len(d.shape)}")
    if ctx.attrs.get("scalar"):
        if len(elems) != 1:
            raise ctx.fail(f"scalar=1 needs one element, dims has {len(elems)}")
        return [TensorDesc(DType.INT64, ())]
    return [TensorDesc(DType.INT64, (len(elems),))]


OPS: list[OpDef] = [
    # not foldable: it reads shapes, not values, and a compiled graph never holds it (module doc)
    OpDef("ShapeOf", _infer, _k_shape_of, domain=DOMAIN, attrs={"dims": REQUIRED, "scalar": 0}, foldable=False),
]
