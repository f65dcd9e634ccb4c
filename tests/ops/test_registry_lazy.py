"""The op table reads its core families at import and the rest on the first lookup that misses
(pycann/ops/registry.py). The two sets must define disjoint op keys, so that every lookup answers
as the eager table of all families would; a fresh process that runs a static conv model does not
import the rest."""

from __future__ import annotations

import subprocess
import sys

from pycann.ops import registry


def _table(names: tuple[str, ...]) -> dict[tuple[str, str], list[object]]:
    table: dict[tuple[str, str], list[object]] = {}
    for fam in registry.family_modules(names):
        for op in fam.OPS:
            table.setdefault((registry._canon_domain(op.domain), op.op_type), []).append(op)
    return table


def test_core_and_other_families_define_disjoint_keys() -> None:
    core, other = _table(registry.CORE_FAMILIES), _table(registry.OTHER_FAMILIES)
    assert core and other and not set(core) & set(other)
    assert not set(registry.CORE_FAMILIES) & set(registry.OTHER_FAMILIES)


def test_completed_table_equals_the_eager_one() -> None:
    eager = _table(registry.FAMILIES)
    for defs in eager.values():
        defs.sort(key=lambda d: d.since)  # type: ignore[attr-defined]
    table = registry.complete()
    assert {k: [id(d) for d in v] for k, v in table.items() if k in eager} == \
           {k: [id(d) for d in v] for k, v in eager.items()}
    assert registry.known("", "LSTM") and registry.known("ai.onnx", "If") and not registry.known("", "NoSuchOp")
    assert registry.lookup("LSTM", "", 14).op_type == "LSTM"


def test_fresh_process_reads_the_other_families_on_a_miss_only() -> None:
    code = (
        "import sys\n"
        "from pycann.ops import registry\n"
        "names = ['pycann.ops.' + n for n in registry.OTHER_FAMILIES]\n"
        "before = [n for n in names if n in sys.modules]\n"
        "registry.lookup('Conv', '', 17); registry.lookup('Relu', '', 14)\n"
        "mid = [n for n in names if n in sys.modules]\n"
        "registry.lookup('Loop', '', 16)\n"  # a key of a family not read yet
        "after = [n for n in names if n in sys.modules]\n"
        "print(len(before), len(mid), len(after), len(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    before, mid, after, total = (int(v) for v in out.stdout.split())
    assert (before, mid, after) == (0, 0, total), out.stdout + out.stderr
