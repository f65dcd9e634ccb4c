"""tensor ops (ONNX spec, Operators.md)."""

from __future__ import annotations

from pycann.ops.opdef import OpDef

OPS: list[OpDef] = []
