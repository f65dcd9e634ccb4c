"""Caffe test networks: deploy prototxt text plus the shapes of each layer's blobs.

``write_net`` writes ``<name>.prototxt`` and a ``<name>.caffemodel`` with seeded random blobs
(serialised with the same vendored caffe.proto, the only way to make one without Caffe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class CaffeNet:
    name: str
    prototxt: str
    blobs: dict[str, list[tuple[int, ...]]]
    input_shape: tuple[int, ...]
    outputs: list[str] = field(default_factory=list)  # the layers whose outputs are the net's (OpenCV's names)


def _input(shape: tuple[int, ...]) -> str:
    return 'input: "data"\ninput_shape { ' + " ".join(f"dim: {d}" for d in shape) + " }\n"


def _layer(name: str, type_: str, bottom: str | list[str], top: str | list[str], params: str = "") -> str:
    bs = [bottom] if isinstance(bottom, str) else bottom
    ts = [top] if isinstance(top, str) else top
    lines = [f'layer {{ name: "{name}" type: "{type_}"']
    lines += [f'  bottom: "{b}"' for b in bs] + [f'  top: "{t}"' for t in ts]
    if params:
        lines.append(f"  {params}")
    return "\n".join(lines) + "\n}\n"


LENET = CaffeNet(
    "caffe_lenet",
    'name: "LeNet"\n' + _input((1, 1, 28, 28))
    + _layer("conv1", "Convolution", "data", "conv1", "convolution_param { num_output: 20 kernel_size: 5 stride: 1 }")
    + _layer("pool1", "Pooling", "conv1", "pool1", "pooling_param { pool: MAX kernel_size: 2 stride: 2 }")
    + _layer("conv2", "Convolution", "pool1", "conv2", "convolution_param { num_output: 50 kernel_size: 5 }")
    + _layer("pool2", "Pooling", "conv2", "pool2", "pooling_param { pool: MAX kernel_size: 2 stride: 2 }")
    + _layer("ip1", "InnerProduct", "pool2", "ip1", "inner_product_param { num_output: 500 }")
    + _layer("relu1", "ReLU", "ip1", "ip1")
    + _layer("ip2", "InnerProduct", "ip1", "ip2", "inner_product_param { num_output: 10 }")
    + _layer("prob", "Softmax", "ip2", "prob"),
    {"conv1": [(20, 1, 5, 5), (20,)], "conv2": [(50, 20, 5, 5), (50,)], "ip1": [(500, 800), (500,)],
     "ip2": [(10, 500), (10,)]},
    (1, 1, 28, 28), ["prob"])

# ResNet-style block: Conv without bias + BatchNorm + Scale, in-place ReLU, Eltwise SUM, then an
# average pooling whose last window runs into Caffe's ceil-mode overhang (16 -> 9 with pad 1)
RESBLOCK = CaffeNet(
    "caffe_resblock",
    'name: "ResBlock"\n' + _input((1, 3, 16, 16))
    + _layer("conv1", "Convolution", "data", "conv1", "convolution_param { num_output: 8 kernel_size: 3 pad: 1 bias_term: false }")
    + _layer("bn1", "BatchNorm", "conv1", "conv1", "batch_norm_param { use_global_stats: true eps: 1e-5 }")
    + _layer("sc1", "Scale", "conv1", "conv1", "scale_param { bias_term: true }")
    + _layer("relu1", "ReLU", "conv1", "conv1")
    + _layer("conv2", "Convolution", "conv1", "conv2", "convolution_param { num_output: 8 kernel_size: 3 pad: 1 bias_term: false }")
    + _layer("bn2", "BatchNorm", "conv2", "conv2", "batch_norm_param { use_global_stats: true }")
    + _layer("sc2", "Scale", "conv2", "conv2", "scale_param { bias_term: true }")
    + _layer("sum", "Eltwise", ["conv1", "conv2"], "sum", "eltwise_param { operation: SUM coeff: 1 coeff: 0.5 }")
    + _layer("relu2", "ReLU", "sum", "sum", "relu_param { negative_slope: 0.1 }")
    + _layer("pool", "Pooling", "sum", "pool", "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }")
    + _layer("prelu", "PReLU", "pool", "pool")
    + _layer("fc", "InnerProduct", "pool", "fc", "inner_product_param { num_output: 5 }")
    + _layer("prob", "Softmax", "fc", "prob"),
    {"conv1": [(8, 3, 3, 3)], "bn1": [(8,), (8,), (1,)], "sc1": [(8,), (8,)], "conv2": [(8, 8, 3, 3)],
     "bn2": [(8,), (8,), (1,)], "sc2": [(8,), (8,)], "prelu": [(8,)], "fc": [(5, 648), (5,)]},
    (1, 3, 16, 16), ["prob"])

SQUEEZE = CaffeNet(
    "caffe_squeezenet_fire",
    'name: "Fire"\n' + _input((1, 3, 33, 33))
    + _layer("conv1", "Convolution", "data", "conv1", "convolution_param { num_output: 16 kernel_size: 3 stride: 2 }")
    + _layer("relu_conv1", "ReLU", "conv1", "conv1")
    + _layer("pool1", "Pooling", "conv1", "pool1", "pooling_param { pool: MAX kernel_size: 3 stride: 2 }")
    + _layer("squeeze", "Convolution", "pool1", "squeeze", "convolution_param { num_output: 4 kernel_size: 1 }")
    + _layer("relu_sq", "ReLU", "squeeze", "squeeze")
    + _layer("expand1", "Convolution", "squeeze", "expand1", "convolution_param { num_output: 8 kernel_size: 1 }")
    + _layer("relu_e1", "ReLU", "expand1", "expand1")
    + _layer("expand3", "Convolution", "squeeze", "expand3", "convolution_param { num_output: 8 kernel_size: 3 pad: 1 }")
    + _layer("relu_e3", "ReLU", "expand3", "expand3")
    + _layer("concat", "Concat", ["expand1", "expand3"], "concat")
    + _layer("drop", "Dropout", "concat", "concat", "dropout_param { dropout_ratio: 0.5 }")
    + _layer("conv10", "Convolution", "concat", "conv10", "convolution_param { num_output: 10 kernel_size: 1 }")
    + _layer("gpool", "Pooling", "conv10", "gpool", "pooling_param { pool: AVE global_pooling: true }")
    + _layer("flat", "Flatten", "gpool", "flat")
    + _layer("prob", "Softmax", "flat", "prob"),
    {"conv1": [(16, 3, 3, 3), (16,)], "squeeze": [(4, 16, 1, 1), (4,)], "expand1": [(8, 4, 1, 1), (8,)],
     "expand3": [(8, 4, 3, 3), (8,)], "conv10": [(10, 16, 1, 1), (10,)]},
    (1, 3, 33, 33), ["prob"])

# SSD-style head: Permute (the SSD fork's layer), Flatten, Concat, Reshape, Softmax over axis 2,
# a Slice, and an unknown fork field (ignored) to check tolerance
SSD_HEAD = CaffeNet(
    "caffe_ssd_head",
    'name: "SSDHead"\n' + _input((1, 8, 6, 6))
    + _layer("loc", "Convolution", "data", "loc", "convolution_param { num_output: 12 kernel_size: 3 pad: 1 }")
    + _layer("loc_perm", "Permute", "loc", "loc_perm", "permute_param { order: 0 order: 2 order: 3 order: 1 }")
    + _layer("loc_flat", "Flatten", "loc_perm", "loc_flat", "flatten_param { axis: 1 }")
    + _layer("conf", "Convolution", "data", "conf", "convolution_param { num_output: 6 kernel_size: 3 pad: 1 }")
    + _layer("conf_perm", "Permute", "conf", "conf_perm", "permute_param { order: 0 order: 2 order: 3 order: 1 }")
    + _layer("conf_flat", "Flatten", "conf_perm", "conf_flat")
    + _layer("conf_reshape", "Reshape", "conf_flat", "conf_reshape", "reshape_param { shape { dim: 0 dim: -1 dim: 3 } }")
    + _layer("conf_softmax", "Softmax", "conf_reshape", "conf_softmax", "softmax_param { axis: 2 }")
    + _layer("conf_out", "Flatten", "conf_softmax", "conf_out")
    + _layer("split", "Slice", "loc_flat", ["loc_a", "loc_b"], "slice_param { axis: 1 slice_point: 100 }")
    + _layer("mbox", "Concat", ["loc_b", "conf_out", "loc_a"], "mbox", "concat_param { axis: 1 } fork_only_param { x: 1 }"),
    {"loc": [(12, 8, 3, 3), (12,)], "conf": [(6, 8, 3, 3), (6,)]},
    (1, 8, 6, 6), ["mbox"])

ALEXNET_MINI = CaffeNet(
    "caffe_alexnet_mini",
    'name: "AlexMini"\n' + _input((1, 3, 35, 35))
    + _layer("conv1", "Convolution", "data", "conv1", "convolution_param { num_output: 16 kernel_size: 5 stride: 2 }")
    + _layer("relu1", "ReLU", "conv1", "conv1")
    + _layer("norm1", "LRN", "conv1", "norm1", "lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }")
    + _layer("pool1", "Pooling", "norm1", "pool1", "pooling_param { pool: MAX kernel_size: 3 stride: 2 }")
    + _layer("conv2", "Convolution", "pool1", "conv2", "convolution_param { num_output: 16 kernel_size: 3 pad: 1 group: 2 }")
    + _layer("relu2", "ReLU", "conv2", "conv2")
    + _layer("up", "Deconvolution", "conv2", "up", "convolution_param { num_output: 8 kernel_size: 4 stride: 2 pad: 1 }")
    + _layer("sig", "Sigmoid", "up", "up")
    + _layer("pow", "Power", "up", "powed", "power_param { power: 2 scale: 0.5 shift: 1 }")
    + _layer("prod", "Eltwise", ["up", "powed"], "prod", "eltwise_param { operation: PROD }")
    + _layer("pool2", "Pooling", "prod", "pool2", "pooling_param { pool: AVE kernel_size: 2 stride: 2 }")
    + _layer("fc", "InnerProduct", "pool2", "fc", "inner_product_param { num_output: 10 }")
    + _layer("tanh", "TanH", "fc", "fc"),
    {"conv1": [(16, 3, 5, 5), (16,)], "conv2": [(16, 8, 3, 3), (16,)], "up": [(16, 8, 4, 4), (8,)],
     "fc": [(10, 512), (10,)]},
    (1, 3, 35, 35), ["tanh"])

# The less common layers and parameters: Scale with a bias and with a second bottom, ELU/AbsVal/BNLL, Slice
# without points, Reshape/Flatten on inner axes, InnerProduct with axis 3, Eltwise MAX
MISC = CaffeNet(
    "caffe_misc_layers",
    'name: "Misc"\n' + _input((1, 4, 6, 6))
    + _layer("affine", "Scale", "data", "biased", "scale_param { bias_term: true }")
    + _layer("elu", "ELU", "biased", "elu", "elu_param { alpha: 0.7 }")
    + _layer("abs", "AbsVal", "data", "abs")
    + _layer("bnll", "BNLL", "abs", "bnll")
    + _layer("mx", "Eltwise", ["elu", "bnll"], "mx", "eltwise_param { operation: MAX }")
    + _layer("halves", "Slice", "mx", ["h1", "h2"], "slice_param { axis: 1 }")
    + _layer("gate", "Sigmoid", "h2", "gate")
    + _layer("gated", "Scale", ["h1", "gate"], "gated", "scale_param { axis: 0 }")
    + _layer("rs", "Reshape", "gated", "rs", "reshape_param { shape { dim: 3 dim: -1 } axis: 2 }")
    + _layer("ip", "InnerProduct", "rs", "ip", "inner_product_param { num_output: 5 axis: 3 }")
    + _layer("fl", "Flatten", "ip", "fl", "flatten_param { axis: 1 end_axis: 2 }"),
    {"affine": [(4,), (4,)], "ip": [(5, 12), (5,)]},
    (1, 4, 6, 6), ["fl"])

NETS = [LENET, RESBLOCK, SQUEEZE, SSD_HEAD, ALEXNET_MINI, MISC]


def write_net(net: CaffeNet, folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """Write the prototxt and a caffemodel of random blobs; returns their paths."""
    from pycann.ge.compile.importers.caffe_proto import net_parameter_class

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    proto = folder / f"{net.name}.prototxt"
    proto.write_text(net.prototxt)
    weights = net_parameter_class()()
    weights.name = net.name
    for layer_name, shapes in net.blobs.items():
        layer = weights.layer.add()
        layer.name = layer_name
        for i, shape in enumerate(shapes):
            if layer_name.startswith("bn") and i == 1:
                data = rng.uniform(0.5, 2.0, shape)  # variance
            elif layer_name.startswith("bn") and i == 2:
                data = np.full(shape, 2.0)  # Caffe's moving-average scale factor
            elif len(shape) >= 2:  # weights scaled by fan-in, so the softmax outputs do not saturate
                data = rng.normal(0, 1.5 / np.sqrt(np.prod(shape[1:])), shape)
            else:
                data = rng.normal(0, 0.5, shape)
            blob = layer.blobs.add()
            blob.shape.dim.extend(shape)
            blob.data.extend(data.astype(np.float32).ravel().tolist())
    model = folder / f"{net.name}.caffemodel"
    model.write_bytes(weights.SerializeToString())
    return proto, model
