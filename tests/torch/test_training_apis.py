"""A CUDA training script's torch.npu / torch.cuda names that it reaches for beyond the basics
(found migrating small CNN / transformer training loops): the AMP decorators for custom autograd
Functions, the npu autocast state functions, and their mapping under ``transfer_to_npu``.
Goldens are torch's CPU results."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pycann.torch  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[2]


class _MatMul(torch.autograd.Function):
    """A custom Function the way AMP docs write one: float32 forward inside an autocast region."""

    @staticmethod
    @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx: object, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)  # type: ignore[attr-defined]
        return a.mm(b)

    @staticmethod
    @torch.npu.amp.custom_bwd
    def backward(ctx: object, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors  # type: ignore[attr-defined]
        return g.mm(b.t()), a.t().mm(g)


def test_amp_custom_fwd_bwd_cast_and_gradients() -> None:
    assert {"autocast", "GradScaler", "custom_fwd", "custom_bwd"} <= set(torch.npu.amp.__all__)
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    an, bn = a.npu().requires_grad_(), b.npu().requires_grad_()
    with torch.npu.amp.autocast():
        y = _MatMul.apply(an, bn)
    assert y.dtype == torch.float32  # cast_inputs: forward in float32 with autocast off
    y.sum().backward()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    ac.mm(bc).sum().backward()
    torch.testing.assert_close(y.detach().cpu(), a.mm(b))
    torch.testing.assert_close(an.grad.cpu(), ac.grad)
    torch.testing.assert_close(bn.grad.cpu(), bc.grad)


def test_custom_fwd_without_cast_keeps_the_autocast_state() -> None:
    seen: list[bool] = []

    @torch.npu.amp.custom_fwd
    def fwd(ctx: object, x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.npu.is_autocast_enabled())
        return x.mm(x)

    x = torch.ones(2, 2, device="npu")
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert fwd(type("Ctx", (), {})(), x).dtype == torch.bfloat16
    assert seen == [True]


def test_npu_autocast_state_functions() -> None:
    for name in ("is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype"):
        assert name in torch.npu.__all__, name
    assert not torch.npu.is_autocast_enabled()
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert torch.npu.is_autocast_enabled() and torch.npu.get_autocast_dtype() == torch.bfloat16
    old = torch.npu.get_autocast_dtype()
    try:
        torch.npu.set_autocast_dtype(torch.bfloat16)
        torch.npu.set_autocast_enabled(True)
        x = torch.ones(2, 2, device="npu")
        assert torch.is_autocast_enabled("npu") and (x @ x).dtype == torch.bfloat16
    finally:
        torch.npu.set_autocast_enabled(False)
        torch.npu.set_autocast_dtype(old)
    assert not torch.is_autocast_enabled("npu")


def test_migrated_cuda_custom_fwd_runs_on_the_npu(tmp_path: Path) -> None:
    """``@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)`` in a migrated script: torch_npu maps
    torch.cuda.amp to torch.npu.amp; PyTorch's CUDA decorator saw no CUDA autocast, so forward ran in
    float16 and the float32 backward raised "expected m1 and m2 to have the same dtype"."""
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent("""
        import warnings
        import torch
        import pycann.torch
        from pycann.torch.contrib import transfer_to_npu
        warnings.simplefilter("ignore")
        from torch.cuda.amp import custom_bwd, custom_fwd

        class MM(torch.autograd.Function):
            @staticmethod
            @custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return a.mm(b)

            @staticmethod
            @custom_bwd
            def backward(ctx, g):
                a, b = ctx.saved_tensors
                return g.mm(b.t()), a.t().mm(g)

        a = torch.randn(3, 4, device="cuda", requires_grad=True)
        b = torch.randn(4, 2, device="cuda", requires_grad=True)
        with torch.cuda.amp.autocast():
            y = MM.apply(a, b)
            assert torch.cuda.is_autocast_enabled()
        y.sum().backward()
        assert y.dtype == torch.float32 and a.grad.dtype == torch.float32, (y.dtype, a.grad.dtype)
        torch.testing.assert_close(a.grad.cpu(), torch.ones(3, 2).mm(b.detach().cpu().t()))
        print("OK")
    """), encoding="utf-8")
    _run_ok(app)


def _run_ok(app: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYCANN_TORCH_REPORT": "0"}
    r = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_migrated_torch_cuda_random_seeds_the_npu(tmp_path: Path) -> None:
    """``torch.cuda.random.manual_seed`` in a migrated script (torch_npu patches ``torch.cuda.random``
    with its npu functions): it raised "module 'torch._C' has no attribute '_cuda_getDevice'"."""
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent("""
        import torch
        import pycann.torch
        from pycann.torch.contrib import transfer_to_npu

        torch.cuda.random.manual_seed(3)
        a = torch.randn(4, device="cuda")
        state = torch.cuda.random.get_rng_state()
        b = torch.randn(4, device="cuda")
        torch.cuda.random.manual_seed_all(3)
        assert torch.equal(torch.randn(4, device="cuda").cpu(), a.cpu())
        torch.cuda.random.set_rng_state(state)
        assert torch.equal(torch.randn(4, device="cuda").cpu(), b.cpu())
        assert torch.cuda.random.initial_seed() == 3 and torch.equal(torch.cuda.random.get_rng_state(), torch.npu.get_rng_state())
        print("OK")
    """), encoding="utf-8")
    _run_ok(app)


def test_torch_accelerator_memory_and_synchronize_follow_torch_npu() -> None:
    """Device-generic code (``torch.accelerator.*``) on the npu: the memory functions raised
    "INTERNAL ASSERT FAILED ... Allocator for npu is not a DeviceAllocator" and ``synchronize`` /
    ``get_device_capability`` "Backend doesn't support ..."."""
    acc = torch.accelerator
    acc.synchronize()
    acc.synchronize(0)
    acc.empty_cache()
    before = acc.memory_allocated()
    assert before == torch.npu.memory_allocated()
    x = torch.empty(1 << 18, device="npu")  # 1 MiB
    assert acc.memory_allocated() - before == x.numel() * 4
    assert acc.memory_reserved() == torch.npu.memory_reserved()
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated() == torch.npu.max_memory_allocated()
    y = torch.empty(1 << 18, device="npu")
    del y
    assert acc.max_memory_allocated() == acc.memory_allocated() + x.numel() * 4
    assert dict(acc.memory_stats()) == torch.npu.memory_stats()
    acc.reset_accumulated_memory_stats()
    assert acc.memory_stats()["allocation.all.allocated"] == 0
    assert acc.get_memory_info() == torch.npu.mem_get_info()
    assert torch.float32 in acc.get_device_capability()["supported_dtypes"]
    del x


def test_memory_and_capture_names_of_torch_npu() -> None:
    """torch_npu's (and torch.cuda's) names that cleanup / memory-budget code calls: they raised
    AttributeError."""
    for name in ("reset_max_memory_cached", "get_per_process_memory_fraction", "get_allocator_backend",
                 "ipc_collect", "is_current_stream_capturing"):
        assert name in torch.npu.__all__, name
    assert torch.npu.get_per_process_memory_fraction() == 1.0
    torch.npu.set_per_process_memory_fraction(0.5)
    try:
        assert torch.npu.get_per_process_memory_fraction(0) == 0.5
        assert torch.npu.get_per_process_memory_fraction("npu:0") == 0.5
    finally:
        torch.npu.set_per_process_memory_fraction(1.0)
    x = torch.empty(1 << 16, device="npu")
    y = torch.empty(1 << 16, device="npu")
    del y
    assert torch.npu.max_memory_allocated() >= torch.npu.memory_allocated() + (1 << 18)
    torch.npu.reset_max_memory_cached()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
    assert torch.npu.get_allocator_backend() == "native"
    torch.npu.empty_cache()
    assert torch.npu.ipc_collect() is None
    del x


def test_is_current_stream_capturing_inside_an_npu_graph_capture() -> None:
    assert not torch.npu.is_current_stream_capturing()
    seen: list[bool] = []
    x = torch.ones(3, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        seen.append(torch.npu.is_current_stream_capturing())
        y = x * 2
    assert seen == [True] and not torch.npu.is_current_stream_capturing()
    x.fill_(3.0)
    g.replay()
    assert y.cpu().tolist() == [6.0, 6.0, 6.0]


def _scaler_history(device: str) -> tuple[list[float], torch.Tensor]:
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**20, growth_interval=2)
    scales = []
    for step in range(6):
        x = torch.randn(8, 4).to(device) * (1e4 if step == 1 else 1.0)
        with torch.autocast(device, dtype=torch.float16):
            loss = m(x).float().pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, m.weight.detach().cpu()


def test_float16_overflow_steps_are_silent_as_on_the_cpu() -> None:
    """GradScaler's reason to be: float16 gradients that overflow to inf. The npu's bound matmul
    kernels (a signature's second call on) let numpy's "overflow encountered in cast" / "invalid
    value encountered in matmul" RuntimeWarnings out, which ``-W error`` (pytest's
    ``filterwarnings = error``) turned into an exception in backward; torch CPU computes inf."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _scaler_history("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU-fallback notices, GradScaler's own
        warnings.simplefilter("error", RuntimeWarning)
        got = _scaler_history("npu")
        for v in (1.0, 6e4, float("inf")):  # same signature: the bound kernel runs from the 2nd call
            a = torch.full((4, 4), v).half()
            torch.testing.assert_close((a.npu() @ a.npu()).cpu(), a @ a, equal_nan=True)
            f = torch.full((4, 4), v)
            z = torch.zeros(4, 4) if v != 1.0 else torch.ones(4, 4)
            torch.testing.assert_close((f.npu() @ z.npu()).cpu(), f @ z, equal_nan=True)
    assert got[0] == want[0] and got[0][1] < got[0][0]  # the overflow steps were skipped, as on the CPU
    torch.testing.assert_close(got[1], want[1])


def test_erf_of_huge_values_is_silent_as_on_the_cpu() -> None:
    """pycann's erf evaluates its small-|x| branch everywhere: x * x overflowed for |x| >= ~1.8e19
    and numpy's RuntimeWarning raised under ``-W error`` (the value, +-1, was right)."""
    import warnings

    x = torch.tensor([1e30, 2.0, -1e30, float("inf"), float("-inf"), float("nan"), 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.erf(x.npu())  # first call of the signature (GE's single-op path)
        warnings.simplefilter("error", RuntimeWarning)
        got = torch.erf(x.npu())
    torch.testing.assert_close(got.cpu(), torch.erf(x), equal_nan=True)
