"""bench/bench_one.py keeps its .om cache bounded: every source edit compiles a new .om."""

from __future__ import annotations

import os
import pathlib

from tests.tools.scripts import load_script


def _bench_one():  # type: ignore[no-untyped-def]
    return load_script("bench/bench_one.py", "bench_one")


def test_prune_cache_keeps_the_newest_per_model(tmp_path: pathlib.Path) -> None:
    b = _bench_one()
    for i in range(6):
        for model in ("minilm_l6_b1", "minilm_l6_dynamo_b1"):
            om = tmp_path / f"{model}_{i:012d}.om"
            om.write_bytes(b"x")
            om.with_suffix(".json").write_text("{}")
            os.utime(om, (1000 + i, 1000 + i))
    b.prune_cache(tmp_path, "minilm_l6_b1_", keep=2)
    left = sorted(p.name for p in tmp_path.glob("minilm_l6_b1_*"))
    assert left == [f"minilm_l6_b1_{i:012d}.{ext}" for i in (4, 5) for ext in ("json", "om")]
    assert len(list(tmp_path.glob("minilm_l6_dynamo_b1_*.om"))) == 6  # another model's prefix: untouched
