"""The npu device against PyTorch's out-of-tree device contract (cf. PyTorch's
test/cpp_extensions open_registration tests and test_privateuseone_python_backend.py): tensor
creation and moves, ops, storage, views, autograd, optimizers, serialization, streams, events,
rng, memory, autocast, DataLoader pinning. Goldens are torch's CPU results."""

from __future__ import annotations

import io
import re

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402
from pycann.torch import Provider  # noqa: E402


def test_device_registered() -> None:
    assert torch._C._get_privateuse1_backend_name() == "npu"
    assert torch.npu is pycann.torch.npu
    assert torch.npu.is_available() and torch.npu.device_count() >= 1
    x = torch.arange(6.0).reshape(2, 3).npu()
    assert x.device == torch.device("npu", 0) and x.is_npu and not torch.ones(1).is_npu
    assert torch.equal(x.cpu(), torch.arange(6.0).reshape(2, 3))


def test_ops_match_cpu() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    an, bn = a.npu(), b.npu()
    for f in (lambda x, y: x + y, lambda x, y: x * y - y, lambda x, y: torch.relu(x) / (y.abs() + 1),
              lambda x, y: x @ y.T, lambda x, y: torch.softmax(x, 1), lambda x, y: x.sum(0) + y.mean(),
              lambda x, y: torch.where(x > y, x, y), lambda x, y: torch.cat([x, y]).sigmoid()):
        got = f(an, bn)
        assert got.device.type == "npu"
        torch.testing.assert_close(got.cpu(), f(a, b))


