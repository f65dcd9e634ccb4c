"""One plan run from several threads at once, each checking its outputs against ONNX Runtime's."""

from __future__ import annotations

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
