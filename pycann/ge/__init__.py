"""GE (Graph Engine): ``compile/`` builds a model, ``om/`` stores it, ``run/`` executes it; ``ir/``,
``planning/`` and ``aipp/`` are shared by both sides (docs/architecture.md, "Inside ge").

The stable entry points are re-exported here, imported on first use (as ``pycann.compile_model`` is)
so that importing one submodule, e.g. ``pycann.ge.ir``, does not load the compiler:
``pycann.ge.compile_model``, ``pycann.ge.CompileOptions``, ``pycann.ge.CompiledModel``,
``pycann.ge.LoadedModel``. ``pycann.ge.om`` (save/load/peek of .om files) keeps its path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompileOptions", "CompiledModel", "LoadedModel", "compile_model"]


def __getattr__(name: str) -> Any:
    if name in ("compile_model", "CompiledModel"):
        from pycann.ge.compile import compiler

        return getattr(compiler, name)
    if name == "CompileOptions":
        from pycann.ge.compile.options import CompileOptions

        return CompileOptions
    if name == "LoadedModel":
        from pycann.ge.run.model import LoadedModel

        return LoadedModel
    raise AttributeError(f"module 'pycann.ge' has no attribute {name!r}")
