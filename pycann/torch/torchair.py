"""torchair's graph-mode names over pycann's ``torch.compile`` backend (GE graph mode).

``config = torchair.CompilerConfig(); backend = torchair.get_npu_backend(compiler_config=config);
torch.compile(model, backend=backend)``. ``config.mode`` "max-autotune" (torchair's default: FX ->
GE graph) is what pycann does; "reduce-overhead" (captured NPU graphs) is accepted and also
compiles to a GE plan, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pycann.torch.compile import npu_backend

__all__ = ["CompilerConfig", "get_compiler", "get_npu_backend"]

_MODES = ("max-autotune", "reduce-overhead", "npugraph_ex")


@dataclass
class CompilerConfig:
    """torchair.CompilerConfig's ``mode`` (other torchair options are accepted as attributes)."""

    mode: str = "max-autotune"


def get_npu_backend(*, compiler_config: CompilerConfig | None = None, custom_decompositions: Any = None) -> Callable[..., Any]:
    """The Dynamo backend for ``torch.compile`` (``ValueError`` for an unknown mode)."""
    cfg = compiler_config or CompilerConfig()
    if cfg.mode not in _MODES:
        raise ValueError(f"torchair CompilerConfig.mode {cfg.mode!r}: expected one of {', '.join(_MODES)}")
    if cfg.mode != "max-autotune":
        warnings.warn(f"torchair mode {cfg.mode!r}: pycann compiles every mode to a GE plan (max-autotune)",
                      UserWarning, stacklevel=2)
    return npu_backend


def get_compiler(compiler_config: CompilerConfig | None = None) -> Callable[..., Any]:
    """The same backend (torchair's lower-level name)."""
    return get_npu_backend(compiler_config=compiler_config)