def test_scalar_overloads_match_cpu() -> None:
    """ATen's Scalar overloads (``x % 3``, ``fmod``, ``&``, ``xlogy``, ``copysign``) reach the npu as the
    Tensor overload with a wrapped number, a Python number in the boxed kernel: the values and the
    result dtype are torch CPU's (it was "Unable to cast 3 to Tensor")."""
    import warnings

    ia, fa = torch.arange(-5, 5, dtype=torch.int32), torch.linspace(-3, 3, 10)
    cases = (lambda i, f: i % 3, lambda i, f: torch.fmod(f, 1.5), lambda i, f: torch.fmod(i, 2.5),
             lambda i, f: i & 3, lambda i, f: (i > 0) | True, lambda i, f: torch.xlogy(f.abs(), 2),
             lambda i, f: torch.copysign(i, -1), lambda i, f: f.half() % 2, lambda i, f: i[3] % 4,
             lambda i, f: i.clone().remainder_(3), lambda i, f: torch.fmod(f, 3, out=torch.empty_like(f)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the CPU fallback's warning)
        for f in cases:
            want, got = f(ia, fa), f(ia.npu(), fa.npu())
            assert got.device.type == "npu"
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)  # (dtypes too)


def test_scalars_out_of_the_tensors_dtype_keep_their_value() -> None:
    """A Python number that the tensor's dtype cannot hold (-3 beside uint8, 300 beside int8, 1e5 or
    2049 beside float16) keeps its value as a wrapped number does: it was made a tensor of the result
    dtype, so ``torch.div(uint8, -3)`` divided by 253, ``int8 / 300`` raised "cannot be converted to
    type int8 without overflow" and ``half * 1e5`` gave inf / nan."""
    import warnings

    u, i8 = torch.tensor([1, 5, 200], dtype=torch.uint8), torch.tensor([1, 5, 100], dtype=torch.int8)
    h = torch.tensor([0.001, 3.0, 7.0], dtype=torch.float16)
    cases = (lambda: torch.div(u, -3), lambda: torch.copysign(u, -3), lambda: torch.xlogy(u, -3),
             lambda: i8 / 300, lambda: torch.floor_divide(i8, 300), lambda: u & 300,
             lambda: h * 1e5, lambda: h * 2049, lambda: torch.where(u > 3, h, 2049.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the CPU fallback's warning)
        for f in cases:
            want = f()
            u, i8, h = u.npu(), i8.npu(), h.npu()
            got = f()
            u, i8, h = u.cpu(), i8.cpu(), h.cpu()
            assert got.device.type == "npu"
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)  # (dtypes too)


def test_cpu_tensors_beside_npu_ones_raise_as_on_a_device() -> None:
    """PyTorch's rule on CUDA (and torch_npu's): no CPU tensor in an op on npu tensors, except a 0-dim
    one and an index; code that mixes them would otherwise pass here and fail on a real NPU."""
    lin = torch.nn.Linear(4, 2).npu()
    conv = torch.nn.Conv2d(3, 4, 3).npu()
    for f in (lambda: lin(torch.randn(1, 4)), lambda: conv(torch.randn(1, 3, 8, 8)),
              lambda: torch.ones(2).npu() + torch.ones(2), lambda: torch.ones(1, 2).npu().mm(torch.ones(2, 2))):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*npu:0 and cpu"):
            f()
    x = torch.arange(4.0).npu()
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.arange(4.0) * 2)  # a 0-dim CPU tensor: a scalar
    assert torch.equal(x[torch.tensor([0, 3])].cpu(), torch.tensor([0.0, 3.0]))  # CPU indices
    y = torch.zeros(4).npu()
    y[torch.tensor([1, 2])] = torch.tensor(5.0)
    assert torch.equal(y.cpu(), torch.tensor([0.0, 5.0, 5.0, 0.0]))
    # all on npu: runs. Not bit-equal to torch's CPU linear, which adds the bias before the products
    # (pycann after them): 1 ulp apart for some weights (1.0210847 vs 1.0210845 after test_ops_match_cpu's draws)
    torch.testing.assert_close(lin(torch.ones(1, 4).npu()).cpu(),
                               torch.nn.functional.linear(torch.ones(1, 4), lin.weight.cpu(), lin.bias.cpu()),
                               rtol=1e-6, atol=1e-7)


_MIXED = "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"


@pytest.mark.parametrize("case", ["atan2", "cat", "add_out", "atan2_out", "add_"])
def test_out_forms_with_a_cpu_tensor_raise_pytorchs_error(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ops that reach the npu as their out= / in-place form raise PyTorch's RuntimeError for a CPU
    tensor too (``atan2``: PyTorch's own check). The temporary npu tensors of the expression are
    freed while the error unwinds: the error must come through (it used to turn into "SystemError:
    error return without exception set") and their memory be counted as freed."""
    unraisable: list[object] = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    ops = {"atan2": lambda: torch.atan2(torch.ones(2).npu(), torch.ones(2)),
           "cat": lambda: torch.cat([torch.ones(2).npu(), torch.ones(2)]),
           "add_out": lambda: torch.add(torch.ones(2).npu(), torch.ones(2), out=torch.empty(2, device="npu")),
           "atan2_out": lambda: torch.atan2(torch.ones(2).npu(), torch.ones(2), out=torch.empty(2, device="npu")),
           "add_": lambda: torch.ones(2).npu().add_(torch.ones(2))}
    base = torch.npu.memory_allocated()
    stats = torch.npu.memory_stats()
    for _ in range(2):
        # not SystemError (no RuntimeError subclass); the ExceptionInfo is not kept: its traceback
        # holds this frame, a cycle that would keep the temporaries alive until a gc run
        with pytest.raises(RuntimeError, match="^" + re.escape(_MIXED)):
            ops[case]()
    assert torch.npu.memory_allocated() == base and not unraisable
    after = torch.npu.memory_stats()
    made = after["allocation.all.allocated"] - stats["allocation.all.allocated"]
    assert made >= 2 and after["allocation.all.freed"] - stats["allocation.all.freed"] == made
    x = torch.ones(2).npu()
    assert torch.equal(torch.atan2(x, x.clone()).cpu(), torch.atan2(torch.ones(2), torch.ones(2)))


def test_memory_of_a_storage_outlives_its_python_objects() -> None:
    """The memory counters follow the storage, not the Python objects over it: a view keeps the
    memory counted after its base and every Python storage object went."""
    base = torch.npu.memory_allocated()
    x = torch.empty(1024, device="npu")
    x.untyped_storage()  # a Python storage object made and dropped: the memory stays counted
    v = x[512:]
    del x
    assert torch.npu.memory_allocated() - base == 4096
    del v
    assert torch.npu.memory_allocated() == base


def test_views_share_storage_and_in_place_writes() -> None:
    x = torch.zeros(4, 4, device="npu")
    v = x[1:3, ::2]
    t = x.t()
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    v.fill_(7.0)
    t[0, 0] = 5.0
    ref = torch.zeros(4, 4)
    ref[1:3, ::2] = 7.0
    ref[0, 0] = 5.0
    torch.testing.assert_close(x.cpu(), ref)
    y = torch.ones(3, device="npu")
    torch.add(y, y, out=(o := torch.empty(0, device="npu")))
    assert o.shape == (3,) and o.device.type == "npu" and torch.equal(o.cpu(), torch.full((3,), 2.0))
    y.resize_(10)
    assert y.shape == (10,) and torch.equal(y[:3].cpu(), torch.ones(3))


def test_storage_and_dtypes() -> None:
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.uint8):
        c = torch.arange(5).to(dt)
        n = c.npu()
        assert n.dtype == dt and n.untyped_storage().device.type == "npu"
        assert torch.equal(n.cpu(), c)
    s = torch.ones(3, device="npu").untyped_storage()
    assert s.nbytes() == 12 and s.device.type == "npu"


def test_deepcopy_and_storage_constructors_on_npu() -> None:
    """copy.deepcopy of an npu module (UntypedStorage.clone) and torch.UntypedStorage /
    TypedStorage made with device="npu" crashed the process (no C++ allocator for the device);
    they now allocate through the npu kernels, with the same values and device."""
    import copy

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).npu()
    m2 = copy.deepcopy(m)
    for a, b in zip(m.parameters(), m2.parameters()):
        assert b.device.type == "npu" and a.data_ptr() != b.data_ptr()
        assert torch.equal(a.cpu(), b.cpu())
    x = torch.randn(1, 3, 6, 6)
    torch.testing.assert_close(m2.cpu().eval()(x), copy.deepcopy(m).cpu().eval()(x))
    s = torch.UntypedStorage(16, device="npu")
    assert s.device.type == "npu" and s.nbytes() == 16
    assert torch.TypedStorage(4, device="npu", dtype=torch.float32).size() == 4
    assert torch.TypedStorage(device="npu", dtype=torch.float32).size() == 0
    assert torch.UntypedStorage(8).device.type == "cpu"
    with pytest.raises(TypeError, match="byte count"):
        torch.UntypedStorage([1, 2], device="npu")


def test_autograd_and_optimizer_match_cpu() -> None:
    torch.manual_seed(1)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    net.load_state_dict(ref.state_dict())
    net = net.npu()
    assert all(p.device.type == "npu" for p in net.parameters())
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    xn, yn = x.npu(), y.npu()
    for model, opt, xx, yy in ((ref, torch.optim.Adam(ref.parameters(), 0.01), x, y),
                               (net, torch.optim.Adam(net.parameters(), 0.01), xn, yn)):
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xx), yy).backward()
            opt.step()
    assert net[0].weight.grad.device.type == "npu"
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_state_dict_save_load_roundtrip() -> None:
    net = torch.nn.Linear(3, 2).npu()
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)  # weights_only default: plain tensors on npu
    assert sd["weight"].device.type == "npu"
    torch.testing.assert_close(sd["weight"].cpu(), net.weight.detach().cpu())
    buf.seek(0)
    cpu_sd = torch.load(buf, map_location="cpu")
    assert cpu_sd["bias"].device.type == "cpu"


