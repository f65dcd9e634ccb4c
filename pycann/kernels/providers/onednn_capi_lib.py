"""Finding and opening a oneDNN library of a given major version: the paths tried
(``library_candidates``), ``open_library`` (typed functions, CPU engine and in-order stream), and
``check``, which turns a ``dnnl_status_t`` into ``DnnlError``.

Separate from the v3 binding (``onednn_capi``: its library state, memory and primitive objects)
because ``onednn2_capi`` opens oneDNN v2's library with the same code.
"""

from __future__ import annotations

import ctypes
import os
import site
import sys
from collections.abc import Sequence
from typing import Any

from pycann import config
from pycann.config import apply_omp_wait_policy
from pycann.kernels.providers.onednn_capi_table import _I, _P, ENGINE_CPU, STREAM_DEFAULT, SUCCESS, DnnlError

# CPU runtimes whose execute returns when the primitive is done (sequential, OpenMP, TBB:
# DNNL_RUNTIME_SEQ/OMP/TBB); others (threadpool, SYCL) are waited on after each execute
_SYNC_RUNTIMES = (1, 2, 4)


def library_candidates() -> list[str]:
    """Paths tried for ``libdnnl.so.3``, in order."""
    env = config.dnnl_lib()
    dirs = [os.path.join(sys.prefix, "lib")]
    user = getattr(site, "USER_BASE", None)
    if user:
        dirs.append(os.path.join(user, "lib"))
    return ([env] if env else []) + [os.path.join(d, "libdnnl.so.3") for d in dirs]


def open_library(paths: Sequence[str], major: int, signatures: dict[str, tuple[Any, ...]],
                 restypes: dict[str, Any]) -> tuple[Any, Any, Any, bool]:
    """(library, CPU engine, in-order stream, synchronous) from the first of ``paths`` that loads
    as oneDNN ``major``.x with every function of ``signatures`` (typed here; return type
    ``restypes`` or ``dnnl_status_t``). Raises OSError listing why each path failed."""
    errors = []
    apply_omp_wait_policy()  # libgomp (linked by libdnnl) reads its wait policy when it loads
    for path in paths:
        if not os.path.exists(path):
            errors.append(f"{path}: not found")
            continue
        try:
            lib = ctypes.CDLL(path)  # RTLD_LOCAL: a v2 and a v3 library never see each other's symbols
            for name, argtypes in signatures.items():
                fn = getattr(lib, name)
                fn.argtypes = list(argtypes)
                fn.restype = restypes.get(name, _I)
        except (OSError, AttributeError) as e:
            errors.append(f"{path}: {e}")
            continue
        v = lib.dnnl_version().contents
        if v.major != major:
            errors.append(f"{path}: oneDNN {v.major}.{v.minor}, need {major}.x")
            continue
        eng, strm = _P(), _P()
        check(lib.dnnl_engine_create(ctypes.byref(eng), ENGINE_CPU, 0), "dnnl_engine_create")
        check(lib.dnnl_stream_create(ctypes.byref(strm), eng, STREAM_DEFAULT), "dnnl_stream_create")
        return lib, eng, strm, v.cpu_runtime in _SYNC_RUNTIMES
    raise OSError(f"libdnnl.so.{major} not loadable: " + "; ".join(errors))


def check(status: int, call: str) -> None:
    """Raise ``DnnlError`` unless ``status`` is ``dnnl_success``."""
    if status != SUCCESS:
        raise DnnlError(call, status)
