"""Elementwise ops (ONNX spec: Operators.md, per-op sections). Numpy ufuncs are the kernels.

Pattern every family follows: small ``_infer_*`` helpers, ``_k_*`` kernels, and an explicit
``OPS`` list at the bottom that ``pycann.ops.registry`` reads.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import broadcast_shapes, same_as


def _infer_broadcast(ctx: InferContext) -> list[TensorDesc]:
    descs = [d for d in ctx.inputs if d is not None]
    try:
        shape = broadcast_shapes(*(d.shape for d in descs))
    except ValueError as e:
        raise ctx.fail(f"inputs {[str(d) for d in descs]} do not broadcast: {e}") from None
    return [TensorDesc(descs[0].dtype, shape)]


def _infer_unary(ctx: InferContext) -> list[TensorDesc]:
    return [same_as(ctx.inputs[0])]


def _k_add(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.asarray(np.add(x[0], x[1]))]


def _k_relu(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.asarray(np.maximum(x[0], x[0].dtype.type(0)))]


OPS: list[OpDef] = [
    OpDef("Add", _infer_broadcast, _k_add, since=7),
    OpDef("Relu", _infer_unary, _k_relu, since=6),
]
