"""torch.compile(backend='npu') with parameters/buffers that change or are special: inference
tensors (no version counter), tied weights, non-persistent buffers, graph breaks whose graph
only passes a tensor through. Values against eager PyTorch on the same module."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402,F401
from pycann.torch.compile import graph_report, reset_graph_report  # noqa: E402


def _close(a: object, b: object) -> None:
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    warnings.simplefilter("ignore")


def test_module_made_under_inference_mode_compiles_and_follows_in_place_writes() -> None:
    """Inference tensors have no ``_version``: reading it raised inside the backend
    (BackendCompilerFailed). They are fed each call now, so an in-place write is seen."""
    with torch.inference_mode():
        m = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)).eval()
        x = torch.randn(4, 5)
        c = torch.compile(m, backend="npu")
        _close(c(x), m(x))
        m[0].weight.mul_(2.0)
        m[2].bias.add_(1.0)
        _close(c(x), m(x))
    assert graph_report() and all(r.compiled for r in graph_report())


def test_buffer_replaced_by_an_inference_tensor() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("k", torch.randn(5))
            self.lin = torch.nn.Linear(5, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.k

    m, x = M().eval(), torch.randn(3, 5)
    c = torch.compile(m, backend="npu")
    with torch.no_grad():
        _close(c(x), m(x))
    with torch.inference_mode():
        m.k = torch.randn(5) * 7
        _close(c(x), m(x))
        m.k.add_(3.0)  # in place on an inference tensor: no version bump to see
        _close(c(x), m(x))


def test_tied_weights_and_non_persistent_buffer() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(5, 5), torch.nn.Linear(5, 5)
            self.b.weight = self.a.weight
            self.register_buffer("k", torch.randn(5), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x))) * self.k

    m, x = M().eval(), torch.randn(3, 5)
    c = torch.compile(m, backend="npu")
    with torch.no_grad():
        _close(c(x), m(x))
        m.a.weight.mul_(2.0)  # both uses of the tied weight
        _close(c(x), m(x))
        m.k.add_(1.0)
        _close(c(x), m(x))
        m.b.weight.data = torch.randn(5, 5)
        _close(c(x), m(x))
    assert sum(r.relowers for r in graph_report()) >= 3


def test_graph_breaks_with_a_pass_through_graph_and_weights_changed() -> None:
    """A graph break in a ModuleList loop leaves a graph whose input no output depends on; the
    exporter drops it and the plan rejected the feed ('the model has 0 inputs () but 1 were
    given'). Values follow the weights after every change."""
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(5, 5) for _ in range(3)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = torch.relu(layer(x))
                torch._dynamo.graph_break()
            return x

    m, x = M().eval().npu(), torch.randn(3, 5).npu()
    c = torch.compile(m, backend="npu")
    with torch.no_grad():
        _close(c(x).cpu(), m(x).cpu())
        for layer in m.layers:
            layer.weight.mul_(1.5)
        _close(c(x).cpu(), m(x).cpu())
        assert c(x).device.type == "npu"
        m.layers[1].bias.zero_()
        _close(c(x).cpu(), m(x).cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batchnorm_statistics_updated_by_a_train_mode_forward_on_cpu(dtype: torch.dtype) -> None:
    """ATen's CPU batch_norm writes running_mean/var in a train-mode forward without bumping their
    ``_version``: the eval call after it gave the old statistics' answer (off by ~1)."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).to(dtype).eval()
    x = torch.randn(2, 3, 6, 6, dtype=dtype)
    c = torch.compile(m, backend="npu")
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=tol, atol=tol)
        relowers = sum(r.relowers for r in graph_report())
        torch.testing.assert_close(c(x), m(x), rtol=tol, atol=tol)
        assert sum(r.relowers for r in graph_report()) == relowers  # unchanged statistics: no rebuild
        m.train()
        m(torch.randn(4, 3, 6, 6, dtype=dtype) * 3 + 1)
        m.eval()
        torch.testing.assert_close(c(x), m(x), rtol=tol, atol=tol)


def test_written_under_inference_mode_and_npu_batchnorm_trained_between_calls() -> None:
    """A normal parameter written in place inside ``torch.inference_mode`` (its version still moves)
    and an npu BatchNorm whose statistics a train-mode forward updated: torch's kernel writes them
    without a ``_version`` bump, so eager npu (its cached BN constants) and the plan both kept the
    old statistics (off by 0.16) until the dispatcher bumped it. Checked against the module's
    state on CPU."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval().npu()
    x = torch.randn(2, 3, 6, 6).npu()
    c = torch.compile(m, backend="npu")
    with torch.inference_mode():
        _close(c(x).cpu(), m(x).cpu())
        m[0].weight.mul_(-1.5)
        _close(c(x).cpu(), m(x).cpu())
    with torch.no_grad():
        m.train()
        m(torch.randn(4, 3, 6, 6).npu() * 3 + 1)
        m.eval()
        cpu = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
        cpu.load_state_dict({k: v.cpu().clone() for k, v in m.state_dict().items()})
        want = cpu(x.cpu().clone())
        _close(m(x).cpu(), want)
        _close(c(x).cpu(), want)
