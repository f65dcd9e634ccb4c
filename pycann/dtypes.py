"""Data types, formats and tensor descriptors shared by every layer.

The canonical dtype is ONNX's ``TensorProto.DataType`` enum value (an ``int``), because models
arrive as ONNX and the .om manifest stores it; helpers map it to numpy dtypes (via ``ml_dtypes``
for bfloat16 / float8 / int4) and to CANN's ``aclDataType`` codes (cann-interfaces.md §1.7).

``ml_dtypes`` is imported on the first use of one of its types (``bfloat16()``, ``is_bfloat16``,
``to_numpy``/``from_numpy`` of such a type): ~4 ms of every fresh process's import that a float32
model never needs (issue 23 item 5). An array of one of its types implies it is imported already.
"""

from __future__ import annotations

import enum
import functools
import sys
from dataclasses import dataclass

import numpy as np


class DType(enum.IntEnum):
    """ONNX ``TensorProto.DataType`` values (onnx.proto3)."""

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26


_NP: dict[DType, np.dtype] = {
    DType.FLOAT: np.dtype(np.float32),
    DType.UINT8: np.dtype(np.uint8),
    DType.INT8: np.dtype(np.int8),
    DType.UINT16: np.dtype(np.uint16),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.STRING: np.dtype(object),
    DType.BOOL: np.dtype(np.bool_),
    DType.FLOAT16: np.dtype(np.float16),
    DType.DOUBLE: np.dtype(np.float64),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.COMPLEX64: np.dtype(np.complex64),
    DType.COMPLEX128: np.dtype(np.complex128),
}
# the types ml_dtypes provides: DType -> its attribute name there (added to the tables on first need)
_ML_DTYPES: dict[DType, str] = {
    DType.BFLOAT16: "bfloat16",
    DType.FLOAT8E4M3FN: "float8_e4m3fn",
    DType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    DType.FLOAT8E5M2: "float8_e5m2",
    DType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    DType.UINT4: "uint4",
    DType.INT4: "int4",
    DType.FLOAT4E2M1: "float4_e2m1fn",
    DType.FLOAT8E8M0: "float8_e8m0fnu",
    DType.UINT2: "uint2",
    DType.INT2: "int2",
}
_FROM_NP: dict[np.dtype, DType] = {v: k for k, v in _NP.items()}
# numpy's str_ arrays map to STRING as well (object arrays are the canonical carrier).
_FROM_NP[np.dtype(np.str_)] = DType.STRING


@functools.cache
def _ml_types() -> bool:
    """Import ml_dtypes and add its types to both tables (once)."""
    import ml_dtypes

    for t, name in _ML_DTYPES.items():
        dt = np.dtype(getattr(ml_dtypes, name))
        _NP[t] = dt
        _FROM_NP[dt] = t
    return True


