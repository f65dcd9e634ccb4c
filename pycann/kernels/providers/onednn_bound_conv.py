"""The plan kernel of one oneDNN conv bound for one static signature (``onednn.bound_conv_nhwc``).

A call re-points the primitive's data handles and executes. The executor calls a plan's kernel with
the same arena buffers run after run: a call whose (x, out, residual) addresses passed the checks
before, and whose layouts still match, goes straight to the primitive and re-points only the
handles that changed (each check and handle is ~1 us of Python and ctypes; 53 convs in ResNet-50).
The same arrays come back too (the arena's views live as long as the arena): by identity, through
weak references (nothing kept alive; a dead or reused id simply misses), the addresses need not
even be read (``__array_interface__`` is ~0.8 us each).

State and slow path in a class with slots, the fast path a closure over that object: the closures
before (a kernel over 19 values, and four helpers) were ~35 objects per bound conv for the cyclic
garbage collector to walk, and a shape-generic plan binds one per conv node and input shape (84 OCR
shapes: ~50,000 objects; its full collections landed in calls as 40-100 ms pauses, bench/RESULTS.md).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from pycann.errors import OperandError
from pycann.kernels.providers import aligned
from pycann.kernels.providers.native_args import address

__all__ = ["BoundConv"]

_F32 = np.dtype(np.float32)
_VERIFIED_MAX = 64  # buffer triples remembered per bound conv (one per arena of concurrent runs)

Key = tuple[int, int, int]


def _same_buffer(a: np.ndarray, b: np.ndarray, strides: tuple[int, ...]) -> bool:
    """``a`` and ``b`` are the same float32 memory with the layout ``strides``."""
    return a.dtype == b.dtype == np.float32 and a.shape == b.shape and a.strides == b.strides == strides \
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


class BoundConv:
    """The state of one bound conv over ``plan`` (an ``onednn_conv_plan._Plan`` for ``x_shape``) and its slow
    path; ``kernel()`` is the plan kernel ``k(inputs, attrs, out=None) -> [y]``: ``inputs`` x, w,
    b[, residual] (float32); with ``out`` (the executor's arena view) Y is written there. Arrays of
    other layouts or dtypes go through ``plan.run`` (same values)."""

    __slots__ = ("plan", "residual", "x_shape", "y_shape", "xs", "ys", "cl_shape", "perm", "verified", "seen")

    def __init__(self, plan: Any, x_shape: tuple[int, ...], residual: bool) -> None:
        self.plan = plan
        self.residual = residual
        self.x_shape = x_shape
        self.y_shape = y_shape = plan.y_shape
        self.xs, self.ys = plan.x_strides, plan.y_strides
        self.perm = (0, len(y_shape) - 1, *range(1, len(y_shape) - 1))
        self.cl_shape = (y_shape[0], *y_shape[2:], y_shape[1])
        self.verified: dict[Key, Any] = {}  # addresses checked before -> the primitive that ran on them
        self.seen: dict[Key, tuple[Any, Key, Any, Any, Any]] = {}  # ids -> (primitive, addresses, weakrefs)

    def dest(self, out: Any, *reads: np.ndarray) -> np.ndarray | None:
        """The arena view to write into (channels-last, not overlapping an input), or None."""
        if out is None:
            return None
        o = out[0]
        if o.strides != self.ys or o.dtype != np.float32 or o.shape != self.y_shape \
                or any(np.may_share_memory(o, r) for r in reads):
            return None
        return o  # type: ignore[no-any-return]

    @staticmethod
    def finish(y: np.ndarray, out: Any) -> list[np.ndarray]:
        if out is not None and y is not out[0]:
            if out[0].shape != y.shape:
                raise OperandError(f"conv output Y: the kernel was bound for {list(y.shape)} but the output "
                                   f"given is {list(out[0].shape)}")
            out[0][...] = y  # the executor reads the arena view
        return [y]

    def remember(self, key: Key, prim: Any) -> None:
        verified = self.verified
        if len(verified) >= _VERIFIED_MAX:
            verified.clear()  # bounded: callers that bring new buffers every time just re-check
        verified[key] = prim

    def checked(self, x: np.ndarray, o: np.ndarray, r: np.ndarray | None) -> tuple[Any, Key] | None:
        """(primitive, addresses) when these arrays' addresses were verified before and their
        layouts still match; they are then remembered by identity too."""
        xs, ys, y_shape = self.xs, self.ys, self.y_shape
        if x.strides != xs or x.dtype != _F32 or o.strides != ys or o.dtype != _F32 or x.shape != self.x_shape \
                or o.shape != y_shape or (r is not None and (r.strides != ys or r.dtype != _F32 or r.shape != y_shape)):
            return None
        key = (x.__array_interface__["data"][0], o.__array_interface__["data"][0],
               r.__array_interface__["data"][0] if r is not None else 0)
        prim = self.verified.get(key)
        if prim is None:
            return None
        seen = self.seen
        if len(seen) >= _VERIFIED_MAX:
            seen.clear()  # (graph inputs are new arrays every run)
        seen[(id(x), id(o), id(r))] = (prim, key, weakref.ref(x), weakref.ref(o),
                                       weakref.ref(r) if r is not None else None)
        return prim, key

    def kernel(self) -> Any:
        """The plan kernel ``k(inputs, attrs, out=None) -> [y]``: a closure over this object, its
        fast path reading three slots (no slower than cells in a measurement; a method of this class
        cost ~0.2 us more a conv, ~1 % of MobileNetV2). Cells for those values and bound methods for
        the slow paths were five more objects per bound conv for the cyclic GC: a shape-generic plan
        binds one per conv node and input shape (84 OCR shapes: ~9,000 objects)."""
        bc = self

        def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
            x = inputs[0]
            r = inputs[3] if bc.residual else None
            if out is not None:
                o = out[0]
                hit = bc.seen.get((id(x), id(o), id(r)))
                known = (hit[0], hit[1]) if hit is not None and hit[2]() is x and hit[3]() is o \
                    and (r is None or hit[4]() is r) else bc.checked(x, o, r)
                if known is not None:
                    prim, key = known
                    p = bc.plan
                    with p.lock:
                        if p.bound_key != key:
                            p.src.set(key[0])
                            p.dst.set(key[1])
                            if p.res is not None and r is not None:
                                p.res.set(key[2])
                            p.bound_key = key
                        prim.execute()
                    return out  # type: ignore[no-any-return]
            return bc._slow(x, r, out)

        return kernel

    def _slow(self, x: np.ndarray, r: np.ndarray | None, out: Any) -> list[np.ndarray]:
        """A call whose buffers were not verified before: checked, bound and remembered."""
        p, xs, ys, x_shape, y_shape = self.plan, self.xs, self.ys, self.x_shape, self.y_shape
        if r is not None and out is not None and _same_buffer(out[0], r, ys) and x.strides == xs \
                and x.dtype == np.float32 and x.shape == x_shape and r.shape == y_shape and not np.may_share_memory(x, r):
            prim = p.in_place()  # the executor planned the output over the residual: accumulate there
            if prim is not None:
                with p.lock:
                    p.bound_key = None
                    p.src.set(x.__array_interface__["data"][0])
                    p.dst.set(r.__array_interface__["data"][0])
                    prim.execute()
                    self.remember((x.__array_interface__["data"][0], r.__array_interface__["data"][0],
                                   r.__array_interface__["data"][0]), prim)
                return [out[0]]
        # anything but the planned layouts, and a residual the primitive cannot take as a binary
        # post-op (the "sum" form copies it into the destination first), goes through ``run``
        if x.strides != xs or x.dtype != np.float32 or x.shape != x_shape or (r is not None and (
                p.res is None or r.strides != ys or r.dtype != np.float32 or r.shape != y_shape)):
            # (into the arena view when it fits: a separate result would cost a copy, 3 MB on
            # ResNet-50's stem conv whose NCHW graph input takes this path)
            return self.finish(p.run(x.astype(np.float32, copy=False), None, r, out[0] if out is not None else None),
                               out)
        y = self.dest(out, x) if r is None else self.dest(out, x, r)
        if y is None:
            y = aligned.empty(self.cl_shape).transpose(self.perm)
        xp, yp = address("conv input X", x, x_shape, strides=xs), address("conv output Y", y, y_shape, strides=ys)
        rp = address("conv residual", r, y_shape, strides=ys) if r is not None and p.res is not None else 0
        with p.lock:
            p.bound_key = None
            p.src.set(xp)
            p.dst.set(yp)
            if rp and p.res is not None:
                p.res.set(rp)
            p.prim.execute()
            if out is not None and y is out[0]:
                self.remember((x.__array_interface__["data"][0], y.__array_interface__["data"][0],
                               r.__array_interface__["data"][0] if r is not None else 0), p.prim)
        return self.finish(y, out)
