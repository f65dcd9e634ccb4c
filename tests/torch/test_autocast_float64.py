"""``torch.autocast("npu")`` leaves float64 tensors alone, as PyTorch's autocast does (its
``is_eligible``: floating, on the device, not double; checked against ``torch.autocast("cpu")``)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402,F401


def test_float64_is_not_cast_by_lower_precision_or_promote_ops() -> None:
    """A float64 matmul under autocast ran in float16 (every floating npu tensor was cast); torch keeps
    it float64 (CPU autocast here, CUDA alike). A "promote" op ignores a float64 input when choosing its
    dtype: float16 beside float32 is float32, and float64 is left as it is (not the widest to cast to)."""
    torch.manual_seed(0)
    a = torch.randn(3, 3, dtype=torch.float64)
    v, w = torch.randn(3), torch.randn(3, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the CPU fallback's warning)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = {"mm": torch.mm(a, a), "einsum": torch.einsum("ij,jk->ik", a, a), "mv": torch.mv(a, a[0])}
        with torch.autocast("npu", dtype=torch.float16):
            got = {"mm": torch.mm(a.npu(), a.npu()), "einsum": torch.einsum("ij,jk->ik", a.npu(), a.npu()),
                   "mv": torch.mv(a.npu(), a[0].npu())}
            h = v.npu() @ torch.eye(3, device="npu")  # float16
            mixed = torch.addcmul(w.npu(), h, v.npu())  # float16 and float32 promote to float32; float64 stays
            both = torch.atan2(h, v.npu())
    for name, g in got.items():
        assert g.dtype == torch.float64, name
        torch.testing.assert_close(g.cpu(), want[name], rtol=1e-12, atol=1e-12, msg=name)  # (float64 math)
    assert both.dtype == torch.float32
    assert mixed.dtype == torch.float64  # (the op's own promotion of its float32 product with w)
    torch.testing.assert_close(mixed.cpu(), w + v.half().float() * v, rtol=1e-6, atol=1e-6)
