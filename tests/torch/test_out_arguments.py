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


SHAPED = {
    "sum": lambda x, out: torch.sum(x, 0, out=out),  # torch's kernels
    "sum_int": lambda x, out: torch.sum((x[:2, :1] > -9).long(), 0, out=out),
    "exp": lambda x, out: torch.exp(x[:2, :2], out=out),  # pycann's ops
    "bmm": lambda x, out: torch.bmm(x[:1, :3].unsqueeze(0), x[:3, :4].unsqueeze(0), out=out),
    "add": lambda x, out: torch.add(x[:1], x[1:2], out=out),
}


@pytest.mark.parametrize("name", sorted(SHAPED))
@pytest.mark.parametrize("view", [False, True], ids=["plain", "transposed_view"])
def test_out_of_another_shape_is_resized_in_its_memory(name: str, view: bool) -> None:
    """An out tensor of another, non-empty shape is resized as ATen's ``resize_output`` does: its
    memory kept when large enough, so a view's base sees the write. torch's kernels (``sum``)
    returned freed memory on npu (the out tensor adopted its own memory as a new storage, and the
    old one was freed), pycann's (``exp``, ``bmm``) left the base unwritten."""
    import warnings

    torch.manual_seed(0)
    x = torch.randn(4, 5)
    results = []
    for dev in ("cpu", "npu"):
        base = torch.arange(10.0, device=dev).view(2, 5).to(torch.int64 if name == "sum_int" else torch.float32)
        out = base.t() if view else base
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (resizing a non-empty out tensor is deprecated)
            r = SHAPED[name](x.to(dev), out)
        reuse = [torch.full((2, 5), -1.0) for _ in range(8)]  # (freed memory, if any, is handed out again)
        results.append((r.cpu(), base.cpu()))
        del reuse
    (got, got_base), (want, want_base) = results[1], results[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_base, want_base)


STRIDED = {
    "softmax": lambda x, out: torch.softmax(x, -1, out=out),  # (its out form resizes out to its own sizes)
    "log_softmax": lambda x, out: torch.log_softmax(x, -1, out=out),
    "exp": lambda x, out: torch.exp(x, out=out),
    "sum": lambda x, out: torch.sum(x.unsqueeze(0), 0, out=out),
}


@pytest.mark.parametrize("name", sorted(STRIDED))
def test_out_view_of_the_right_shape_keeps_its_strides(name: str) -> None:
    """``softmax(x, -1, out=base[::2])`` writes rows 0 and 2 of ``base``, as on CPU: ATen's out form
    calls ``resize_`` with the out tensor's own sizes, a no-op, which the npu's resize_ made a
    restride to contiguous (rows 0 and 1 were written)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    bases = []
    for dev in ("cpu", "npu"):
        base = torch.arange(12.0, device=dev).view(4, 3)
        out = base[::2]
        STRIDED[name](x.to(dev), out)
        assert out.stride() == (6, 1)
        bases.append(base.cpu())
    torch.testing.assert_close(bases[1], bases[0])


@pytest.mark.parametrize("start", [(2, 3, 4, 5), (1,), (5, 4, 3, 2)], ids=["same", "grow", "other"])
@pytest.mark.parametrize("fmt", [None, torch.channels_last, torch.contiguous_format], ids=str)
def test_resize_follows_aten(start: tuple[int, ...], fmt: torch.memory_format | None) -> None:
    """``resize_``'s sizes and strides as ATen's: a memory format restrides (it was ignored), the same
    sizes without one change nothing."""
    got, want = torch.zeros(start, device="npu"), torch.zeros(start)
    if len(start) == 4:
        got, want = got.transpose(1, 2), want.transpose(1, 2)
    got.resize_((2, 3, 4, 5), memory_format=fmt)
    want.resize_((2, 3, 4, 5), memory_format=fmt)
    assert (got.shape, got.stride()) == (want.shape, want.stride())
