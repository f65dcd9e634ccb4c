"""Host-side contexts a custom op's InferShape and tiling functions receive (gert / optiling, reference 1.15).

``TilingContext``: input shapes/dtypes, attributes, the platform (PlatformAscendC), and the
outputs of tiling: SetBlockDim, SetTilingKey, GetRawTilingData (SaveToBuffer target),
GetWorkspaceSizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.ascendc.soc import SocSpec


class Shape:
    """``gert::Shape``."""

    def __init__(self, dims: tuple[int, ...] | list[int] = ()) -> None:
        self.dims = [int(d) for d in dims]

    def GetDimNum(self) -> int:  # noqa: N802
        return len(self.dims)

    def GetDim(self, i: int) -> int:  # noqa: N802
        return self.dims[i]

    def SetDimNum(self, n: int) -> None:  # noqa: N802
        self.dims = (self.dims + [0] * n)[:n]

    def SetDim(self, i: int, v: int) -> None:  # noqa: N802
        self.dims[i] = int(v)

    def AppendDim(self, v: int) -> None:  # noqa: N802
        self.dims.append(int(v))

    def GetShapeSize(self) -> int:  # noqa: N802
        return int(np.prod(self.dims, dtype=np.int64)) if self.dims else 1

    def GetOriginShape(self) -> Shape:  # noqa: N802
        return self

    def GetStorageShape(self) -> Shape:  # noqa: N802
        return self

    def CopyFrom(self, other: Shape) -> None:  # noqa: N802
        self.dims = list(other.dims)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and self.dims == other.dims

    def __repr__(self) -> str:
        return f"Shape({self.dims})"


class _Attrs:
    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def GetFloat(self, i: int) -> float:  # noqa: N802
        return float(self.values[i])

    def GetInt(self, i: int) -> int:  # noqa: N802
        return int(self.values[i])

    def GetBool(self, i: int) -> bool:  # noqa: N802
        return bool(self.values[i])

    def GetStr(self, i: int) -> str:  # noqa: N802
        return str(self.values[i])

    def GetAttrPointer(self, i: int) -> Any:  # noqa: N802
        return self.values[i]


class InferShapeContext:
    """``gert::InferShapeContext``: input shapes in, output shapes out (start as copies of input 0)."""

    def __init__(self, in_shapes: list[Shape], n_out: int, attrs: list[Any]) -> None:
        self._in = in_shapes
        self._out = [Shape(in_shapes[0].dims if in_shapes else ()) for _ in range(n_out)]
        self._attrs = _Attrs(attrs)

    def GetInputShape(self, i: int) -> Shape:  # noqa: N802
        return self._in[i]

    def GetOutputShape(self, i: int) -> Shape:  # noqa: N802
        return self._out[i]

    def GetAttrs(self) -> _Attrs:  # noqa: N802
        return self._attrs


class PlatformAscendC:
    """``platform_ascendc::PlatformAscendC``: the SoC the op is compiled for."""

    def __init__(self, soc: SocSpec) -> None:
        self.soc = soc

    def GetCoreNumAiv(self) -> int:  # noqa: N802
        return self.soc.aiv_num

    def GetCoreNumAic(self) -> int:  # noqa: N802
        return self.soc.aic_num

    def GetCoreNum(self) -> int:  # noqa: N802
        return self.soc.aiv_num if self.soc.split else self.soc.aic_num

    def GetSocVersion(self) -> str:  # noqa: N802
        return self.soc.name

    def GetLibApiWorkSpaceSize(self) -> int:  # noqa: N802
        return (16 if self.soc.arch in (2201, 3002) else 2) * 1024 * 1024


class _RawTilingData:
    def __init__(self, capacity: int) -> None:
        self.buf = bytearray(capacity)
        self.size = 0

    def GetData(self) -> bytearray:  # noqa: N802
        return self.buf

    def GetCapacity(self) -> int:  # noqa: N802
        return len(self.buf)

    def SetDataSize(self, n: int) -> None:  # noqa: N802
        self.size = int(n)


class TilingContext:
    """``gert::TilingContext``."""

    def __init__(self, in_shapes: list[Shape], in_dtypes: list[str], out_shapes: list[Shape], attrs: list[Any],
                 soc: SocSpec) -> None:
        self._in, self._dt, self._out = in_shapes, in_dtypes, out_shapes
        self._attrs = _Attrs(attrs)
        self.platform = PlatformAscendC(soc)
        self.block_dim = 0
        self.tiling_key: int | None = None
        self.raw = _RawTilingData(64 * 1024)
        self.workspace = [0]

    def GetInputShape(self, i: int) -> Shape:  # noqa: N802
        return self._in[i]

    def GetOutputShape(self, i: int) -> Shape:  # noqa: N802
        return self._out[i]

    def GetInputDataType(self, i: int) -> str:  # noqa: N802
        return self._dt[i]

    def GetAttrs(self) -> _Attrs:  # noqa: N802
        return self._attrs

    def GetPlatformInfo(self) -> PlatformAscendC:  # noqa: N802
        return self.platform

    def SetBlockDim(self, n: int) -> None:  # noqa: N802
        self.block_dim = int(n)

    def SetTilingKey(self, k: int) -> None:  # noqa: N802
        self.tiling_key = int(k)

    def GetRawTilingData(self) -> _RawTilingData:  # noqa: N802
        return self.raw

    def GetWorkspaceSizes(self, n: int = 1) -> list[int]:  # noqa: N802
        self.workspace = [0] * int(n)
        return self.workspace
