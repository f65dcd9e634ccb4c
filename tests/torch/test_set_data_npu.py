"""``param.data = t`` between the npu and the CPU (pycann/torch/_set_data.py): ATen refused the
shallow copy for PrivateUse1 ("incompatible tensor type"); golden: the same on CPU tensors."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pycann.torch")


def test_data_swaps_between_npu_and_cpu_keep_the_parameter() -> None:
    p = torch.nn.Parameter(torch.arange(3.0).npu())
    opt = torch.optim.SGD([p], lr=1.0)
    obj = id(p)
    p.data = p.cpu()
    assert p.device.type == "cpu" and id(p) == obj and isinstance(p, torch.nn.Parameter)
    p.data = p.npu() * 2
    assert p.device == torch.device("npu", 0) and id(p) == obj
    (p * 3).sum().backward()
    opt.step()  # the optimizer still holds the same Parameter
    torch.testing.assert_close(p.cpu(), torch.tensor([0.0, 2.0, 4.0]) - 3.0)
    torch.testing.assert_close(p.grad.cpu(), torch.full((3,), 3.0))


def test_torch_grants_the_npu_pairs_only() -> None:
    n, c = torch.ones(2).npu(), torch.ones(2)
    assert torch._has_compatible_shallow_copy_type(n, c) and torch._has_compatible_shallow_copy_type(c, n)
    assert torch._has_compatible_shallow_copy_type(n, torch.ones(3).npu())
    assert not torch._has_compatible_shallow_copy_type(n, torch.ones(2).to_sparse())
