"""ATen ops on npu tensors computed by pycann's op library (the default, ``PYCANN_TORCH_KERNELS``):
values against torch's CPU kernels (forward and, where autograd applies, backward), routing
checked through the report's providers and ``_pycann_ops.counters`` (not timings), and the bound
kernels' cache keyed on the bound tensors (a weight written in place or freed is never stale)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import pycann.torch
from pycann.torch import _dispatch, _pycann_ops
from pycann.torch.optable import Provider

torch.manual_seed(0)


def _providers() -> dict[str, set[Provider]]:
    out: dict[str, set[Provider]] = {}
    for s in pycann.torch.report().ops:
        out.setdefault(s.name.split(".")[0], set()).add(s.provider)
    return out


@pytest.fixture(autouse=True)
def _default_kernels() -> None:
    _dispatch.use_kernels(None)  # the default: pycann
    pycann.torch.reset()


def _w(*shape: int) -> torch.Tensor:
    return torch.randn(*shape) * 0.2


CASES: list[tuple[str, str, Callable[..., torch.Tensor], list[torch.Tensor]]] = [
    ("aten::convolution", "conv 3x3 pad 1", lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=1),
     [torch.randn(2, 8, 10, 10), _w(16, 8, 3, 3), _w(16)]),
    ("aten::convolution", "conv stride 2, no bias", lambda x, w: torch.nn.functional.conv2d(x, w, stride=2),
     [torch.randn(1, 4, 9, 9), _w(6, 4, 3, 3)]),
    ("aten::convolution", "depthwise conv, dilation 2",
     lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=2, dilation=2, groups=8),
     [torch.randn(1, 8, 12, 12), _w(8, 1, 3, 3), _w(8)]),
    ("aten::addmm", "linear", lambda x, w, b: torch.nn.functional.linear(x, w, b),
     [torch.randn(4, 32), _w(10, 32), _w(10)]),
    ("aten::native_batch_norm", "batch norm (running stats)",
     lambda x, w, b, m, v: torch.nn.functional.batch_norm(x, m, v.abs() + 0.5, w, b, training=False, eps=1e-3),
     [torch.randn(2, 6, 5, 5), _w(6), _w(6), _w(6), _w(6)]),
    ("aten::relu", "relu", torch.relu, [torch.randn(3, 70000)]),
    ("aten::relu_", "relu_", lambda x: torch.relu_(x.clone()), [torch.randn(4, 5)]),
    ("aten::add", "add (oneDNN binary, large)", torch.add, [torch.randn(2, 64, 32, 32), torch.randn(2, 64, 32, 32)]),
    ("aten::mul", "mul", torch.mul, [torch.randn(7, 3), torch.randn(7, 3)]),
    ("aten::sub", "sub", torch.sub, [torch.randn(7, 3), torch.randn(7, 3)]),
    ("aten::div", "div", torch.div, [torch.randn(7, 3), torch.rand(7, 3) + 0.5]),
    ("aten::add", "add_ (residual; reaches the npu as add.out)", lambda a, b: a.clone().add_(b), [torch.randn(2, 3, 4), torch.randn(2, 3, 4)]),
    ("aten::mean", "global average pool (adaptive_avg_pool2d to 1 is mean.dim)",
     lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 1), [torch.randn(2, 16, 7, 7)]),
    ("aten::avg_pool2d", "avg_pool2d 3x3 stride 2 pad 1",
     lambda x: torch.nn.functional.avg_pool2d(x, 3, 2, 1), [torch.randn(2, 4, 9, 9)]),
    ("aten::avg_pool2d", "avg_pool2d without the pads in the count",
     lambda x: torch.nn.functional.avg_pool2d(x, 2, padding=1, count_include_pad=False), [torch.randn(1, 3, 7, 7)]),
    ("aten::avg_pool2d", "avg_pool2d large (oneDNN)",
     lambda x: torch.nn.functional.avg_pool2d(x, 2), [torch.randn(1, 64, 64, 64)]),
    ("aten::_softmax", "softmax", lambda x: torch.softmax(x, -1), [torch.randn(4, 1000)]),
    ("aten::_log_softmax", "log_softmax", lambda x: torch.log_softmax(x, 1), [torch.randn(4, 12)]),
    ("aten::mm", "mm", torch.mm, [torch.randn(5, 8), torch.randn(8, 3)]),
    ("aten::bmm", "bmm", torch.bmm, [torch.randn(2, 5, 8), torch.randn(2, 8, 3)]),
    ("aten::sigmoid", "sigmoid", torch.sigmoid, [torch.randn(6, 6)]),
    ("aten::tanh", "tanh", torch.tanh, [torch.randn(6, 6)]),
    ("aten::exp", "exp", torch.exp, [torch.randn(6, 6)]),
    ("aten::sqrt", "sqrt", torch.sqrt, [torch.rand(6, 6)]),
    ("aten::erf", "erf", torch.erf, [torch.randn(6, 6)]),
]


@pytest.mark.parametrize("aten, what, fn, args", CASES, ids=[c[1] for c in CASES])
def test_op_runs_on_pycann_and_matches_torch_cpu(aten: str, what: str, fn: Callable[..., torch.Tensor],
                                                 args: list[torch.Tensor]) -> None:
    want = fn(*args)
    calls = _pycann_ops.counters["calls"]
    got = fn(*[a.npu() for a in args])
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    assert _pycann_ops.counters["calls"] > calls, f"{what} did not reach pycann's op library"
    assert Provider.PYCANN in _providers().get(aten, set()), _providers()
    again = fn(*[a.npu() for a in args])  # the signature's cached (bound) kernel
    torch.testing.assert_close(again.cpu(), want, rtol=1e-4, atol=1e-4)


def test_host_setting_uses_torch_kernels() -> None:
    x = torch.randn(2, 4, 6, 6)
    w = _w(5, 4, 3, 3)
    _dispatch.use_kernels("host")
    try:
        calls = _pycann_ops.counters["calls"]
        y = torch.nn.functional.conv2d(x.npu(), w.npu())
        assert _pycann_ops.counters["calls"] == calls
    finally:
        _dispatch.use_kernels(None)
    assert _providers()["aten::convolution"] == {Provider.HOST}
    torch.testing.assert_close(y.cpu(), torch.nn.functional.conv2d(x, w))


def test_conv_and_linear_bind_their_weights_once() -> None:
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).npu().eval()
    x = torch.randn(1, 3, 16, 16).npu()
    with torch.no_grad():
        conv(x)
        binds, bound = _pycann_ops.counters["binds"], _pycann_ops.counters["bound_calls"]
        for _ in range(3):
            conv(x)
    assert _pycann_ops.counters["binds"] == binds  # no rebinding per call
    assert _pycann_ops.counters["bound_calls"] == bound + 3  # the prepared (packed-weight) kernel ran


def test_weight_written_in_place_rebinds() -> None:
    conv = torch.nn.Conv2d(3, 4, 3).npu()
    lin = torch.nn.Linear(6, 2).npu()
    x, v = torch.randn(1, 3, 8, 8), torch.randn(3, 6)
    with torch.no_grad():
        conv(x.npu())
        lin(v.npu())
        conv.weight.mul_(-2.0)  # an optimizer step writes parameters in place: same tensor, same memory
        lin.weight.add_(1.0)
        got_c, got_l = conv(x.npu()).cpu(), lin(v.npu()).cpu()
        want_c = torch.nn.functional.conv2d(x, conv.weight.cpu(), conv.bias.cpu())
        want_l = torch.nn.functional.linear(v, lin.weight.cpu(), lin.bias.cpu())
    torch.testing.assert_close(got_c, want_c, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_l, want_l, rtol=1e-4, atol=1e-4)


def test_weight_reshaped_over_the_same_memory_rebinds() -> None:
    """The binding's key names a constant by tensor, address and version; its sizes and strides come
    from its view's (``_pycann_ops._key``): ``set_`` to fewer output channels over the same storage
    (same address, same tensor) must give a new binding, not the packed 4-channel weight."""
    conv = torch.nn.Conv2d(3, 4, 3, bias=False).npu().eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        conv(x.npu())
        w = conv.weight
        w.set_(w.untyped_storage(), 0, (2, 3, 3, 3))
        got = conv(x.npu()).cpu()
        want = torch.nn.functional.conv2d(x, w.cpu())
    assert got.shape == (1, 2, 6, 6)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_new_weight_tensors_are_never_served_a_stale_binding() -> None:
    # weights that are activations: a new tensor each call, often at a freed one's address
    x = torch.randn(1, 2, 6, 6).npu()
    for i in range(6):
        w = torch.full((3, 2, 3, 3), float(i)).npu()
        got = torch.nn.functional.conv2d(x, w)
        torch.testing.assert_close(got.cpu(), torch.nn.functional.conv2d(x.cpu(), w.cpu()), rtol=1e-4, atol=1e-4)
        del w, got


def test_training_step_gradients_match_cpu() -> None:
    """Forward ops on pycann (conv, relu_, add_, global pool, linear, log_softmax), backward on
    the npu's kernels: gradients and the SGD update equal torch's CPU run."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu_(self.c1(x))
            y = self.c2(y).add_(y)
            y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            return torch.log_softmax(self.fc(y), 1)

    torch.manual_seed(1)
    cpu = Net()
    npu = Net()
    npu.load_state_dict(cpu.state_dict())
    npu = npu.npu()
    x, t = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_n = torch.optim.SGD(npu.parameters(), lr=0.1)
    for _ in range(2):  # the second step runs on weights the first one changed in place
        for model, opt, xx, tt in ((cpu, opt_c, x, t), (npu, opt_n, x.npu(), t.npu())):
            opt.zero_grad()
            torch.nn.functional.nll_loss(model(xx), tt).backward()
            opt.step()
    for (name, pc), pn in zip(cpu.named_parameters(), npu.parameters()):
        assert pn.grad is not None and pc.grad is not None
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(pn.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-5, msg=name)
    assert Provider.PYCANN in _providers()["aten::convolution"]


