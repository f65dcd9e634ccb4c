"""pycann: Huawei CANN's stack (ATC, Graph Engine, AscendCL runtime) in Python, on the host CPU.

``pycann.InferSession`` (ais_bench-style) and ``pycann.compile_model`` are the entry points;
they are imported on first use so that ``import pycann`` stays cheap.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (``typing`` costs ~3 ms; the .pth start-up hook imports this package)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

__all__ = ["InferSession", "compile_model", "CompileOptions", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "InferSession":
        from pycann.acl.session import InferSession

        return InferSession
    if name == "compile_model":
        from pycann.ge.compile.compiler import compile_model

        return compile_model
    if name == "CompileOptions":
        from pycann.ge.compile.options import CompileOptions

        return CompileOptions
    raise AttributeError(f"module 'pycann' has no attribute {name!r}")