def test_streams_and_events() -> None:
    s = torch.npu.Stream()
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with torch.npu.stream(s):
        assert torch.npu.current_stream() is s
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        torch.ones(100, 100, device="npu").sum()
        end.record()
    end.synchronize()
    assert s.query() and end.query() and start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.npu.Event().elapsed_time(torch.npu.Event())
    torch.npu.synchronize()


def test_rng_is_per_device_and_reproducible() -> None:
    torch.npu.manual_seed(123)
    a = torch.randn(5, device="npu")
    state = torch.npu.get_rng_state()
    b = torch.randn(5, device="npu")
    torch.npu.set_rng_state(state)
    torch.testing.assert_close(torch.randn(5, device="npu").cpu(), b.cpu())
    torch.npu.manual_seed(123)
    torch.testing.assert_close(torch.randn(5, device="npu").cpu(), a.cpu())
    assert torch.npu.initial_seed() == 123


def test_memory_counters_follow_tensor_lifetimes() -> None:
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    x = torch.empty(1024, 1024, device="npu")  # 4 MiB
    assert torch.npu.memory_allocated() - base == 4 << 20
    assert torch.npu.max_memory_allocated() >= base + (4 << 20)
    del x
    assert torch.npu.memory_allocated() == base
    assert torch.npu.memory_stats()["allocated_bytes.all.current"] == base


