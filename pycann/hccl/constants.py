"""HCCL's enums and support tables (hccl_types.h; cann-interfaces.md §8).

``HcclResult`` codes, ``HcclDataType`` and ``HcclReduceOp`` carry CANN's numbers so code that
compares return values with HCCL's constants works unchanged. The support tables say which
dtypes and reduce ops each collective accepts, as HCCL documents them: reductions take integer
and floating types up to 64 bits (no unsigned, no float64, no bool); data movement collectives
take every fixed-size type.
"""

from __future__ import annotations

import enum

HCCL_ROOT_INFO_BYTES = 4108  # sizeof(HcclRootInfo.internal)


class HcclResult(enum.IntEnum):
    """``HcclResult`` (hccl_types.h)."""

    HCCL_SUCCESS = 0
    HCCL_E_PARA = 1
    HCCL_E_PTR = 2
    HCCL_E_MEMORY = 3
    HCCL_E_INTERNAL = 4
    HCCL_E_NOT_SUPPORT = 5
    HCCL_E_NOT_FOUND = 6
    HCCL_E_UNAVAIL = 7
    HCCL_E_SYSCALL = 8
    HCCL_E_TIMEOUT = 9
    HCCL_E_OPEN_FILE_FAILURE = 10
    HCCL_E_TCP_CONNECT = 11
    HCCL_E_ROCE_CONNECT = 12
    HCCL_E_TCP_TRANSFER = 13
    HCCL_E_ROCE_TRANSFER = 14
    HCCL_E_RUNTIME = 15
    HCCL_E_DRV = 16
    HCCL_E_PROFILING = 17
    HCCL_E_CCE = 18
    HCCL_E_NETWORK = 19
    HCCL_E_AGAIN = 20
    HCCL_E_REMOTE = 21
    HCCL_E_SUSPENDING = 22


class HcclDataType(enum.IntEnum):
    """``HcclDataType`` (hccl_types.h)."""

    HCCL_DATA_TYPE_INT8 = 0
    HCCL_DATA_TYPE_INT16 = 1
    HCCL_DATA_TYPE_INT32 = 2
    HCCL_DATA_TYPE_FP16 = 3
    HCCL_DATA_TYPE_FP32 = 4
    HCCL_DATA_TYPE_INT64 = 5
    HCCL_DATA_TYPE_UINT64 = 6
    HCCL_DATA_TYPE_UINT8 = 7
    HCCL_DATA_TYPE_UINT16 = 8
    HCCL_DATA_TYPE_UINT32 = 9
    HCCL_DATA_TYPE_FP64 = 10
    HCCL_DATA_TYPE_BFP16 = 11


class HcclReduceOp(enum.IntEnum):
    """``HcclReduceOp`` (hccl_types.h)."""

    HCCL_REDUCE_SUM = 0
    HCCL_REDUCE_PROD = 1
    HCCL_REDUCE_MAX = 2
    HCCL_REDUCE_MIN = 3


class Collective(enum.IntEnum):
    """The collectives, numbered for the per-call signature (``pycann.hccl.signature``)."""

    ALL_REDUCE = 1
    BROADCAST = 2
    REDUCE = 3
    ALL_GATHER = 4
    REDUCE_SCATTER = 5
    ALL_TO_ALL = 6
    ALL_TO_ALL_V = 7
    GATHER = 8
    SCATTER = 9
    BARRIER = 10
    SEND = 11
    RECV = 12

    @property
    def hccl_name(self) -> str:
        """HCCL's name of the operation (``HcclAllReduce`` ...)."""
        return _HCCL_NAMES[self]

    @property
    def reduces(self) -> bool:
        return self in (Collective.ALL_REDUCE, Collective.REDUCE, Collective.REDUCE_SCATTER)


_HCCL_NAMES = {
    Collective.ALL_REDUCE: "HcclAllReduce", Collective.BROADCAST: "HcclBroadcast",
    Collective.REDUCE: "HcclReduce", Collective.ALL_GATHER: "HcclAllGather",
    Collective.REDUCE_SCATTER: "HcclReduceScatter", Collective.ALL_TO_ALL: "HcclAlltoAll",
    Collective.ALL_TO_ALL_V: "HcclAlltoAllV", Collective.GATHER: "HcclGather",
    Collective.SCATTER: "HcclScatter", Collective.BARRIER: "HcclBarrier",
    Collective.SEND: "HcclSend", Collective.RECV: "HcclRecv",
}

# Data types by numpy name (the common currency of the torch backend and the C-style API).
DTYPE_NAMES: dict[HcclDataType, str] = {
    HcclDataType.HCCL_DATA_TYPE_INT8: "int8", HcclDataType.HCCL_DATA_TYPE_INT16: "int16",
    HcclDataType.HCCL_DATA_TYPE_INT32: "int32", HcclDataType.HCCL_DATA_TYPE_INT64: "int64",
    HcclDataType.HCCL_DATA_TYPE_UINT8: "uint8", HcclDataType.HCCL_DATA_TYPE_UINT16: "uint16",
    HcclDataType.HCCL_DATA_TYPE_UINT32: "uint32", HcclDataType.HCCL_DATA_TYPE_UINT64: "uint64",
    HcclDataType.HCCL_DATA_TYPE_FP16: "float16", HcclDataType.HCCL_DATA_TYPE_FP32: "float32",
    HcclDataType.HCCL_DATA_TYPE_FP64: "float64", HcclDataType.HCCL_DATA_TYPE_BFP16: "bfloat16",
}
DTYPE_BY_NAME: dict[str, HcclDataType] = {v: k for k, v in DTYPE_NAMES.items()}
DTYPE_SIZES: dict[str, int] = {
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
    "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "bool": 1,
}

# What HCCL reduces (HcclAllReduce / HcclReduce / HcclReduceScatter).
REDUCE_DTYPES = frozenset({"int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"})
# What HCCL moves (broadcast, all-gather, all-to-all, send/recv): every fixed-size type. torch's
# bool travels as its bytes.
MOVE_DTYPES = frozenset(DTYPE_SIZES)
REDUCE_OPS = frozenset(HcclReduceOp)


def check_dtype(coll: Collective, dtype: str) -> str | None:
    """``None`` if HCCL runs ``coll`` on ``dtype`` (a numpy/torch dtype name), else the reason."""
    allowed = REDUCE_DTYPES if coll.reduces else MOVE_DTYPES
    if dtype in allowed:
        return None
    names = ", ".join(sorted(allowed))
    fix = " (cast to float32 or int64 first)" if coll.reduces else ""
    return f"{coll.hccl_name} does not support {dtype}: HCCL supports {names}{fix}"