def test_batch_norm_in_training_mode_stays_on_torch_kernels() -> None:
    bn = torch.nn.BatchNorm2d(4).npu().train()
    x = torch.randn(3, 4, 5, 5)
    y = bn(x.npu())
    ref = torch.nn.BatchNorm2d(4).train()(x)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-5)
    assert Provider.PYCANN not in _providers().get("aten::native_batch_norm", set())


def test_spatial_mean_without_keepdim_and_other_means() -> None:
    x = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(x.npu().mean((2, 3)).cpu(), x.mean((2, 3)))
    torch.testing.assert_close(x.npu().mean((-1, -2), keepdim=True).cpu(), x.mean((-1, -2), keepdim=True))
    torch.testing.assert_close(x.npu().mean(1).cpu(), x.mean(1))  # not spatial: torch's kernel
    assert _providers()["aten::mean"] == {Provider.PYCANN, Provider.HOST}


def test_a_new_thread_count_binds_anew() -> None:
    """oneDNN fixes a primitive's work split at creation: a kernel bound at one thread count is
    not reused at another (it would stay single-threaded after torch.set_num_threads(2))."""
    conv = torch.nn.Conv2d(3, 4, 3).npu().eval()
    x = torch.randn(1, 3, 8, 8).npu()
    saved = torch.get_num_threads()
    try:
        with torch.no_grad():
            torch.set_num_threads(1)
            conv(x)
            binds = _pycann_ops.counters["binds"]
            torch.set_num_threads(2)
            y = conv(x)
            assert _pycann_ops.counters["binds"] == binds + 1
            conv(x)
            assert _pycann_ops.counters["binds"] == binds + 1
    finally:
        torch.set_num_threads(saved)
    torch.testing.assert_close(y.cpu(), torch.nn.functional.conv2d(x.cpu(), conv.weight.cpu(), conv.bias.cpu()),
                               rtol=1e-4, atol=1e-4)