def test_autocast_runs_matmul_in_float16() -> None:
    a = torch.randn(4, 4, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        y = a @ a
    assert y.dtype == torch.float16
    with torch.npu.amp.autocast():
        assert (a @ a).dtype == torch.float16


def test_autocast_covers_cudas_whole_lower_precision_list() -> None:
    """CUDA's (and torch_npu's) float16 list has more than mm/linear/conv: mv, addmv, addr, einsum,
    multi_dot, vecdot, scaled_dot_product_attention and the RNN cells ran in float32 under
    torch.autocast("npu") (einsum and multi_dot take their tensors in a list). Values: the op on the
    float16-cast inputs, as CUDA computes it."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    a, v, q = torch.randn(4, 4), torch.randn(4), torch.randn(1, 2, 3, 4)
    lstm = torch.nn.LSTM(4, 3)
    lstm_n = torch.nn.LSTM(4, 3)
    lstm_n.load_state_dict(lstm.state_dict())
    lstm_n = lstm_n.npu()
    h = torch.float16
    cases = {"mv": (lambda t, u, r: torch.mv(t, u)), "addmv": (lambda t, u, r: torch.addmv(u, t, u)),
             "addr": (lambda t, u, r: torch.addr(t, u, u)), "einsum": (lambda t, u, r: torch.einsum("ij,jk->ik", t, t)),
             "multi_dot": (lambda t, u, r: torch.linalg.multi_dot([t, t, t])),
             "vecdot": (lambda t, u, r: torch.linalg.vecdot(t, t)),
             "sdpa": (lambda t, u, r: F.scaled_dot_product_attention(r, r, r))}
    with torch.autocast("npu", dtype=h):
        for name, f in cases.items():
            got = f(a.npu(), v.npu(), q.npu())
            assert got.dtype == h, name
            want = f(a.half().float(), v.half().float(), q.half().float())  # (float16 inputs, float32 math)
            torch.testing.assert_close(got.cpu().float(), want, rtol=2e-2, atol=2e-2, msg=name)
        out, (hn, cn) = lstm_n(a.npu().view(4, 1, 4))
        assert out.dtype == hn.dtype == cn.dtype == h
        # CUDA's float32 list ends with the upsampling ops; its "promote" ops take a float16 result
        # beside a float32 tensor (they raised "expected both vectors to have same dtype")
        hv = v.npu() @ torch.eye(4, device="npu")  # float16
        assert F.interpolate(hv.view(1, 1, 2, 2), scale_factor=2, mode="bilinear").dtype == torch.float32
        torch.testing.assert_close(torch.dot(hv, v.npu()).cpu(), torch.dot(v.half().float(), v), rtol=2e-3, atol=2e-3)
        for name, f in {"scatter_add": lambda t, u: torch.zeros(4, device=u.device).scatter_add(0, torch.arange(4, device=u.device), t),
                        "index_put": lambda t, u: u.index_put((torch.tensor([1], device=u.device),), t[:1]),
                        "tensordot": lambda t, u: torch.tensordot(t, u, dims=1), "cross": lambda t, u: torch.cross(t[:3], u[:3], dim=0),
                        "addcmul": lambda t, u: torch.addcmul(u, t, u)}.items():
            got = f(hv, v.npu())
            assert got.dtype == torch.float32, name
            torch.testing.assert_close(got.cpu(), f(v.half().float(), v), rtol=2e-3, atol=2e-3, msg=name)
    torch.testing.assert_close(out.cpu().float(), lstm(a.view(4, 1, 4))[0], rtol=2e-2, atol=2e-2)


def test_autocast_keeps_losses_norms_and_reductions_in_float32() -> None:
    """CUDA's autocast policy (torch_npu's too): losses, norms, softmax, sums, exp/log run in
    float32 (a float16 loss lost precision and a GradScaler-scaled one overflowed to NaN
    gradients); a reduction given a dtype keeps it; matmuls stay float16."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    a, w, y = torch.randn(6, 8), torch.randn(8, 5), torch.randint(0, 5, (6,))
    an, wn, yn = a.npu(), w.npu(), y.npu()
    with torch.autocast("npu", dtype=torch.float16):
        z = an @ wn
        assert z.dtype == torch.float16
        outs = {"cross_entropy": F.cross_entropy(z, yn), "mse_loss": F.mse_loss(z, torch.zeros_like(z)),
                "softmax": torch.softmax(z, 1), "log_softmax": F.log_softmax(z, 1), "sum": z.sum(),
                "layer_norm": F.layer_norm(z, (5,)), "exp": torch.exp(z)}
        for name, o in outs.items():
            assert o.dtype == torch.float32, name
        assert z.sum(dtype=torch.float16).dtype == torch.float16
    zc = z.cpu().float()  # the float16 logits, widened: what the float32 ops see
    torch.testing.assert_close(outs["cross_entropy"].cpu(), F.cross_entropy(zc, y))
    torch.testing.assert_close(outs["softmax"].cpu(), torch.softmax(zc, 1))
    torch.testing.assert_close(outs["layer_norm"].cpu(), F.layer_norm(zc, (5,)))


