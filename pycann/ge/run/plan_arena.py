"""A plan's arena: one buffer for the outputs the memory plan places, with each bound step's output
views into it (``Arena``), and ``_warm_buffer``, an arena buffer with its pages already faulted in.

Separate from ``Plan`` (``pycann.ge.run.plan``), which lays the arena out and pools arenas between
runs: this is the memory object itself, also used by the executor.
"""

from __future__ import annotations

import ctypes

import numpy as np

from pycann.kernels.providers import aligned

# (arena offset, dtype, logical shape, stored channels-last)
ViewSpec = tuple[int, np.dtype, tuple[int, ...], bool]


class Arena:
    """One arena buffer plus, per bound step, the output views into it."""

    def __init__(self, nbytes: int, layout: list[list[ViewSpec]], buffer: np.ndarray | None = None) -> None:
        self.buffer = aligned.empty(max(nbytes, 1), np.uint8) if buffer is None else buffer
        self.views = [[self._view(*spec) for spec in outs] for outs in layout]

    def _view(self, off: int, dt: np.dtype, shape: tuple[int, ...], nhwc: bool) -> np.ndarray:
        raw = self.buffer[off : off + int(np.prod(shape, dtype=np.int64)) * dt.itemsize].view(dt)
        if nhwc:  # channels-last storage, logical NCHW view (GE LayoutSelection)
            n, c, h, w = shape
            return raw.reshape(n, h, w, c).transpose(0, 3, 1, 2)
        return raw.reshape(shape)


def _warm_buffer(nbytes: int) -> np.ndarray:
    """An arena buffer with every page written (zeros): a page fault costs ~1-2 us on this kind of
    VM, and a 4-8 MB arena is 1-2 thousand of them."""
    buffer = aligned.empty(max(nbytes, 1), np.uint8)  # (on a cache line: the offsets in it are 64-byte multiples)
    ctypes.memset(buffer.ctypes.data, 0, buffer.nbytes)
    return buffer
