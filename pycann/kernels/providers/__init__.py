"""Kernel providers: interchangeable implementations of the innermost heavy kernels.

A *provider* is a library that can compute some ops (numpy + its BLAS, PyTorch's oneDNN, ...);
an *algorithm* (``pycann.kernels.algorithm.Algorithm``: provider, name, layout, packing, threads,
...) is one way a provider computes one op family, and an ``Implementation`` is its code here
(``supports(spec)``, ``fn``). Every algorithm is *total*: given any valid
input of its op it returns the right answer (a specialised algorithm handed a shape it was not
made for delegates to the general one), so a recorded choice can never produce a wrong result.

Selection (see docs/kernels.md):

* ``choose(op_type, shapes, attrs)`` picks once per node, from ``STATIC_TABLE`` (measured on
  the real models' shapes) or, in ``"measure"`` mode, by timing every candidate on the shape.
  GE's ``KernelSelection`` pass records the pick in the node attribute ``_algo`` (saved in the .om).
* At run time the kernel calls ``resolve(algorithm.of(attrs), spec)``; an algorithm whose provider
  is missing here falls back to the static choice among available providers (logged once).

Heavy providers stay optional: ``torch`` is imported only when first asked about, and
``PYCANN_PROVIDERS=numpy`` (comma-separated names) restricts the set in a process.

This module resolves choices (availability, lookup, fallback); its parts live beside it: ``specs``
(``ConvSpec``/``GemmSpec``/``Implementation``), ``choice_table`` (``PROVIDERS``, ``STATIC_TABLE``,
``shape_class``), ``measured`` (``measure``) and ``thread_pools`` (OpenMP and BLAS pools).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pycann import config
from pycann.kernels.algorithm import (
    FALLBACK,
    INTERIM_CONV_TRANSPOSE,
    Algorithm,
    parse,
)

# The specs, the tables and measured selection live in their own modules (specs, choice_table,
# measured); the names imported here are the ones this module uses, and with them the package's
# public API (``__all__``, docs/kernels.md) stays ``providers.<name>``.
from pycann.kernels.providers.choice_table import (
    PROVIDERS,
    STATIC_TABLE,
    TINY_FLOPS,
    TINY_FLOPS_2D,
    Provider,
    shape_class,
)
from pycann.kernels.providers.measured import measure
from pycann.kernels.providers.specs import (
    ConvSpec,
    GemmSpec,
    Implementation,
    OpSpec,
    compute_name,
    conv_spec,
    make_spec,
)

log = logging.getLogger("pycann.kernels.providers")


# ------------------------------------------------------------------ availability and lookup

_available: dict[str, bool] = {}
_implementations: dict[Algorithm, Implementation] = {}
_warned: set[Algorithm] = set()


def _allowed() -> set[str] | None:
    return config.providers_allowed()


def available(provider: str) -> bool:
    """True when ``provider`` is registered, allowed (``PYCANN_PROVIDERS``) and importable."""
    if provider not in PROVIDERS:
        return False
    allowed = _allowed()
    if allowed is not None and provider not in allowed:
        return False
    if provider not in _available:
        try:
            mod = importlib.import_module(PROVIDERS[provider].module)
            ok = bool(mod.available())
        except config.ConfigError:
            raise  # a bad knob (PYCANN_OMP_WAIT_POLICY, PYCANN_NUM_THREADS) is the user's to fix: not "unavailable"
        except Exception as e:  # a broken optional install must not break pycann
            log.info("kernel provider %s unavailable: %s", provider, e)
            ok = False
        _available[provider] = ok
    return _available[provider]


def provider_algorithms(provider: str) -> list[Implementation]:
    """All implementations a provider declares (whether or not it is available)."""
    return list(importlib.import_module(PROVIDERS[provider].module).ALGORITHMS)


def algorithm(algo: Algorithm | str) -> Implementation | None:
    """The implementation of ``algo`` if its provider is available here, else None. A
    ``"provider:name"`` key (the AOE bank's text form) is parsed first."""
    if isinstance(algo, str):
        parsed = parse(algo)
        if parsed is None:
            return None
        algo = parsed
    impl = _implementations.get(algo)
    if impl is not None:
        return impl
    if not available(algo.provider):
        return None
    for i in provider_algorithms(algo.provider):
        _implementations[i.algo] = i
    return _implementations.get(algo)


def loaded(provider: str) -> bool:
    """Whether ``provider``'s availability has been decided in this process (its library loaded or
    found missing): asking it anything more costs nothing."""
    return provider in _available


def declared(algo: Algorithm | str) -> Implementation | None:
    """The implementation of ``algo`` when its provider is registered, allowed and *can* load,
    without loading it: a provider module may define ``importable()`` (a cheap check, e.g.
    ``find_spec``), so reading a choice from the knowledge bank does not ``import torch`` (seconds)
    before a torch kernel runs; the run-time lookup (``resolve``) loads it, or falls back to the
    static choice if loading fails. Providers without ``importable`` are checked with ``available``."""
    if isinstance(algo, str):
        parsed = parse(algo)
        if parsed is None:
            return None
        algo = parsed
    if algo in _implementations:
        return _implementations[algo]
    provider = algo.provider
    if provider not in PROVIDERS or provider in _available:
        return algorithm(algo)
    allowed = _allowed()
    if allowed is not None and provider not in allowed:
        return None
    try:
        mod = importlib.import_module(PROVIDERS[provider].module)
        check = getattr(mod, "importable", None)
        if check is None:
            return algorithm(algo)
        if not check():
            return None
    except Exception:  # a broken optional install must not break pycann
        return None
    return next((i for i in mod.ALGORITHMS if i.algo == algo), None)


def arena_ok(algo: Algorithm | None) -> bool:
    """Whether a node whose recorded algorithm is ``algo`` should get an arena output.

    False for algorithms that compute into their own buffer (torch's convolutions,
    ``Algorithm.writes_out``): binding them to the arena adds a full copy of the output per call
    (measured: PP-OCRv4 det 640x640 about 10% slower). None: True."""
    return algo is None or algo.writes_out


def reset() -> None:
    """Forget cached availability and choices (after changing ``PYCANN_PROVIDERS``; tests)."""
    _available.clear()
    _implementations.clear()
    _warned.clear()
    _static_choice.cache_clear()


def candidates(spec: OpSpec, only: set[str] | None = None, approx: bool = False) -> list[Implementation]:
    """Available implementations supporting ``spec``: the static preference first, then the rest.

    ``only``: look at these providers alone (others are not even probed, so asking for an
    alternative on the numpy or onednn provider never imports torch). ``approx``: include
    algorithms that are not ``exact`` (op_select_implmode high_performance)."""
    algos = [a for a in STATIC_TABLE.get((spec.op_type, shape_class(spec)), ()) if only is None or a.provider in only]
    for p in PROVIDERS:
        if (only is None or p in only) and available(p):
            algos += [i.algo for i in provider_algorithms(p) if i.op_type == spec.op_type]
    out: list[Implementation] = []
    for a in dict.fromkeys(algos):
        i = algorithm(a)
        if i is not None and i.op_type == spec.op_type and (approx or i.exact) and i.supports(spec):
            out.append(i)
    fallback = algorithm(FALLBACK[spec.op_type])
    if fallback is not None and fallback not in out:
        out.append(fallback)  # total: computes any valid input, supported or not
    return out


# Below these FLOPs the interim plan (a new signature's calls while its plan builds) computes with
# numpy: creating the oneDNN primitive for the shape costs more than numpy's slower product.
# Measured on an AVX-512 host: a deconvolution primitive (brgemm, channels-last) takes 2-8 ms to
# create and 0.04-0.6 ms to run at PP-OCRv4 det's 2x2-stride-2 shapes; numpy's col2im takes
# 0.06 ms at 1 MFLOP, 0.55 ms at 6, 5 ms at 24. (Convolutions are not listed: their primitives
# are created in 0.3-0.7 ms, about numpy's run, and numpy's made PP-OCRv4 rec's first calls slower.)
# Kernel-equals-stride deconvolutions (det's) need no per-size primitive (``ConvSpec.patches``) and
# keep oneDNN.
INTERIM_NUMPY_FLOPS: dict[str, int] = {"ConvTranspose": 16_000_000}


@lru_cache(maxsize=4096)
def _interim_choice(spec: OpSpec) -> Implementation:
    """numpy's implementation for ``spec`` below ``INTERIM_NUMPY_FLOPS``, else the static choice
    (always for a patch-scattering ConvTranspose: oneDNN's runs it with no per-size primitive)."""
    if spec.flops < INTERIM_NUMPY_FLOPS.get(spec.op_type, 0) and not (isinstance(spec, ConvSpec) and spec.patches):
        return candidates(spec, only={"numpy"})[0]
    return _static_choice(spec)


@lru_cache(maxsize=4096)
def _static_choice(spec: OpSpec, approx: bool = False) -> Implementation:
    # Walk the table's row first: a row that starts with numpy (tiny convs, MatMul) must not
    # import an optional provider (torch costs ~190 MB and ~1 s at first use).
    for a in STATIC_TABLE.get((spec.op_type, shape_class(spec)), ()):
        i = algorithm(a)
        if i is not None and i.op_type == spec.op_type and (approx or i.exact) and i.supports(spec):
            return i
    return candidates(spec, approx=approx)[0]


def select(spec: OpSpec, mode: str = "static", weight: np.ndarray | None = None,
           approx: bool = False) -> Implementation:
    """The implementation for ``spec``: the static table's pick, or in ``"measure"`` mode the
    fastest candidate timed on this shape (``weight``: the real weight/B operand if constant).
    ``approx``: algorithms that are not ``exact`` may win (Winograd; op_select_implmode
    high_performance); run-time choices without a recorded one never pass it."""
    if mode == "measure":
        cands = candidates(spec, approx=approx)
        return cands[0] if len(cands) == 1 else measure(spec, cands, weight)[0]
    return _static_choice(spec, approx)


def accept(spec: OpSpec, algo: Algorithm | str, approx: bool = False) -> Implementation | None:
    """A choice made elsewhere (a knowledge-bank record, written ``"provider:name"``) if it can
    serve ``spec`` here: its provider able to load (``declared``: torch is not imported for it),
    its op family, exact unless ``approx``, and ``supports(spec)`` once the provider is loaded;
    else None (the caller takes ``select``'s)."""
    impl = declared(algo)
    if impl is None or impl.op_type != spec.op_type or not (approx or impl.exact):
        return None
    # ``supports`` may load the provider (torch's prepacked convs ask torch what it can do). A provider not
    # loaded yet is trusted: the record was measured for exactly this spec with this kit on this machine (the
    # key), and the run-time lookup falls back to the static choice if the provider does not load after all.
    if loaded(impl.provider) and not impl.supports(spec):
        return None
    return impl


def resolve(algo: Algorithm | None, spec: Callable[[], OpSpec], remember: bool = True) -> Implementation:
    """Run-time lookup of a recorded choice; ``spec()`` builds the spec for the fallback.

    A missing or unavailable ``algo`` falls back to the static choice (logged once per algorithm).
    ``remember=False``: that choice is made without entering the cache of choices, for a caller that
    keeps what it binds for the spec (the shape-generic plan's per-shape conv tables): an entry
    there costs the same as the choice (~2.5 us) and is three objects for the cyclic GC per conv and
    input shape, up to the cache's 4096 entries.
    """
    if algo is not None:
        if algo is INTERIM_CONV_TRANSPOSE:  # set only at run time, by the interim plan (ge/run/plan.py)
            return _interim_choice(spec())
        impl = _implementations.get(algo) or algorithm(algo)
        if impl is not None:
            return impl
        if algo not in _warned:
            _warned.add(algo)
            log.info("kernel %s recorded in the model is not available here; using the default", algo.key)
    return _static_choice(spec()) if remember else _static_choice.__wrapped__(spec())  # type: ignore[attr-defined]


def choose(op_type: str, shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any], dtype: str = "float32",
           mode: str = "static", weight: np.ndarray | None = None) -> Algorithm:
    """The algorithm for one node from its input shapes and attributes."""
    return select(make_spec(op_type, shapes, attrs, dtype), mode, weight).algo


__all__ = [
    "FALLBACK", "Algorithm", "ConvSpec", "GemmSpec", "Implementation", "OpSpec", "PROVIDERS", "Provider", "STATIC_TABLE", "TINY_FLOPS", "TINY_FLOPS_2D",
    "accept", "algorithm", "arena_ok", "available", "candidates", "choose", "compute_name", "conv_spec", "declared",
    "loaded", "make_spec", "measure",
    "reset", "resolve", "select", "shape_class",
]
