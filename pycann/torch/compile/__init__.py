"""torch.compile(model, backend="npu"): placeholder registration, filled in by backend.py."""

from __future__ import annotations


def register() -> None:
    """Register the "npu" backend name with torch._dynamo (lazily imported)."""