def test_a_device_that_does_not_exist_is_refused_where_the_tensor_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """As CUDA's "invalid device ordinal": at creation, not at the first op that meets another device."""
    monkeypatch.setenv("PYCANN_DEVICE_COUNT", "2")
    assert torch.ones(2).to("npu:1").device == torch.device("npu", 1)
    for make in (lambda: torch.randn(2, device="npu:2"), lambda: torch.ones(2).to("npu:5"),
                 lambda: torch.ones(2).npu().to("npu:3")):
        with pytest.raises(RuntimeError, match=r"invalid device ordinal npu:\d: there are 2 npu device\(s\)"):
            make()


def test_report_without_fallbacks_is_one_line() -> None:
    pycann.torch.reset()
    torch.ones(2).npu() + 1
    text = pycann.torch.report().format()
    assert text.startswith("pycann.torch: CPU fallbacks (0 ops;") and len(text.splitlines()) == 1, text


def test_in_place_activations_run_on_host_kernels_without_a_fallback_warning() -> None:
    """MobileNet's ReLU6 (``hardtanh_``) and ``inplace=True`` activations: torch's kernels on the
    npu's host memory, reported as host, no fallback warning (relu6 warned on every MobileNet)."""
    import warnings

    import torch.nn.functional as F

    pycann.torch.reset()
    x = torch.randn(4, 8)
    cases = {"hardtanh_": lambda t: F.relu6(t, inplace=True), "hardswish_": lambda t: F.hardswish(t, inplace=True),
             "hardsigmoid_": lambda t: F.hardsigmoid(t, inplace=True), "leaky_relu_": lambda t: F.leaky_relu(t, inplace=True),
             "elu_": lambda t: F.elu(t, inplace=True), "sigmoid_": lambda t: t.sigmoid_(), "tanh_": lambda t: t.tanh_()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, f in cases.items():
            torch.testing.assert_close(f(x.npu()).cpu(), f(x.clone()), msg=name)
    assert not pycann.torch.report().fallbacks


def test_dataloader_pin_memory() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    batches = list(torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True))
    assert len(batches) == 2 and torch.equal(batches[0][0], torch.tensor([[0.0, 1.0], [2.0, 3.0]]))


