"""A compiled model loaded for execution: I/O descriptions, input validation, running.

Both ``.om`` files and in-memory ``CompiledModel``s load into ``LoadedModel``; the acl facade
(``pycann.acl``) and ``InferSession`` are thin wrappers over it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, dtype_name, from_numpy, to_numpy
from pycann.errors import InputError
from pycann.ge.compiler import CompiledModel, compile_model, specialize
from pycann.ge.executor import Executor
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


def _info(name: str, d: TensorDesc | None) -> TensorInfo:
    if d is None:
        return TensorInfo(name, [], 0, "undefined")
    shape = [] if d.shape is None else [x if isinstance(x, int) else -1 for x in d.shape]
    try:
        dt = to_numpy(d.dtype).name
    except TypeError:
        dt = dtype_name(d.dtype).lower()
    return TensorInfo(name, shape, d.dtype, dt)


def _owned(o: Any) -> Any:
    """``o`` with read-only arrays copied; sequences (lists) element-wise, empty optionals (None) as is."""
    if o is None:
        return None
    if isinstance(o, list):
        return [_owned(e) for e in o]
    o = np.asarray(o)
    return o if o.flags.writeable else o.copy()


def _container_feed(name: str, kind: str, x: Any) -> Any:
    """A sequence input as a list of arrays; an optional input as None or its value."""
    if kind == "optional" and x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [np.asarray(e) for e in x]
    if kind == "sequence":
        raise InputError(f"input '{name}' is an ONNX sequence: pass a list of arrays, received {type(x).__name__}")
    return np.asarray(x)


class LoadedModel:
    """Runs a compiled graph. Thread-safe: several threads may call ``run`` at once."""

    def __init__(self, graph: Graph, manifest: Mapping[str, Any] | None = None, path: str = "") -> None:
        self.graph = graph
        self.manifest = dict(manifest or {})
        self.path = path
        self.inputs = [_info(n, graph.descs.get(n)) for n in graph.inputs]
        self.outputs = [_info(n, graph.descs.get(n)) for n in graph.outputs]
        self._in_descs = [graph.descs.get(n) for n in graph.inputs]
        self._ranges = self.manifest.get("input_ranges", {})
        self.executor = Executor(graph, specialize)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> LoadedModel:
        """Load an .om (or compile an .onnx in memory). Raises ``OmFormatError`` for bad files."""
        p = os.fspath(path)
        if p.lower().endswith(".onnx"):
            cm = compile_model(p)
            return cls(cm.graph, cm.manifest, p)
        from pycann.ge.om import load_om

        om = load_om(p)
        return cls(om.graph, om.manifest, p)

    @classmethod
    def from_compiled(cls, cm: CompiledModel) -> LoadedModel:
        return cls(cm.graph, cm.manifest)

    def check_feeds(self, feeds: Sequence[Any]) -> list[np.ndarray]:
        """Validate count, dtype and shape of inputs (in model order). Raises ``InputError``."""
        if len(feeds) != len(self.inputs):
            raise InputError(
                f"the model has {len(self.inputs)} inputs ({', '.join(i.name for i in self.inputs)}) "
                f"but {len(feeds)} were given"
            )
        out: list[Any] = []
        for info, desc, x in zip(self.inputs, self._in_descs, feeds):
            if desc is not None and desc.kind != "tensor":
                out.append(_container_feed(info.name, desc.kind, x))
                continue
            arr = np.asarray(x)
            if desc is not None and desc.dtype and int(from_numpy(arr.dtype)) != desc.dtype:
                raise InputError(
                    f"input '{info.name}': expected dtype {info.datatype}, received {arr.dtype}; "
                    f"convert with x.astype(np.{info.datatype})"
                )
            if desc is not None and desc.shape is not None:
                self._check_shape(info.name, desc, arr.shape)
            out.append(arr)
        return out

    def _check_shape(self, name: str, desc: TensorDesc, shape: tuple[int, ...]) -> None:
        assert desc.shape is not None
        want = ["?" if not isinstance(d, int) else d for d in desc.shape]
        ok = len(shape) == len(desc.shape) and all(
            not isinstance(d, int) or d == s for d, s in zip(desc.shape, shape)
        )
        rng = self._ranges.get(name)
        if ok and rng:
            for i, r in enumerate(rng):
                if isinstance(r, list) and not r[0] <= shape[i] <= r[1]:
                    ok = False
                    want[i] = f"{r[0]}~{r[1]}"
        if not ok:
            raise InputError(
                f"input '{name}': expected shape [{','.join(map(str, want))}], received {list(shape)}"
            )

    def run(self, feeds: Sequence[Any]) -> list[np.ndarray]:
        """Run with inputs in model order; returns outputs in model order."""
        outs = self.executor.run(self.check_feeds(feeds))
        # Never hand out the model's own constant memory (read-only, shared between runs).
        return [_owned(o) for o in outs]

    def run_dict(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Run with inputs by name. Raises ``InputError`` naming missing or unknown inputs."""
        names = [i.name for i in self.inputs]
        unknown = [k for k in feeds if k not in names]
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            raise InputError(
                f"input names do not match the model: unknown {unknown}, missing {missing}; "
                f"the model's inputs are {names}"
            )
        return self.run([feeds[n] for n in names])

    def timed_run(self, feeds: Sequence[Any]) -> tuple[list[np.ndarray], float]:
        t0 = time.perf_counter()
        out = self.run(feeds)
        return out, (time.perf_counter() - t0) * 1e3
