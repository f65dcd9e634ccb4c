"""Which narrowing Casts may flush float32 subnormals: those whose every reader is a bf16 matrix operand.

A Cast from float32 to bfloat16 rounds to nearest even, and ONNX Cast (as ml_dtypes) keeps float32
subnormals as bfloat16 subnormals. numpy has no vector form of that rounding, so pycann's exact cast
converts one element at a time (~0.8 ns a value: 9.5 ms of PP-OCRv4 det's 31 ms in
``allow_fp32_to_bf16`` on an AMX Xeon), while oneDNN's reorder converts on every thread with the
CPU's ``vcvtneps2bf16``, which reads float32 subnormals as zero.

The bf16 kernels those Casts feed mostly read them the same way: the dot-product instructions of
AVX512_BF16 (``vdpbf16ps``) and AMX (``tdpbf16ps``) take subnormal bf16 operands as zero
(docs/precision.md). So where every reader of a Cast's output uses it as a multiplicand of a Conv,
MatMul or Gemm (X or W; not a bias or a residual, which are added exactly), directly or through ops
that only move data (Concat, Reshape, Transpose, Slice, a nearest Resize...:
``hoist_casts.DATA_INPUTS``), a flushing conversion changes what those kernels compute only where an
operand is a float32 subnormal: nothing where the kernel's instructions flush it anyway (brgconv,
brgemm, AMX: outputs bit-identical, tests/ge/test_flushing_casts.py); where a kernel widens its bf16
operands to float32 (oneDNN's ``jit_bf16`` conv on 3-channel inputs) the subnormal's share of each
sum, below 1.2e-38 times the weights' absolute sum (oneDNN's bf16 ``gemm`` of a Gemm that
canonicalize keeps, transA or a computed B, widens too: a Gemm whose ``alpha`` exceeds 1 in
magnitude, which would scale that share, does not vouch). (On every kernel, within that bound: a float32
subnormal within half a bf16 step of 2**-126 rounds up to bfloat16's smallest normal in the exact
cast, which no kernel flushes, and to zero in the reorder.) ConvTranspose is not among the readers: outside
its kernel == stride form its bf16 operands are widened and computed in float32. A graph output, a
subgraph, a vector op or any other reader keeps the exact cast.

``mark_flushing_casts`` records the verdict as the node attribute ``_readers_flush`` (the .om keeps
it; a model's own Cast that arrives with the attribute, top level or in a subgraph, loses it, and
``clear_flushing_casts`` drops it in the modes that mark nothing); ``kernels/bind.py`` binds such a
Cast to oneDNN's reorder only where the native bf16 kernels run (a bf16 CPU and libdnnl), else the
exact cast runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from pycann.dtypes import DType
from pycann.ge.compile.passes.hoist_casts import DATA_INPUTS, moves_data
from pycann.ge.ir import Graph, Node, free_names

__all__ = ["ATTR", "MATRIX_OPERANDS", "clear_flushing_casts", "mark_flushing_casts"]

ATTR = "_readers_flush"
_F32, _BF16 = int(DType.FLOAT), int(DType.BFLOAT16)

# (domain, op type) -> the inputs that are multiplicands of the op's bf16 dot products
MATRIX_OPERANDS: Mapping[tuple[str, str], tuple[int, ...]] = {
    ("", "Conv"): (0, 1),
    ("", "MatMul"): (0, 1),
    ("", "Gemm"): (0, 1),
    ("pycann", "FusedConv"): (0, 1),
    ("pycann", "FusedMatMul"): (0, 1),
}


def mark_flushing_casts(g: Graph) -> int:
    """Set ``_readers_flush`` on every float32 -> bfloat16 Cast of ``g`` whose readers all take its
    output as a matrix operand (see the module docstring), clear it on the others; returns how many
    carry it."""
    readers: dict[str, list[tuple[Node, int]]] = {}
    for n in g.nodes:
        for i, x in enumerate(n.inputs):
            if x:
                readers.setdefault(x, []).append((n, i))
    outer = set(g.outputs)
    for n in g.nodes:
        for s in n.subgraphs.values():
            outer |= free_names(s)
    clear_flushing_casts(g)  # (a mark that came with the model, or from an earlier run of this pass)
    marked = 0
    for n in g.nodes:  # (the top level only: nothing is marked in a subgraph)
        if n.op_type != "Cast" or n.domain or not n.inputs or not n.inputs[0] or not n.outputs:
            continue
        src = g.descs.get(n.inputs[0])
        narrowing = int(n.attrs.get("to", 0)) == _BF16 and src is not None and src.dtype == _F32
        if narrowing and _only_matrix_operands(n.outputs[0], readers, outer, set()):
            n.attrs = {**n.attrs, ATTR: 1}  # (a new dict: compiled graphs share attrs dicts)
            marked += 1
    return marked


def clear_flushing_casts(g: Graph) -> int:
    """Drop ``_readers_flush`` from every node of ``g`` and its subgraphs (an ONNX model's own Cast may
    carry the attribute: a flushing cast where nothing vouched for its readers); returns how many."""
    cleared = 0
    for n in g.nodes:
        if ATTR in n.attrs:
            n.attrs = {k: v for k, v in n.attrs.items() if k != ATTR}
            cleared += 1
        for s in n.subgraphs.values():
            cleared += clear_flushing_casts(s)
    return cleared


def _only_matrix_operands(value: str, readers: Mapping[str, list[tuple[Node, int]]], outer: set[str],
                          seen: set[str]) -> bool:
    """Every use of ``value`` is a matrix operand, directly or through data-moving ops."""
    if value in outer or value in seen:
        return False
    seen.add(value)
    uses = readers.get(value, [])
    if not uses:
        return False  # (nothing reads it: nothing to gain, and no reader to vouch for it)
    for node, i in uses:
        operands = MATRIX_OPERANDS.get((node.domain, node.op_type))
        if operands is not None:
            if i not in operands or not _unscaled(node):
                return False
            continue
        want = DATA_INPUTS.get(node.op_type)
        if not moves_data(node) or (want is not None and i not in want):
            return False
        if not _only_matrix_operands(node.outputs[0], readers, outer, seen):
            return False
    return True


def _unscaled(node: Node) -> bool:
    """The op's product is not scaled up: a Gemm's ``alpha`` above 1 in magnitude would scale the
    subnormals' share of a widening kernel's sums past the bound (module docstring); ``transA`` or a
    computed B keep a Gemm as one, and oneDNN's bf16 gemm widens its operands."""
    if node.op_type != "Gemm" or node.domain:
        return True
    try:
        return abs(float(node.attrs.get("alpha", 1.0))) <= 1.0
    except (TypeError, ValueError):
        return False
