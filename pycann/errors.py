"""pycann's exception hierarchy.

Every error raised at compile or run time names where it happened (node, op type, opset,
input) and, where possible, a fix. The ``code`` is the CANN error code shown by ``atc``
(E-codes, cann-interfaces.md §2.2) or returned by pyACL-style calls (§1.8).
"""

from __future__ import annotations


class PycannError(Exception):
    """Base class. ``code`` is an E-code string (atc) or ``None``."""

    code: str | None = None

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ModelError(PycannError):
    """The input model is malformed (fails onnx.checker, dangling edge, bad attribute)."""

    code = "E19999"


class UnsupportedOpError(PycannError):
    """An op type, domain or opset version has no definition (atc E19010)."""

    code = "E19010"


class ShapeError(PycannError):
    """Shapes or dtypes do not agree (compile-time inference or run-time input check)."""

    code = "E19999"


class KernelError(PycannError):
    """A kernel failed at run time; the message names the node and op."""

    code = "E19999"


class OmFormatError(PycannError):
    """An .om file is truncated, corrupted, from another version, or Huawei-built."""

    code = "E10003"


class OmInvalidModelError(OmFormatError):
    """An .om whose container is intact but whose graph or manifest does not describe a runnable
    model (nodes out of order, an output never produced, an unknown op, a mistyped field)."""


class InputError(PycannError):
    """A user-supplied input (name, dtype, shape) does not match the model."""

    code = "E10001"


class OptionError(PycannError):
    """A command-line / API option is missing or invalid."""

    code = "E10001"


class OperandError(KernelError, ValueError):
    """An operand does not fit what a kernel or native primitive will read or write (a bias
    shorter than the output channels, a buffer of the wrong size, dtype or layout). Raised before
    any pointer reaches native code; also a ``ValueError`` (what kernels raised before)."""
