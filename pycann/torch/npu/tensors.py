"""torch.npu's legacy typed tensor classes (``torch.npu.FloatTensor``, ``HalfTensor``, ...), as
torch.cuda has them: calling one makes an npu tensor of its dtype (``FloatTensor(2, 3)``:
uninitialized, of that size; ``FloatTensor([1, 2])``: from data; ``FloatTensor()``: empty), and
``isinstance(t, torch.npu.FloatTensor)`` is True for an npu tensor of that dtype, and
``t.type(torch.npu.HalfTensor)`` converts (the classes' ``__name__`` is the dotted name, as the
C type name of torch.cuda's is).
"""

from __future__ import annotations

from typing import Any

import torch


class _TensorType(type):
    dtype: torch.dtype

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == "npu" and obj.dtype == cls.dtype

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:  # type: ignore[override]
        from pycann.torch.npu import current_device

        dev = torch.device("npu", current_device()) if device is None else torch.device(device)
        if dev.type != "npu":
            raise RuntimeError(f"legacy constructor {cls.__name__} expects an npu device, got {dev}")
        if not args:
            return torch.empty(0, dtype=cls.dtype, device=dev)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return torch.empty(args, dtype=cls.dtype, device=dev)
        if len(args) == 1 and isinstance(args[0], torch.Size):
            return torch.empty(args[0], dtype=cls.dtype, device=dev)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            t = args[0]
            if t.dtype != cls.dtype:
                raise TypeError(f"expected {cls.dtype} (got {t.dtype})")
            return t.to(dev)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=dev)
        raise TypeError(f"{cls.__name__}: takes sizes (ints), a torch.Size, a sequence of data or "
                        f"a tensor; got {tuple(type(a).__name__ for a in args)}")

    def __repr__(cls) -> str:
        return f"<class '{cls.__name__}'>"


def _make(name: str, dtype: torch.dtype) -> _TensorType:
    # The full dotted name is the class's C type name (tp_name), which is what torch's
    # Tensor.type(<class>) reads: x.type(torch.npu.HalfTensor) then converts as x.type("torch.npu.HalfTensor").
    return _TensorType(f"torch.npu.{name}", (), {"dtype": dtype, "is_cuda": False, "is_npu": True,
                                                  "__module__": "torch.npu", "__qualname__": name,
                                                  "__doc__": f"npu tensors of dtype {dtype}."})


DoubleTensor = _make("DoubleTensor", torch.float64)
FloatTensor = _make("FloatTensor", torch.float32)
HalfTensor = _make("HalfTensor", torch.float16)
BFloat16Tensor = _make("BFloat16Tensor", torch.bfloat16)
ByteTensor = _make("ByteTensor", torch.uint8)
CharTensor = _make("CharTensor", torch.int8)
ShortTensor = _make("ShortTensor", torch.int16)
IntTensor = _make("IntTensor", torch.int32)
LongTensor = _make("LongTensor", torch.int64)
BoolTensor = _make("BoolTensor", torch.bool)

TENSOR_TYPES = ["DoubleTensor", "FloatTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor", "CharTensor",
                "ShortTensor", "IntTensor", "LongTensor", "BoolTensor"]
