"""torch.compile(backend="npu") on training steps (AOTAutograd forward and backward graphs lowered
to GE where GE has the ops) against torch CPU eager, the ATen -> ONNX lowering's
convolution_backward identity, and backward passes on npu:1."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402,F401
from pycann.torch.compile import graph_report, reset_graph_report  # noqa: E402
from pycann.torch.compile.training import _conv_backward  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 5))


def _convnet() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 6, 3, stride=2), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(6, 5))


def _train_side_by_side(build, shape: tuple[int, ...], steps: int = 3) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    ref = build().train()
    m = copy.deepcopy(ref).npu()
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    compiled = torch.compile(m, backend="npu")
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(*shape, generator=gen)
        y = torch.randint(0, 5, (shape[0],), generator=gen)
        loss_ref = torch.nn.functional.cross_entropy(ref(x), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        loss = torch.nn.functional.cross_entropy(compiled(x.npu()), y.npu())
        opt.zero_grad()
        loss.backward()
        torch.testing.assert_close(loss.detach().cpu(), loss_ref.detach(), rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(ref.named_parameters(), m.parameters()):
            assert q.grad is not None and q.grad.device.type == "npu", name
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
        opt_ref.step()
        opt.step()
    for a, b in zip(ref.state_dict().values(), m.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)
    return ref, m


def test_training_mlp_forward_and_backward_on_ge_match_cpu() -> None:
    _train_side_by_side(_mlp, (4, 8))
    recs = graph_report()
    kinds = {r.kind: r for r in recs}
    assert set(kinds) == {"forward", "backward"}
    # every ATen op of the MLP's forward and backward graphs has a GE lowering
    for r in recs:
        assert r.ge_partitions == 1 and r.eager_ops == () and r.calls == 3, r


def test_training_convnet_with_batchnorm_matches_cpu_and_reports_eager_ops() -> None:
    _train_side_by_side(_convnet, (2, 3, 8, 8))
    recs = {r.kind: r for r in graph_report()}
    fw, bw = recs["forward"], recs["backward"]
    assert fw.ge_partitions >= 1 and bw.ge_partitions >= 1 and bw.ge_ops > 0
    # max pooling's indices have no exact ONNX form: it and its backward stay eager, by name
    assert "aten::max_pool2d_with_indices" in dict(fw.eager_ops)
    assert "aten::max_pool2d_with_indices_backward" in dict(bw.eager_ops)
    # convolution_backward became convolutions on GE
    assert "aten::convolution_backward" not in dict(bw.eager_ops)


@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, 1, 1), (2, 0, 2), (3, 2, 1)])
def test_convolution_backward_identity_matches_aten(stride: int, padding: int, dilation: int) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 11, 9, generator=gen)
    w = torch.randn(4, 3, 3, 2, generator=gen)
    out = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation)
    g = torch.randn(out.shape, generator=gen)
    args = ([4], [stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], 1, [True, True, True])
    want = torch.ops.aten.convolution_backward.default(g, x, w, *args)
    got = _conv_backward(g, x, w, *args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernels", ["pycann", "host"])
def test_zero_dim_binary_ops_keep_their_shape(kernels: str) -> None:
    from pycann.torch import _dispatch

    _dispatch.use_kernels(kernels)
    try:
        a, b = torch.tensor(3.0), torch.tensor(2.0)
        for _ in range(2):  # the first call plans the op, the second runs its cached handle
            got = a.npu() / b.npu()
            assert got.shape == torch.Size([]) and float(got) == 1.5
            assert (a.npu() + b.npu()).shape == torch.Size([])
            e = (a.npu() * b.npu()).exp()
            assert e.shape == torch.Size([]) and float(e) == pytest.approx(float(torch.tensor(6.0).exp()))
    finally:
        _dispatch.use_kernels(None)


_NPU1_BACKWARD = r"""
import torch, pycann.torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
ref = __import__("copy").deepcopy(m)
m = m.to("npu:1")
x = torch.randn(5, 6)
loss = m(x.to("npu:1")).pow(2).mean()
loss.backward()
ref(x).pow(2).mean().backward()
for p, q in zip(ref.parameters(), m.parameters()):
    assert q.grad.device == torch.device("npu:1"), q.grad.device
    torch.testing.assert_close(q.grad.cpu(), p.grad)
xg = torch.randn(4, device="npu:1", requires_grad=True)
(g,) = torch.autograd.grad((xg * xg).sum(), xg)
torch.testing.assert_close(g.cpu(), 2 * xg.detach().cpu())
print("OK", float(loss))
"""


def test_backward_on_npu1() -> None:
    env = {**__import__("os").environ, "PYCANN_DEVICE_COUNT": "2", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _NPU1_BACKWARD], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_partition_that_ge_cannot_compile_runs_eagerly_and_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.torch.compile import aten_onnx

    def refuse(gm: object, args: object = None) -> bytes:
        raise aten_onnx.LoweringError("refused for the test")

    monkeypatch.setattr(aten_onnx, "to_onnx", refuse)
    _train_side_by_side(_mlp, (4, 8), steps=2)
    recs = graph_report()
    assert recs and all("refused for the test" in r.reason for r in recs)
    assert all(dict(r.eager_ops).get("aten::addmm" if r.kind == "forward" else "aten::mm", 0) > 0 for r in recs)


def test_inference_with_dynamic_batch_runs_partitioned_on_ge() -> None:
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    ref = _convnet().eval()
    compiled = torch.compile(copy.deepcopy(ref).npu(), backend="npu")
    with torch.no_grad():
        for batch in (2, 3, 5):  # the second batch size makes Dynamo recompile with a symbolic batch
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(compiled(x.npu()).cpu(), ref(x), rtol=1e-4, atol=1e-5)
    kinds = [r.kind for r in graph_report()]
    assert kinds[0] == "inference" and "aten inference" in kinds
    dyn = next(r for r in graph_report() if r.kind == "aten inference")
    assert dyn.ge_partitions >= 1 and dyn.calls == 2
