"""Results of the ops pycann computes on the npu follow ATen's memory-format rule, as on torch's CPU:
a contiguous input gives a contiguous result, a channels-last one a channels-last result (a conv's
result is channels-last when its input or its weight is). A conv's result used to be channels-last
for any input, so LeNet-style ``conv(x).view(n, -1)`` raised "view size is not compatible"; a batch
norm's first call and an add of mixed layouts returned channels-last inputs' results contiguous.
Layouts (``is_contiguous`` in both formats) and values are checked against torch's CPU for the first
call of a signature (GE's single-op path), the second (the bound kernel) and the third (the fast path)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import pycann.torch
from pycann.torch import _dispatch, _layout

CL = torch.channels_last
NCHW = torch.contiguous_format


@pytest.fixture(autouse=True)
def _default_kernels() -> None:
    _dispatch.use_kernels(None)  # the default: pycann
    pycann.torch.reset()


def _layout_of(t: torch.Tensor) -> tuple[bool, bool]:
    return t.is_contiguous(), t.is_contiguous(memory_format=CL)


def _check(fn: Callable[..., torch.Tensor], *args: torch.Tensor, tol: float = 1e-4) -> None:
    want = fn(*args)
    npu = [a.npu() for a in args]
    for call in range(3):  # GE's single-op path, the bound kernel, the fast path
        got = fn(*npu)
        assert _layout_of(got) == _layout_of(want), (call, got.stride(), want.stride())
        torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


def _x(shape: tuple[int, ...], fmt: torch.memory_format) -> torch.Tensor:
    return torch.randn(*shape).contiguous(memory_format=fmt)


SHAPES = [(1, 16, 20, 20), (2, 8, 7, 9), (2, 64, 24, 24), (2, 8, 1, 1)]
FORMATS = [NCHW, CL]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("xf", FORMATS)
@pytest.mark.parametrize("wf", FORMATS)
@pytest.mark.parametrize("k", [1, 3])
def test_conv_result_follows_the_input_and_weight_formats(shape: tuple[int, ...], xf: torch.memory_format,
                                                          wf: torch.memory_format, k: int) -> None:
    """Channels-last when the input or the weight is (``suggest_memory_format``), else contiguous;
    1x1 convs of contiguous inputs (a matrix product) and 3x3 ones (oneDNN's NCHW conv)."""
    torch.manual_seed(0)
    x = _x(shape, xf)
    w = (torch.randn(12, shape[1], k, k) * 0.1).contiguous(memory_format=wf)
    b = torch.randn(12)
    pad = k // 2
    _check(lambda x, w, b: F.conv2d(x, w, b, padding=pad), x, w, b)
    _check(lambda x, w: F.conv2d(x, w, stride=2, padding=pad), x, w)


@pytest.mark.parametrize("xf", FORMATS)
@pytest.mark.parametrize(("groups", "dilation", "k"), [(4, 1, 3), (16, 1, 3), (16, 1, 5), (1, 2, 3), (2, 1, 1)])
def test_grouped_depthwise_and_dilated_convs_follow_the_input_format(xf: torch.memory_format, groups: int,
                                                                     dilation: int, k: int) -> None:
    """Contiguous grouped, depthwise (MobileNet's) and dilated convs run oneDNN's NCHW conv and give
    torch CPU's values in its layout; a grouped 1x1 is not a single matrix product."""
    torch.manual_seed(1)
    x = _x((2, 16, 13, 11), xf)
    w = torch.randn(32, 16 // groups, k, k) * 0.1
    b = torch.randn(32)
    pad = dilation * (k // 2)
    _check(lambda x, w, b: F.conv2d(x, w, b, padding=pad, dilation=dilation, groups=groups), x, w, b)
    _check(lambda x, w: F.conv2d(x, w, stride=2, padding=pad, dilation=dilation, groups=groups), x, w)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_elementwise_batch_norm_and_pooling_results_keep_the_input_format(shape: tuple[int, ...],
                                                                           fmt: torch.memory_format) -> None:
    torch.manual_seed(0)
    x = _x(shape, fmt)
    c = shape[1]
    stats = [torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c)]
    _check(lambda x, m, v, g, b: F.batch_norm(x, m, v, g, b, training=False), x, *stats)
    _check(F.relu, x)
    _check(lambda x: F.relu(x * 1, inplace=True), x)
    _check(torch.sigmoid, x)
    _check(torch.tanh, x)
    for op in (torch.add, torch.sub, torch.mul, torch.maximum):
        _check(op, x, x * 2 + 1)
        _check(op, x, (x * 2 + 1).contiguous())  # mixed layouts: the first operand's order
        _check(op, (x * 2 + 1).contiguous(), x)
    _check(lambda a, b: (a * 1).add_(b), x, x.contiguous())
    _check(lambda x: F.adaptive_avg_pool2d(x, 1), x)
    _check(lambda x: x.mean((2, 3)), x)
    if shape[2] > 1:
        _check(lambda x: F.avg_pool2d(x, 2), x)


class _LeNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.Conv2d(6, 16, 5)
        self.f1, self.f2 = torch.nn.Linear(16 * 5 * 5, 120), torch.nn.Linear(120, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = x.view(x.shape[0], -1)  # (LeNet's and VGG's flattening: needs a contiguous tensor)
        return self.f2(F.relu(self.f1(x)))


def test_lenet_style_view_after_convolutions_works_as_on_cpu() -> None:
    """``conv(x).view(n, -1)``, directly and after a pooling / activation, and a LeNet whose forward
    flattens with ``view``: torch CPU runs them; the npu raised "view size is not compatible"."""
    torch.manual_seed(0)
    ref = _LeNet().eval()
    net = copy.deepcopy(ref).npu()
    x = torch.randn(4, 1, 28, 28)
    conv = torch.nn.Conv2d(3, 8, 3)
    img = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(net(x.npu()).cpu(), ref(x), rtol=1e-4, atol=1e-4)
            for f in (lambda t: conv(t), lambda t: F.relu(conv(t)), lambda t: F.max_pool2d(conv(t), 2)):
                want = f(img).view(2, -1)
                conv.npu()
                got = f(img.npu()).view(2, -1)
                conv.cpu()
                torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


class _Block(torch.nn.Module):
    """A ResNet bottleneck with a strided projection shortcut (torchvision's layout)."""

    def __init__(self, c: int, mid: int, out: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(c, mid, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = torch.nn.Conv2d(mid, mid, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = torch.nn.Conv2d(mid, out, 1, bias=False), torch.nn.BatchNorm2d(out)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(c, out, 1, stride, bias=False), torch.nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = F.relu(self.bn2(self.conv2(y)), inplace=True)
        y = self.bn3(self.conv3(y))
        y += self.down(x)
        return F.relu(y, inplace=True)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                            _Block(32, 16, 64, 1), _Block(64, 32, 128, 2), torch.nn.AdaptiveAvgPool2d(1))
    for mod in m.modules():  # non-trivial statistics, so the batch norms compute something
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
    return m.eval()


def _layouts(m: torch.nn.Module, x: torch.Tensor) -> list[tuple[bool, bool]]:
    seen: list[tuple[bool, bool]] = []
    hooks = [mod.register_forward_hook(lambda mod, i, o: seen.append(_layout_of(o)))
             for mod in m.modules() if not list(mod.children())]
    try:
        m(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("fmt", FORMATS)
def test_resnet_style_blocks_keep_the_model_format_at_every_layer(fmt: torch.memory_format,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer's result has torch CPU's layout (channels-last throughout for a
    ``model.to(memory_format=torch.channels_last)`` model, contiguous throughout for a plain one),
    the output matches, ``model(x).view(n, -1)`` works, and a channels-last model's calls after the
    first pay no layout copy."""
    ref = _model().to(memory_format=fmt)
    npu = copy.deepcopy(ref).npu()
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=fmt)
    xn = x.npu()
    reorders: list[tuple[int, ...]] = []
    real = _layout._reorder

    def counted(a: object, out: object) -> None:
        reorders.append(getattr(a, "shape", ()))
        real(a, out)  # type: ignore[arg-type]

    monkeypatch.setattr(_layout, "_reorder", counted)
    with torch.no_grad():
        want = _layouts(ref, x)
        for call in range(3):
            reorders.clear()
            assert _layouts(npu, xn) == want, call
            got = npu(xn)
            torch.testing.assert_close(got.view(2, -1).cpu(), ref(x).view(2, -1), rtol=1e-4, atol=1e-4)
            if fmt == CL and call:
                assert reorders == []
    assert all(cl for _, cl in want[:-1]) if fmt == CL else all(c for c, _ in want)


def test_channels_last_weights_with_a_contiguous_input_give_channels_last_results() -> None:
    """As on torch's CPU: a channels-last model fed a contiguous image computes channels-last from its
    first conv on (the weight decides), and its flattened output matches."""
    ref = _model().to(memory_format=CL)
    npu = copy.deepcopy(ref).npu()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = _layouts(ref, x)
        for _ in range(2):
            assert _layouts(npu, x.npu()) == want
            torch.testing.assert_close(npu(x.npu()).flatten(1).cpu(), ref(x).flatten(1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [1, 3])
def test_a_one_channel_results_strides_are_torch_cpus(k: int) -> None:
    """A size-1 dim's stride is free to ATen but ``Tensor.stride()`` shows it: a 1-channel conv's
    first result (GE's single-op path) said ``(25, 1, 5, 1)`` where torch's CPU says ``(25, 25, 5, 1)``."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 1, k, padding=k // 2).eval()
    npu = copy.deepcopy(conv).npu()
    x = torch.randn(2, 8, 5, 5)
    with torch.no_grad():
        want = conv(x)
        for _ in range(3):
            got = npu(x.npu())
            assert got.stride() == want.stride()
            torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
