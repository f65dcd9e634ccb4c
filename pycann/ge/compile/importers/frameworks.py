"""atc's ``--framework`` dispatch: the importer for each framework code (cann-interfaces.md §2.1).

0 Caffe (``--model`` prototxt + ``--weight`` caffemodel), 3 TensorFlow (frozen ``.pb`` or a
SavedModel holding a frozen graph), 5 ONNX (``compile_model`` reads the file itself).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # atc checks --input_format with this module before numpy and the IR load
    from pycann.ge.ir import Graph


class Framework(enum.IntEnum):
    """atc's ``--framework`` values."""

    CAFFE = 0
    MINDSPORE = 1
    TENSORFLOW = 3
    ONNX = 5


# --input_format values atc accepts per framework (cann-interfaces.md §2.1) and each default
INPUT_FORMATS: dict[Framework, tuple[str, ...]] = {
    Framework.CAFFE: ("NCHW", "ND"),
    Framework.TENSORFLOW: ("NHWC", "NCHW", "ND", "NCDHW", "NDHWC"),
    Framework.ONNX: ("NCHW", "NCDHW", "ND"),
}
DEFAULT_INPUT_FORMAT = {Framework.CAFFE: "NCHW", Framework.TENSORFLOW: "NHWC", Framework.ONNX: "NCHW"}


def load_framework_model(framework: int, model: str | os.PathLike[str], weight: str | None = None,
                         out_nodes: Sequence[tuple[str, int]] = (),
                         input_shape: Mapping[str, Sequence[Any]] | None = None) -> Graph:
    """Import a Caffe (0) or TensorFlow (3) model into an IR ``Graph`` with its ``out_nodes``
    applied (by the framework's node/layer names). Raises what the importers raise."""
    if framework == Framework.TENSORFLOW:
        from pycann.ge.compile.importers.tensorflow import load_tensorflow

        return load_tensorflow(model, out_nodes, input_shape or {})
    if framework == Framework.CAFFE:
        from pycann.ge.compile.importers.caffe import load_caffe

        return load_caffe(model, weight, out_nodes, input_shape)
    raise ValueError(f"framework {framework} has no importer here (ONNX: compile_model reads the file)")
