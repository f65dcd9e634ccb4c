"""pyACL-compatible facade (cann-interfaces.md §1): ``acl.init``, ``acl.rt``, ``acl.mdl``,
``acl.op``, ``acl.util``, ``acl.media`` (DVPP), with pyACL's call shapes and ``aclError`` codes, plus the high-level
``InferSession`` (``pycann.acl.session``).

``import pycann.acl as acl`` works in new code; ``pycann-run app.py`` makes an unmodified
application's ``import acl`` resolve to this package. Constants: ``pycann.acl.constants``.
The facade holds no logic of its own: memory, streams and events are ``pycann.runtime``,
models are ``pycann.ge``.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (static types for the lazy names below)
    from pycann.acl import constants, mdl, prof, rt, util
    from pycann.acl.base import (
        AclLeakWarning,
        app_log,
        create_data_buffer,
        create_tensor_desc,
        data_type_size,
        destroy_data_buffer,
        destroy_tensor_desc,
        finalize,
        float16_to_float,
        float_to_float16,
        get_data_buffer_addr,
        get_data_buffer_size,
        get_data_buffer_size_v2,
        get_recent_err_msg,
        get_soc_name,
        get_tensor_desc_dim,
        get_tensor_desc_dim_v2,
        get_tensor_desc_element_count,
        get_tensor_desc_format,
        get_tensor_desc_name,
        get_tensor_desc_num_dims,
        get_tensor_desc_size,
        get_tensor_desc_type,
        get_version,
        init,
        set_tensor_desc_name,
        set_tensor_format,
        set_tensor_place_ment,
        set_tensor_shape,
        update_data_buffer,
    )

# Everything loads on first access (PEP 562): ``from pycann.acl.session import InferSession`` (ais_bench's
# API) needs none of the pyACL facade, ~6-10 ms of a fresh process's import (issue 23 item 5).
# pyACL's functions of ``pycann.acl.base`` re-exported here:
_BASE = (
    "AclLeakWarning",
    "app_log",
    "create_data_buffer",
    "create_tensor_desc",
    "data_type_size",
    "destroy_data_buffer",
    "destroy_tensor_desc",
    "finalize",
    "float16_to_float",
    "float_to_float16",
    "get_data_buffer_addr",
    "get_data_buffer_size",
    "get_data_buffer_size_v2",
    "get_recent_err_msg",
    "get_soc_name",
    "get_tensor_desc_dim",
    "get_tensor_desc_dim_v2",
    "get_tensor_desc_element_count",
    "get_tensor_desc_format",
    "get_tensor_desc_name",
    "get_tensor_desc_num_dims",
    "get_tensor_desc_size",
    "get_tensor_desc_type",
    "get_version",
    "init",
    "set_tensor_desc_name",
    "set_tensor_format",
    "set_tensor_place_ment",
    "set_tensor_shape",
    "update_data_buffer",
)

SUBMODULES = ("constants", "mdl", "media", "op", "prof", "rt", "util")

# (a literal list: linters read it to see the TYPE_CHECKING names above as exported)
__all__ = [
    "AclLeakWarning", "app_log", "constants", "create_data_buffer", "create_tensor_desc", "data_type_size",
    "destroy_data_buffer", "destroy_tensor_desc", "finalize", "float16_to_float", "float_to_float16",
    "get_data_buffer_addr", "get_data_buffer_size", "get_data_buffer_size_v2", "get_recent_err_msg",
    "get_soc_name", "get_tensor_desc_dim", "get_tensor_desc_dim_v2", "get_tensor_desc_element_count",
    "get_tensor_desc_format", "get_tensor_desc_name", "get_tensor_desc_num_dims", "get_tensor_desc_size",
    "get_tensor_desc_type", "get_version", "init", "mdl", "media", "op", "prof", "rt", "set_tensor_desc_name",
    "set_tensor_format", "set_tensor_place_ment", "set_tensor_shape", "update_data_buffer", "util",
]


# submodules (media: DVPP, op: single-op), and the internal ones code and docs reach as attributes
# (``pycann.acl._state.config``): a plain ``import pycann.acl`` made them attributes before
_LAZY = (*SUBMODULES, "base", "errors", "session", "_aipp", "_config", "_dataset", "_dynamic", "_models", "_state")


def __getattr__(name: str) -> object:
    """``acl.<submodule>`` and ``acl.<function>``: import it on first access (PEP 562)."""
    if name in _LAZY:
        value: object = importlib.import_module(f"pycann.acl.{name}")
    elif name in _BASE:
        value = getattr(importlib.import_module("pycann.acl.base"), name)
    else:
        raise AttributeError(f"module 'pycann.acl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
