"""The model index of operator tuning: which bank records one model's ``aoe --job_type=2`` run
produced, so that a later run on the same model reuses them without compiling it.

A run that tunes a model's ops needs the compiled graph to know its kernel specs (shapes after
GE's fusions), and compiling costs seconds where reading the bank costs milliseconds. So after a
run the bank also gets one ``kind="model"`` record (op_type ``opat``), keyed by what decides that
set of specs:

* ``shapes``/``formats``: the ``--input_shape`` (by input name) and ``--input_format`` given;
* ``attrs``: sha256 of the model file(s), the input names, every other compile option (implmode, soc, ...; not the
  bank path), the ``--tune_ops_file`` selection and the cost-model soc;
* ``soc_version``/``kit_version``: this machine and the library versions, as for kernel records.

Its choice lists the key and ``created`` stamp of every kernel/tiling record the run reported and
of the model's subgraph-tuning record (or its absence); its detail keeps the report entries and the
tuned .om written (path and sha256). ``reuse`` accepts the index only when every listed record is
still in the bank with the same stamp (nothing re-tuned since, no subgraph record added) and the
.om is still there unchanged: then the run measures nothing, compiles nothing and copies the .om.
Anything else (an edited model, other options, a record replaced) falls back to the full run.
This module does not import GE: the point is a second run that loads neither GE nor torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pycann.aoe.bank import BankError, BankKey, BankRecord, KnowledgeBank, canonical, host_soc, kit_version
from pycann.aoe.ops_file import OpsFilter


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def index_key(files: Sequence[str | Path], options: Any, wanted: OpsFilter, soc_version: str) -> BankKey:
    """The key of one model's operator-tuning index: the model files' contents, the compile options
    (``options``: a ``CompileOptions``; its bank path left out), the ops selection, the cost-model soc."""
    opts = {k: v for k, v in dataclasses.asdict(options).items() if k != "op_bank_path"}
    shapes = opts.pop("input_shape", None) or {}
    attrs = canonical({"files": [file_sha256(f) for f in files], "inputs": sorted(shapes), "options": opts,
                       "ops": sorted(wanted.entries), "matmuls": [list(m) for m in wanted.matmuls],
                       "tiling_soc": soc_version})
    return BankKey("model", "opat", tuple(tuple(-1 if not isinstance(d, int) else d for d in v) for _, v in
                                          sorted(shapes.items())),
                   (), (str(opts.get("input_format", "")),), attrs, host_soc(), kit_version())


def _key_from_columns(cols: list[str]) -> BankKey:
    """Inverse of ``BankKey.columns`` (JSON lists back to tuples)."""
    import json

    shapes = tuple(tuple(s) for s in json.loads(cols[2]))
    return BankKey(cols[0], cols[1], shapes, tuple(json.loads(cols[3])), tuple(json.loads(cols[4])), cols[5],
                   cols[6], cols[7])


def remember(bank: KnowledgeBank, key: BankKey, records: Sequence[BankKey], graph_key: BankKey | None,
             entries: list[dict[str, Any]], om: Path | None, notes: Sequence[str] = ()) -> None:
    """Store the index of a finished run: the records it reported (with their current stamps), the
    subgraph record's key and stamp (0 when absent), its report entries and notes, the .om written."""
    listed = []
    for k in records:
        rec = bank.get(k)
        if rec is None:  # a record the run did not store (a write that failed): no index
            return
        listed.append([list(k.columns()), rec.created])
    graph = None
    if graph_key is not None:
        grec = bank.get(graph_key)
        graph = [list(graph_key.columns()), grec.created if grec is not None else 0.0]
    detail = {"entries": entries, "notes": list(notes), "om": str(om.resolve()) if om else "",
              "om_sha256": file_sha256(om) if om else ""}
    bank.put(BankRecord(key, {"records": listed, "graph": graph}, 0.0, 0.0, 0, detail))


def reuse(bank: KnowledgeBank, key: BankKey, om_out: Path | None) -> tuple[list[dict[str, Any]], list[str]] | None:
    """(report entries, notes) when the bank still holds every choice the index lists (and the .om it
    names is unchanged, copied to ``om_out``); None when the run has to compile and look up."""
    try:
        idx = bank.get(key)
        if idx is None:
            return None
        current: list[BankRecord] = []
        for cols, created in idx.choice.get("records", []):
            rec = bank.get(_key_from_columns(cols))
            if rec is None or rec.created != created:
                return None
            current.append(rec)
        graph = idx.choice.get("graph")
        if graph is not None:
            grec = bank.get(_key_from_columns(graph[0]))
            if (grec.created if grec is not None else 0.0) != graph[1]:
                return None
    except (BankError, ValueError, TypeError, KeyError, IndexError):
        return None  # an index from another layout: the full run rewrites it
    entries = [dict(e) for e in idx.detail.get("entries", [])]
    if len(entries) != len(current):
        return None
    note = "the knowledge bank held every choice of this model (index of an earlier run): nothing compiled or measured"
    src = Path(str(idx.detail.get("om", "")))
    if om_out is not None:
        if not src.is_file() or file_sha256(src) != idx.detail.get("om_sha256"):
            return None  # the earlier .om is gone or changed: compile it again
        om_out.parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != om_out.resolve():
            shutil.copyfile(src, om_out)
        note += f"; tuned model copied from {src}"
    for e, rec in zip(entries, current):
        e.update(choice=rec.choice, cost_us=round(rec.cost_us, 3), baseline_us=round(rec.baseline_us, 3),
                 speedup=round(rec.speedup, 4), trials=0, from_bank=True, seconds=0.0,
                 note=f"from the knowledge bank ({rec.trials} trials when tuned)")
    return entries, [*map(str, idx.detail.get("notes", [])), note]
