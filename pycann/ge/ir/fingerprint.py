"""A content fingerprint of an imported graph: which source model an .om was compiled from.

``atc`` records it in the .om manifest (``source_fingerprint``) right after import, before any
option or pass changes the graph; ``pycann compare`` imports the ONNX model it is given and
refuses an .om whose fingerprint differs (an .om of another export of the same architecture has
the same inputs and node names, and its first "disagreement" would blame pycann for the weights).

What is hashed (SHA-256): the graph's inputs and outputs, every node's op type, domain, input and
output names and attributes (GRAPH attributes recursively), and every initializer's name, dtype,
shape and bytes. Node names and metadata are left out: renaming nodes changes no result.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from pycann.ge.ir.graph import Graph

ALGORITHM = "sha256-graph-v1"  # stored beside the value: a later scheme is not compared with this one


def _attr(h: Any, value: Any) -> None:
    if isinstance(value, Graph):
        _graph(h, value)
    elif isinstance(value, np.ndarray):
        h.update(f"ndarray {value.dtype.str} {value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)):
        h.update(f"seq {len(value)}".encode())
        for v in value:
            _attr(h, v)
    else:  # int, float, str, bytes: repr is exact for each
        h.update(f"{type(value).__name__} {value!r}".encode())


def _graph(h: Any, g: Graph) -> None:
    h.update(repr((g.inputs, g.outputs)).encode())
    for n in g.nodes:
        h.update(repr((n.domain, n.op_type, n.inputs, n.outputs)).encode())
        for k in sorted(n.attrs):
            h.update(k.encode())
            _attr(h, n.attrs[k])
    for name in sorted(g.initializers):
        a = np.asarray(g.initializers[name])
        h.update(f"init {name} {a.dtype.str} {a.shape}".encode())
        if a.dtype.hasobject:  # (string tensors)
            h.update(repr(a.tolist()).encode())
        else:
            h.update(np.ascontiguousarray(a).view(np.uint8).data)


def graph_fingerprint(g: Graph) -> str:
    """The hex SHA-256 fingerprint of ``g`` (module docstring); ~0.1-0.3 s per 100 MB of weights."""
    h = hashlib.sha256()
    _graph(h, g)
    return h.hexdigest()
