"""The eager fast path (``pycann.torch._fastpath``): a recorded signature's later calls give
torch's CPU answers, and every change the general path would see still reaches it: aliased
arguments, constants written in place, re-pointed or freed, CPU tensors (the device rule)."""

from __future__ import annotations

import gc

import pytest
import torch

import pycann.torch  # noqa: F401  (the npu device)
from pycann.torch import _dispatch, _pycann_ops


@pytest.fixture(autouse=True)
def _default_kernels() -> None:
    _dispatch.use_kernels(None)  # the default: pycann's op library (a fresh fast-path cache per op)


def _recorded(name: str) -> int:
    """Signatures the fast path holds for ATen op ``name`` ("aten::mul.Tensor")."""
    return sum(len(i.fast.calls) for i in _dispatch._infos.values() if i.name == name)


def test_an_argument_passed_twice_is_not_taken_for_the_next_calls_arguments() -> None:
    """``mul(t, t)`` (tanh's backward in an AOTAutograd graph) recorded which *argument* each
    input is, not which tensor: the next ``mul(a, b)`` of the same signature multiplies a by b."""
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    t = a.npu()
    torch.testing.assert_close(torch.mul(t, t).cpu(), a * a)  # the signature's first call
    assert _recorded("aten::mul.Tensor") == 1
    for _ in range(2):
        torch.testing.assert_close(torch.mul(a.npu(), b.npu()).cpu(), a * b)
        torch.testing.assert_close(torch.mul(b.npu(), a.npu()).cpu(), b * a)


def test_constants_written_re_pointed_or_resized_are_followed() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3).eval()
    npu = torch.nn.Conv2d(3, 4, 3).eval()
    npu.load_state_dict(conv.state_dict())
    npu = npu.npu()
    x = torch.randn(2, 3, 6, 6)

    def check() -> None:
        for _ in range(2):  # the second call of a signature is the fast path's
            torch.testing.assert_close(npu(x.npu()).cpu(), conv(x), rtol=1e-4, atol=1e-5)

    with torch.no_grad():
        check()
        assert _recorded("aten::convolution") == 1
        for m in (conv, npu):
            m.weight.mul_(-2)  # in place: the version changes
        check()
        new = torch.randn(4, 3, 3, 3)
        conv.weight.data = new.clone()
        npu.weight.data = new.clone().npu()  # re-pointed: another storage
        check()
        bias = torch.randn(4)
        conv.bias.copy_(bias)
        npu.bias.copy_(bias.npu())
        check()


def test_batch_norm_follows_its_running_statistics() -> None:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(5).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    npu = torch.nn.BatchNorm2d(5).eval()
    npu.load_state_dict(bn.state_dict())
    npu = npu.npu()
    x = torch.randn(2, 5, 4, 4)
    with torch.no_grad():
        for step in range(3):
            for _ in range(2):
                torch.testing.assert_close(npu(x.npu()).cpu(), bn(x), rtol=1e-5, atol=1e-5)
            for m in (bn, npu):
                m.running_mean.add_(0.5 * (step + 1))  # buffers: no grad, written in place


def test_in_place_relu_on_both_layouts() -> None:
    torch.manual_seed(0)
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = torch.randn(2, 8, 5, 5).contiguous(memory_format=fmt)
        for _ in range(3):
            t = x.npu()
            assert t.stride() == x.stride()
            out = torch.relu_(t)
            assert out is t
            torch.testing.assert_close(t.cpu(), torch.relu(x))


def test_the_device_rule_still_applies_after_a_signature_was_recorded() -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    for _ in range(2):
        torch.mul(a.npu(), b.npu())
    with pytest.raises(RuntimeError, match="same device"):
        torch.mul(a.npu(), b)
    torch.testing.assert_close(torch.mul(a.npu(), torch.tensor(2.0)).cpu(), a * 2)  # a 0-dim CPU scalar


def test_a_dead_models_recorded_signatures_go_with_it() -> None:
    """A recorded signature holds host views of the constants (and the bound kernel, with its
    packed weight): they must not outlive the model."""
    conv = torch.nn.Conv2d(3, 8, 3).npu().eval()
    x = torch.randn(1, 3, 8, 8).npu()
    with torch.no_grad():
        for _ in range(2):
            conv(x)
    assert _recorded("aten::convolution") == 1
    calls = _pycann_ops.counters["calls"]
    with torch.no_grad():
        conv(x)
    assert _pycann_ops.counters["calls"] == calls + 1  # (the fast path counts its calls too)
    del conv
    gc.collect()
    assert _recorded("aten::convolution") == 0
    lin = torch.nn.Linear(4, 3).npu()
    for _ in range(2):
        lin(torch.randn(2, 4).npu())
    assert _recorded("aten::addmm") == 1
    torch.npu.empty_cache()  # the bound constants and the recorded calls, which hold them
    assert _recorded("aten::addmm") == 0 and not _pycann_ops._handles


def test_out_arguments_take_the_general_path() -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(3, 4).npu()
    for _ in range(2):
        torch.add(a.npu(), b.npu(), out=out)
        torch.testing.assert_close(out.cpu(), a + b)
    wrong = torch.empty(0).npu()
    torch.add(a.npu(), b.npu(), out=wrong)  # resized by the general path
    torch.testing.assert_close(wrong.cpu(), a + b)


def test_in_place_add_through_out_self() -> None:
    """``x.add_(y)`` reaches the device as ``add.out(x, y, out=x)``: served in place from the
    second call, on both layouts, and ``out=`` another tensor still takes the general path."""
    torch.manual_seed(0)
    for fmt in (torch.contiguous_format, torch.channels_last):
        x, y = (torch.randn(2, 8, 5, 5).contiguous(memory_format=fmt) for _ in range(2))
        for _ in range(3):
            t, u = x.npu(), y.npu()
            assert t.add_(u) is t
            torch.testing.assert_close(t.cpu(), x + y)
            assert torch.add(u, t, out=u) is u
            torch.testing.assert_close(u.cpu(), y + x + y)
    assert _recorded("aten::add.out") >= 1
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    other = torch.empty(3, 4).npu()
    for _ in range(2):
        torch.add(a.npu(), b.npu(), out=other)
        torch.testing.assert_close(other.cpu(), a + b)
