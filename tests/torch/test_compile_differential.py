"""Differential tests of torch.compile(backend="npu") against eager PyTorch: values, dtypes,
devices, shapes, strides, the inputs after the call (in-place writes) and aliasing. Each case
here gave something other than eager before its fix (ops the ONNX export gets wrong, results on
the wrong device, lost input writes, views returned as copies, contiguous strides where eager's
were not)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import pycann.torch  # noqa: E402,F401
from pycann.torch.compile import graph_report, reset_graph_report  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    warnings.simplefilter("ignore")


def _clone(a: Any) -> Any:
    return a.clone() if isinstance(a, torch.Tensor) else a


def _same(got: Any, want: Any, strides: bool = True) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert (got.dtype, got.device, got.shape) == (want.dtype, want.device, want.shape)
        if strides and want.numel() > 1:  # a size-1 dim's stride is free
            gs = [st for n, st in zip(got.shape, got.stride()) if n > 1]
            ws = [st for n, st in zip(want.shape, want.stride()) if n > 1]
            assert gs == ws, (got.stride(), want.stride())
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-5, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, strides)
    else:
        assert got == want


def _check(fn: Callable[..., Any], *args: Any, strides: bool = True, **kw: Any) -> Any:
    """``fn`` compiled with the npu backend against eager on copies of ``args``: the results and
    the arguments afterwards. Returns the compiled call's result and arguments."""
    ea, ca = [_clone(a) for a in args], [_clone(a) for a in args]
    want = fn(*ea)
    got = torch.compile(fn, backend="npu", **kw)(*ca)
    _same(got, want, strides)
    _same(ca, ea)
    return got, ca


# ---------------------------------------------------------------- ops the ONNX export gets wrong

_PADS_1D = [(-1, 2), (2, -1), (-2, -1), (-1, 0), (0, -3), (1, 1), (3, 0)]


@pytest.mark.parametrize("mode", ["circular", "reflect", "replicate", "constant"])
def test_pad_with_negative_and_mixed_pads(mode: str) -> None:
    """Circular pads with a negative pad were exported as wrong slices (``(-1, 2)`` on 4 columns
    gave 2 columns of other values; ORT on the exported model agrees with the wrong answer): they
    are rewritten as a crop then a circular pad, PyTorch's own order. Reflect, replicate and
    constant pads export right and are kept as a guard."""
    x1 = torch.arange(1.0, 6.0).reshape(1, 1, 5).to("npu")
    x2 = torch.arange(1.0, 21.0).reshape(1, 1, 4, 5).to("npu")
    x3 = torch.arange(1.0, 61.0).reshape(1, 1, 3, 4, 5).to("npu")
    cases = [(x1, p) for p in _PADS_1D if mode != "reflect" or max(p) < 4]
    cases += [(x2, p) for p in [(-1, 2, 1, -2), (2, -1, -1, 0), (-1, -1, -1, -1), (0, 2, -2, 1)]]
    cases += [(x3, (-1, 2, 1, -2, -1, 1))]
    for x, p in cases:
        torch._dynamo.reset()  # else the pads become symbolic after two (the ATen path, checked below)
        _check(lambda x, p=p: F.pad(x, p, mode=mode), x)
    assert all(r.compiled for r in graph_report()), [(r.kind, r.compiled, r.reason) for r in graph_report() if not r.compiled]
    torch._dynamo.reset()
    for x, p in cases[:3]:
        _check(lambda x, p=p: F.pad(x, p, mode=mode), x)


