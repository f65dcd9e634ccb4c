"""The ``tvm`` names TBE DSL code uses: ``tvm.placeholder`` and ``tvm.target.cce()``."""

from __future__ import annotations

from pycann.tbe.expr import Tensor, placeholder, target

__all__ = ["Tensor", "placeholder", "target"]
