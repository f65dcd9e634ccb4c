"""``ops::OpDef``: a custom op's prototype, with CANN's builder methods (reference 1.16).

    class AddCustom(OpDef):
        def __init__(self, name):
            super().__init__(name)
            self.Input("x").ParamType(REQUIRED).DataType([ge.DT_FLOAT16, ge.DT_FLOAT]).Format([ge.FORMAT_ND] * 2)
            self.Output("z").ParamType(REQUIRED).DataType([ge.DT_FLOAT16, ge.DT_FLOAT]).Format([ge.FORMAT_ND] * 2)
            self.SetInferShape(InferShape)
            self.AICore().SetTiling(TilingFunc).AddConfig("ascend910b")
    OP_ADD(AddCustom)

DataType lists are positional: combination i of every input and output belongs together.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class ge:  # noqa: N801 - CANN's namespace ge (DataType / Format constants)
    DT_FLOAT16 = "float16"
    DT_FLOAT = "float32"
    DT_BF16 = "bfloat16"
    DT_INT32 = "int32"
    DT_INT8 = "int8"
    DT_UINT8 = "uint8"
    DT_INT16 = "int16"
    DT_INT64 = "int64"
    FORMAT_ND = "ND"
    FORMAT_NCHW = "NCHW"
    FORMAT_NHWC = "NHWC"
    GRAPH_SUCCESS = 0
    GRAPH_FAILED = 1


JSON_TYPES = {"fp16": ge.DT_FLOAT16, "float16": ge.DT_FLOAT16, "float": ge.DT_FLOAT, "float32": ge.DT_FLOAT,
              "fp32": ge.DT_FLOAT, "bf16": ge.DT_BF16, "bfloat16": ge.DT_BF16, "int32": ge.DT_INT32,
              "int8": ge.DT_INT8, "uint8": ge.DT_UINT8, "int16": ge.DT_INT16, "int64": ge.DT_INT64}


def np_dtype(dt: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if dt == ge.DT_BF16 else np.dtype(dt)


class ParamType(enum.Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"
    DYNAMIC = "dynamic"


REQUIRED, OPTIONAL, DYNAMIC = ParamType.REQUIRED, ParamType.OPTIONAL, ParamType.DYNAMIC


@dataclass
class ParamDef:
    """One input or output of the prototype."""

    name: str
    param_type: ParamType = ParamType.REQUIRED
    dtypes: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)

    def ParamType(self, t: ParamType) -> ParamDef:  # noqa: N802
        self.param_type = t
        return self

    def DataType(self, types: list[str]) -> ParamDef:  # noqa: N802
        self.dtypes = list(types)
        return self

    def Format(self, formats: list[str]) -> ParamDef:  # noqa: N802
        self.formats = list(formats)
        return self

    DataTypeList = DataType
    FormatList = Format


@dataclass
class AttrDef:
    """An attribute: type name ('float', 'int', 'bool', 'str', 'list_int', ...) and default (None = required)."""

    name: str
    kind: str = "float"
    default: Any = None
    required: bool = True

    def AttrType(self, t: ParamType) -> AttrDef:  # noqa: N802
        self.required = t == ParamType.REQUIRED
        return self

    def Float(self, default: float | None = None) -> AttrDef:  # noqa: N802
        return self._set("float", default)

    def Int(self, default: int | None = None) -> AttrDef:  # noqa: N802
        return self._set("int", default)

    def Bool(self, default: bool | None = None) -> AttrDef:  # noqa: N802
        return self._set("bool", default)

    def String(self, default: str | None = None) -> AttrDef:  # noqa: N802
        return self._set("str", default)

    def ListInt(self, default: list[int] | None = None) -> AttrDef:  # noqa: N802
        return self._set("list_int", default)

    def _set(self, kind: str, default: Any) -> AttrDef:
        self.kind, self.default = kind, default
        if default is not None:
            self.required = False
        return self


class AICoreConfig:
    """``this->AICore()``: the tiling function and the SoCs the op is built for."""

    def __init__(self) -> None:
        self.tiling: Callable[[Any], Any] | None = None
        self.configs: list[str] = []

    def SetTiling(self, fn: Callable[[Any], Any]) -> AICoreConfig:  # noqa: N802
        self.tiling = fn
        return self

    def AddConfig(self, soc: str) -> AICoreConfig:  # noqa: N802
        self.configs.append(soc)
        return self


class OpDef:
    """Base class of a custom op prototype."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[ParamDef] = []
        self.outputs: list[ParamDef] = []
        self.attrs: list[AttrDef] = []
        self.infer_shape: Callable[[Any], Any] | None = None
        self.infer_dtype: Callable[[Any], Any] | None = None
        self._aicore = AICoreConfig()

    def Input(self, name: str) -> ParamDef:  # noqa: N802
        p = ParamDef(name)
        self.inputs.append(p)
        return p

    def Output(self, name: str) -> ParamDef:  # noqa: N802
        p = ParamDef(name)
        self.outputs.append(p)
        return p

    def Attr(self, name: str) -> AttrDef:  # noqa: N802
        a = AttrDef(name)
        self.attrs.append(a)
        return a

    def SetInferShape(self, fn: Callable[[Any], Any]) -> OpDef:  # noqa: N802
        self.infer_shape = fn
        return self

    def SetInferDataType(self, fn: Callable[[Any], Any]) -> OpDef:  # noqa: N802
        self.infer_dtype = fn
        return self

    def AICore(self) -> AICoreConfig:  # noqa: N802
        return self._aicore

    def check(self) -> None:
        """``ValueError`` naming the op when the prototype is inconsistent."""
        params = self.inputs + self.outputs
        if not self.outputs:
            raise ValueError(f"op {self.name}: no outputs")
        counts = {len(p.dtypes) for p in params}
        if len(counts) != 1 or 0 in counts:
            raise ValueError(f"op {self.name}: every input/output needs DataType lists of one length "
                             f"(got {[(p.name, len(p.dtypes)) for p in params]})")
        for p in params:
            if p.formats and len(p.formats) != len(p.dtypes):
                raise ValueError(f"op {self.name}: {p.name} has {len(p.formats)} formats for {len(p.dtypes)} dtypes")
        if self._aicore.tiling is None:
            raise ValueError(f"op {self.name}: no tiling function (AICore().SetTiling)")


_ADDED: list[type[OpDef]] = []


def OP_ADD(cls: type[OpDef]) -> type[OpDef]:  # noqa: N802
    """Register a prototype class (``OP_ADD(AddCustom);``)."""
    _ADDED.append(cls)
    return cls


def take_added() -> list[type[OpDef]]:
    """The classes OP_ADD'ed since the last call (the loader calls it after importing one op_host file)."""
    out = list(_ADDED)
    _ADDED.clear()
    return out


def snake_case(op_type: str) -> str:
    """CANN's kernel-name rule: AddCustom -> add_custom (runs of capitals stay together)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", op_type)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
