"""``--tune_ops_file``: which ops to tune.

One entry per line (``#`` starts a comment; commas also separate entries, as in CANN's lists):

* an op type (``Conv``, ``MatMul``, ``FusedConv``): tune every node of that type (``Conv`` also
  selects the fused convs GE made of the model's Conv nodes);
* a node name: tune that node (the model's own ONNX node name, or the compiled graph's);
* ``MatMul MxKxN`` (pycann's extension): tune the fp16 MatMul tiling of that shape on the cost
  model of ``--soc_version``, with or without ``--model``.

No file: every op. Errors name the file, the line and the expected form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pycann.errors import OptionError

_SHAPE = re.compile(r"^MatMul\s+(\d+)\s*x\s*(\d+)\s*x\s*(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class OpsFilter:
    """Op types and node names to tune (both empty: all), and MatMul shapes (M, K, N) to tile."""

    entries: frozenset[str] = frozenset()
    matmuls: tuple[tuple[int, int, int], ...] = field(default_factory=tuple)

    @property
    def everything(self) -> bool:
        return not self.entries and not self.matmuls

    def selects(self, op_type: str, node_name: str, *aliases: str) -> bool:
        """``aliases``: the other names of the node, e.g. a fused node's kernel op type (``Conv`` for
        ``FusedConv``) and the original ONNX node names it covers (``conv1`` for ``conv1_fused``)."""
        return self.everything or any(x in self.entries for x in (op_type, node_name, *aliases))


def read_ops_file(path: str) -> OpsFilter:
    """Parse ``path``. Raises ``OptionError`` (E10001) for a missing file or a bad shape line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise OptionError(f"E10001: Value [{path}] for parameter [--tune_ops_file] is invalid. Reason: "
                          f"{e.strerror or e}.") from None
    entries: set[str] = set()
    shapes: list[tuple[int, int, int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        for item in raw.split("#", 1)[0].split(","):
            item = item.strip()
            if not item:
                continue
            m = _SHAPE.match(item)
            if m:
                shapes.append((int(m[1]), int(m[2]), int(m[3])))
            elif " " in item or "\t" in item:
                raise OptionError(f"E10001: --tune_ops_file {path} line {lineno} '{raw.strip()}': expected an op "
                                  "type, a node name or 'MatMul MxKxN' (e.g. MatMul 1024x512x2048)")
            else:
                entries.add(item)
    return OpsFilter(frozenset(entries), tuple(shapes))
