"""Host tiling data: CANN's BEGIN_TILING_DATA_DEF / TILING_DATA_FIELD_DEF macros as a typed struct.

``MyTiling = BEGIN_TILING_DATA_DEF("MyTiling", TILING_DATA_FIELD_DEF(uint32_t, "totalLength"), ...)``
makes a class with ``set_totalLength(v)`` setters, ``SaveToBuffer(dst)`` (packed little-endian
bytes, the layout the kernel's ``GET_TILING_DATA`` reads) and ``GetDataSize()`` (reference 1.15).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pycann.ascendc.dtypes import ElemType, elem
from pycann.ascendc.gm import GmAddr


@dataclass(frozen=True)
class Field:
    """One TilingData field: a scalar, an array of ``count`` scalars, or a nested TilingData struct."""

    name: str
    dtype: ElemType | None = None
    count: int = 0                       # 0 = scalar
    struct: type[TilingData] | None = None

    @property
    def nbytes(self) -> int:
        if self.struct is not None:
            return self.struct.size()
        assert self.dtype is not None
        return self.dtype.size * max(1, self.count)


class TilingData:
    """Base of generated tiling structs; attribute access reads/writes the fields."""

    FIELDS: ClassVar[tuple[Field, ...]] = ()

    def __init__(self, **values: Any) -> None:
        for f in self.FIELDS:
            if f.struct is not None:
                v: Any = f.struct()
            elif f.count:
                v = np.zeros(f.count, f.dtype.np_dtype)  # type: ignore[union-attr]
            else:
                v = 0
            object.__setattr__(self, f.name, v)
        for k, v in values.items():
            setattr(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in {f.name for f in self.FIELDS}:
            raise AttributeError(f"{type(self).__name__} has no tiling field {name!r}")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        if name.startswith("set_"):
            field = name[4:]
            if field in {f.name for f in self.FIELDS}:
                return lambda v: setattr(self, field, v)
        if name.startswith("get_"):
            field = name[4:]
            if field in {f.name for f in self.FIELDS}:
                return lambda: getattr(self, field)  # type: ignore[return-value,misc]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @classmethod
    def size(cls) -> int:
        return sum(f.nbytes for f in cls.FIELDS)

    def GetDataSize(self) -> int:
        """Bytes SaveToBuffer writes."""
        return self.size()

    def to_bytes(self) -> bytes:
        parts = []
        for f in self.FIELDS:
            v = getattr(self, f.name)
            if f.struct is not None:
                parts.append(v.to_bytes())
            else:
                arr = np.asarray(v, f.dtype.np_dtype).reshape(-1)  # type: ignore[union-attr]
                n = max(1, f.count)
                if arr.size != n:
                    raise ValueError(f"tiling field {f.name}: {arr.size} values, expected {n}")
                parts.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
        return b"".join(parts)

    def SaveToBuffer(self, dst: GmAddr | np.ndarray | bytearray, capacity: int | None = None) -> None:
        """Serialise into a GM buffer, a uint8 array or a bytearray."""
        raw = self.to_bytes()
        if capacity is not None and len(raw) > capacity:
            raise ValueError(f"tiling data needs {len(raw)} B, the buffer holds {capacity}")
        if isinstance(dst, GmAddr):
            view = dst.buf.data[dst.offset: dst.offset + len(raw)]
            if view.size < len(raw):
                raise ValueError(f"tiling data needs {len(raw)} B, the GM buffer holds {view.size}")
            view[:] = np.frombuffer(raw, np.uint8)
        elif isinstance(dst, bytearray):
            dst[: len(raw)] = raw
        else:
            dst[: len(raw)] = np.frombuffer(raw, np.uint8)

    @classmethod
    def from_bytes(cls, raw: bytes | np.ndarray) -> TilingData:
        buf = np.frombuffer(bytes(raw), np.uint8)
        if buf.size < cls.size():
            raise ValueError(f"{cls.__name__}: {buf.size} B of tiling data, the struct needs {cls.size()}")
        out = cls()
        off = 0
        for f in cls.FIELDS:
            n = f.nbytes
            chunk = buf[off: off + n]
            if f.struct is not None:
                object.__setattr__(out, f.name, f.struct.from_bytes(chunk))
            else:
                vals = chunk.view(f.dtype.np_dtype.newbyteorder("<")).astype(f.dtype.np_dtype)  # type: ignore[union-attr]
                object.__setattr__(out, f.name, vals.copy() if f.count else vals[0].item())
            off += n
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.FIELDS) + ")"


def TILING_DATA_FIELD_DEF(dtype: ElemType | type, name: str) -> Field:
    return Field(name, elem(dtype))


def TILING_DATA_FIELD_DEF_ARR(dtype: ElemType | type, count: int, name: str) -> Field:
    return Field(name, elem(dtype), int(count))


def TILING_DATA_FIELD_DEF_STRUCT(struct: type[TilingData], name: str) -> Field:
    return Field(name, struct=struct)


def BEGIN_TILING_DATA_DEF(name: str, *fields: Field) -> type[TilingData]:
    """A TilingData class named ``name`` with ``fields`` in declaration order (END_TILING_DATA_DEF is implied)."""
    seen = set()
    for f in fields:
        if f.name in seen:
            raise ValueError(f"tiling struct {name}: field {f.name} defined twice")
        seen.add(f.name)
    return type(name, (TilingData,), {"FIELDS": tuple(fields)})


_REGISTERED: dict[str, type[TilingData]] = {}


def REGISTER_TILING_DATA_CLASS(op_type: str, cls: type[TilingData]) -> None:
    """Associate an op type with its tiling struct (what GET_TILING_DATA uses for that op)."""
    _REGISTERED[op_type] = cls


def registered_tiling(op_type: str) -> type[TilingData] | None:
    return _REGISTERED.get(op_type)


def GET_TILING_DATA(cls: type[TilingData], tiling: GmAddr) -> Any:
    """Kernel side: the struct ``cls`` read from the tiling GM buffer."""
    raw = tiling.buf.data[tiling.offset: tiling.offset + cls.size()]
    return cls.from_bytes(raw)
