"""Loaded models and model descriptions of the ``acl.mdl`` facade (cann-interfaces.md §1.4)."""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._state import api, as_int, handles
from pycann.acl.errors import fault
from pycann.dtypes import to_numpy
from pycann.ge.run.model import LoadedModel, TensorInfo
from pycann.runtime import Context

F = TypeVar("F", bound=Callable[..., Any])


def mdl_api(out: tuple[Any, ...] = (), **kw: Any) -> Callable[[F], F]:
    """``_state.api`` for ``acl.mdl`` functions defined in helper modules (``_dataset``,
    ``_dynamic``, ``_aipp``): errors and profiles name them ``acl.mdl.<function>``."""

    def deco(fn: F) -> F:
        return api(out, name=f"acl.mdl.{fn.__name__}", **kw)(fn)

    return deco


@dataclass
class ModelRecord:
    """A loaded model: the GE model plus what ``get_cur_output_dims`` reports: the output shapes of
    the latest execution each thread asked for (``execute`` or ``execute_async``, by the thread that
    called it), and of the model's latest (``last_out_shapes``, for a thread that ran none)."""

    model: LoadedModel
    path: str
    context: Context | None = None  # current when it loaded: execute needs it alive (cann-interfaces.md §1.4)
    model_id: int = 0
    last_out_shapes: list[tuple[int, ...] | None] = field(default_factory=list)
    thread_out_shapes: weakref.WeakKeyDictionary[threading.Thread, list[tuple[int, ...] | None]] = field(
        default_factory=weakref.WeakKeyDictionary)

    def ran(self, caller: threading.Thread, shapes: list[tuple[int, ...] | None]) -> None:
        """Record the output shapes of an execution ``caller`` asked for."""
        self.last_out_shapes = shapes
        self.thread_out_shapes[caller] = shapes

    def out_shapes(self) -> list[tuple[int, ...] | None]:
        """The output shapes ``get_cur_output_dims`` reports to the calling thread: of its latest
        execution of the model, else of the model's latest. (The model's latest alone gave a thread the
        shapes of another thread's execution that ended after its own: 20 of 120 calls of three threads.)"""
        return self.thread_out_shapes.get(threading.current_thread(), self.last_out_shapes)

    def require_live_context(self) -> None:
        """CANN loads, executes and unloads a model in one context, and destroying that context
        (``destroy_context``, or the last ``reset_device`` for a device's default one) releases what the
        model runs on; pycann's model ran on regardless, from any other context. Raises
        ``AclFault(ACL_ERROR_INVALID_RESOURCE_HANDLE)``, the code of the context's other resources (its
        streams) once it is destroyed. Checked when ``execute``/``execute_async`` is called and again
        when the stream runs it (the context may go in between)."""
        ctx = self.context
        if ctx is not None and ctx.destroyed:
            how = ("its device's default context, destroyed by reset_device" if ctx.is_default else
                   "a context destroyed by destroy_context")
            raise fault(C.ACL_ERROR_INVALID_RESOURCE_HANDLE,
                        f"model id {self.model_id} was loaded in {how}: it cannot execute any more; unload it and "
                        "load it again in a live context (unload still releases it; CANN's order is unload, then "
                        "destroy_context and reset_device)")

    @property
    def dynamic(self) -> bool:
        return any(_has_dynamic(self, i) for i in range(len(self.model.inputs)))


_models: dict[int, ModelRecord] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def _renew_lock_in_child() -> None:  # (a parent's thread that held it at a fork is not in the child)
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_in_child)


def _has_dynamic(rec: ModelRecord, i: int) -> bool:
    d = rec.model.graph.descs.get(rec.model.inputs[i].name)
    return d is None or d.shape is None or any(not isinstance(x, int) for x in d.shape)


def loaded_model_ids() -> list[int]:
    with _lock:
        return sorted(_models)


def loaded_path(model_id: int) -> str:
    return _models[model_id].path


def forget_model(model_id: int) -> ModelRecord | None:
    """Unregister a model; its record, or None if it was not loaded (an unload that lost a race)."""
    with _lock:
        rec = _models.pop(model_id, None)
        if rec is None:
            return None
        name = rec.model.graph.name
    from pycann.profiler import hooks

    # (each live load has its own graph name, the same .om loaded twice too: hooks.claim_graph_name)
    if hooks.ACL_MODEL_IDS.get(name) == model_id:
        hooks.ACL_MODEL_IDS.pop(name, None)
    return rec


def add_model(model: LoadedModel, path: str) -> tuple[int, int]:
    """Register a loaded model, bound to the calling thread's current context; returns
    ``(model_id, ACL_SUCCESS)``."""
    rt = _state.runtime
    rec = ModelRecord(model, path, context=rt.current if rt is not None else None,
                      last_out_shapes=[None] * len(model.outputs))
    with _lock:
        mid = rec.model_id = next(_ids)
        _models[mid] = rec
    from pycann.profiler import hooks

    hooks.ACL_MODEL_IDS[model.graph.name] = mid  # (a dump's {model_id} folder is this id, as in CANN)
    return mid, C.ACL_SUCCESS


def model_record(model_id: Any) -> ModelRecord:
    mid = as_int(model_id, "model_id")
    rec = _models.get(mid)
    if rec is None:
        raise fault(C.ACL_ERROR_INVALID_MODEL_ID, f"model id {mid} is not loaded")
    return rec


def runnable_record(model_id: Any) -> ModelRecord:
    """``model_record`` of a model about to execute (``ModelRecord.require_live_context``)."""
    rec = model_record(model_id)
    rec.require_live_context()
    return rec


@dataclass
class ModelDesc:
    """``aclmdlDesc``: a snapshot of a model's inputs and outputs (filled by ``get_desc``)."""

    model_id: int = 0
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    ranges: dict[str, list[Any]] = field(default_factory=dict)
    input_format: str = "ND"
    record: ModelRecord | None = None


def desc_obj(h: Any) -> ModelDesc:
    return handles.get("model_desc", h, "model desc")


def np_dtype(info: TensorInfo) -> np.dtype | None:
    try:
        dt = to_numpy(info.dtype)
    except TypeError:
        return None
    return None if dt.hasobject else dt
