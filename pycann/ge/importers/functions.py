"""Model-local ONNX functions are inlined with onnx's own inliner before import."""

from __future__ import annotations

import onnx
import onnx.inliner


def inline_local_functions(model: onnx.ModelProto) -> onnx.GraphProto:
    """The main graph with every call to a model-local function expanded (recursively)."""
    return onnx.inliner.inline_local_functions(model).graph
