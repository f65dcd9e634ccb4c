"""Differential fuzzer of torch ops on the ``npu`` device (``pycann.torch``) against CPU torch.

Property: a random op call (``torch_ops.py`` / ``torch_ops_nn.py``: convs, matmuls, pooling, norms,
softmax, reductions, elementwise with broadcasting and mixed dtypes, activations, interpolate,
indexing, shape plumbing, sort/topk, where, embedding, factories; float32/float16/bfloat16/int32/
int64/bool; zero-size and size-1 dims; non-contiguous views) gives on npu what it gives on CPU:
the same shapes and dtypes, integers and bools exactly, floats within ``TOLERANCES`` (relative to
the output's largest magnitude, NaN where NaN), the same values in arguments the op wrote, and, for
differentiable float calls (half of them), the same gradients of a random weighting of the outputs.
A call CPU torch refuses (any exception) must raise on npu too (any exception type).

Float16 / bfloat16 convolutions are compared with the float32 conv of the same values, rounded:
CPU torch's own half conv crashes the process (SIGSEGV) on some degenerate geometries (windows
reading only padding), so it is never called here.

The default test run checks a fixed, derandomized set of examples; ``PYCANN_FUZZ_SECONDS=N`` runs
random ones for N s (tests/fuzz/README.md). ``PYCANN_TORCH_FUZZ_LOG=path`` appends each example's
parameters to ``path`` before running it, to find the call that ended a crashed run."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch
from hypothesis import strategies as st

import pycann.torch  # noqa: F401 (registers the npu device)
from tests.fuzz import torch_ops_nn, torch_ops_writes  # noqa: F401 (register their builders)
from tests.fuzz.budget import fuzz
from tests.fuzz.torch_ops import BUILDERS, Case, Draw

pytestmark = [pytest.mark.fuzz, pytest.mark.filterwarnings("ignore")]

# relative to max(1, the largest finite |value| of the golden output)
TOLERANCES = {torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 4e-2}


def _run(case: Case, device: str, grad: bool, upcast: bool, repeat: bool = False) -> tuple[Any, list[Any], list[Any]]:
    """(outputs, the leaves' values after the call, their gradients) of ``case`` on ``device``;
    ``upcast``: half arguments computed in float32 and the results rounded back; ``repeat``: the
    call made twice on the same tensors (the npu's second call of a signature takes its fast path,
    with the constants it bound), both calls' outputs compared."""
    made = [a.make(device, grad) for a in case.args]
    if upcast:
        dt = case.args[0].base.dtype
        made = [(leaf, view.float()) if view.dtype == dt else (leaf, view) for leaf, view in made]
    views = [v for _, v in made]
    out = case.fn(*views) if case.args else case.fn(device)
    if repeat:
        out = (out, case.fn(*views) if case.args else case.fn(device))
    if upcast:
        out = _cast(out, case.args[0].base.dtype)
    grads: list[Any] = []
    if grad:
        floats = [o for o in _flat(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if floats:
            g = torch.Generator().manual_seed(1234)
            loss = sum((o.float() * torch.randn(o.shape, generator=g).to(o.device)).sum() for o in floats)
            assert isinstance(loss, torch.Tensor)
            loss.backward()
        grads = [leaf.grad for leaf, _ in made]
    return out, [leaf.detach() for leaf, _ in made], grads


def _cast(out: Any, dtype: torch.dtype) -> Any:
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.dtype == torch.float32 else out
    if isinstance(out, (tuple, list)):
        return type(out)(_cast(o, dtype) for o in out)
    return out


def _flat(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [e for o in out for e in _flat(o)]
    return [out]


def agree(got: Any, want: Any, what: str, floor: float = 0.0) -> None:
    """``got`` (npu) equals ``want`` (CPU torch) in structure, shape, dtype and value (floats within
    their dtype's tolerance, or ``floor`` if looser)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: {type(got).__name__}, CPU torch a tensor"
        assert got.device.type == ("npu" if want.device.type == "cpu" else want.device.type), \
            f"{what}: on {got.device}"
        g, w = got.detach().cpu(), want.detach()
        assert g.shape == w.shape, f"{what}: shape {tuple(g.shape)}, CPU torch {tuple(w.shape)}"
        assert g.dtype == w.dtype, f"{what}: dtype {g.dtype}, CPU torch {w.dtype}"
        if not w.dtype.is_floating_point:
            assert torch.equal(g, w), f"{what}: values differ\nnpu {g}\ncpu {w}"
            return
        g64, w64 = g.double(), w.double()
        finite = w64[torch.isfinite(w64)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        tol = max(TOLERANCES[w.dtype], floor)
        close = torch.isclose(g64, w64, rtol=tol, atol=tol * scale, equal_nan=True)
        if not bool(close.all()):
            bad = (~close).nonzero()[:5].tolist()
            raise AssertionError(f"{what}: values differ at {bad} (of {tuple(w.shape)}; tol {tol} x {scale:.3g})\n"
                                 f"npu {g64[~close][:5].tolist()}\ncpu {w64[~close][:5].tolist()}")
        return
    if isinstance(want, (tuple, list)) and not isinstance(want, torch.Size):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {got!r}, CPU torch {want!r}"
        for i, (g_, w_) in enumerate(zip(got, want)):
            agree(g_, w_, f"{what}[{i}]", floor)
        return
    assert got == want or (got != got and want != want), f"{what}: {got!r}, CPU torch {want!r}"


def check(case: Case, grad: bool, repeat: bool = False) -> str:
    """``"ran"`` / ``"refused"`` (both devices raised); a disagreement raises AssertionError."""
    try:
        want = _run(case, "cpu", grad, case.upcast, repeat)
    except Exception as e:  # noqa: BLE001 - CPU torch refusing the call: the npu must refuse it too
        try:
            got = _run(case, "npu", grad, False, repeat)
        except Exception:  # noqa: BLE001 - any exception type will do
            return "refused"
        if case.cpu_only_refusal:
            return "ran"
        raise AssertionError(f"CPU torch raised {type(e).__name__}: {e}\nbut npu returned {got[0]!r}") from None
    got = _run(case, "npu", grad, False, repeat)
    agree(got[0], want[0], "output")
    for i, (g, w) in enumerate(zip(got[1], want[1])):
        agree(g, w, f"argument {i} after the call")
    # a gradient goes through every dtype the call computed in: the loosest tolerance among them
    floats = [t.dtype for t in [a.base for a in case.args] + _flat(want[0])
              if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]
    floor = max((TOLERANCES[t] for t in floats), default=0.0)
    for i, (g, w) in enumerate(zip(got[2], want[2])):
        if w is None or g is None:
            assert (w is None) == (g is None), f"grad of argument {i}: npu {g!r}, CPU torch {w!r}"
        else:
            agree(g, w, f"grad of argument {i}", floor)
    return "ran"


def _prop(data: Any) -> None:
    family = data.draw(st.sampled_from(sorted(BUILDERS)), label="family")
    d = Draw(data)
    case = BUILDERS[family](d)
    grad = case.grad and data.draw(st.booleans(), label="check_grad")
    repeat = data.draw(st.booleans(), label="repeat")
    log = os.environ.get("PYCANN_TORCH_FUZZ_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{family} {case.op} grad={grad} {d.params}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            check(case, grad, repeat)
        except AssertionError as e:
            raise AssertionError(f"{case.op} ({family}, grad={grad}, repeat={repeat}) {d.params}\n"
                                 f"replay: {(family, grad, repeat, d.trace)!r}\n{e}") from None


def test_torch_ops_fuzz() -> None:
    fuzz(st.data(), _prop, examples=80)
