"""Where the team's shared/ folder is: beside the repository (CI lays a copy there), else /work/shared."""

from __future__ import annotations

from pathlib import Path


def shared(rel: str) -> Path:
    """``shared/<rel>``: next to the checkout if present there, else under /work/shared."""
    beside = Path(__file__).resolve().parents[2] / "shared" / rel
    return beside if beside.exists() else Path("/work/shared") / rel
