"""torch.npu names beyond the basics (cann-interfaces.md section 7): external / sync-launch
streams, option switches, dump and overflow functions, the allocator API, NPUGraph, typed
tensors, mstx."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import pycann.torch  # noqa: E402,F401

npu = pycann.torch.npu


def test_names_exist() -> None:
    for name in ["ExternalStream", "ExternalEvent", "SyncLaunchStream", "set_sync_debug_mode", "get_sync_debug_mode",
                 "memory_stats_as_nested_dict", "memory_snapshot", "caching_allocator_alloc",
                 "caching_allocator_delete", "MemPool", "use_mem_pool", "NPUPluggableAllocator",
                 "change_current_allocator", "set_option", "set_aoe", "set_mm_bmm_format_nd", "init_dump",
                 "set_dump", "finalize_dump", "get_npu_overflow_flag", "clear_npu_overflow_flag", "stress_detect",
                 "NPUGraph", "graph", "graph_pool_handle", "make_graphed_callables", "FloatTensor", "HalfTensor",
                 "IntTensor", "LongTensor", "BoolTensor", "mstx"]:
        assert hasattr(torch.npu, name), name
        assert name in torch.npu.__all__, name


def test_external_and_sync_launch_streams() -> None:
    s = torch.npu.ExternalStream(0x1000)
    assert s.stream_ptr == 0x1000 and s.device == torch.device("npu", 0) and s.query()
    with torch.npu.stream(s):
        assert torch.npu.current_stream() is s
        y = torch.ones(3, device="npu") + 1
    assert torch.npu.current_stream() is not s and y.sum().item() == 6
    assert torch.npu.SyncLaunchStream().is_sync_launch
    e = torch.npu.ExternalEvent(7)
    assert e.event_ptr == 7 and e.query()
    with pytest.raises(TypeError):
        torch.npu.ExternalStream("0x10")


def test_switches_keep_values_and_validate() -> None:
    torch.npu.set_sync_debug_mode("warn")
    assert torch.npu.get_sync_debug_mode() == 1
    torch.npu.set_sync_debug_mode(0)
    assert torch.npu.get_sync_debug_mode() == 0
    with pytest.raises(RuntimeError, match="expected one of"):
        torch.npu.set_sync_debug_mode("loud")
    opt = {"ACL_PRECISION_MODE": "must_keep_origin_dtype", "ACL_AICORE_NUM": 8, "MM_BMM_ND_ENABLE": "disable"}
    torch.npu.set_option(opt)
    assert opt["ACL_AICORE_NUM"] == "8" and npu.options.get_option("ACL_AICORE_NUM") == "8"
    assert torch.npu.get_mm_bmm_format_nd() is False
    torch.npu.set_mm_bmm_format_nd(True)
    assert torch.npu.get_mm_bmm_format_nd() is True
    with pytest.raises(ValueError, match="ACL_PRECISION_MODE"):
        torch.npu.set_option({"ACL_PRECISION_MODE": "fast"})
    with pytest.raises(ValueError, match="ACL_AICORE_NUM"):
        torch.npu.set_option({"ACL_AICORE_NUM": "64"})
    with pytest.raises(TypeError):
        torch.npu.set_option([("ACL_DEBUG_DIR", "x")])


def test_set_aoe_makes_dir(tmp_path: object) -> None:
    d = os.path.join(str(tmp_path), "aoe", "graphs")
    torch.npu.set_aoe(d)
    assert os.path.isdir(d) and npu.options._aoe_path == d


def test_overflow_flag_is_inf_nan_mode() -> None:
    assert torch.npu.is_support_inf_nan()
    with pytest.raises(RuntimeError, match="npu_check_overflow"):
        torch.npu.get_npu_overflow_flag()
    with pytest.raises(RuntimeError, match="npu_check_overflow"):
        torch.npu.clear_npu_overflow_flag()
    big = torch.tensor([65504.0], dtype=torch.float16, device="npu")
    assert torch.npu.npu_check_overflow(big + big)
    assert not torch.npu.npu_check_overflow(torch.ones(3, device="npu"))
    assert torch.npu.npu_check_overflow(float("nan"))
    with pytest.raises(RuntimeError, match="stress-test"):
        torch.npu.stress_detect()


def test_set_dump_starts_pycann_dump(tmp_path: object) -> None:
    from pycann.profiler import dump

    cfg = os.path.join(str(tmp_path), "dump.json")
    with open(cfg, "w") as f:
        json.dump({"dump": {"dump_path": str(tmp_path), "dump_list": [], "dump_mode": "output"}}, f)
    torch.npu.init_dump()
    torch.npu.set_dump(cfg)
    try:
        folders = npu.debug.dump_folders()
        assert len(folders) == 1 and os.path.isdir(folders[0])
        assert any(d.root == folders[0] for d in dump.active_dumpers())
    finally:
        torch.npu.finalize_dump()
    assert npu.debug.dump_folders() == [] and not any(d.root == folders[0] for d in dump.active_dumpers())
    assert os.path.exists(os.path.join(folders[0], dump.INDEX_NAME))
    with pytest.raises(AssertionError, match="does not exists"):
        torch.npu.set_dump(os.path.join(str(tmp_path), "missing.json"))
    bad = os.path.join(str(tmp_path), "bad.json")
    with open(bad, "w") as f:
        json.dump({"dump": {}}, f)
    with pytest.raises(ValueError, match="dump_path"):
        torch.npu.set_dump(bad)


def test_set_dump_op_switch_dumps_eager_npu_ops(tmp_path: object) -> None:
    import numpy as np

    from pycann.profiler import dump

    cfg = os.path.join(str(tmp_path), "dump.json")
    with open(cfg, "w") as f:
        json.dump({"dump": {"dump_path": str(tmp_path), "dump_op_switch": "on", "dump_mode": "all"}}, f)
    a, b = torch.tensor([1.0, 2.0], device="npu"), torch.tensor([3.0, 4.0], device="npu")
    torch.npu.set_dump(cfg)
    try:
        c = a * b
        torch.ones(2) + 1  # cpu only: not dumped
        folder = npu.debug.dump_folders()[0]
    finally:
        torch.npu.finalize_dump()
    (a + b).sum()  # after finalize_dump: not dumped
    rows = dump.load_index(folder)
    assert {r["op_type"] for r in rows} == {"aten.mul.Tensor"}
    assert [(r["io"], r["index"]) for r in rows] == [("input", "0"), ("input", "1"), ("output", "0")]
    out = next(r for r in rows if r["io"] == "output")
    assert out["model_name"] == "npu_eager" and np.array_equal(np.load(out["path"]), c.cpu().numpy())


def test_caching_allocator_alloc_is_real_memory() -> None:
    base = torch.npu.memory_allocated()
    p = torch.npu.caching_allocator_alloc(4096)
    assert p != 0 and torch.npu.memory_allocated() - base == 4096
    seg = [s for s in torch.npu.memory_snapshot() if s["address"] == p]
    assert len(seg) == 1 and seg[0]["total_size"] == 4096 and seg[0]["blocks"][0]["state"] == "active_allocated"
    torch.npu.caching_allocator_delete(p)
    assert torch.npu.memory_allocated() == base
    assert not any(s["address"] == p for s in torch.npu.memory_snapshot())
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        torch.npu.caching_allocator_delete(p)
    with pytest.raises(TypeError, match="stream"):
        torch.npu.caching_allocator_alloc(8, stream="s")
    assert torch.npu.caching_allocator_alloc(0) == 0


def test_memory_stats_as_nested_dict() -> None:
    flat = torch.npu.memory_stats()
    nested = torch.npu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["num_ooms"] == flat["num_ooms"]


def test_mem_pool_collects_its_allocations() -> None:
    pool = torch.npu.MemPool()
    outside = torch.empty(10, device="npu")
    with torch.npu.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.empty(256, device="npu")
    assert pool.use_count() == 1
    addrs = {s["address"] for s in pool.snapshot()}
    assert inside.data_ptr() in addrs and outside.data_ptr() not in addrs
    assert all(s["segment_pool_id"] == pool.id for s in pool.snapshot())
    del inside
    assert pool.snapshot() == []
    with pytest.raises(RuntimeError, match="custom npu allocator"):
        torch.npu.MemPool(allocator=object())
    with pytest.raises(RuntimeError, match="custom npu allocator"):
        torch.npu.change_current_allocator(object())


def test_pluggable_allocator_checks_symbols() -> None:
    import ctypes.util

    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to load")
    a = torch.npu.NPUPluggableAllocator(libc, "malloc", "free")
    assert a.alloc_fn and a.free_fn
    with pytest.raises(AttributeError):
        torch.npu.NPUPluggableAllocator(libc, "no_such_alloc_fn", "free")


def test_npu_graph_replays_captured_work() -> None:
    x = torch.zeros(4, device="npu")
    w = torch.ones(4, device="npu")
    acc = torch.zeros(1, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = (x * 2 + w).relu()
        s = y.sum()
        acc.add_(1)
    assert torch.equal(y.cpu(), torch.ones(4)) and s.item() == 4 and acc.item() == 1
    x.copy_(torch.tensor([1.0, -5.0, 3.0, 4.0]))
    g.replay()
    assert torch.equal(y.cpu(), torch.tensor([3.0, 0.0, 7.0, 9.0])) and s.item() == 19
    assert acc.item() == 2  # in-place work happens again on each replay
    g.replay()
    assert acc.item() == 3
    assert g.captured_ops()[:2] == ["aten::mul", "aten::add"]
    assert isinstance(torch.npu.graph_pool_handle(), tuple)
    g.reset()
    with pytest.raises(RuntimeError, match="nothing was captured"):
        g.replay()


def test_npu_graph_refuses_host_reads_and_shape_changes() -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="npu")
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with torch.npu.graph(g):
            x.sum().item()
    g2 = torch.npu.NPUGraph()
    with torch.npu.graph(g2):
        nz = torch.nonzero(x)
    assert nz.shape == (2, 1)
    x.fill_(1.0)
    with pytest.raises(RuntimeError, match="data-dependent"):
        g2.replay()


def test_typed_tensors() -> None:
    a = torch.npu.FloatTensor(2, 3)
    assert a.shape == (2, 3) and a.dtype == torch.float32 and a.device.type == "npu"
    assert isinstance(a, torch.npu.FloatTensor) and not isinstance(a, torch.npu.HalfTensor)
    assert not isinstance(torch.zeros(1), torch.npu.FloatTensor)
    b = torch.npu.LongTensor([1, 2, 3])
    assert b.dtype == torch.int64 and b.cpu().tolist() == [1, 2, 3]
    assert torch.npu.BoolTensor([True]).dtype == torch.bool
    assert torch.npu.HalfTensor().numel() == 0 and torch.npu.IntTensor.dtype == torch.int32
    h = a.fill_(1.5).type(torch.npu.HalfTensor)  # torch's Tensor.type reads the class's C type name
    assert h.dtype == torch.float16 and h.device.type == "npu" and h.cpu().tolist() == [[1.5] * 3] * 2
    assert a.type() == "torch.npu.FloatTensor"


def test_mstx_reports_to_profiler() -> None:
    from pycann.profiler import hooks

    class Obs:
        def __init__(self) -> None:
            self.apis: list[tuple[str, str]] = []

        def on_node(self, *a: object) -> None: ...

        def on_run(self, *a: object) -> None: ...

        def on_api(self, name: str, track: str, start: int, end: int, args: dict[str, object]) -> None:
            self.apis.append((name, track))

    obs = Obs()
    with hooks.observe(obs):
        torch.npu.mstx.mark("step")
        rid = torch.npu.mstx.range_start("fwd")
        torch.npu.mstx.range_end(rid)

        @torch.npu.mstx.mstx_range("fn")
        def f() -> int:
            return 3

        assert f() == 3
    assert obs.apis == [("step", "mstx"), ("fwd", "mstx"), ("fn", "mstx")]
    with pytest.warns(UserWarning):
        assert torch.npu.mstx.range_start("") == 0


def test_npu_graph_replays_a_training_step() -> None:
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2).npu()
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    opt, ropt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    data = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(3)]
    x, t = data[0][0].npu(), data[0][1].npu()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):  # forward, backward and the optimizer step
        loss = ((m(x) - t) ** 2).mean()
        loss.backward()
        opt.step()

    def ref_step(a: torch.Tensor, b: torch.Tensor) -> float:
        ropt.zero_grad()
        lo = ((ref(a) - b) ** 2).mean()
        lo.backward()
        ropt.step()
        return float(lo.detach())

    ref_step(*data[0])
    for a, b in data[1:]:
        x.copy_(a.npu())
        t.copy_(b.npu())
        g.replay()
        assert abs(float(loss.detach()) - ref_step(a, b)) < 1e-6
        assert torch.allclose(m.weight.detach().cpu(), ref.weight.detach(), atol=1e-6)
        assert torch.allclose(m.bias.detach().cpu(), ref.bias.detach(), atol=1e-6)


def test_make_graphed_callables_module_matches_the_original_in_a_training_loop() -> None:
    """torch.cuda.make_graphed_callables' semantics (it raised): the graphed module gives the
    original's outputs, input gradients and parameter gradients on new inputs, across optimizer
    steps (golden: the same module on torch CPU); in eval mode it runs its original forward."""
    import copy

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    mod = copy.deepcopy(ref).npu()
    sample = torch.randn(5, 4, device="npu", requires_grad=True)
    graphed = torch.npu.make_graphed_callables(mod, (sample,))
    assert graphed is mod
    opt_r, opt_g = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(mod.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(5, 4)
        xr, xg = x.clone().requires_grad_(), x.npu().requires_grad_()
        yr, yg = ref(xr), mod(xg)
        yr.square().sum().backward()
        yg.square().sum().backward()
        torch.testing.assert_close(yg.cpu(), yr)
        assert xg.grad is not None and xr.grad is not None
        torch.testing.assert_close(xg.grad.cpu(), xr.grad)
        for pr, pg in zip(ref.parameters(), mod.parameters()):
            torch.testing.assert_close(pg.grad.cpu(), pr.grad)
        opt_r.step()
        opt_g.step()
        opt_r.zero_grad()
        opt_g.zero_grad()
    mod.eval()
    ref.eval()
    x = torch.randn(2, 4)  # another batch size: the original forward (not graphed in eval mode)
    torch.testing.assert_close(mod(x.npu()).cpu(), ref(x))


def test_make_graphed_callables_functions_and_tuples() -> None:
    """Functions with several outputs and an argument without grad, and a tuple of callables run in
    sequence (the second's sample argument stands for the first's output), against torch CPU."""

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a * b.sin(), (a + b).sum()

    gf = torch.npu.make_graphed_callables(f, (torch.randn(3, device="npu", requires_grad=True),
                                              torch.randn(3, device="npu")))
    for _ in range(2):
        a, b = torch.randn(3), torch.randn(3)
        ar, ag = a.clone().requires_grad_(), a.npu().requires_grad_()
        r1, r2 = f(ar, b)
        g1, g2 = gf(ag, b.npu())
        (r1.sum() * 2 + r2).backward()
        (g1.sum() * 2 + g2).backward()
        torch.testing.assert_close(g1.cpu(), r1)
        torch.testing.assert_close(g2.cpu(), r2)
        assert ag.grad is not None and ar.grad is not None
        torch.testing.assert_close(ag.grad.cpu(), ar.grad)

    torch.manual_seed(1)
    m1, m2 = torch.nn.Linear(3, 4), torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(4, 2))
    r1, r2 = torch.nn.Linear(3, 4), torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(4, 2))
    r1.load_state_dict(m1.state_dict())
    r2.load_state_dict(m2.state_dict())
    m1.npu()
    m2.npu()
    g1, g2 = torch.npu.make_graphed_callables(
        (m1, m2), ((torch.randn(6, 3, device="npu"),), (torch.randn(6, 4, device="npu", requires_grad=True),)))
    x = torch.randn(6, 3)
    out_g, out_r = g2(g1(x.npu())), r2(r1(x))
    out_g.sum().backward()
    out_r.sum().backward()
    torch.testing.assert_close(out_g.cpu(), out_r)
    for pr, pg in zip([*r1.parameters(), *r2.parameters()], [*m1.parameters(), *m2.parameters()]):
        torch.testing.assert_close(pg.grad.cpu(), pr.grad)
    with pytest.raises(AssertionError, match="only Tensors"):
        torch.npu.make_graphed_callables(f, (torch.zeros(3, device="npu"), 2.0))


def _sync_cases() -> tuple[dict, dict]:
    """torch.cuda's own test of set_sync_debug_mode (test_cuda.py, test_sync_warning) on the npu,
    plus the copies and reads it leaves out: which calls synchronize and which do not."""
    size = 4
    x, y = torch.rand(size, device="npu"), torch.rand((), device="npu")
    ind = torch.randint(size, (3,), device="npu")
    ind_cpu = ind.cpu()
    repeats = torch.full((1,), 2, device="npu")
    mask = torch.randint(2, (size,), device="npu", dtype=torch.bool)

    def put(t: torch.Tensor, i: object, v: object) -> torch.Tensor:
        t[i] = v
        return t

    def cond(t: torch.Tensor) -> torch.Tensor:
        return t if t else 2 * t  # taking a tensor's truth value reads it on the host

    no_sync = {"put mask scalar": lambda: put(x, mask, 1.0), "put index": lambda: put(x, ind, y),
               "get index": lambda: x[ind], "one_hot num_classes": lambda: F.one_hot(ind, num_classes=size),
               "randperm": lambda: torch.randperm(20, device="npu"),
               "repeat_interleave output_size": lambda: torch.repeat_interleave(x, repeats, output_size=2 * size),
               "any": lambda: torch.any(y), "arith": lambda: x * 2 + y, "non_blocking d2h": lambda: x.to("cpu", non_blocking=True),
               "non_blocking h2d": lambda: torch.ones(2).to("npu", non_blocking=True), "synchronize": torch.npu.synchronize}
    sync = {"put mask tensor": lambda: put(x, mask, y), "put cpu index": lambda: put(x, ind_cpu, y),
            "get mask": lambda: x[mask], "get cpu index": lambda: x[ind_cpu], "nonzero": lambda: x.nonzero(),
            "bool": lambda: cond(y), "one_hot": lambda: F.one_hot(ind), "repeat_interleave": lambda: torch.repeat_interleave(x, repeats),
            "item": lambda: y.item(), "cpu": lambda: x.cpu(), "npu": lambda: torch.ones(2).npu(),
            "tensor": lambda: torch.tensor([1.0], device="npu"), "copy_ h2d": lambda: x.copy_(torch.ones(size)),
            "copy_ d2h": lambda: torch.ones(size).copy_(x), "masked_select": lambda: x.masked_select(mask),
            "unique": lambda: torch.unique(ind), "equal": lambda: torch.equal(x, x)}
    return no_sync, sync


@pytest.mark.parametrize("mode", [1, 2, "warn", "error"])
def test_sync_debug_mode_reports_synchronizing_calls_as_torch_cuda(mode: object) -> None:
    """set_sync_debug_mode had no effect: "warn" / 1 warns and "error" / 2 raises "called a
    synchronizing NPU operation" (torch_npu's text; torch.cuda's says CUDA) on exactly the calls
    torch.cuda reports, the warning naming the caller's line; 0 reports nothing."""
    import warnings

    no_sync, sync = _sync_cases()
    torch.npu.set_sync_debug_mode(mode)  # type: ignore[arg-type]
    try:
        for name, f in no_sync.items():
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                f()
            assert not [w for w in seen if "synchronizing" in str(w.message)], name
        for name, f in sync.items():
            if mode in (1, "warn"):
                with warnings.catch_warnings(record=True) as seen:
                    warnings.simplefilter("always")
                    f()
                hits = [w for w in seen if "called a synchronizing NPU operation" in str(w.message)]
                assert hits and issubclass(hits[0].category, UserWarning), name
                assert "pycann" not in hits[0].filename, (name, hits[0].filename)
            else:
                with pytest.raises(RuntimeError, match="called a synchronizing NPU operation"):
                    f()
    finally:
        torch.npu.set_sync_debug_mode(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for f in sync.values():
            f()
    assert not [w for w in seen if "synchronizing" in str(w.message)]


def test_sync_debug_error_mode_lets_a_training_step_run() -> None:
    """A training step without host reads synchronizes nothing on CUDA: none of pycann's own
    work is reported (conv, batch norm, cross entropy, backward, SGD / Adam steps)."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 5)).npu()
    x, t = torch.randn(2, 3, 8, 8).npu(), torch.tensor([1, 3]).npu()
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), torch.optim.Adam(m.parameters())]
    torch.npu.set_sync_debug_mode("error")
    try:
        for opt in opts:
            loss = F.cross_entropy(m(x), t)
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        torch.npu.set_sync_debug_mode("default")
    assert loss.item() > 0
