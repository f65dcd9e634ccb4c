"""Running one custom op: dtype combination, InferShape, tiling on the host, the kernel on the twin.

The kernel gets ``(*inputs, *outputs, workspace, tiling)`` GM addresses, CANN's kernel signature
for operator projects (reference 1.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.ascendc import twin
from pycann.ascendc.diagnostics import KernelCheckError
from pycann.ascendc.enums import KernelMode
from pycann.ascendc.gm import GmAlloc, GmFree
from pycann.ascendc.opdev.context import InferShapeContext, Shape, TilingContext
from pycann.ascendc.opdev.opdef import OpDef, np_dtype
from pycann.ascendc.soc import get_soc


class CustomOpError(ValueError):
    """Inputs the prototype does not accept, or a tiling function that produced no launch."""


@dataclass
class CustomOp:
    """An installed custom operator: its prototype, kernel and where it came from."""

    op_type: str
    proto: OpDef
    kernel: Callable[..., None]
    mode: KernelMode = KernelMode.AIV_MODE
    onnx_domain: str = "customize"
    vendor: str = "customize"
    source: str = ""


def combination(op: OpDef, in_dtypes: Sequence[str]) -> int:
    """Index of the DataType combination matching ``in_dtypes``; ``CustomOpError`` listing the accepted ones."""
    n = len(op.outputs[0].dtypes)
    for i in range(n):
        if all(p.dtypes[i] == d for p, d in zip(op.inputs, in_dtypes)):
            return i
    accepted = [tuple(p.dtypes[i] for p in op.inputs) for i in range(n)]
    raise CustomOpError(f"{op.name}: input dtypes {tuple(in_dtypes)} match none of the prototype's "
                        f"combinations {accepted}")


def infer(op: OpDef, in_dtypes: Sequence[str], in_shapes: Sequence[Sequence[int]],
          attrs: Sequence[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Output (dtype, shape) pairs from the prototype's lists and its InferShape function."""
    if len(in_dtypes) != len(op.inputs):
        raise CustomOpError(f"{op.name}: {len(in_dtypes)} inputs given, the prototype has {len(op.inputs)}")
    k = combination(op, in_dtypes)
    ctx = InferShapeContext([Shape(list(s)) for s in in_shapes], len(op.outputs), list(attrs))
    if op.infer_shape is not None:
        ret = op.infer_shape(ctx)
        if ret not in (None, 0):
            raise CustomOpError(f"{op.name}: InferShape returned {ret} (GRAPH_FAILED)")
    return [(p.dtypes[k], tuple(ctx.GetOutputShape(j).dims)) for j, p in enumerate(op.outputs)]


def run(op: CustomOp, arrays: Sequence[np.ndarray], attrs: Sequence[Any], soc_version: str = "Ascend910B1",
        trace: Any = None) -> list[np.ndarray]:
    """Execute ``op`` on the twin; raises ``KernelCheckError`` with the kernel's findings."""
    proto = op.proto
    in_dt = [str(a.dtype) if a.dtype.name != "bfloat16" else "bfloat16" for a in arrays]
    outs = infer(proto, in_dt, [a.shape for a in arrays], attrs)
    soc = get_soc(soc_version)
    tctx = TilingContext([Shape(a.shape) for a in arrays], in_dt, [Shape(s) for _, s in outs], list(attrs), soc)
    tiling_fn = proto.AICore().tiling
    assert tiling_fn is not None  # OpDef.check() at load time
    ret = tiling_fn(tctx)
    if ret not in (None, 0):
        raise CustomOpError(f"{op.op_type}: tiling function returned {ret} (GRAPH_FAILED)")
    if tctx.block_dim <= 0:
        raise CustomOpError(f"{op.op_type}: the tiling function did not call SetBlockDim (block dim 0)")
    gins = []
    for a in arrays:
        g = GmAlloc(max(a.nbytes, 32))
        g.numpy(np.uint8)[: a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        gins.append(g)
    gouts = [GmAlloc(max(int(np.prod(s, dtype=np.int64)) * np_dtype(d).itemsize, 32)) for d, s in outs]
    ws = GmAlloc(max(32, sum(tctx.workspace)))
    tiling = GmAlloc(max(32, tctx.raw.size or len(tctx.raw.buf)))
    tiling.numpy(np.uint8)[: len(tctx.raw.buf)] = np.frombuffer(bytes(tctx.raw.buf), np.uint8)[: tiling.buf.nbytes]
    # CANN's tiling key is 0 unless the tiling function sets one (not the previous launch's)
    twin.ICPU_SET_TILING_KEY(tctx.tiling_key if tctx.tiling_key is not None else 0)
    try:
        res = twin.run_kernel(op.kernel, tctx.block_dim, (*gins, *gouts, ws, tiling), soc_version=soc_version,
                              mode=op.mode, trace=trace)
        if res.errors:
            raise KernelCheckError(res.errors)
        result = []
        for g, (d, s) in zip(gouts, outs):
            n = int(np.prod(s, dtype=np.int64))
            result.append(g.numpy(np_dtype(d))[:n].reshape(s).copy())
        return result
    finally:
        for g in (*gins, *gouts, ws, tiling):
            GmFree(g)
