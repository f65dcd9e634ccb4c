"""Helpers for the Ascend C twin tests: GM buffers from numpy arrays, launches, marker lines."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann import ascendc as AscendC
from pycann.ascendc.diagnostics import Rule


def gm(a: np.ndarray) -> AscendC.GmAddr:
    """A GM buffer holding ``a``."""
    g = AscendC.GmAlloc(max(a.nbytes, 1))
    g.numpy(np.uint8)[: a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    return g


def launch(fn: Callable[..., None], block_dim: int, *arrays: np.ndarray, soc: str = "Ascend910B1",
           mode: AscendC.KernelMode = AscendC.KernelMode.AIV_MODE, extra: tuple[Any, ...] = ()
           ) -> tuple[AscendC.TwinResult, list[AscendC.GmAddr]]:
    """Run ``fn`` on GM copies of ``arrays`` (+ ``extra`` args); returns the result and the GM buffers."""
    bufs = [gm(a) for a in arrays]
    res = AscendC.run_kernel(fn, block_dim, (*bufs, *extra), soc_version=soc, mode=mode)
    return res, bufs


def marker_line(fn: Callable[..., Any], tag: str) -> str:
    """'file:line' of the line in ``fn``'s module carrying the comment ``# BUG: tag``."""
    src_file = inspect.getsourcefile(fn)
    assert src_file is not None
    lines = open(src_file, encoding="utf-8").read().splitlines()
    hits = [i + 1 for i, ln in enumerate(lines) if ln.rstrip().endswith(f"# BUG: {tag}")]
    assert len(hits) == 1, f"marker '# BUG: {tag}' found {len(hits)} times in {src_file}"
    return f"{src_file}:{hits[0]}"


@dataclass
class BugCase:
    """A seeded-bug kernel: running it must report ``rule`` at its '# BUG: name' line."""

    name: str
    rule: Rule
    run: Callable[[], AscendC.TwinResult]
    kernel: Callable[..., Any]
    notes: str = ""
    extra_rules: set[Rule] = field(default_factory=set)


def half(n: int, lo: float = -4, hi: float = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float16)


def f32(n: int, lo: float = -4, hi: float = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)
