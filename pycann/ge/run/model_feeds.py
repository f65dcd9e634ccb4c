"""A loaded model's inputs as seen from outside: ``TensorInfo`` (one input or output, as ais_bench
reports it) and ``FeedChecks``, the checks that what a caller feeds fits the model's inputs (count,
dtype, shape, ``--input_shape`` ranges, gears, AIPP) with the messages that say what to feed instead.

Separate from ``LoadedModel`` (``pycann.ge.run.model``: loading, running, gears, metadata), which
inherits these checks: validating a feed is one job, running it another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.dtypes import TensorDesc, from_numpy, to_numpy
from pycann.errors import InputError

if TYPE_CHECKING:  # (as in model.py: gears and dynamic AIPP load only when a model has them)
    from collections.abc import Sequence

    from pycann.ge.aipp.dynamic import DynamicAipp
    from pycann.ge.compile.gears import GearTable
    from pycann.ge.ir import Graph


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output, as ais_bench's ``get_inputs()`` reports it."""

    name: str
    shape: list[Any]  # ints, or -1 / symbol names for dynamic dims
    dtype: int  # ONNX dtype enum
    datatype: str  # numpy name, e.g. "float32"
    format: str = "ND"

    @property
    def size(self) -> int:
        """Bytes for a static shape, else 0."""
        n = 1
        for d in self.shape:
            if not isinstance(d, int) or d < 0:
                return 0
            n *= d
        return n * to_numpy(self.dtype).itemsize


def _container_feed(name: str, kind: str, x: Any) -> Any:
    """A sequence input as a list of arrays; an optional input as None or its value."""
    if kind == "optional" and x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [np.asarray(e) for e in x]
    if kind == "sequence":
        raise InputError(f"input '{name}' is an ONNX sequence: pass a list of arrays, received {type(x).__name__}")
    return np.asarray(x)


