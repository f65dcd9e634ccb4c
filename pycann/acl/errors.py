"""How the facade turns failures into ``aclError`` codes (cann-interfaces.md §1.8).

Inside ``pycann.acl`` a failing call raises ``AclFault(code, message)`` or lets a runtime / GE
exception through; the ``api`` decorator of ``_state`` catches it, records the message (for
``acl.get_recent_err_msg``) and returns the code in pyACL's shape. Argument-type errors raise
``ArgTypeError`` (a ``TypeError``) and are *not* caught, as pyACL raises on parse failures (§1.1).

| fault                                              | code                                     |
|----------------------------------------------------|------------------------------------------|
| null / unknown / interior pointer, use after free  | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| size past the buffer, count > destMax              | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| wrong memory kind (memcpy kind, free vs free_host) | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| write into a read-only host buffer (``bytes``)     | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| double free                                        | ``ACL_ERROR_RT_MEMORY_FREE`` (207002)     |
| out of device memory                               | ``ACL_ERROR_RT_MEMORY_ALLOCATION`` (207001) |
| no such device                                     | ``ACL_ERROR_RT_INVALID_DEVICEID`` (107001) |
| no current context                                 | ``ACL_ERROR_RT_CONTEXT_NULL`` (107002)    |
| ``execute_async`` on another context's stream      | ``ACL_ERROR_RT_STREAM_CONTEXT`` (107003)  |
| unknown / destroyed stream, event, context, desc   | ``ACL_ERROR_INVALID_RESOURCE_HANDLE`` (200005) |
| event not recorded / not complete                  | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| synchronize timeout                                | ``ACL_ERROR_RT_WAIT_TIMEOUT`` (107019)    |
| a queued task (async execute / copy) failed        | the task's own code, else ``ACL_ERROR_RT_MODEL_EXECUTE`` (507011) |
| .om path missing / a directory                     | ``ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID`` (145002) |
| .om file that cannot be read (permissions, I/O)    | ``ACL_ERROR_READ_MODEL_FAILURE`` (100014) |
| .om container truncated / corrupted / foreign      | ``ACL_ERROR_DESERIALIZE_MODEL`` (100012)  |
| .om graph or manifest not a runnable model         | ``ACL_ERROR_PARSE_MODEL`` (100013)        |
| a model whose node does not match its op (ModelError) | ``ACL_ERROR_PARSE_MODEL`` (100013)     |
| model input does not match (dtype, shape)          | ``ACL_ERROR_GE_SHAPE_INVALID`` / ``ACL_ERROR_GE_DATATYPE_INVALID`` |
| kernel failure while executing                     | ``ACL_ERROR_RT_MODEL_EXECUTE`` (507011)   |
| a ``PYCANN_`` environment knob pycann cannot use   | ``ACL_ERROR_INVALID_PARAM`` (100000)      |
| anything unexpected                                | ``ACL_ERROR_INTERNAL_ERROR`` (500000)     |
"""

from __future__ import annotations

from pycann.acl import constants as C
from pycann.config import ConfigError
from pycann.errors import (
    InputError,
    KernelError,
    ModelError,
    OmFormatError,
    OmInvalidModelError,
    PycannError,
    ShapeError,
    UnsupportedOpError,
)
from pycann.runtime import errors as rt


class AclFault(PycannError):
    """A facade-level failure carrying its ``aclError`` code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.acl_code = code


class CallbackRaised(PycannError):
    """An application callback (``acl.rt.launch_callback``) raised. CANN documents no code for it
    (``aclrtCallback`` returns nothing): it keeps ``ACL_ERROR_INTERNAL_ERROR``, with a message that
    names the callback instead of calling it pycann's internal error."""


class ArgTypeError(TypeError):
    """An argument of the wrong Python type (pyACL raises instead of returning a code)."""


_RT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (rt.DoubleFree, C.ACL_ERROR_RT_MEMORY_FREE),
    (rt.InvalidPointer, C.ACL_ERROR_INVALID_PARAM),
    (rt.UseAfterFree, C.ACL_ERROR_INVALID_PARAM),
    (rt.OutOfBounds, C.ACL_ERROR_INVALID_PARAM),
    (rt.KindMismatch, C.ACL_ERROR_INVALID_PARAM),
    (rt.ReadOnly, C.ACL_ERROR_INVALID_PARAM),
    (rt.OutOfMemory, C.ACL_ERROR_RT_MEMORY_ALLOCATION),
    (rt.InvalidDevice, C.ACL_ERROR_RT_INVALID_DEVICEID),
    (rt.NoContext, C.ACL_ERROR_RT_CONTEXT_NULL),
    (rt.InvalidHandle, C.ACL_ERROR_INVALID_RESOURCE_HANDLE),
    (rt.NotReady, C.ACL_ERROR_INVALID_PARAM),
    (rt.WaitTimeout, C.ACL_ERROR_RT_WAIT_TIMEOUT),
    (rt.LostInFork, C.ACL_ERROR_RT_FAILURE),
    (rt.WaitOnOwnWorker, C.ACL_ERROR_INVALID_PARAM),
    (OmInvalidModelError, C.ACL_ERROR_PARSE_MODEL),  # before its base class
    (OmFormatError, C.ACL_ERROR_DESERIALIZE_MODEL),
    # a graph the loader accepted that no kernel binds to (a node missing an input its op reads), or an
    # .onnx given to load_from_file that fails the import: the model does not parse as a runnable one
    (ModelError, C.ACL_ERROR_PARSE_MODEL),
    (UnsupportedOpError, C.ACL_ERROR_OP_NOT_FOUND),
    (InputError, C.ACL_ERROR_GE_SHAPE_INVALID),
    (ShapeError, C.ACL_ERROR_GE_SHAPE_INVALID),
    (KernelError, C.ACL_ERROR_RT_MODEL_EXECUTE),
    # the message names the knob and its accepted values (``acl.get_recent_err_msg``)
    (ConfigError, C.ACL_ERROR_INVALID_PARAM),
)


def code_for(exc: BaseException) -> int:
    """The ``aclError`` code for an exception raised inside a facade call."""
    if isinstance(exc, AclFault):
        return exc.acl_code
    if isinstance(exc, CallbackRaised):
        return C.ACL_ERROR_INTERNAL_ERROR
    if isinstance(exc, rt.TaskFailed):
        return code_for(exc.cause) if exc.cause is not None else C.ACL_ERROR_RT_MODEL_EXECUTE
    if isinstance(exc, InputError) and "dtype" in str(exc):
        return C.ACL_ERROR_GE_DATATYPE_INVALID
    for cls, code in _RT_CODES:
        if isinstance(exc, cls):
            return code
    return C.ACL_ERROR_INTERNAL_ERROR


def fault(code: int, message: str) -> AclFault:
    """``raise fault(C.ACL_ERROR_..., "why")``."""
    return AclFault(code, message)
