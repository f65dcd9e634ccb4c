"""``CompileContext``: the compile options the graph carries after ``compile_model``, typed.

Passes that run again when a call specialises the graph to its shapes (KernelSelection, the
fusions) must make the choices the compile made: the implementation mode, the passes switched
off, the knowledge bank to read. They used to travel as strings in ``graph.metadata``
(``"op_select_implmode"``, a comma-joined ``"disabled_passes"``...); now they are fields of one
frozen dataclass, ``Graph.context``, written to the .om as its own manifest section
(``"compile"`` in the graph's JSON). Files written before it carry the old metadata keys:
``from_metadata`` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# the graph.metadata keys of files written before CompileContext (read by ``from_metadata``)
LEGACY_KEYS = ("op_select_implmode", "optypelist_for_implmode", "disabled_passes", "op_bank_path", "kernel_bank")


@dataclass(frozen=True)
class CompileContext:
    """What a compile decided that later specialisations of the graph must repeat.

    * ``op_select_implmode`` / ``optypelist_for_implmode``: CANN's ``--op_select_implmode``
      (``high_performance``, the default, lets Conv take approximate algorithms such as Winograd)
      and the op types it applies to (empty: all);
    * ``disabled_passes``: pass names switched off (``--fusion_switch_file``, a subgraph-tuning record);
    * ``op_bank_path``: the knowledge bank folder given to atc (``--op_bank_path``; '' = the default);
    * ``kernel_bank``: whether tuned kernel choices of the bank are used.
    """

    op_select_implmode: str = "high_performance"
    optypelist_for_implmode: tuple[str, ...] = ()
    disabled_passes: tuple[str, ...] = ()
    op_bank_path: str = ""
    kernel_bank: bool = True

    def approx_allowed(self, op_type: str) -> bool:
        """Whether ``op_type`` may take an algorithm that is not exact under the implementation mode."""
        mode = self.op_select_implmode or "high_performance"
        types = self.optypelist_for_implmode
        return not (mode.startswith("high_precision") and (not types or op_type in types))

    def to_json(self) -> dict[str, Any]:
        """The .om manifest section (``"compile"``)."""
        return {"op_select_implmode": self.op_select_implmode,
                "optypelist_for_implmode": list(self.optypelist_for_implmode),
                "disabled_passes": list(self.disabled_passes), "op_bank_path": self.op_bank_path,
                "kernel_bank": self.kernel_bank}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CompileContext:
        """The section ``to_json`` wrote. Raises ValueError naming a field of the wrong type."""
        def names(key: str) -> tuple[str, ...]:
            v = obj.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"compile section: '{key}' must be a list of strings, got {v!r:.60}")
            return tuple(v)

        mode, bank, kernel_bank = obj.get("op_select_implmode", "high_performance"), obj.get("op_bank_path", ""), \
            obj.get("kernel_bank", True)
        if not isinstance(mode, str) or not isinstance(bank, str) or not isinstance(kernel_bank, bool):
            raise ValueError(f"compile section has a field of the wrong type: {dict(obj)!r:.120}")
        return cls(mode, names("optypelist_for_implmode"), names("disabled_passes"), bank, kernel_bank)

    @classmethod
    def from_metadata(cls, md: Mapping[str, str]) -> CompileContext:
        """The context of a graph written before ``CompileContext`` (its ``graph.metadata`` strings)."""
        def split(key: str) -> tuple[str, ...]:
            return tuple(t for t in str(md.get(key, "")).split(",") if t)

        return cls(str(md.get("op_select_implmode", "") or "high_performance"), split("optypelist_for_implmode"),
                   split("disabled_passes"), str(md.get("op_bank_path", "")), md.get("kernel_bank") != "off")
