"""npu writes whose operands share the written tensor's memory, against torch's CPU: ATen's overlap
checks compare storages, and every npu argument reached torch's kernel as a host view of its own
storage, so ``torch.add(a, a[0], out=a)``, ``torch.where(c, a.t(), a, out=a)``, ``torch.clamp(a.t(), -1, 1,
out=a)`` or an expanded out computed an order-dependent result where CPU torch refuses (found by the
torch op fuzzer). Allowed aliasing (``a.add_(a.t())``, ``torch.add(a, a, out=a)``) must still agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import pycann.torch  # noqa: F401 (registers the npu device)

CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "add_row_out": lambda a: torch.add(a, a[0], out=a),
    "clamp_tensor_bounds": lambda a: torch.clamp(a, a[:1], a, out=a),
    "where_transposed": lambda a: torch.where(a > 0, a.t(), a, out=a),
    "clamp_transposed": lambda a: torch.clamp(a.t(), -0.5, 0.5, out=a),
    "sub_expanded_out": lambda a: torch.sub(a[:1], a[:1], out=a[:1].expand(3, 3)),
    "add_expanded_inplace": lambda a: a[:1].expand(3, 3).add_(a),
    "relu_expanded_inplace": lambda a: a[:1].expand(3, 3).relu_(),
    "addcmul_transposed": lambda a: a.addcmul_(a.t(), a),
    "copy_shifted_transposed": lambda a: a.t()[:, 1:].copy_(a.t()[:, :-1]),
    # allowed: the same view, disjoint views, a shifted copy of a contiguous tensor (ATen copies
    # memmove-style). (Not ``a.add_(a.t())``: ATen lets it through and CPU torch's result depends on
    # its kernel's order.)
    "add_same_out": lambda a: torch.add(a, a, out=a),
    "exp_disjoint_views": lambda a: torch.exp(a[:, ::2], out=a[:, 1::2]),
    "copy_shifted": lambda a: a[:, 1:].copy_(a[:, :-1]),
    "masked_fill_self": lambda a: a.masked_fill_(a > 0, 1.0),
}


def _outcome(f: Callable[[torch.Tensor], Any], dev: str) -> torch.Tensor | str:
    torch.manual_seed(0)
    a = torch.randn(3, 3).to(dev)
    try:
        f(a)
    except RuntimeError as e:
        return f"raised {str(e).splitlines()[0]}"
    return a.cpu()


@pytest.mark.parametrize("name", sorted(CASES))
def test_aliased_write(name: str) -> None:
    want, got = _outcome(CASES[name], "cpu"), _outcome(CASES[name], "npu")
    if isinstance(want, str):
        assert isinstance(got, str), f"CPU torch {want}; npu computed {got}"
    else:
        assert isinstance(got, torch.Tensor), got
        torch.testing.assert_close(got, want)