def test_report_counts_providers() -> None:
    from pycann.torch import _dispatch

    pycann.torch.reset()
    x = torch.randn(3, 3, device="npu")
    mine = torch.relu(x)  # default: pycann's Relu through GE's single-op path
    _dispatch.use_kernels("host")
    try:
        host = torch.relu(x)  # torch's kernel on the host memory
    finally:
        _dispatch.use_kernels(None)
    torch.testing.assert_close(mine.cpu(), host.cpu())
    torch.testing.assert_close(host.cpu(), torch.relu(x.cpu()))
    r = pycann.torch.report()
    names = {(s.name, s.provider) for s in r.ops}
    assert ("aten::relu", Provider.PYCANN) in names and ("aten::relu", Provider.HOST) in names
    assert all(0.0 <= r.share(s) <= 1.0 for s in r.ops)
    assert "aten::relu" in r.format(only_fallbacks=False)


def test_api_names_of_torch_npu() -> None:
    for name in ("is_available", "device_count", "set_device", "current_device", "synchronize", "Stream",
                 "Event", "memory_allocated", "max_memory_allocated", "manual_seed", "manual_seed_all",
                 "get_rng_state", "set_rng_state", "current_stream", "default_stream", "stream", "device",
                 "get_device_name", "get_device_properties", "mem_get_info", "empty_cache", "memory_reserved",
                 "reset_peak_memory_stats", "is_bf16_supported", "get_soc_version"):
        assert callable(getattr(torch.npu, name)), name
    with pytest.raises(ValueError, match="does not exist"):
        torch.npu.set_device(torch.npu.device_count())
    torch.npu.set_device(0)
    assert torch.npu.current_device() == 0
    # the first line of most torch_npu training scripts (AttributeError before)
    assert not torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=False)
    assert torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=True)
    assert not torch.npu.is_jit_compile_false()
    # and the next lines (AttributeError: module 'pycann.torch.npu' has no attribute 'matmul' before)
    assert torch.npu.matmul.allow_hf32 is False and torch.npu.conv.allow_hf32 is True  # torch_npu's defaults
    torch.npu.matmul.allow_hf32 = True
    torch.npu.conv.allow_hf32 = False
    assert torch.npu.matmul.allow_hf32 and not torch.npu.conv.allow_hf32
    with pytest.raises(AttributeError):
        torch.npu.matmul.allow_tf32 = True  # type: ignore[attr-defined]
    torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32 = False, True
    # torch_npu's config switch (it was pycann's own config module, which took any attribute)
    assert torch.npu.config.allow_internal_format is False
    torch.npu.config.allow_internal_format = True
    assert torch.npu.config.allow_internal_format is True
    with pytest.raises(AttributeError):
        torch.npu.config.allow_internal_fromat = False  # type: ignore[attr-defined]
    torch.npu.config.allow_internal_format = False
    assert "soc_version" not in dir(torch.npu.config)


def test_dead_activations_free_their_memory() -> None:
    # weights' host views are cached; activations' are not, so their memory goes with them
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3)).eval().npu()
    x = torch.randn(1, 3, 32, 32).npu()
    with torch.no_grad():
        m(x)
        base = torch.npu.memory_allocated()
        for _ in range(3):
            y = m(x)
            assert torch.npu.memory_allocated() - base == y.untyped_storage().nbytes()
            del y
        assert torch.npu.memory_allocated() == base


def test_op_table_names_ops_pycann_has() -> None:
    from pycann.errors import UnsupportedOpError
    from pycann.ops.registry import lookup
    from pycann.torch.optable import CANN_ONLY, HOST_OPS, PYCANN_OPS

    missing = []
    for op_type in sorted({*HOST_OPS.values(), *(p.op_type for p in PYCANN_OPS.values())}):
        try:
            lookup(op_type, "", None)
        except UnsupportedOpError:
            missing.append(op_type)
    assert sorted(missing) == sorted(CANN_ONLY)


def test_torch_kernels_knob_rejects_unknown_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann import config

    monkeypatch.setenv("PYCANN_TORCH_KERNELS", "host")
    assert config.torch_kernels() == "host"
    monkeypatch.delenv("PYCANN_TORCH_KERNELS")
    assert config.torch_kernels() == "pycann"
    monkeypatch.setenv("PYCANN_TORCH_KERNELS", "gpu")
    with pytest.raises(config.ConfigError, match="PYCANN_TORCH_KERNELS='gpu'"):
        config.torch_kernels()


