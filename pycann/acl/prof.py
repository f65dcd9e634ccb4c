"""``acl.prof``: profiling from the application (pyACL's ``aclprofInit`` ... ``aclprofFinalize``).

The CANN sequence works unchanged and writes msprof's layout (``PROF_*/mindstudio_profiler_output``:
op_summary, op_statistic, api_statistic, the Chrome trace, summary) under ``init``'s folder::

    acl.prof.init("prof")
    cfg = acl.prof.create_config([0], ACL_AICORE_NONE, 0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME)
    acl.prof.start(cfg)
    ... acl.mdl.execute(...) ...
    acl.prof.stop(cfg)           # writes the results of start .. stop
    acl.prof.destroy_config(cfg)
    acl.prof.finalize()

The collection itself is ``pycann.profiler``'s (a ``Profiler`` between ``start`` and ``stop``);
``ACL_PROF_ACL_API`` in ``data_type_config`` records the host API calls, the other switches and
the AI Core metrics are accepted and change nothing (there are no PMU counters). As in CANN, this
mode excludes the others: under ``msprof`` or with acl.json's ``"profiler"`` block switched on,
``init`` returns ``ACL_ERROR_PROF_ALREADY_RUN``. The subscription API (``model_subscribe``,
``get_op_*``) is not there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pycann import config
from pycann.acl import constants as C
from pycann.acl._state import api, as_int, handles, require_init
from pycann.acl.errors import ArgTypeError, fault


@dataclass
class _Config:
    """What ``create_config`` was given, and the profiler a ``start`` of it runs."""

    devices: list[int]
    aicore_metrics: int
    data_type_config: int
    profiler: Any = None


@dataclass
class _ProfState:
    path: str | None = None  # set by init, cleared by finalize


_prof = _ProfState()
_METRICS = (*range(0, 7), C.ACL_AICORE_NONE)


def _require_prof() -> str:
    require_init()
    if _prof.path is None:
        raise fault(C.ACL_ERROR_PROF_NOT_RUN, "acl.prof.init was not called (or acl.prof.finalize was)")
    return _prof.path


@api()
def init(profiler_path: str) -> int:
    """``ret = acl.prof.init(path)``: results of later ``start`` .. ``stop`` go under ``path``."""
    require_init()
    if not isinstance(profiler_path, (str, os.PathLike)):
        raise ArgTypeError(f"profiler_path must be a str, not {type(profiler_path).__name__}")
    if _prof.path is not None:
        raise fault(C.ACL_ERROR_REPEAT_INITIALIZE, "acl.prof.init was already called (acl.prof.finalize first)")
    from pycann.profiler import session

    if config.profile_env().out or session._MANAGED:
        raise fault(C.ACL_ERROR_PROF_ALREADY_RUN, "profiling already runs (msprof, or acl.json's \"profiler\" "
                    "block): the acl.prof API cannot be used with another profiling mode")
    path = os.fspath(profiler_path)
    from pycann.paths import folder_problem

    problem = folder_problem(path) if path else "the path is empty"
    if problem is not None:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"profiler_path {path!r}: {problem}")
    _prof.path = path
    return C.ACL_SUCCESS


@api(bare=0)
def create_config(device_id_list: Any, aicore_metrics: int, aicore_events: Any, data_type_config: int) -> int:
    """``config = acl.prof.create_config(device_ids, aicore_metrics, aicore_events, data_type_config)``:
    a config handle, 0 on failure (``acl.get_recent_err_msg()`` says why)."""
    rt = require_init()
    if not isinstance(device_id_list, (list, tuple)) or not device_id_list:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"device_id_list must be a non-empty list of device ids, "
                    f"not {device_id_list!r}")
    devices = [as_int(d, "device id") for d in device_id_list]
    for d in devices:
        rt.device(d)  # an unknown id: ACL_ERROR_RT_INVALID_DEVICEID
    metrics = as_int(aicore_metrics, "aicore_metrics")
    if metrics not in _METRICS:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"aicore_metrics {metrics} is not an aclprofAicoreMetrics value "
                    f"(0..6, or ACL_AICORE_NONE = {C.ACL_AICORE_NONE})")
    types = as_int(data_type_config, "data_type_config")
    if types < 0:
        raise fault(C.ACL_ERROR_INVALID_PARAM, f"data_type_config {types} is not a set of ACL_PROF_* switches")
    return handles.add("prof_config", _Config(devices, metrics, types))


@api()
def destroy_config(prof_config: int) -> int:
    """``ret = acl.prof.destroy_config(config)``; a started config is stopped first (results written)."""
    cfg = handles.pop("prof_config", prof_config, "prof_config")
    if cfg.profiler is not None:
        cfg.profiler.stop()
    return C.ACL_SUCCESS


@api()
def start(prof_config: int) -> int:
    """``ret = acl.prof.start(config)``: collect from now until ``stop(config)``. A folder of ``init`` that
    cannot be written (any more) is ``ACL_ERROR_INVALID_PROFILING_CONFIG``, nothing started."""
    path = _require_prof()
    cfg = handles.get("prof_config", prof_config, "prof_config")
    if any(c.profiler is not None for c in handles.live("prof_config")):
        raise fault(C.ACL_ERROR_PROF_ALREADY_RUN, "a profiling config is started already: stop it first")
    from pycann.paths import folder_problem

    # init checked the folder, but it may have gone since; the results are written at stop, too late to say so
    problem = folder_problem(path)
    if problem is not None:
        raise fault(C.ACL_ERROR_INVALID_PROFILING_CONFIG,
                    f"acl.prof.init's folder {path!r}: {problem} (acl.prof.finalize, then init a writable folder)")
    from pycann.profiler.session import Profiler

    cfg.profiler = Profiler(path, api=bool(cfg.data_type_config & C.ACL_PROF_ACL_API)).start()
    return C.ACL_SUCCESS


@api()
def stop(prof_config: int) -> int:
    """``ret = acl.prof.stop(config)``: stop and write the ``PROF_*`` folder under init's path."""
    _require_prof()
    cfg = handles.get("prof_config", prof_config, "prof_config")
    if cfg.profiler is None:
        raise fault(C.ACL_ERROR_PROF_NOT_RUN, "this config was not started (acl.prof.start)")
    p, cfg.profiler = cfg.profiler, None
    p.stop()
    return C.ACL_SUCCESS


@api()
def finalize() -> int:
    """``ret = acl.prof.finalize()``: a config still started is stopped (its results written)."""
    _require_prof()
    finalize_all()
    return C.ACL_SUCCESS


def finalize_all(forget_configs: bool = False) -> None:
    """Stop every started config (writing its results) and forget ``init``'s path; ``acl.finalize``
    calls this with ``forget_configs`` (an app that skipped ``acl.prof.finalize`` keeps its results)."""
    for cfg in handles.live("prof_config"):
        if cfg.profiler is not None:
            p, cfg.profiler = cfg.profiler, None
            p.stop()
    _prof.path = None
    if forget_configs:
        handles.clear(("prof_config",))


__all__ = ["create_config", "destroy_config", "finalize", "init", "start", "stop"]
