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
