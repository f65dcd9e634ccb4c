"""Custom operators (Ascend C kernels installed as vendor packages) as entries of the op table.

``load_ops()`` reads the vendors folders of ASCEND_CUSTOM_OPP_PATH (pycann.ascendc.opdev.vendor)
and makes one ``OpDef`` per custom op and domain: the CANN op type in the default domain (what
``acl.op.execute("AddCustom", ...)`` looks up) and the ONNX domain its framework mapping names
(what a model node ``customize::AddCustom`` resolves to). Shapes come from the op's InferShape,
dtypes from its DataType lists; the kernel runs on the CPU twin with the op's tiling function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann import config
from pycann.dtypes import TensorDesc, from_numpy, to_numpy
from pycann.errors import KernelError, ShapeError
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

SOC_ENV = "PYCANN_CUSTOM_OP_SOC"  # the SoC the twin runs custom kernels as (default Ascend910B1)


def _dt_name(dtype: int) -> str:
    d = to_numpy(dtype)
    return "bfloat16" if d.name == "bfloat16" else str(d)


def _attr_values(op: Any, attrs: Mapping[str, Any]) -> list[Any]:
    return [attrs.get(a.name, a.default) for a in op.proto.attrs]


def _make(op: Any, domain: str) -> OpDef:
    from pycann.ascendc.opdev import runner

    def infer(ctx: InferContext) -> list[TensorDesc]:
        descs = [ctx.required(i) for i in range(len(op.proto.inputs))]
        if not all(d.is_static for d in descs):
            raise ctx.fail("custom Ascend C ops need static input shapes (the tiling function runs per shape)")
        try:
            outs = runner.infer(op.proto, [_dt_name(d.dtype) for d in descs], [tuple(int(x) for x in d.shape or ()) for d in descs],  # type: ignore[arg-type]
                                _attr_values(op, ctx.attrs))
        except runner.CustomOpError as e:
            raise ctx.fail(str(e)) from None
        return [TensorDesc(int(from_numpy(np.dtype(runner.np_dtype(dt)))), shape) for dt, shape in outs]

    def kernel(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in inputs if a is not None]
        try:
            return runner.run(op, arrays, _attr_values(op, attrs), config.custom_op_soc())
        except runner.CustomOpError as e:
            raise ShapeError(str(e)) from None
        except KernelError:
            raise

    defaults = {a.name: (REQUIRED if a.required else a.default) for a in op.proto.attrs}
    return OpDef(op.op_type, infer, kernel, domain=domain, since=1, attrs=defaults, foldable=False,
                 doc=f"custom Ascend C op from vendor {op.vendor} ({op.source})")


def load_ops() -> list[OpDef]:
    """OpDefs for every installed custom op (none when ASCEND_CUSTOM_OPP_PATH is unset)."""
    if not config.custom_opp_path():
        return []
    from pycann.ascendc.opdev.vendor import load_all

    out = []
    for op in load_all():
        out.append(_make(op, ""))
        if op.onnx_domain not in ("", "ai.onnx"):
            out.append(_make(op, op.onnx_domain))
    return out