@pytest.mark.parametrize("kind", ["lstm", "gru", "lstm_cell", "gru_cell"])
def test_recurrent_layers_match_cpu(kind: str) -> None:
    """ATen's LSTM / GRU cells call the CUDA-only fused cell ops for PrivateUse1 inputs; on the npu
    they failed ("Could not run 'aten::_thnn_fused_lstm_cell' ... 'CPU' backend"). Outputs, input
    and weight gradients against torch CPU (bidirectional, two layers, with and without biases)."""
    import warnings

    torch.manual_seed(0)
    make = {"lstm": lambda b: torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, bias=b),
            "gru": lambda b: torch.nn.GRU(6, 5, num_layers=2, bidirectional=True, bias=b),
            "lstm_cell": lambda b: torch.nn.LSTMCell(6, 5, bias=b),
            "gru_cell": lambda b: torch.nn.GRUCell(6, 5, bias=b)}[kind]
    for bias in (True, False):
        cpu = make(bias)
        npu = make(bias)
        npu.load_state_dict(cpu.state_dict())
        npu = npu.npu()
        x = torch.randn(4, 3, 6) if kind in ("lstm", "gru") else torch.randn(3, 6)
        xc, xn = x.clone().requires_grad_(), x.npu().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the CPU fallback's warning for other ops)
            outs = [m(v) for m, v in ((cpu, xc), (npu, xn))]
            ys = [o[0] if isinstance(o, tuple) else o for o in outs]
            w = torch.linspace(-1, 1, ys[0].numel()).view(ys[0].shape)
            (ys[0] * w).sum().backward()
            (ys[1] * w.npu()).sum().backward()
        assert ys[1].device.type == "npu"
        torch.testing.assert_close(ys[1].detach().cpu(), ys[0].detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(cpu.named_parameters(), npu.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_record_stream_on_npu_tensors() -> None:
    """``x.record_stream(torch.npu.current_stream())`` (CUDA data prefetchers' pattern, which torch_npu
    supports) raised "unknown parameter type"; with a ``torch.Stream`` it raised "Could not run
    'aten::record_stream' ... 'CPU' backend". Synchronous ops and memory freed with its last tensor
    leave nothing to record: it returns None, and a non-stream still raises."""
    x = torch.ones(3).npu()
    s = torch.npu.Stream()
    with torch.npu.stream(s):
        y = x * 2
    y.record_stream(torch.npu.current_stream())
    y.record_stream(s)
    y.record_stream(torch.Stream(device="npu"))
    with pytest.raises(TypeError, match="must be a Stream"):
        y.record_stream(0)  # type: ignore[arg-type]
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_conjugate_and_negative_views_copy_with_their_values() -> None:
    """A lazy conjugate view of an npu tensor (``c.conj()``, ``x.mH``, ``torch.fft.hfft``'s input)
    killed the process (segmentation fault: the Conjugate fallback resolved ``_copy_from``'s source
    with a clone, itself a ``_copy_from``, without end), and its host view dropped the bit (wrong
    values). Run in a child process so that a regression fails this test, not the session."""
    import subprocess
    import sys

    script = """
import torch, warnings
import pycann.torch
warnings.simplefilter("ignore")
c = torch.randn(3, 3, dtype=torch.complex64)
x = torch.randn(5, 6, 7)
n = c.npu()
cases = [(c.conj(), n.conj().cpu()), (c.conj() * 2, (n.conj() * 2).cpu()), (c.conj().imag, n.conj().imag.cpu()),
         (c.mH @ c, (n.mH @ n).cpu()), (c.conj().clone(), n.conj().clone().cpu()),
         (torch.fft.hfft(x, n=10, dim=1), torch.fft.hfft(x.npu(), n=10, dim=1).cpu())]
out = torch.zeros(3, 3, dtype=torch.complex64).npu()
out.copy_(n.conj())
cases.append((c.conj(), out.cpu()))
for want, got in cases:
    torch.testing.assert_close(got.resolve_conj().resolve_neg(), want.resolve_conj().resolve_neg(), rtol=1e-5, atol=1e-5)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])


def test_zero_gradients_are_zeros_in_npu_memory() -> None:
    """``aten::_efficientzerotensor`` (autograd's zero gradient: ``sgn`` of a real tensor, ...) on the
    npu relabelled the CPU kernel's memoryless ZeroTensor: a tensor over no memory, whose values were
    garbage and whose copy to the CPU killed the process. It is zeros in npu memory now (child
    process: a regression fails this test, not the session)."""
    import subprocess
    import sys

    script = """
import torch, warnings
import pycann.torch
warnings.simplefilter("ignore")
z = torch._efficientzerotensor((2, 3), dtype=torch.float16, device="npu")
assert z.device.type == "npu" and z.dtype == torch.float16
assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=torch.float16))
for dev in ("cpu", "npu"):
    x = torch.tensor([-2.0, 3.0, -0.5], device=dev, requires_grad=True)
    torch.sgn(x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.zeros(3)), x.grad
    x.grad = None
    (torch.sgn(x) * x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.tensor([-1.0, 1.0, -1.0])), x.grad
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])


