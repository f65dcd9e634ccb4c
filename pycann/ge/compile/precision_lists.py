"""The op tables behind ``--precision_mode`` (docs/precision.md): which ops run on the matrix
(cube) unit, and the default mixed-precision white / black / gray lists.

CANN keeps this information per op in ``aic-<soc>-ops-info-*.json`` as ``precision_reduce``:
``true`` = white list (may run in float16/bfloat16), ``false`` = black list (keeps float32),
absent = gray list (follows the op before it). pycann's tables use ONNX op types (plus the
``pycann`` fused ops); ``CANN_ALIASES`` maps the Ascend IR names that users copy from CANN's
files (``Conv2D``, ``MatMulV2``, ``SoftmaxV2``, ...) to them, so a ``--modify_mixlist`` or
``--keep_dtype`` file written for CANN works unchanged.

An op in none of the three lists has no reduced-precision model in pycann: every mode keeps it
in its original dtype (the pass logs it as "not applied").
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ------------------------------------------------------------------------------------------
# Matrix (cube) ops: reduced-precision operands, float32 accumulation. ``allow_fp32_to_fp16`` /
# ``allow_fp32_to_bf16`` reduce exactly these; ``force_fp32`` (= ``cube_fp16in_fp32out``) rounds
# their operands to float16 and keeps a float32 result. Value: the operand input indices (the
# inputs the cube reads; bias / residual / mask inputs are added in the float32 accumulator).
MATRIX_OPERANDS: dict[str, tuple[int, ...]] = {
    "Conv": (0, 1),
    "ConvTranspose": (0, 1),
    "MatMul": (0, 1),
    "Gemm": (0, 1),
    "FusedConv": (0, 1),
    "FusedConvTranspose": (0, 1),
    "FusedMatMul": (0, 1),
    "FusedAttention": (0, 1, 2),
}
# (GE's fe.ini ``fp16.op_type``: MatMul[V2], BatchMatMul[V2], Conv2D/3D, DepthwiseConv2D,
# Conv2DTranspose, Deconvolution, FullyConnection, GEMM — the ops above in ONNX terms.)
MATRIX_OPS: frozenset[str] = frozenset(MATRIX_OPERANDS)
# The op types a fused node stands for (``OpType::Conv`` in --keep_dtype also names FusedConv).
FUSED_FROM: dict[str, tuple[str, ...]] = {
    "FusedConv": ("Conv",), "FusedConvTranspose": ("ConvTranspose",), "FusedMatMul": ("MatMul", "Gemm"), "FusedAttention": ("MatMul", "Softmax"),
}

# ------------------------------------------------------------------------------------------
# Default mixed-precision lists (allow_mix_precision[_fp16|_bf16], mixed_float16/bfloat16).
#
# | list  | meaning in a mixed mode                    | what is in it                       |
# |-------|--------------------------------------------|-------------------------------------|
# | white | runs in float16 / bfloat16                 | matrix ops                          |
# | black | keeps float32                              | exp/log/pow, reductions that sum,   |
# |       |                                            | softmax, normalisations             |
# | gray  | low precision iff an input comes from an   | elementwise, activations, pooling,  |
# |       | op that runs in low precision              | data movement                       |
WHITE_LIST: frozenset[str] = MATRIX_OPS | {"LSTM", "GRU", "RNN"}  # RNNs: DynamicRNN on the cube

BLACK_LIST: frozenset[str] = frozenset({
    # transcendental ops whose results leave the float16 range or lose relative precision
    "Exp", "Log", "Pow", "Softplus", "LogSoftmax", "Softmax",
    # reductions that add many terms: a float16 sum overflows beyond 65504
    "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "CumSum",
    # normalisations: mean / variance over a whole axis
    "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization",
    "MeanVarianceNormalization",
})

GRAY_LIST: frozenset[str] = frozenset({
    # elementwise arithmetic and comparisons
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Sum", "Mean", "Sqrt", "Reciprocal",
    "Floor", "Ceil", "Round", "Sign", "Mod", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "IsNaN", "IsInf", "Where",
    # activations
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
    "Celu", "Gelu", "Erf", "Clip", "Softsign", "Mish", "ThresholdedRelu", "Sin", "Cos",
    # pycann's fused elementwise chain (black when one of its steps is black, see chain_class)
    "ElementwiseChain",
    # pooling and batch norm (inference: one multiply-add per element)
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
    "BatchNormalization", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK",
    # data movement: values are copied, never changed
    "Identity", "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
    "GatherND", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Pad", "Resize", "Upsample",
    "DepthToSpace", "SpaceToDepth", "Trilu", "ScatterND", "ScatterElements", "ReverseSequence",
    "Dropout", "ChannelShuffle",
})

# Float inputs that keep their dtype whatever the op computes in (their type is a separate type
# parameter in the ONNX schema): Resize/Upsample roi and scales, GridSample's grid.
FIXED_INPUTS: dict[str, tuple[int, ...]] = {
    "Resize": (1, 2),
    "Upsample": (1,),
    "GridSample": (1,),
}

# Ops that only read a tensor's shape: any stored version of the value will do (no Cast).
SHAPE_READERS: frozenset[str] = frozenset({"Shape", "Size"})

# Ascend IR op types (as in CANN's ops-info files and keep_dtype / mixlist examples) -> ONNX.
CANN_ALIASES: dict[str, str] = {
    "Conv2D": "Conv", "Conv3D": "Conv", "Conv2DTranspose": "ConvTranspose",
    "Conv3DTranspose": "ConvTranspose", "Deconvolution": "ConvTranspose", "MatMulV2": "MatMul",
    "MatMulV3": "MatMul", "BatchMatMul": "MatMul", "BatchMatMulV2": "MatMul",
    "FullyConnection": "Gemm", "DynamicRNN": "LSTM", "DynamicRNNV2": "LSTM",
    "DynamicGRUV2": "GRU", "SoftmaxV2": "Softmax", "LogSoftmaxV2": "LogSoftmax",
    "LayerNorm": "LayerNormalization", "LayerNormV3": "LayerNormalization",
    "ReduceSumD": "ReduceSum", "ReduceMeanD": "ReduceMean", "ReduceMaxD": "ReduceMax",
    "ReduceMinD": "ReduceMin", "RealDiv": "Div", "Maximum": "Max", "Minimum": "Min",
    "BNInference": "BatchNormalization", "BNInferenceD": "BatchNormalization",
    "AvgPool": "AveragePool", "ConcatV2": "Concat", "ConcatD": "Concat",
    "SplitD": "Split", "SplitV": "Split", "StridedSlice": "Slice", "StridedSliceD": "Slice",
    "GatherV2": "Gather", "ExpandDims": "Unsqueeze", "BroadcastTo": "Expand", "PadV3": "Pad",
    "FastGelu": "Gelu", "ClipByValue": "Clip", "Select": "Where",
    "ResizeBilinearV2": "Resize", "ResizeNearestNeighborV2": "Resize", "TransposeD": "Transpose",
}


def canonical_op_type(op_type: str) -> str:
    """The ONNX op type for an ONNX or Ascend IR op type name."""
    return CANN_ALIASES.get(op_type, op_type)


@dataclass
class MixLists:
    """The white / black / gray lists in force for one compilation (defaults + --modify_mixlist)."""

    white: set[str] = field(default_factory=lambda: set(WHITE_LIST))
    black: set[str] = field(default_factory=lambda: set(BLACK_LIST))
    gray: set[str] = field(default_factory=lambda: set(GRAY_LIST))

    def classify(self, op_type: str) -> str:
        """``"white"``, ``"black"``, ``"gray"`` or ``""`` (no reduced-precision model)."""
        if op_type in self.white:
            return "white"
        if op_type in self.black:
            return "black"
        if op_type in self.gray:
            return "gray"
        return ""

    def move(self, op_type: str, to: str) -> None:
        """Put ``op_type`` on list ``to`` (``white``, ``black`` or ``gray``), off the others."""
        for name in ("white", "black", "gray"):
            getattr(self, name).discard(op_type)
        getattr(self, to).add(op_type)

    def to_json(self) -> dict[str, list[str]]:
        return {"white": sorted(self.white), "black": sorted(self.black), "gray": sorted(self.gray)}


def chain_class(steps: list[list[object]], lists: MixLists) -> str:
    """List of an ``ElementwiseChain``: black if any step's op is black, else the chain's own."""
    if any(str(s[0]) in lists.black for s in steps):
        return "black"
    return lists.classify("ElementwiseChain")