def test_circular_pad_repro_from_the_report() -> None:
    x = torch.arange(4.0).reshape(1, 1, 4).to("npu")
    got, _ = _check(lambda x: F.pad(x, (-1, 2), mode="circular"), x)
    assert got.cpu().flatten().tolist() == [1.0, 2.0, 3.0, 1.0, 2.0]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_floor_division_of_negative_numbers(dtype: torch.dtype) -> None:
    """``//`` / ``floor_divide`` was exported as a truncating Div (-6 // 5 gave -1): rewritten as
    ``div(rounding_mode="floor")``, on GE."""
    x = (torch.arange(12) - 6).reshape(3, 4).to(dtype).to("npu")
    d = (torch.arange(12) % 5 - 7).reshape(3, 4).to(dtype).to("npu")
    _check(lambda x: x // 5, x)
    _check(lambda x: x // 0.7 if x.is_floating_point() else x // 3, x)
    _check(lambda x: torch.floor_divide(x, 4) + x.floor_divide(-3), x)
    assert all(r.compiled for r in graph_report())
    _check(lambda x, d: x // d, x, d)  # integers by a tensor run eagerly (a zero divisor must raise)
    assert graph_report()[-1].compiled == dtype.is_floating_point


def test_integer_division_by_a_zero_tensor_raises_as_eager() -> None:
    """A plan's integer Div/Mod gave 0 for a zero divisor where eager raises ZeroDivisionError
    (ONNX leaves it undefined): integer division and remainder by a tensor run eagerly."""
    cases = [lambda a, b: a // b, lambda a, b: torch.remainder(a, b), lambda a, b: torch.fmod(a, b),
             lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda a, b: a.int() % b.int()]
    a = torch.tensor([5, -3, 7]).to("npu")
    for fn in cases:
        torch._dynamo.reset()
        c = torch.compile(fn, backend="npu")
        b = torch.tensor([2, 1, 2]).to("npu")
        _same(c(a, b), fn(a, b))
        b = torch.tensor([2, 0, 3]).to("npu")
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            c(a, b)


def test_floor_division_forms_that_stay_eager() -> None:
    x = (torch.arange(12) - 6).reshape(3, 4).to("npu")
    _check(lambda x: 7 // (x + 20), x)

    def inplace(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y //= 4
        return y

    _check(inplace, x)
    assert any("floor" in r.reason for r in graph_report())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.bool])
def test_cumsum_of_small_ints_gives_int64(dtype: torch.dtype) -> None:
    """The exporter kept an int32 cumsum int32 (PyTorch promotes to int64; a position-id
    ``mask.int().cumsum(1)``) and made an invalid model for bool."""
    x = (torch.arange(12).reshape(3, 4) % 3 == 0).to(dtype).to("npu")
    _check(lambda x: x.cumsum(1), x)
    _check(lambda x: torch.cumsum(x, 0) * 2, x)


# ---------------------------------------------------------------- devices

def test_cpu_inputs_moved_to_the_npu_inside_give_npu_results() -> None:
    x = torch.arange(1.0, 5.0)
    _check(lambda x: x.to("npu") * 2, x)
    _check(lambda x: (x.npu() + 1).sum(), x)
    _check(lambda x: (x.to("npu") * 2, x + 1), x)


def test_npu_inputs_moved_to_the_cpu_inside_give_cpu_results() -> None:
    x = torch.arange(1.0, 5.0).to("npu")
    _check(lambda x: x.cpu() + 1, x)
    _check(lambda x: (x + 1, x.cpu() * 2), x)


def test_a_tensor_made_on_the_npu_without_inputs_is_an_npu_tensor() -> None:
    x = torch.randn(3).to("npu")
    _check(lambda x: (torch.full((2,), 7, device=x.device), x * 2), x)
    _check(lambda x: torch.arange(4, device="npu") * 3, x)


# ---------------------------------------------------------------- in-place writes and views

def test_in_place_writes_to_inputs_are_kept() -> None:
    x = torch.randn(3, 4).to("npu")
    _check(lambda x: x.add_(1), x)
    _check(lambda x: (x.mul_(2), x + 1)[1], x)
    _check(lambda x: x[0].zero_(), x)

    def setitem(x: torch.Tensor) -> torch.Tensor:
        x[1] = 5.0
        return x.sum()

    _check(setitem, x)
    _check(lambda x: F.relu(x, inplace=True) * 2, x)


def test_returned_views_alias_the_input() -> None:
    x = torch.randn(3, 4).to("npu")
    got, args = _check(lambda x: x[1:], x)
    got.add_(1)
    _same(args[0][1:], got)
    got, args = _check(lambda x: (x.t(), x * 2), x)
    assert got[0].data_ptr() == args[0].data_ptr()


def test_buffer_updated_in_forward() -> None:
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("n", torch.zeros(()))
            self.register_buffer("last", torch.zeros(4))
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.n += 1
            self.last.copy_(x.mean(0))
            return self.lin(x) * self.n

    torch.manual_seed(0)
    eager = Counter().to("npu").eval()
    comp = Counter().to("npu").eval()
    comp.load_state_dict(eager.state_dict())
    c = torch.compile(comp, backend="npu")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4).to("npu")
            _same(c(x), eager(x))
            _same(comp.n, eager.n)
            _same(comp.last, eager.last)


# ---------------------------------------------------------------- strides

def test_output_strides_are_eager_strides() -> None:
    x = torch.randn(3, 4).to("npu")
    _check(lambda x: (x * 2).t(), x)
    _check(lambda x: x * 2, x.t())
    _check(lambda x: (x * 2)[:, :1].expand(3, 4), x)
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).to("npu")
    _check(lambda x: torch.relu(x) + 1, cl)
    assert all(r.compiled for r in graph_report())


# ---------------------------------------------------------------- more export value errors

_EXPORT_WRONG = {
    "mean of nothing": lambda x, i: x[:0].mean(0) + 1,
    "var of nothing": lambda x, i: x[:0].var(0) + 1,
    "std_mean of nothing": lambda x, i: torch.std_mean(x[:, :0], 1)[0],
    "softplus threshold": lambda x, i: F.softplus(x * 10, beta=2, threshold=5),
    "logsigmoid below -88": lambda x, i: F.logsigmoid(x * 200),
    "embedding max_norm": lambda x, i: F.embedding(i % 3, x.t().contiguous() * 3, max_norm=0.5),
    "index_put accumulate": lambda x, i: torch.zeros_like(x).index_put((i // 2,), x, accumulate=True),
    "index_put_ accumulate": lambda x, i: torch.zeros_like(x).index_put_((i // 2,), x, True) * 1,
    "index_add": lambda x, i: torch.zeros_like(x).index_add(0, i // 2, x),
    "clamp of ints by floats": lambda x, i: torch.clamp(i, 0.5, 1.5),
}


@pytest.mark.parametrize("name", list(_EXPORT_WRONG))
def test_ops_the_export_gets_wrong_run_eagerly(name: str) -> None:
    """The TorchScript exporter's values differ from eager's for these (ORT agrees with the
    exported model): 0 for a mean/var over nothing (eager NaN), softplus's threshold and
    embedding's max_norm ignored, Log(Sigmoid(x)) = -inf, ScatterND without the sum over repeated
    indices, an int64 clamp by floats (eager float). Each graph runs eagerly instead."""
    fn = _EXPORT_WRONG[name]
    x = torch.randn(4, 3).to("npu")
    i = torch.arange(4).to("npu")
    _check(fn, x, i)
    assert not graph_report()[0].compiled and graph_report()[0].reason


@pytest.mark.parametrize("name", ["mean of nothing", "var of one", "std_mean of nothing"])
def test_empty_reductions_on_the_aten_path(name: str) -> None:
    """A graph with symbolic sizes (the ATen path): ``aten.mean`` over nothing was ReduceMean's 0
    and ``var_mean`` of one element with correction 1 clamped its factor to 0 (eager: NaN)."""
    fn = {"mean of nothing": lambda x: x[:0].mean(0) + x.sum(0),
          "var of one": lambda x: torch.var_mean(x[:1], 0)[0] + x.sum(0),
          "std_mean of nothing": lambda x: torch.std_mean(x[:, :0], 1)[1].sum() + x}[name]
    c = torch.compile(fn, backend="npu")
    for n in (4, 6, 8):
        x = torch.randn(n, 3).to("npu")
        _same(c(x), fn(x))
    assert any(r.kind == "aten inference" for r in graph_report())


def test_aten_path_outputs_on_eager_devices_with_eager_strides() -> None:
    """Symbolic sizes (the ATen path): a GE partition returned its outputs on its inputs' device
    and contiguous; ``.cpu()`` / ``.npu()`` inside and transposed or channels_last results now
    come back as eager gives them."""
    cases = [(lambda x: (x * 2).cpu(), lambda n: torch.randn(n, 4).to("npu")),
             (lambda x: x.npu() * 2 + 1, lambda n: torch.randn(n, 4)),
             (lambda x: (x * 2).t(), lambda n: torch.randn(n, 4).to("npu")),
             (lambda x: torch.relu(x) + 1,
              lambda n: torch.randn(n, 3, 4, 5).to(memory_format=torch.channels_last).to("npu"))]
    for fn, make in cases:
        torch._dynamo.reset()
        c = torch.compile(fn, backend="npu")
        for n in (2, 3, 5):
            x = make(n)
            _same(c(x.clone()), fn(x.clone()))
    assert any(r.kind == "aten inference" and r.compiled for r in graph_report())


@pytest.mark.parametrize("grad", [False, True])
def test_conv_of_a_channels_last_input_is_channels_last(grad: bool) -> None:
    """Eager (CPU, and the npu) gives a conv of a channels_last input channels_last strides;
    Dynamo's npu fake tensors said contiguous (ATen's meta conv propagates the format for CPU/CUDA
    only), so the compiled result was contiguous. Layouts now come from a fake run on the CPU."""
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3).requires_grad_(grad)
    fn = lambda x, w: F.conv2d(x, w, padding=1) * 2  # noqa: E731
    want = fn(x, w)  # torch CPU
    for dev in ("cpu", "npu"):
        torch._dynamo.reset()
        got = torch.compile(fn, backend="npu")(x.to(dev), w.detach().to(dev).requires_grad_(grad))
        assert got.stride() == want.stride() and got.device.type == dev
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)


def test_a_graph_aot_autograd_cannot_trace_runs_eagerly() -> None:
    """floor_divide of a tensor that requires grad: eager runs it (the quotient has no grad_fn),
    AOTAutograd's joint trace raised "derivative for aten::floor_divide is not implemented" (eager
    raises it at backward only) and the call failed with BackendCompilerFailed."""
    x = torch.randn(3, 4).to("npu")
    w = torch.randn(4, 2).to("npu").requires_grad_()
    fn = lambda x, w: (x @ w) // 0.5 + (x @ w)  # noqa: E731
    got = torch.compile(fn, backend="npu")(x, w)
    want = fn(x, w)
    _same(got, want)
    assert any("AOTAutograd failed" in r.reason for r in graph_report())


def test_a_float_argument_is_not_baked_into_the_plan() -> None:
    """Called with a second float, Dynamo makes it a 0-dim float64 input read by ``.item()``; the
    ONNX export traced that number as a constant, so every later call used the second call's
    float (``f(x, 1.5)`` gave ``x * 0.7 + 1``)."""
    fn = lambda x, a: x * a + 1  # noqa: E731
    c = torch.compile(fn, backend="npu")
    x = torch.randn(3, 4).to("npu")
    for a in (0.5, 0.7, 1.5, -2.25):
        _same(c(x, a), fn(x, a))


def test_item_in_the_graph_is_read_each_call() -> None:
    """``capture_scalar_outputs``: ``.item()`` inside the graph was a constant of the first call."""
    fn = lambda x: x * x.sum().item() + x.max().item()  # noqa: E731
    rep = lambda x: x.repeat(int(x[0, 0].item()) + 1, 1).sum(0)  # noqa: E731
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        c, crep = torch.compile(fn, backend="npu"), torch.compile(rep, backend="npu")
        for k in range(3):
            x = torch.randn(2, 3).to("npu") + k
            _same(c(x), fn(x))
            xi = torch.full((2, 3), float(k)).to("npu")
            _same(crep(xi), rep(xi))


@pytest.mark.parametrize("name", ["randn", "rand_like", "dropout"])
def test_random_ops_follow_torch_manual_seed(name: str) -> None:
    """A GE plan's random ops drew from their own generator: ``torch.manual_seed`` did not make
    a compiled call reproducible (eager and Inductor are). They run on torch's generator now."""
    fn = {"randn": lambda x: x + torch.randn(64, device=x.device),
          "rand_like": lambda x: x * torch.rand_like(x),
          "dropout": lambda x: F.dropout(x + 1, 0.5, training=True)}[name]
    c = torch.compile(fn, backend="npu")
    x = torch.ones(64).to("npu")
    with torch.no_grad():
        torch.manual_seed(3)
        a = c(x)
        b = c(x)
        torch.manual_seed(3)
        a2 = c(x)
    assert torch.equal(a.cpu(), a2.cpu()) and not torch.equal(a.cpu(), b.cpu())
    if name != "dropout":  # the same draws as eager (dropout is decomposed: other draws, same law)
        torch.manual_seed(3)
        _same(a, fn(x))


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_index_out_of_range_raises_eagers_exception(dynamic: bool) -> None:
    """A plan whose Gather met an index out of range raised pycann's KernelError (neither
    IndexError nor RuntimeError, so ``except IndexError`` missed it); the call now runs eagerly
    and raises eager's exception."""
    cases = [(lambda a, b: a[b] * 2, IndexError), (lambda a, b: torch.gather(a, 0, b) + 1, RuntimeError),
             (lambda a, b: F.embedding(b, a[:, None]) * 2, IndexError)]
    for fn, exc in cases:
        torch._dynamo.reset()
        c = torch.compile(fn, backend="npu", dynamic=dynamic)
        a = torch.arange(5.0).to("npu")
        good = torch.tensor([0, 4, 1]).to("npu")
        _same(c(a, good), fn(a, good))
        bad = torch.tensor([0, 7, 1]).to("npu")
        with pytest.raises(exc) as want:
            fn(a, bad)
        with pytest.raises(exc) as got:
            c(a, bad)
        assert str(got.value) == str(want.value)
        assert any(r.compiled for r in graph_report())


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_compiled_optimizer_step(opt: str) -> None:
    """``torch.compile(opt.step)``: Dynamo holds the parameters as graph attributes (get_attr)
    and updates them with ``torch._foreach_add_``; the writes were not seen (their fakes keep
    version 0), the ONNX export's trace applied the step to the real parameters, failed, and the
    eager fallback applied it again (SGD, Adam: other parameters than eager's)."""
    import copy

    torch.manual_seed(0)
    m1 = torch.nn.Linear(4, 3).to("npu")
    m2 = copy.deepcopy(m1)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.01)}[opt]
    o1, o2 = make(m1.parameters()), make(m2.parameters())
    step = torch.compile(o2.step, backend="npu")
    for _ in range(3):
        x = torch.randn(5, 4).to("npu")
        m1(x).sum().backward()
        m2(x).sum().backward()
        o1.step()
        step()
        o1.zero_grad()
        o2.zero_grad()
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(p2.detach().cpu(), p1.detach().cpu(), rtol=1e-5, atol=1e-6)


def test_the_export_traces_copies_of_graph_attributes() -> None:
    """``_host_graph``: a tensor attribute of the graph is traced as a host copy, so an in-place
    op on it does not write the caller's tensor (nor meet an npu tensor among host ones)."""
    from pycann.torch.compile import _host_graph

    root = torch.nn.Module()
    root.k = torch.ones(3).to("npu")
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    k = graph.get_attr("k")
    graph.call_method("add_", (k, 1.0))
    graph.output(graph.call_function(torch.add, (x, k)))
    gm = torch.fx.GraphModule(root, graph)
    out = _host_graph(gm)(torch.zeros(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert root.k.device.type == "npu" and root.k.cpu().tolist() == [1.0, 1.0, 1.0]
