"""Several threads at once: one plan run from each, checking its outputs against ONNX Runtime's
(``mismatches_from_threads``); any work lined up on a barrier (``run_threads``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx

from tests.ops.oracle import run_ort


def mismatches_from_threads(lm: Any, m: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], threads: int = 4,
                            rounds: int = 12) -> list[int]:
    """Per thread, how many of its ``rounds`` runs of ``lm`` (a LoadedModel of ``m``) gave a first output other
    than ORT's (rtol 1e-4, atol 1e-5); thread ``i`` cycles through ``feeds`` from feed ``i``."""
    wants = [run_ort(m, f)[0] for f in feeds]

    def job(i: int) -> int:
        bad = 0
        for j in range(rounds):
            k = (i + j) % len(feeds)
            bad += not np.allclose(lm.run_dict(feeds[k])[0], wants[k], rtol=1e-4, atol=1e-5)
        return bad

    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(job, range(threads)))


def run_threads(work: Callable[[int], None], n: int, timeout: float) -> None:
    """``work(0) .. work(n - 1)`` on ``n`` threads released together by a barrier; fails on a thread
    still running after ``timeout`` s (a hang) and re-raises the first error a thread raised."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout)
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "hang"
    if errors:
        raise errors[0]
