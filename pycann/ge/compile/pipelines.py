"""The pass pipelines, as explicit ordered lists. Names are usable from the command line
(``--fusion_switch_file`` turns a pass off by name)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pycann import config
from pycann.errors import ModelError
from pycann.ge.compile.passes import (
    bn_to_affine,
    cancel_transpose,
    canonicalize,
    canonicalize_qop,
    concat_prefix,
    constant_folding,
    dead_code,
    fold_conv_affine,
    fold_conv_bn,
    fuse_attention,
    fuse_channel_shuffle,
    fuse_conv_act,
    fuse_elementwise,
    fuse_gelu,
    fuse_layernorm,
    fuse_matmul_bias,
    fuse_qdq,
    fuse_rmsnorm,
    fuse_se_project,
    fuse_softmax,
    fuse_squeeze_excite,
    infer_shapes,
    precision,
    select_kernels,
    select_layout,
)
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, verify

PassFn = Callable[[Graph, PassContext], PassResult]

# (name, run) in order. Inference runs again after rewrites so descs stay exact.
COMPILE_PIPELINE: list[tuple[str, PassFn]] = [
    (infer_shapes.name, infer_shapes.run),
    # QLinearConv & co. (QOperator models) -> the QDQ form that QuantizedConvFusion reads
    (canonicalize_qop.name, canonicalize_qop.run),
    (infer_shapes.name, infer_shapes.run),
    # before ConstantFolding, which would dequantise the int8 weights into float ones
    (fuse_qdq.name, fuse_qdq.run),
    (constant_folding.name, constant_folding.run),
    (dead_code.name, dead_code.run),
    # one spelling per computation (Sum -> Add, Div by constant -> Mul, Gemm -> MatMul + Add, Pad into
    # Conv, hard activations), so the folds and fusions below match graphs from every exporter
    (canonicalize.name, canonicalize.run),
    (infer_shapes.name, infer_shapes.run),
    (fold_conv_bn.name, fold_conv_bn.run),
    (fold_conv_affine.name, fold_conv_affine.run),
    # a bias Add folded into a ConvTranspose can expose a BatchNormalization behind it (PP-OCR det)
    (fold_conv_bn.name, fold_conv_bn.run),
    # the BatchNormalizations no conv absorbed (pre-activation nets): per-channel Mul + Add, which
    # ElementwiseChainFusion chains with the Relu after them
    (bn_to_affine.name, bn_to_affine.run),
    (constant_folding.name, constant_folding.run),
    (dead_code.name, dead_code.run),
    (infer_shapes.name, infer_shapes.run),
    (cancel_transpose.name, cancel_transpose.run),
    # ShuffleNet's Concat -> Reshape -> Transpose -> Reshape -> Slices: one copy instead of three
    (fuse_channel_shuffle.name, fuse_channel_shuffle.run),
    (fuse_gelu.name, fuse_gelu.run),
    (fuse_layernorm.name, fuse_layernorm.run),
    (fuse_rmsnorm.name, fuse_rmsnorm.run),
    # a decomposed softmax must be one op before AttentionFusion looks for MatMul-Softmax-MatMul
    (fuse_softmax.name, fuse_softmax.run),
    (fuse_attention.name, fuse_attention.run),
    (fuse_conv_act.name, fuse_conv_act.run),
    # GlobalAveragePool -> 1x1 conv -> 1x1 conv -> Mul (static shapes): one op, before ElementwiseChainFusion takes the Mul
    (fuse_squeeze_excite.name, fuse_squeeze_excite.run),
    # ... and the 1x1 projection conv after it: the gate scales the conv's weights, not the tensor
    (fuse_se_project.name, fuse_se_project.run),
    (fuse_matmul_bias.name, fuse_matmul_bias.run),
    (fuse_elementwise.name, fuse_elementwise.run),
    # dtypes are chosen on the fused graph, as CANN's FE does after graph fusion
    (precision.name, precision.run),
    # DenseNet's per-layer Concat of every feature map so far: the previous layer's Concat output first
    # (after the dtypes: a Concat that --customize_dtypes / a mixlist runs in float16 must not feed a
    # float32 one its rounded copy of the same inputs)
    (concat_prefix.name, concat_prefix.run),
    (dead_code.name, dead_code.run),
    (infer_shapes.name, infer_shapes.run),
    # provider per node (numpy BLAS, oneDNN through torch), recorded in the .om as attrs["_algo"]
    (select_kernels.name, select_kernels.run),
    # NHWC or NCHW per oneDNN conv chain, recorded as attrs["_layout"]
    (select_layout.name, select_layout.run),
]

# Run once per *symbolic signature* of a model (its control-input values; the input shapes stay
# symbolic): after those values have inlined every If, the flat graph is optimised again
# (specialize.specialize keeps the result as the signature's template graph).
SIGNATURE_PIPELINE: list[tuple[str, PassFn]] = [
    (dead_code.name, dead_code.run),
    (infer_shapes.name, infer_shapes.run),
    # known ranks let rank-dependent rewrites (Gemm, Flatten) apply
    (canonicalize.name, canonicalize.run),
    (infer_shapes.name, infer_shapes.run),
    (cancel_transpose.name, cancel_transpose.run),
    (fuse_channel_shuffle.name, fuse_channel_shuffle.run),
    (fuse_conv_act.name, fuse_conv_act.run),
    (fuse_matmul_bias.name, fuse_matmul_bias.run),
    (fuse_elementwise.name, fuse_elementwise.run),
    (dead_code.name, dead_code.run),
    (infer_shapes.name, infer_shapes.run),
]

# Run per concrete input shape on a copy of the signature's template, after shape inference and
# the folding of the shape arithmetic: the choices that depend on the sizes, no other rewrite.
SHAPE_CHOICES: list[tuple[str, PassFn]] = [
    # the Shape -> Gather -> Concat chains just folded into constants leave dead nodes
    (dead_code.name, dead_code.run),
    # a channel shuffle's Reshape targets are constants only once the batch is known (a gear, a
    # dynamic batch): ShuffleNet exported with a symbolic batch computes them at run time
    (fuse_channel_shuffle.name, fuse_channel_shuffle.run),
    # a residual Add joins a FusedMatMul only where its operand has provably the product's shape,
    # which exported transformers compute at run time (Shape -> Reshape): known only per size
    (fuse_matmul_bias.name, fuse_matmul_bias.run),
    # provider per node, and NHWC or NCHW per oneDNN conv chain: both depend on the sizes
    (select_kernels.name, select_kernels.run),
    (select_layout.name, select_layout.run),
]

# The whole re-optimisation a flat graph gets when a concrete shape inlines an If its template
# kept (an If on a shape): both lists above, on that shape's graph.
SPECIALIZE_PIPELINE: list[tuple[str, PassFn]] = SIGNATURE_PIPELINE + SHAPE_CHOICES[1:]

# Passes that may not be switched off: the rest of the stack relies on their results.
REQUIRED_PASSES = {infer_shapes.name, precision.name}

# Passes whose PassResult.changed is False only when they left the graph exactly as it was, so an
# InferShapes right after them (and after InferShapes) has nothing to do and is skipped (~13 ms of
# DenseNet-121's ~105 ms compile: every model without QOperator nodes). Others may report False while
# writing descs or attributes: after them InferShapes always runs. tests/ge/test_pipeline_skip.py
# checks each listed pass on graphs it rewrites and graphs it leaves alone.
EXACT_CHANGED = {canonicalize_qop.name}


def _dumper() -> Any:
    """``export.pipeline_dumper()`` when ``DUMP_GE_GRAPH`` asks for dumps; the export module (and
    onnx, ~20 MB) is imported only then, so running an .om never loads onnx."""
    if config.graph_dump().mode not in ("1", "2", "3"):
        return None
    from pycann.ge.compile import export

    return export.pipeline_dumper()


def run_pipeline(graph: Graph, ctx: PassContext, pipeline: list[tuple[str, PassFn]] | None = None,
                 changed: dict[str, bool] | None = None) -> Graph:
    """Run ``pipeline`` (default ``COMPILE_PIPELINE``); logs one line per pass to ``ctx.log``.
    With ``DUMP_GE_GRAPH`` set, writes the graph around each pass (``ge/compile/export.py``).
    ``changed``, when given, receives per pass name whether any of its runs changed the graph."""
    disabled = set(ctx.options.get("disabled_passes", ()))
    dump = _dumper()
    typed = False  # whether the graph's descs are InferShapes' for the graph as it is now
    for name, fn in pipeline or COMPILE_PIPELINE:
        if name in disabled and name not in REQUIRED_PASSES:
            ctx.log(f"[{name}] off (fusion switch)")
            continue
        if name == infer_shapes.name and typed and not ctx.debug:
            ctx.log(f"[{name}] skipped: no pass changed the graph since the last inference")
            continue
        before = len(graph.nodes)
        if dump is not None:
            dump.before(graph, name)
        t0 = time.perf_counter()
        res = fn(graph, ctx)
        graph = res.graph
        if changed is not None:
            changed[name] = changed.get(name, False) or bool(res.changed)
        # only passes whose ``changed`` is exact keep the descs valid when they report no change
        typed = name == infer_shapes.name or (typed and name in EXACT_CHANGED and not res.changed)
        if dump is not None:
            dump.after(graph, name)
        ms = (time.perf_counter() - t0) * 1e3
        ctx.log(f"[{name}] nodes {before} -> {len(graph.nodes)}; {res.report} ({ms:.1f} ms)")
        for m in res.missed:
            ctx.log(f"[{name}]   not applied: {m}")
        if ctx.debug:
            verify(graph)
    if not ctx.debug:
        # once per pipeline (each pass under debug): a rewrite that removed a value something still
        # reads, or a graph output, fails the compile here instead of running with that value None
        try:
            verify(graph)
        except ModelError as e:
            raise ModelError(f"the GE pass pipeline left an invalid graph (a pass bug; --fusion_switch_file can "
                             f"turn the fusion off): {e}") from e
    if dump is not None:
        dump.done(graph)
    return graph
