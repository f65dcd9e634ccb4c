"""What every prepared-kernel table shares (``bind.py``, ``bind_onednn.py``,
``bind_small.py``): the kernel and prepare signatures, and the static shape of a desc."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc

Kernel = Callable[[Sequence[Any], Mapping[str, Any]], list[np.ndarray]]
# prepare(attrs, in_descs, in_consts, out_descs) -> kernel, or None to keep the generic kernel
Prepare = Callable[[Mapping[str, Any], Sequence[TensorDesc | None], Sequence[np.ndarray | None],
                    Sequence[TensorDesc | None]], Kernel | None]


def static_shape(d: TensorDesc | None) -> tuple[int, ...] | None:
    """The shape of a tensor desc whose dims are all known, else None."""
    if d is None or getattr(d, "kind", "tensor") != "tensor" or not d.is_static:
        return None
    return tuple(int(x) for x in d.shape)  # type: ignore[arg-type, union-attr]


_NONE: Any = object()  # (``remember``: no key is kept)


def remember(table: dict[Any, Any], lock: Any, key: Any, value: Any, limit: int,
             keep: Any = _NONE) -> None:
    """``table[key] = value`` for a node's per-shape kernel table, the oldest entry (but ``keep``)
    dropped beyond ``limit``. Never waits for ``lock``: a thread of the parent inside it at an
    os.fork is not in the child, where it would stay taken for ever; held (that, or another thread
    recording now), the value serves its call unrecorded and is made again next time."""
    if not lock.acquire(blocking=False):
        return
    try:
        if len(table) >= limit:
            table.pop(next(k for k in table if k != keep))
        table[key] = value
    finally:
        lock.release()
