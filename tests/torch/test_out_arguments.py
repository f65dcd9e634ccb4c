"""``out=`` tensors on the npu against torch's CPU (found by tests/fuzz/test_torch_ops_fuzz.py):
ATen casts an op's result into an out tensor of another dtype; pycann's ops (``optable.PYCANN_OPS``)
wrote their own float32 result, so a float16 out read the float32 bytes (wrong values), a float64
one failed with a storage error and a bfloat16 one with a TypeError."""

from __future__ import annotations

import pytest
import torch

import pycann.torch  # noqa: F401 (registers the npu device)

DTYPES = [torch.float16, torch.bfloat16, torch.float64, torch.int32]
OPS = {
    "exp": lambda a, b, out: torch.exp(a, out=out),
    "add": lambda a, b, out: torch.add(a, b, out=out),
    "mul": lambda a, b, out: torch.mul(a, b, out=out),
    "sigmoid": lambda a, b, out: torch.sigmoid(a, out=out),
    "mm": lambda a, b, out: torch.mm(a, b.t(), out=out),
    "softmax": lambda a, b, out: torch._softmax(a, 1, False, out=out),
}


def _outcome(f, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor | str:
    try:
        f(a, b, out)
    except RuntimeError as e:
        return f"raised {str(e).splitlines()[0]}"
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", [(2, 3), (0,)], ids=["sized", "empty"])
def test_out_of_another_dtype(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    want = _outcome(OPS[name], a, b, torch.zeros(shape, dtype=dtype))
    got = _outcome(OPS[name], a.npu(), b.npu(), torch.zeros(shape, dtype=dtype, device="npu"))
    if isinstance(want, str):
        assert isinstance(got, str), f"CPU torch {want}, npu returned {got}"
        return
    assert isinstance(got, torch.Tensor), got
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-2 if dtype.itemsize == 2 else 1e-6, atol=1e-3)
