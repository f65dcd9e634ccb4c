"""The rest of PyTorch's out-of-tree device contract (cf. PyTorch's test/test_openreg.py and
test_privateuseone_python_backend.py: ops, storage, streams, events, rng, memory, autocast,
serialization, torch.accelerator) against the npu device. Goldens are torch's CPU results."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402,F401

# -- ops ----------------------------------------------------------------------------------------


def test_factories_and_printing() -> None:
    for make in (lambda d: torch.zeros(2, 3, device=d), lambda d: torch.ones(2, dtype=torch.int64, device=d),
                 lambda d: torch.full((2, 2), 1.5, device=d), lambda d: torch.arange(0, 10, 3, device=d),
                 lambda d: torch.tensor([[1, 2], [3, 4]], device=d), lambda d: torch.eye(3, device=d),
                 lambda d: torch.linspace(0, 1, 5, device=d)):
        got = make("npu")
        assert got.device == torch.device("npu:0")
        assert torch.equal(got.cpu(), make("cpu"))
    x = torch.tensor([1.0, 2.0], device="npu")
    assert repr(x) == "tensor([1., 2.], device='npu:0')"
    assert x.new_zeros(3).device.type == "npu" and torch.empty_like(x).device.type == "npu"
    assert x[1].item() == 2.0


def test_cross_device_copies_and_casts() -> None:
    c = torch.arange(6.0).reshape(2, 3)
    n = torch.empty(2, 3, device="npu")
    n.copy_(c)  # cpu -> npu
    back = torch.empty(2, 3)
    back.copy_(n)  # npu -> cpu
    n2 = torch.empty(2, 3, device="npu").copy_(n.t().contiguous().t())  # npu -> npu, strided source
    assert torch.equal(back, c) and torch.equal(n2.cpu(), c)
    assert torch.equal(n.to(torch.int32).cpu(), c.to(torch.int32)) and n.half().dtype == torch.float16
    assert torch.equal(n.to("cpu", non_blocking=True), c)
    with pytest.raises(TypeError, match="npu"):
        n.numpy()  # like cuda: a device tensor must come to the cpu first


def test_indexing_and_data_dependent_ops() -> None:
    c = torch.tensor([[3.0, -1.0, 2.0], [0.0, 5.0, -4.0]])
    n = c.npu()
    idx = torch.tensor([1, 0])
    for f in (lambda x: x[idx.to(x.device)], lambda x: x[x > 0], lambda x: torch.nonzero(x),
              lambda x: x.masked_fill(x < 0, 9.0), lambda x: torch.sort(x, dim=1).values,
              lambda x: torch.topk(x.flatten(), 2).indices, lambda x: x.expand(2, 2, 3).sum(0),
              lambda x: x.as_strided((2, 2), (1, 3)), lambda x: x.argmax(1), lambda x: x.cumsum(1)):
        torch.testing.assert_close(f(n).cpu(), f(c))
    m = n.clone()
    m[torch.tensor([0, 1]).npu(), torch.tensor([2, 0]).npu()] = torch.tensor([7.0, 8.0]).npu()
    ref = c.clone()
    ref[torch.tensor([0, 1]), torch.tensor([2, 0])] = torch.tensor([7.0, 8.0])
    assert torch.equal(m.cpu(), ref) and torch.equal(n, n.clone())


# -- storage ------------------------------------------------------------------------------------


def test_storage_moves_and_set() -> None:
    s = torch.arange(4.0).untyped_storage()
    ns = s.npu()
    assert ns.is_npu and ns.device == torch.device("npu:0") and not s.is_npu
    assert ns.nbytes() == s.nbytes() and bytes(ns.cpu()) == bytes(s)
    t = torch.empty(0, device="npu").set_(torch.arange(6.0).npu().untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(t.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    x = torch.zeros(3, device="npu")
    assert x.storage().device.type == "npu" and x.untyped_storage().data_ptr() == x.data_ptr()


# -- streams and events -------------------------------------------------------------------------


def test_stream_and_event_api() -> None:
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    e = s1.record_event()
    s2.wait_event(e)
    s2.wait_stream(s1)
    s1.synchronize()
    assert e.query() and s1.query() and s2.query()
    torch.npu.set_stream(s2)
    try:
        assert torch.npu.current_stream() is s2
    finally:
        torch.npu.set_stream(torch.npu.default_stream())
    assert torch.npu.current_stream() == torch.npu.default_stream()
    ev = torch.npu.Event()
    ev.record(s1)
    ev.wait(s2)
    ev.synchronize()
    assert ev.query()


# -- rng ------------------------------------------------------------------------------------------


def test_rng_states_and_independence_from_cpu() -> None:
    torch.manual_seed(7)  # seeds the npu generator too
    a = torch.rand(4, device="npu")
    torch.npu.manual_seed_all(7)
    assert torch.equal(torch.rand(4, device="npu").cpu(), a.cpu())
    states = torch.npu.get_rng_state_all()
    b = torch.randn(3, device="npu")
    torch.npu.set_rng_state_all(states)
    assert torch.equal(torch.randn(3, device="npu").cpu(), b.cpu())
    # npu draws do not advance the CPU generator
    torch.manual_seed(3)
    cpu_first = torch.rand(2)
    torch.manual_seed(3)
    torch.rand(5, device="npu")
    assert torch.equal(torch.rand(2), cpu_first)
    torch.npu.manual_seed(11)
    d1 = torch.nn.functional.dropout(torch.ones(64, device="npu"), 0.5)
    torch.npu.manual_seed(11)
    d2 = torch.nn.functional.dropout(torch.ones(64, device="npu"), 0.5)
    assert torch.equal(d1.cpu(), d2.cpu()) and set(d1.cpu().unique().tolist()) <= {0.0, 2.0}


# -- memory ---------------------------------------------------------------------------------------


def test_memory_reserved_peak_and_summary() -> None:
    torch.npu.empty_cache()
    base = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    x = torch.empty(256, 1024, device="npu")  # 1 MiB
    y = torch.empty(256, 1024, device="npu")
    del x
    assert torch.npu.max_memory_allocated() == base + (2 << 20)
    assert torch.npu.memory_allocated() == base + (1 << 20) == torch.npu.memory_reserved()
    torch.npu.reset_peak_memory_stats()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
    free, total = torch.npu.mem_get_info()
    assert 0 < free <= total
    assert isinstance(torch.npu.memory_summary(), str)
    del y
    assert torch.npu.memory_allocated() == base


# -- autocast -------------------------------------------------------------------------------------


def test_autocast_policy_and_state() -> None:
    a = torch.randn(4, 4, device="npu")
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("npu") and torch.get_autocast_dtype("npu") == torch.bfloat16
        y = a @ a
        with torch.autocast("npu", enabled=False):
            z = a @ a
    assert not torch.is_autocast_enabled("npu")
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32
    torch.testing.assert_close(y.float().cpu(), (a.cpu().bfloat16() @ a.cpu().bfloat16()).float())


def test_grad_scaler_step() -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1).npu()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(init_scale=1024.0)
    before = net.weight.detach().cpu().clone()
    x = torch.randn(8, 4).npu()
    scaler.scale(net(x).pow(2).mean()).backward()
    grad = net.weight.grad.detach().cpu() / 1024.0
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(net.weight.detach().cpu(), before - 0.1 * grad)


# -- serialization --------------------------------------------------------------------------------


def test_serialization_keeps_storage_sharing_and_map_location() -> None:
    base = torch.arange(6.0, device="npu")
    views = {"a": base[:4], "b": base[2:].view(2, 2)}
    buf = io.BytesIO()
    torch.save(views, buf)
    buf.seek(0)
    got = torch.load(buf, weights_only=True)
    assert got["a"].device.type == "npu"
    got["a"][2] = 100.0  # the two views still share one storage
    assert got["b"][0, 0].item() == 100.0
    buf = io.BytesIO()
    torch.save(torch.arange(3.0), buf)
    for loc in ("npu", torch.device("npu:0"), {"cpu": "npu:0"}):
        buf.seek(0)
        t = torch.load(buf, map_location=loc)
        assert t.device == torch.device("npu:0") and torch.equal(t.cpu(), torch.arange(3.0))


# -- torch.accelerator ----------------------------------------------------------------------------


def test_accelerator_api() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.accelerator.device_count() == torch.npu.device_count()
    assert torch.get_device_module("npu") is torch.npu
