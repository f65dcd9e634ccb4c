"""A decode loop's resident memory stays at its KV caches' size (kernels/kv_cache.py, "Released pages").

Each cache buffer is replaced by a larger one every ``RESERVE_ROWS`` steps (or a quarter of its
length); with pycann's allocator policy (freed memory kept, blocks below 32 MiB from the heap) the
freed buffers stayed resident, and RSS grew to about twice the live buffers. Values are checked
against numpy's concatenate (ONNX Concat's semantics) after the freed pages were reused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pycann.kernels import kv_cache
from tests.forking import run_script

SCRIPT = r"""
import numpy as np
from pycann.kernels.kv_cache import k_cache_append
from pycann.runtime.host_allocator import keep_freed_memory

keep_freed_memory()  # what loading a model does: the policy under which the freed buffers stayed

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

CACHES, ROWS, HEAD = 8, 1536, 128  # 8 caches growing to 1536 rows of 4 KiB: ~7 MiB buffers
rng = np.random.default_rng(0)
pasts = [np.zeros((1, 8, 0, HEAD), np.float32) for _ in range(CACHES)]
rows = [rng.standard_normal((1, 8, 1, HEAD)).astype(np.float32) for _ in range(16)]
start = rss()
for t in range(ROWS):
    pasts = [k_cache_append([p, rows[(t + i) % 16]], {"axis": 2})[0] for i, p in enumerate(pasts)]
grown = rss() - start
live = sum(p.base.nbytes for p in pasts)
for i, p in enumerate(pasts):  # every row as written, though freed buffers' pages were dropped and reused
    want = np.concatenate([rows[(t + i) % 16] for t in range(ROWS)], axis=2)
    np.testing.assert_array_equal(p, want)
print(grown / live)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pages are given back with Linux's madvise")
def test_decode_loop_rss_stays_at_the_live_cache_buffers(tmp_path: Path) -> None:
    r = run_script(tmp_path, SCRIPT)
    assert r.returncode == 0, r.stderr
    ratio = float(r.stdout.split()[-1])
    # before: ~2x (each freed buffer stayed resident); now the live buffers and a little transient
    assert ratio < 1.4, f"RSS grew {ratio:.2f}x the live cache buffers"


def test_only_buffers_appended_in_place_give_their_pages_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that copies each ``present`` (pyACL's path) gets a new buffer per step, which the next
    step's reuses: dropping its pages made that step fault them in again (2x its time)."""
    released: list[int] = []
    monkeypatch.setattr(kv_cache, "_release", lambda address, nbytes: released.append(nbytes))
    past = np.zeros((1, 8, 100, 128), np.float32)
    row = np.ones((1, 8, 1, 128), np.float32)
    (once,) = kv_cache.k_cache_append([past, row], {"axis": 2})
    np.testing.assert_array_equal(once, np.concatenate([past, row], axis=2))
    del once  # never appended to: freed as numpy frees it
    assert released == []
    (grown,) = kv_cache.k_cache_append([past, row], {"axis": 2})
    (grown,) = kv_cache.k_cache_append([grown, row], {"axis": 2})  # in place
    np.testing.assert_array_equal(grown, np.concatenate([past, row, row], axis=2))
    nbytes = grown.base.nbytes
    del grown
    assert released == [nbytes]
