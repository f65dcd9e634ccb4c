"""The op table reads a family on the first lookup of one of its ops (pycann/ops/registry.py),
through the index ``pycann/ops/families.py``. The index must list exactly each family's op keys, so
that every lookup answers as the eager table of all families would; a fresh process that runs a
static conv model imports only the families its ops need."""

from __future__ import annotations

import json
import subprocess
import sys

from pycann.ops import registry
from pycann.ops.families import FAMILY_OPS


def _table(names: tuple[str, ...]) -> dict[tuple[str, str], list[object]]:
    table: dict[tuple[str, str], list[object]] = {}
    for fam in registry.family_modules(names):
        for op in fam.OPS:
            table.setdefault((registry._canon_domain(op.domain), op.op_type), []).append(op)
    return table


def test_the_index_lists_each_familys_keys_exactly() -> None:
    for name in registry.FAMILIES:
        listed = {(d, t) for d, types in FAMILY_OPS[name].items() for t in types}
        actual = set(_table((name,)))
        assert listed == actual, (f"pycann/ops/families.py, family {name}: add {sorted(actual - listed)}, "
                                  f"remove {sorted(listed - actual)}")
    keys = [(d, t) for by in FAMILY_OPS.values() for d, types in by.items() for t in types]
    assert len(keys) == len(set(keys)), "an op key is listed under two families"


def test_completed_table_equals_the_eager_one() -> None:
    eager = _table(registry.FAMILIES)
    for defs in eager.values():
        defs.sort(key=lambda d: d.since)  # type: ignore[attr-defined]
    table = registry.complete()
    assert {k: [id(d) for d in v] for k, v in table.items() if k in eager} == \
           {k: [id(d) for d in v] for k, v in eager.items()}
    assert registry.known("", "LSTM") and registry.known("ai.onnx", "If") and not registry.known("", "NoSuchOp")
    assert registry.lookup("LSTM", "", 14).op_type == "LSTM"


def test_fresh_process_reads_only_the_families_it_looks_up() -> None:
    code = (
        "import json, sys\n"
        "from pycann.ops import registry\n"
        "def read(): return sorted(n for n in registry.FAMILIES if 'pycann.ops.' + n in sys.modules)\n"
        "r = {'before': read()}\n"
        "r['ops'] = [registry.lookup('Conv', '', 17).op_type, registry.lookup('Relu', '', 14).op_type]\n"
        "r['mid'] = read()\n"
        "r['ops'].append(registry.lookup('Loop', '', 16).op_type)\n"
        "r['after'] = read()\n"
        "try:\n"
        "    registry.lookup('NoSuchOp', '', 17)\n"
        "except Exception as e:\n"
        "    r['missing'] = type(e).__name__\n"
        "r['end'] = read()\n"
        "print(json.dumps(r))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout)
    assert r["ops"] == ["Conv", "Relu", "Loop"]
    for fam in ("nn.rnn", "control", "sequence", "string", "ml", "quant", "training"):
        assert fam not in r["mid"], r
    assert {"nn.conv", "elementwise"} <= set(r["mid"])
    assert "control" in r["after"] and "nn.rnn" not in r["after"], r
    # an unknown op reads every family before it is refused (it may be one of a family not read yet)
    assert r["missing"] == "UnsupportedOpError" and r["end"] == sorted(registry.FAMILIES), r


def test_a_patch_undone_after_its_family_was_read_leaves_the_op() -> None:
    """monkeypatch.setitem on a key whose family was not read yet deletes the key on undo; if the
    family was read meanwhile (another of its ops looked up), the op must still be found after."""
    code = (
        "import pytest\n"
        "from pycann.ops import registry\n"
        "from pycann.ops.opdef import OpDef\n"
        "mp = pytest.MonkeyPatch()\n"
        "mp.setitem(registry.REGISTRY, ('', 'Relu'), [OpDef('Relu', lambda c: [], lambda i, a: [])])\n"
        "registry.lookup('Add', '', 14)\n"  # reads the elementwise family (Relu's) under the patch
        "mp.undo()\n"
        "print(registry.lookup('Relu', '', 14).op_type, registry.complete()[('', 'Relu')][-1].op_type)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["Relu", "Relu"], out.stderr[-800:]