class FeedChecks:
    """``LoadedModel``'s feed validation; the attributes below are set by ``LoadedModel.__init__``."""

    graph: Graph
    inputs: list[TensorInfo]
    aipp: list[dict[str, Any]]
    gears: GearTable | None
    _in_descs: list[TensorDesc | None]
    _ranges: dict[str, Any]
    _dyn_aipp: DynamicAipp | None
    _static_feeds: list[tuple[np.dtype, tuple[int, ...]]] | None

    def _static_signature(self) -> list[tuple[np.dtype, tuple[int, ...]]] | None:
        """(dtype, shape) of every input when all are static tensors (no gears, dynamic AIPP or
        ranges): ``check_feeds`` then accepts matching arrays with one comparison each."""
        if self.gears is not None or self._dyn_aipp is not None or any(
                isinstance(r, list) for dims in self._ranges.values() for r in (dims or [])):
            return None  # gears, dynamic AIPP and lo~hi ranges have their own checks
        sig = []
        for d in self._in_descs:
            if d is None or getattr(d, "kind", "tensor") != "tensor" or not d.dtype or not d.is_static:
                return None
            try:
                sig.append((np.dtype(to_numpy(d.dtype)), tuple(int(x) for x in d.shape)))  # type: ignore[union-attr, arg-type]
            except (TypeError, KeyError, ValueError):
                return None
        return sig

    def check_feeds(self, feeds: Sequence[Any]) -> list[np.ndarray]:
        """Validate count, dtype and shape of inputs (in model order). Raises ``InputError``.

        Dynamic-AIPP parameter inputs may be left out (the ones set with ``set_dynamic_aipp``
        are filled in); with gears, the shapes must match a gear (the selected one if any)."""
        fast = self._static_feeds
        if fast is not None and len(feeds) == len(fast):
            # a static model fed arrays of exactly its signature (every call of a serving loop)
            for (dt, shape), x in zip(fast, feeds):
                if type(x) is not np.ndarray or x.dtype != dt or x.shape != shape:
                    break
            else:
                return list(feeds)
        if self._dyn_aipp is not None:
            feeds = self._dyn_aipp.complete(feeds, len(self.inputs))
        if len(feeds) != len(self.inputs):
            raise InputError(
                f"the model has {len(self.inputs)} input{'' if len(self.inputs) == 1 else 's'} "
                f"({', '.join(i.name for i in self.inputs)}) but {len(feeds)} were given"
            )
        out: list[Any] = []
        for info, desc, x in zip(self.inputs, self._in_descs, feeds):
            if desc is not None and desc.kind != "tensor":
                out.append(_container_feed(info.name, desc.kind, x))
                continue
            if self._dyn_aipp is not None and info.name in self._dyn_aipp.images:
                out.append(self._dyn_aipp.image(info.name, x))
                continue
            arr = np.asarray(x)
            try:
                got = int(from_numpy(arr.dtype))
            except TypeError:  # a dtype ONNX has no type for (structured, void): a mismatch like any other
                got = -1
            if desc is not None and desc.dtype and got != desc.dtype:
                aipp = next((e for e in self.aipp if e.get("input") == info.name and e.get("mode") != "dynamic"), None)
                if aipp is not None:  # x.astype would turn normalised values into garbage pixels
                    raise InputError(
                        f"input '{info.name}' has AIPP (--insert_op_conf): feed the raw image, {info.datatype} "
                        f"{info.format} {list(info.shape)} ({aipp.get('params', {}).get('input_format', 'pixels')}), "
                        f"not the {arr.dtype} tensor the model had before AIPP (the AIPP step converts, crops "
                        "and normalises it: docs/aipp.md)")
                raise InputError(
                    f"input '{info.name}': expected dtype {info.datatype}, received {arr.dtype}; "
                    # a list or scalar has no .astype: show the call that works for it
                    + (f"convert with x.astype(np.{info.datatype})" if isinstance(x, np.ndarray)
                       else f"convert with np.asarray(x, dtype=np.{info.datatype})")
                )
            if desc is not None and desc.shape is not None:
                self._check_shape(info.name, desc, arr.shape)
            out.append(arr)
        if self.gears is not None:
            self.gears.check([i.name for i in self.inputs], [a.shape if isinstance(a, np.ndarray) else None for a in out])
        return out

    def _check_shape(self, name: str, desc: TensorDesc, shape: tuple[int, ...]) -> None:
        """Rank, static dims and ``--input_shape`` ranges (``lo~hi``). The message shows the
        expected shape in --input_shape syntax (``-1`` = any, ``lo~hi`` = range) and the first
        offending dim (CANN E10050 wording for ranges)."""
        assert desc.shape is not None
        rng = self._ranges.get(name) or []
        why = ""
        if len(shape) != len(desc.shape):
            why = f"rank {len(shape)}, expected {len(desc.shape)}"
        else:
            for i, (d, s) in enumerate(zip(desc.shape, shape)):
                r = rng[i] if i < len(rng) else None
                if isinstance(d, int) and d != s:
                    why = f"dim {i} is {s}, expected {d}"
                elif isinstance(r, list) and not r[0] <= s <= r[1]:
                    why = f"dim {i} is {s}, not in the range {r[0]}~{r[1]} set by --input_shape"
                if why:
                    break
        if why:  # (the expected-shape text is built only for the error: this runs on every call)
            raise InputError(f"input '{name}': expected shape {self._expected(name, desc)}, received {list(shape)} ({why})")

    def _expected(self, name: str, desc: TensorDesc | None) -> str:
        """``[1,3,-1,1~8]``: input ``name``'s shape in --input_shape syntax (``-1`` any, ``lo~hi`` a range)."""
        if desc is None or desc.shape is None:
            return "(any shape)"
        rng = self._ranges.get(name) or []
        want = []
        for i, d in enumerate(desc.shape):
            r = rng[i] if i < len(rng) else None
            want.append(str(d) if isinstance(d, int) else f"{r[0]}~{r[1]}" if isinstance(r, list) else "-1")
        return f"[{','.join(want)}]"

    def _shapes_text(self, feeds: Sequence[Any]) -> str:
        return ", ".join(f"{i.name} {list(np.shape(x))}" for i, x in zip(self.inputs, feeds))

    def _expected_text(self) -> str:
        """Every input's shape in --input_shape syntax (``_expected``)."""
        return ", ".join(f"{name} {self._expected(name, d)}" for name, d in zip(self.graph.inputs, self._in_descs))