def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16 as a numpy dtype (imports ml_dtypes on first use)."""
    _ml_types()
    return _NP[DType.BFLOAT16]


def is_bfloat16(dt: np.dtype) -> bool:
    """``dt`` is ml_dtypes' bfloat16; numpy's own dtypes answer without importing ml_dtypes (its
    types are the only ones of kind "V" a model tensor has)."""
    return dt.kind == "V" and dt == bfloat16()


def to_numpy(dtype: int) -> np.dtype:
    """numpy dtype for an ONNX dtype enum value. Raises ``TypeError`` if it has none."""
    try:
        t = DType(dtype)
    except ValueError:
        raise TypeError(f"ONNX dtype {dtype} has no numpy equivalent in pycann") from None
    dt = _NP.get(t)
    if dt is None and t in _ML_DTYPES:
        _ml_types()
        dt = _NP.get(t)
    if dt is None:
        raise TypeError(f"ONNX dtype {dtype} has no numpy equivalent in pycann")
    return dt


def from_numpy(dtype: np.dtype | type) -> DType:
    """ONNX dtype enum for a numpy dtype. Raises ``TypeError`` for unsupported dtypes."""
    dt = np.dtype(dtype)
    if dt.kind == "U":
        return DType.STRING
    t = _FROM_NP.get(dt)
    # one of ml_dtypes' types (imported already if an array has one): not all are of kind "V"
    # (float8_e5m2 is "f"), so a miss adds them whenever ml_dtypes is loaded
    if t is None and "ml_dtypes" in sys.modules:
        _ml_types()
        t = _FROM_NP.get(dt)
    if t is None:
        raise TypeError(f"numpy dtype {dt} has no ONNX equivalent")
    return t


def dtype_name(dtype: int) -> str:
    """Upper-case ONNX name, e.g. ``FLOAT`` (used in error messages and the .om manifest)."""
    try:
        return DType(dtype).name
    except ValueError:
        return f"DTYPE({dtype})"


# CANN aclDataType codes (cann-interfaces.md §1.7) for the types pyACL can describe.
ACL_DTYPE: dict[DType, int] = {
    DType.FLOAT: 0, DType.FLOAT16: 1, DType.INT8: 2, DType.INT32: 3, DType.UINT8: 4,
    DType.INT16: 6, DType.UINT16: 7, DType.UINT32: 8, DType.INT64: 9, DType.UINT64: 10,
    DType.DOUBLE: 11, DType.BOOL: 12, DType.STRING: 13, DType.COMPLEX64: 16,
    DType.COMPLEX128: 17, DType.BFLOAT16: 27, DType.INT4: 29,
}
ACL_TO_DTYPE: dict[int, DType] = {v: k for k, v in ACL_DTYPE.items()}
# CANN's DT_* spelling, as `atc --mode=6` and --output_type show it.
CANN_NAME: dict[DType, str] = {
    DType.FLOAT: "DT_FLOAT", DType.FLOAT16: "DT_FLOAT16", DType.INT8: "DT_INT8",
    DType.INT32: "DT_INT32", DType.UINT8: "DT_UINT8", DType.INT16: "DT_INT16",
    DType.UINT16: "DT_UINT16", DType.UINT32: "DT_UINT32", DType.INT64: "DT_INT64",
    DType.UINT64: "DT_UINT64", DType.DOUBLE: "DT_DOUBLE", DType.BOOL: "DT_BOOL",
    DType.STRING: "DT_STRING", DType.BFLOAT16: "DT_BF16",
}
# --output_type values (cann-interfaces.md §2.1).
OUTPUT_TYPE: dict[str, DType] = {
    "FP32": DType.FLOAT, "FP16": DType.FLOAT16, "UINT8": DType.UINT8, "INT8": DType.INT8,
    "INT16": DType.INT16, "UINT16": DType.UINT16, "INT32": DType.INT32, "INT64": DType.INT64,
    "UINT32": DType.UINT32, "UINT64": DType.UINT64, "DOUBLE": DType.DOUBLE, "BF16": DType.BFLOAT16,
}


class Format(enum.IntEnum):
    """Tensor layouts, numbered as CANN's ``aclFormat`` (cann-interfaces.md §1.7)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    NDHWC = 27
    NCDHW = 30


Dim = int | str | None
"""A dimension: a known ``int``, a symbolic name (``str``) or unknown (``None``)."""


@dataclass(frozen=True)
class TensorDesc:
    """Static description of a value: shape (``None`` = unknown rank), dtype, format.

    ``kind`` is ``"tensor"`` for ordinary tensors; ONNX sequence values are ``"sequence"`` and
    optional values ``"optional"`` (``dtype`` is then the element type, ``shape`` None). At run
    time a sequence is a ``list`` of arrays and an optional is ``None`` (empty) or its value.
    """

    dtype: int
    shape: tuple[Dim, ...] | None
    format: Format = Format.ND
    kind: str = "tensor"

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is a known non-negative ``int``."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def numel(self) -> int | None:
        """Element count, or ``None`` if any dim is not a known int."""
        if not self.is_static:
            return None
        n = 1
        for d in self.shape or ():
            n *= int(d)  # type: ignore[arg-type]
        return n

    def nbytes(self) -> int | None:
        """Byte size for static shapes (object/string tensors count 8 bytes an element)."""
        n = self.numel()
        if n is None:
            return None
        try:
            return n * to_numpy(self.dtype).itemsize
        except TypeError:
            return None

    def __str__(self) -> str:
        shape = "?" if self.shape is None else "x".join("?" if d is None else str(d) for d in self.shape)
        text = f"{dtype_name(self.dtype)}[{shape}]"
        return text if self.kind == "tensor" else f"{self.kind}({text})"
