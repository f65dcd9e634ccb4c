"""What a plan's run hands its caller: outputs copied off the arena (``_off_arena``) and made
independent of the feeds, the plan's constants and each other (``_independent``), as ONNX Runtime's are.

Separate from ``Plan.run`` (``pycann.ge.run.plan``): these decide, per output and every call, which
arrays must be copied, a question of ownership rather than of running the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels import kv_cache


def _independent(outs: list[Any], feeds: Sequence[Any], const_outputs: set[int],
                 cache_outputs: set[int]) -> list[Any]:
    """Outputs the caller may modify freely, as ONNX Runtime's are: a constant of the plan (the
    same array every run), a view of a feed (Identity, Reshape of an input) or an array already
    returned earlier in the list (an output listed twice) is copied. (Runs on every call: arrays
    owning their memory, the usual case, are settled by identity checks alone.) The outputs in
    ``cache_outputs`` are read-only views of a KV cache buffer that may share a feed's memory by
    design (kernels/kv_cache.py): only a second listing of one is copied, and any other output that
    is a (read-only) view of a cache buffer (``Identity(present)`` listed first) is copied."""
    feed_ids = {id(f) for f in feeds}
    seen: set[int] = set()
    views: list[np.ndarray] = []  # earlier outputs that do not own their memory
    res: list[Any] = []
    for i, o in enumerate(outs):
        if isinstance(o, np.ndarray):
            if i in const_outputs or id(o) in seen:
                o = o.copy()
            elif i in cache_outputs:
                pass
            elif cache_outputs and not o.flags.writeable and kv_cache.cache_view(o):
                o = o.copy()  # a view of a ``present``, not one: the caller's, as ORT's outputs
            elif o.base is None:
                # owns its memory: only a feed itself, or the base of an earlier view, can alias it
                if id(o) in feed_ids or any(np.may_share_memory(o, v) for v in views):
                    o = o.copy()
            elif any(isinstance(f, np.ndarray) and np.may_share_memory(o, f) for f in feeds) \
                    or any(isinstance(p, np.ndarray) and np.may_share_memory(o, p) for p in res):
                o = o.copy()
            seen.add(id(o))
            if o.base is not None:
                views.append(o)
        res.append(o)
    return res


def _off_arena(o: Any, buffer: np.ndarray) -> Any:
    """``o`` copied where it shares the arena; sequences (lists) element by element."""
    if isinstance(o, list):
        return [_off_arena(e, buffer) for e in o]
    return o.copy() if isinstance(o, np.ndarray) and np.may_share_memory(o, buffer) else o