_CURRENT_DEVICE_SCRIPT = """
import os, threading, warnings
import torch
import pycann.torch
warnings.simplefilter("ignore")
if LATE:
    os.environ["PYCANN_DEVICE_COUNT"] = "2"  # after the import: set_device installs the resolution
torch.npu.set_device(1)
t = torch.ones(3)
x0 = torch.ones(2, device="npu:0")
made = {"to": t.to("npu"), "to_device": t.to(torch.device("npu")), "to_kw": t.to(device="npu", dtype=torch.float16),
        "npu": t.npu(), "empty": torch.empty(2, device="npu"), "zeros": torch.zeros(2, device="npu"),
        "ones": torch.ones(2, device="npu"), "full": torch.full((2,), 3.0, device="npu"),
        "randn": torch.randn(2, device="npu"), "arange": torch.arange(3, device="npu"),
        "tensor": torch.tensor([1.0], device="npu"), "as_tensor": torch.as_tensor([1.0], device="npu"),
        "asarray": torch.asarray([1.0], device="npu"), "new_tensor": t.new_tensor([1.0], device="npu"),
        "empty_like": torch.empty_like(t, device="npu"), "module": torch.nn.Linear(2, 2).to("npu").weight,
        "npu0_to_npu": x0.to("npu")}
bad = {k: str(v.device) for k, v in made.items() if v.device != torch.device("npu", 1)}
assert not bad, bad
assert torch.equal(made["to"].cpu(), t) and torch.equal(made["tensor"].cpu(), torch.tensor([1.0]))
assert t.to("npu:0").device == torch.device("npu", 0) and x0.device == torch.device("npu", 0)
with torch.npu.device(0):
    assert t.to("npu").device == torch.device("npu", 0) and torch.zeros(1, device="npu").device.index == 0
assert t.to("npu").device.index == 1
seen = []
th = threading.Thread(target=lambda: seen.append((t.to("npu").device.index, torch.zeros(1, device="npu").device.index)))
th.start(); th.join()
assert seen == [(0, 0)], seen  # the current device is per thread, as CUDA's
print("ok")
"""


@pytest.mark.parametrize("late", [False, True])
def test_npu_without_index_is_the_current_device(late: bool) -> None:
    """``torch.npu.set_device(1)`` then ``t.to("npu")`` / ``torch.zeros(..., device="npu")``: npu:1,
    as torch.cuda gives the current device for "cuda" (they gave npu:0). Child process: the
    resolution wraps ``Tensor.to`` & co. for the process (``pycann/torch/_current_device.py``);
    ``late``: the device count is set after the import, so ``set_device`` installs it."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env.pop("PYCANN_DEVICE_COUNT", None)
    env.pop("LOCAL_WORLD_SIZE", None)
    if not late:
        env["PYCANN_DEVICE_COUNT"] = "2"
    script = f"LATE = {late}\n" + _CURRENT_DEVICE_SCRIPT
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])