def test_avg_pool2d_with_ceil_mode_stays_on_torch_kernels() -> None:
    x = torch.randn(1, 2, 7, 7)
    got = torch.nn.functional.avg_pool2d(x.npu(), 2, ceil_mode=True)
    torch.testing.assert_close(got.cpu(), torch.nn.functional.avg_pool2d(x, 2, ceil_mode=True))
    assert _providers()["aten::avg_pool2d"] == {Provider.HOST}


def test_a_dead_models_bound_kernels_are_dropped() -> None:
    """Bound kernels hold packed copies of weights: they go with the model."""
    import gc

    _pycann_ops.clear()
    conv = torch.nn.Conv2d(3, 8, 3).npu().eval()
    with torch.no_grad():
        conv(torch.randn(1, 3, 8, 8).npu())
    assert len(_pycann_ops._handles) == 1
    del conv
    gc.collect()
    assert len(_pycann_ops._handles) == 0


def test_training_keeps_one_binding_per_weight() -> None:
    """Every optimizer step writes the weights in place (their version changes): each forward
    pass rebinds (packs) them, and the new binding replaces the old one. Before, every step's
    packed copies stayed until the cache's 4096-handle limit (ResNet-50: ~100 MB a step)."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 36, 2))
    npu = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 36, 2))
    npu.load_state_dict(cpu.state_dict())
    npu = npu.npu()
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, npu)]
    x = torch.randn(4, 3, 8, 8)
    _pycann_ops.clear()
    sizes, binds = [], []
    for _ in range(6):
        for m, opt, xx in ((cpu, opts[0], x), (npu, opts[1], x.npu())):
            opt.zero_grad()
            m(xx).square().mean().backward()
            opt.step()
        sizes.append(len(_pycann_ops._handles))
        binds.append(_pycann_ops.counters["binds"])
    assert len(set(sizes)) == 1, sizes  # one handle per op signature, whatever the step
    assert all(b1 > b0 for b0, b1 in zip(binds, binds[1:])), binds  # the changed weights were bound anew
    for p, q in zip(cpu.parameters(), npu.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)


def test_model_made_under_inference_mode() -> None:
    """Inference tensors have no version counter (reading ``_version`` raises): such weights are
    not bound as constants, so a conv made under ``torch.inference_mode`` runs, and follows an
    in-place write to its weight (it raised "Inference tensors do not track version counter")."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6)
    with torch.inference_mode():
        conv = torch.nn.Conv2d(3, 4, 3).npu()
        for _ in range(2):
            got = conv(x.npu()).cpu()
            torch.testing.assert_close(got, torch.nn.functional.conv2d(x, conv.weight.cpu(), conv.bias.cpu()),
                                       rtol=1e-4, atol=1e-5)
            conv.weight.mul_(2)


