"""Which oneDNN convolution implementation a primitive takes, by where its JIT kernels live.

Implementations whose JIT kernels oneDNN 3.x keeps in a process-wide store that never shrinks
(``brgemm_kernel_container_t`` with ``BRGEMM_KERNEL_GLOBAL_STORAGE``, deduplicated by code bytes;
the code embeds per-primitive addresses, so every primitive created adds its kernels for good):
brgemm convolutions (``brgconv``, ``brgconv_1x1``, ``brgdeconv``) and depthwise ``brdgmm``. A model
re-planned for many shapes, or whose plans are evicted and rebuilt, grew ~0.4 MB a rebuild
(PP-OCRv4 rec). So only the first primitive of each weight may use one (a static-shape model
keeps the implementation oneDNN ranks first: kept kernels bounded by the model), and only for the
first ``MAX_FIRSTS`` weights of the process (models loaded and dropped again and again); every later
one (another shape, a rebuilt plan) takes the first ``jit*`` implementation, whose kernels the
primitive owns (as fast on AVX2: docs/reliability.md, "Memory"). Depthwise convs always take
``jit_dw`` (1.2-2x faster than ``brdgmm_dw`` on AVX-512 for PP-OCR / MobileNet shapes).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from pycann.kernels.providers import omp_fork, onednn_packed, openmp
from pycann.kernels.providers import onednn_capi as capi

__all__ = ["GLOBAL_KERNELS", "MAX_FIRSTS", "first_primitive", "granted", "no_jit", "own_kernels"]

GLOBAL_KERNELS = ("brg", "brdgmm")
_first_users: dict[tuple[int, tuple[int, ...], tuple[int, ...], int], None] = {}  # weights that had their first
_first_lock = omp_fork.fork_safe(threading.Lock())
# Weight memories whose first primitive may take a global-store implementation, in the process's life: the
# kernels each such primitive adds stay when its model is dropped (their code embeds its addresses), so a
# process that loads and drops models again and again (a model per request, hot reloads) grew with every
# load: two threads loading, running and dropping PP-OCRv4 rec, RSS 366 -> 1022 MB over 876 loads (~0.8 MB a
# load; flat at ~430-470 MB with jit kernels only, or with this bound). Past this many, every primitive takes
# a jit implementation, whose kernels it owns; the store then holds at most this many weights' kernels (~20-27
# KB each on rec: ~50 MB; a process's first models, ~20 to 40 of 50-100 convs, keep oneDNN's first choice).
MAX_FIRSTS = 2048
_granted = [0]


def granted() -> int:
    """How many weight memories got a first primitive that may keep its kernels in oneDNN's store."""
    return _granted[0]


def first_primitive(w: np.ndarray) -> bool:
    """True the first time a primitive is made for the weight memory of ``w`` (then remembered
    until the array owning that memory is collected), while fewer than ``MAX_FIRSTS`` weights had
    theirs in this process."""
    # per OpenMP team too: a plan bound for fewer threads (ge.run.contention) gets the brgemm kernels as well
    key = (capi.ptr(w), tuple(w.shape), tuple(w.strides), openmp.team())
    with _first_lock:
        if key in _first_users or _granted[0] >= MAX_FIRSTS:
            return False
        _first_users[key] = None
        _granted[0] += 1
    weakref.finalize(onednn_packed.owner(w), _first_users.pop, key, None)
    return True


# Deconvolution problems (``_Plan``'s ``kind``: weight shape, geometry, post-ops; no spatial
# size) for which oneDNN offered no ``jit*`` implementation (brgemm ones only).
# Their descriptors cost 1.5-8.5 ms each (PP-OCRv4 det's, AVX-512), so a new image size must not
# make a second one just to learn that again.
no_jit: set[tuple[Any, ...]] = set()


def own_kernels(pd: capi.PrimitiveDesc, make: Any, w: np.ndarray | None = None,
                 kind: tuple[Any, ...] | None = None) -> capi.PrimitiveDesc:
    """``pd``, or when its implementation keeps its kernels in oneDNN's global store
    (``GLOBAL_KERNELS``) and this is not the first primitive of weight ``w`` (None: never
    first), ``pd`` moved on to the first ``jit*`` implementation oneDNN offers (``jit_dw``,
    ``jit_1x1``, ``jit``: same results, kernels owned by the primitive); when there is none, a
    fresh descriptor from ``make()`` (the walk used ``pd`` up), remembered for ``kind``, whose
    later shapes then keep their first descriptor without the walk."""
    impl = pd.impl_info()
    if not impl.startswith(GLOBAL_KERNELS):
        return pd
    if w is not None and not impl.startswith("brdgmm") and first_primitive(w):
        return pd
    if kind is not None and kind in no_jit:
        return pd
    while pd.next_impl():
        if pd.impl_info().startswith("jit"):
            return pd
    if kind is not None:
        no_jit.add(kind)
    return make()  # type: ignore[no-any-return]


