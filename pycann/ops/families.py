"""Which family module under ``pycann.ops`` defines each op: the registry's index (``registry.py``).

Why a table: a lookup imports only the family that defines the op asked for, so loading a model
imports the families its ops need and no others (a ResNet never imports the RNN, sequence, string
or quantization families; bench/RESULTS.md, first run). tests/ops/test_registry_lazy.py checks that
this table lists exactly the keys of each family's ``OPS``: adding an op to a family means adding
its name here too.
"""

from __future__ import annotations

# family module (``pycann.ops.<name>``, in table order) -> domain ("" = ai.onnx) -> op types it defines
FAMILY_OPS: dict[str, dict[str, tuple[str, ...]]] = {
    "fused": {"pycann": ("FusedConv", "FusedMatMul", "FusedAttention")},
    "fused_chain": {"pycann": ("ElementwiseChain",)},
    "fused_deconv": {"pycann": ("FusedConvTranspose",)},
    "channel_shuffle": {"pycann": ("ChannelShuffle",)},
    "squeeze_excite": {"pycann": ("SqueezeExcite", "SqueezeExciteProject")},
    "shape_of": {"pycann": ("ShapeOf",)},
    "cache_append": {"pycann": ("CacheAppend",)},
    "quant_conv": {"pycann": ("QuantConv",)},
    "quant_matmul": {"pycann": ("QuantMatMul",)},
    "math_misc": {"": ("BitCast", "CumProd", "Det", "MaxUnpool", "TensorScatter", "DeformConv")},
    "elementwise": {"": (
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
        "BitwiseNot", "And", "Or", "Xor", "Not", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "Where", "Max", "Min", "Sum", "Mean", "Relu"
    )},
    "activation": {"": (
        "Abs", "Neg", "Sign", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Erf",
        "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh",
        "IsNaN", "IsInf", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Celu",
        "ThresholdedRelu", "Softplus", "Softsign", "Mish", "Shrink", "Gelu", "Clip", "PRelu"
    )},
    "cast": {"": ("Cast", "CastLike")},
    "reduce": {"": (
        "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "Softmax",
        "LogSoftmax", "Hardmax", "CumSum"
    )},
    "tensor": {"": (
        "Constant", "Identity", "Shape", "Size", "Reshape", "Flatten", "Transpose", "Squeeze",
        "Unsqueeze", "Concat", "Split"
    )},
    "tensor_gen": {"": (
        "Expand", "Tile", "Range", "ConstantOfShape", "EyeLike", "Trilu", "DepthToSpace",
        "SpaceToDepth", "Dropout"
    )},
    "indexing": {"": (
        "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter",
        "Pad", "Compress", "OneHot", "ReverseSequence"
    )},
    "selection": {"": ("TopK", "Unique", "NonZero")},
    "matmul": {"": ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum")},
    "nn.conv": {"": ("Conv", "ConvTranspose")},
    "nn.pool": {"": (
        "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
        "MaxRoiPool"
    )},
    "nn.norm": {"": (
        "BatchNormalization", "InstanceNormalization", "LayerNormalization", "RMSNormalization",
        "GroupNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN"
    )},
    "nn.resize": {"": ("Resize",)},
    "aipp": {"pycann": ("Aipp",)},
    "quant": {"": ("QuantizeLinear", "DequantizeLinear", "ConvInteger", "QLinearConv")},
    "quant_ms": {"com.microsoft": ("QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QGemm", "QLinearSigmoid",
                                   "QLinearLeakyRelu", "QLinearSoftmax", "QLinearConcat", "QLinearAveragePool")},
    "nn.rnn": {"": ("LSTM", "GRU", "RNN")},
    "misc": {"": (
        "Upsample", "DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix",
        "RoiAlign", "NonMaxSuppression", "Col2Im", "CenterCropPad", "GridSample", "AffineGrid",
        "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
        "Multinomial"
    )},
    "loss": {"": ("NegativeLogLikelihoodLoss",)},
    "control": {"": ("If", "Loop", "Scan")},
    "sequence": {"": (
        "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase",
        "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
        "OptionalHasElement", "OptionalGetElement"
    )},
    "string": {"": ("StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch", "TfIdfVectorizer")},
    "ml": {"ai.onnx.ml": (
        "ArrayFeatureExtractor", "Binarizer", "LabelEncoder", "Normalizer", "Scaler", "OneHotEncoder",
        "Imputer", "LinearRegressor", "FeatureVectorizer", "CategoryMapper", "TreeEnsemble",
        "TreeEnsembleRegressor"
    )},
    "training": {"ai.onnx.preview.training": ("Adagrad", "Momentum", "Adam")},
    "image": {"": ("ImageDecoder",)},
}