def test_addmm_with_beta_or_alpha_and_nan_propagation() -> None:
    c, x, w = _w(3), torch.randn(4, 5), _w(5, 3)
    for kw in ({"beta": 0.5}, {"alpha": 2.0}, {"beta": 0.0}):
        got = torch.addmm(c.npu(), x.npu(), w.npu(), **kw)
        torch.testing.assert_close(got.cpu(), torch.addmm(c, x, w, **kw), rtol=1e-4, atol=1e-4)
    x[0, 0] = float("nan")
    conv_x = torch.randn(1, 2, 5, 5)
    conv_x[0, 0, 2, 2] = float("nan")
    cw = _w(3, 2, 3, 3)
    for got, want in ((torch.relu(x.npu()).cpu(), torch.relu(x)),
                      (torch.nn.functional.linear(x.npu(), w.t().npu(), c.npu()).cpu(),
                       torch.nn.functional.linear(x, w.t(), c)),
                      (torch.nn.functional.conv2d(conv_x.npu(), cw.npu()).cpu(), torch.nn.functional.conv2d(conv_x, cw))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_softmax_of_a_non_contiguous_input_is_contiguous_as_on_cpu() -> None:
    """ATen's softmax / log_softmax return a contiguous result for any input layout; pycann's
    kept the input's (a transposed tensor's, a channels-last conv's), so ``.view(-1)`` of it raised
    "view size is not compatible with input tensor's size and stride" where torch CPU runs."""
    x = torch.randn(5, 4, 3)
    conv = torch.nn.Conv2d(3, 4, 3)
    img = torch.randn(2, 3, 6, 6)
    cases = (lambda t, c: torch.softmax(t.transpose(0, 2), 1), lambda t, c: torch.log_softmax(t.permute(1, 2, 0), -1),
             lambda t, c: torch.softmax(c(img.to(t.device)), 1))
    with torch.no_grad():
        for f in cases:
            want = f(x, conv)
            got = f(x.npu(), conv.npu())
            conv.cpu()
            assert got.stride() == want.stride()
            torch.testing.assert_close(got.view(-1).cpu(), want.view(-1), rtol=1e-5, atol=1e-6)


def test_group_norm_after_a_channels_last_conv_matches_cpu() -> None:
    """GroupNorm after a conv whose result is channels-last (a channels-last input): ATen's CompositeExplicitAutograd
    ``native_group_norm`` for devices other than CPU/CUDA ``view``s its input, which raised "view size
    is not compatible with input tensor's size and stride" (forward and training alike); the npu
    runs torch's CPU kernel, which takes any layout."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.GroupNorm(2, 4), torch.nn.SiLU())
    npu = copy.deepcopy(ref).npu()
    x = torch.randn(2, 3, 6, 6).contiguous(memory_format=torch.channels_last)
    xc, xn = x.clone().requires_grad_(), x.npu().requires_grad_()
    assert npu[0](xn).is_contiguous(memory_format=torch.channels_last)
    want, got = ref(xc), npu(xn)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    want.pow(2).sum().backward()
    got.pow(2).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for a, b in zip(ref.parameters(), npu.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    assert Provider.HOST in _providers()["aten::native_group_norm"]


def test_softmax_of_a_0_dim_tensor_matches_cpu() -> None:
    """``torch.softmax(x, 0)`` of a 0-dim tensor is 1 (log_softmax 0) in ATen; pycann's Softmax
    raised "KernelError: Softmax (opset 28): kernel failed on inputs (float32[])"."""
    x = torch.tensor(0.7)
    for f in (lambda t: torch.softmax(t, 0), lambda t: torch.log_softmax(t, -1), lambda t: torch.softmax(t, 0, dtype=torch.float64)):
        want, got = f(x), f(x.npu())
        assert got.shape == want.shape == ()
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
