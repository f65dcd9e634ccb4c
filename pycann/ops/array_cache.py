"""Values derived from a constant array (a packed or dequantised weight), kept as long as that array
lives: one entry per array, dropped by ``weakref.finalize`` when it goes, so caches never outlive
the plans that own the weights and never grow with the shapes seen."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


class ArrayCache:
    """``get(w, key, make)``: ``make()`` once per (array, key); a new key replaces the old one (one
    geometry per weight in practice)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[np.ndarray], Hashable, Any]] = {}

    def get(self, w: np.ndarray, key: Hashable, make: Callable[[], Any]) -> Any:
        hit = self._entries.get(id(w))
        if hit is not None and hit[0]() is w and hit[1] == key:
            return hit[2]
        if hit is None or hit[0]() is not w:
            weakref.finalize(w, self._entries.pop, id(w), None)
        value = make()
        self._entries[id(w)] = (weakref.ref(w), key, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
