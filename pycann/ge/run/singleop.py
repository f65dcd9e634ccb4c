"""Single-operator execution in GE: one op of pycann's operator table on concrete inputs.

``run_op`` is what CANN's single-op mode (``acl.op.execute_v2``) needs, with graph mode's checks:
it looks up the ``OpDef`` (``UnsupportedOpError``), fills the schema defaults (a missing required
attribute is an ``AttrError``), runs shape/dtype inference on the inputs (bad attributes or shapes
give a ``ShapeError`` naming the op), runs the kernel (any failure becomes a ``KernelError`` naming
the op) and checks each output against the inferred description. ``pycann.acl.op`` is a facade
over it: it only moves bytes between device memory and arrays and turns these errors into
``aclError`` codes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, from_numpy
from pycann.errors import KernelError, ShapeError, UnsupportedOpError
from pycann.kernels.providers import openmp
from pycann.kernels.table import run_kernel
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.registry import lookup
from pycann.runtime import signal_stack

Input = np.ndarray | Sequence[np.ndarray] | None
"""A single-op input: an array, a list of arrays (ONNX sequence) or None (omitted optional)."""


class AttrError(ShapeError):
    """An attribute of a single op is missing (required by the op's schema)."""


class OutputCountError(ShapeError):
    """More outputs were requested than the op has."""


def find_op(op_type: str, domain: str = "", opset: int | None = None) -> OpDef:
    """The ``OpDef`` serving ``op_type``; raises ``UnsupportedOpError`` for an unknown op or one
    with subgraphs (If, Loop, Scan need a graph)."""
    opdef = lookup(op_type, domain, opset)
    if opdef.scoped:
        raise UnsupportedOpError(f"{op_type} has subgraphs and cannot run as a single op; put it in a model")
    return opdef


def _opset(opdef: OpDef, domain: str, opset: int | None) -> int:
    """The opset to infer with: the given one, else the newest ONNX opset (the kernels implement
    the latest semantics) or, for other domains, the definition's own version."""
    if opset is not None:
        return int(opset)
    if domain in ("", "ai.onnx"):
        import onnx.defs

        return int(onnx.defs.onnx_opset_version())
    return int(opdef.since)


def _check_arity(op_type: str, domain: str, version: int, n_inputs: int, where: str) -> None:
    """ONNX's input count for the op (its schema's min/max; omitted optional inputs count when given as
    None): a ShapeError naming the op and the counts, before a kernel indexes an input that is not
    there. Ops without an ONNX schema (pycann's own domains) are left to inference."""
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(op_type, version, "" if domain == "ai.onnx" else domain)
    except Exception:  # noqa: BLE001 - no schema (a custom domain): inference checks what it can
        return
    lo, hi = schema.min_input, schema.max_input
    if not lo <= n_inputs <= hi:
        takes = f"{lo}" if lo == hi else f"{lo} or more" if hi >= 2**31 - 1 else f"{lo} to {hi}"
        raise ShapeError(f"{where}: takes {takes} input(s), {n_inputs} given")


def _desc(x: Input) -> TensorDesc | None:
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        elem = int(from_numpy(np.asarray(x[0]).dtype)) if x else 0
        return TensorDesc(elem, None, kind="sequence")
    a = np.asarray(x)
    return TensorDesc(int(from_numpy(a.dtype)), tuple(int(d) for d in a.shape))


def _describe(inputs: Sequence[Input]) -> str:
    return ", ".join("None" if x is None else f"sequence[{len(x)}]" if isinstance(x, (list, tuple))
                     else f"{np.asarray(x).dtype}{list(np.shape(x))}" for x in inputs)


def _check_output(op_type: str, j: int, got: Any, want: TensorDesc) -> None:
    """Output ``j`` must have the inferred dtype and every inferred int dim."""
    if want.kind != "tensor":
        if want.kind == "sequence" and not isinstance(got, list):
            raise KernelError(f"{op_type}: output {j} should be a sequence (list of arrays), got {type(got).__name__}")
        return
    if not isinstance(got, np.ndarray):
        raise KernelError(f"{op_type}: output {j} is a {type(got).__name__}, not an array")
    dtype_ok = not want.dtype or int(from_numpy(got.dtype)) == want.dtype
    shape_ok = want.shape is None or (len(want.shape) == got.ndim and all(
        not isinstance(d, int) or d == s for d, s in zip(want.shape, got.shape)))
    if not (dtype_ok and shape_ok):
        raise KernelError(f"{op_type}: output {j} is {got.dtype}{list(got.shape)}, but inference gave {want}")


def run_op(
    op_type: str,
    inputs: Sequence[Input],
    attrs: Mapping[str, Any] | None = None,
    opset: int | None = None,
    domain: str = "",
    n_outputs: int | None = None,
) -> list[np.ndarray]:
    """Run ``op_type`` (ONNX semantics of ``opset``, default the latest) on ``inputs``.

    ``attrs``: the op's attributes (schema defaults are filled in). ``n_outputs``: how many
    outputs the caller wants (e.g. Split without ``num_outputs``, MaxPool's indices); default
    what inference gives for one requested output. Returns the outputs (arrays; lists for
    sequence outputs). Raises ``UnsupportedOpError``, ``AttrError`` (a required attribute is
    missing), ``OutputCountError`` (too many outputs requested), ``ShapeError`` (inference rejects
    the attributes or inputs) or ``KernelError``, each naming the op.
    """
    signal_stack.ensure()  # (as LoadedModel.run: signal handlers off the stack the kernels use)
    openmp.shield_workers()
    opdef = find_op(op_type, domain, opset)
    version = _opset(opdef, domain, opset)
    where = f"{op_type} (opset {version})"
    try:
        full = opdef.with_defaults(dict(attrs or {}), where)
    except ShapeError as e:
        raise AttrError(str(e)) from None
    _check_arity(op_type, domain, version, len(inputs), where)
    want = max(1, int(n_outputs)) if n_outputs is not None else 1
    full["_n_outputs"] = want
    values = [None if x is None or isinstance(x, (list, tuple)) else np.asarray(x) for x in inputs]
    ctx = InferContext(op_type, op_type, full, [_desc(x) for x in inputs], values, version, want)
    try:
        inferred = list(opdef.infer(ctx))
    except ShapeError:
        raise
    except Exception as e:  # noqa: BLE001 - an infer function rejecting the inputs must still name the op
        raise ShapeError(f"{where}: shape inference failed for inputs ({_describe(inputs)}): "
                         f"{type(e).__name__}: {e}") from e
    count = want if n_outputs is not None else len(inferred)
    if len(inferred) < count:
        raise OutputCountError(f"{where}: {count} outputs requested, the op has {len(inferred)}")
    feeds: list[Any] = list(inputs)  # sequence inputs are lists of arrays at run time
    try:
        outs = list(run_kernel(opdef)(feeds, full))
    except Exception as e:  # noqa: BLE001 - every kernel failure becomes a KernelError naming the op
        raise KernelError(f"{where}: kernel failed on inputs ({_describe(inputs)}): {type(e).__name__}: {e}") from e
    if len(outs) < count:
        raise KernelError(f"{where}: the kernel gave {len(outs)} outputs, {count} expected")
    for j in range(count):
        _check_output(where, j, outs[j], inferred[j])
    return outs[:count]
