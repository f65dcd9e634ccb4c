"""Defects a fresh user hit with torch_npu-style code, each checked against CPU torch (or torch_npu's
documented behaviour): device properties and nn.DataParallel, is_bf16_supported per SoC, pinned
memory, missing ``torch_npu.npu_*`` ops, nn.TransformerEncoder's nested-tensor fast path."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT), PYCANN_TORCH_REPORT="0", **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


# ---------------------------------------------------------------- device properties, DataParallel

def test_device_properties_have_the_fields_pytorch_code_reads() -> None:
    p = torch.npu.get_device_properties(0)
    assert p.name == torch.npu.get_device_name(0)
    assert p.total_memory > 0
    # Ascend310P3 (pycann's default SoC): 8 coupled AI Cores, 16 MiB L2 (pycann.ascendc.soc, costmodel.socs)
    if p.name == "Ascend310P3":
        assert (p.multi_processor_count, p.cube_core_num, p.L2_cache_size) == (8, 8, 16 << 20)
    assert p.multi_processor_count >= 1 and (p.major, p.minor) == (0, 0)


def _dp_reference() -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return m, copy.deepcopy(m), torch.randn(6, 4)


def test_data_parallel_on_npu_matches_cpu() -> None:
    m, ref_m, x = _dp_reference()
    dp = torch.nn.DataParallel(m.npu())
    out = dp(x.npu())
    out.sum().backward()
    ref = ref_m(x)
    ref.sum().backward()
    assert out.device == torch.device("npu", 0)
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    torch.testing.assert_close(m[0].weight.grad.cpu(), ref_m[0].weight.grad)


DATA_PARALLEL_MIGRATED = r"""
import copy, torch, pycann.torch
from pycann.torch.contrib import transfer_to_npu  # noqa: F401
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
ref_m = copy.deepcopy(m)
x = torch.randn(6, 4)
dp = torch.nn.DataParallel(m.cuda())           # AttributeError: multi_processor_count; then "cuda:0" vs npu:0
assert dp.device_ids == list(range(torch.cuda.device_count())), dp.device_ids
out = dp(x.cuda())
out.sum().backward()
ref = ref_m(x)
ref.sum().backward()
assert out.device == torch.device("npu", 0), out.device
torch.testing.assert_close(out.detach().cpu(), ref.detach())
torch.testing.assert_close(m[0].weight.grad.cpu(), ref_m[0].weight.grad)
print("OK")
"""


@pytest.mark.parametrize("devices", ["1", "2"])
def test_data_parallel_after_transfer_to_npu_matches_cpu(devices: str) -> None:
    """Two devices: the batch is scattered, the module replicated, the outputs gathered and the
    replicas' gradients reduced (``pycann.torch._parallel_comm``)."""
    r = _run(DATA_PARALLEL_MIGRATED, env={"PYCANN_DEVICE_COUNT": devices})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


# ---------------------------------------------------------------- is_bf16_supported follows the SoC

@pytest.mark.parametrize(("soc", "bf16"), [("Ascend310P3", False), ("Ascend910A", False), ("Ascend910B2", True),
                                           ("Ascend910_9391", True), ("CPU", True)])
def test_is_bf16_supported_follows_the_soc(monkeypatch: pytest.MonkeyPatch, soc: str, bf16: bool) -> None:
    """As atc: ``--precision_mode=allow_fp32_to_bf16`` is refused on the chips without bf16."""
    from pycann.errors import PycannError
    from pycann.ge.compile.precision_config import resolve_mode

    monkeypatch.setenv("PYCANN_SOC_VERSION", soc)
    assert torch.npu.get_soc_version() == soc
    assert torch.npu.is_bf16_supported() is bf16
    assert torch.npu.is_bf16_supported(including_emulation=True) is bf16
    if bf16:
        assert resolve_mode("allow_fp32_to_bf16", soc_version=soc) == "allow_fp32_to_bf16"
    else:
        with pytest.raises(PycannError, match="bfloat16 is not supported"):
            resolve_mode("allow_fp32_to_bf16", soc_version=soc)


def test_is_bf16_supported_default_soc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYCANN_SOC_VERSION", raising=False)
    assert torch.npu.get_soc_version() == "Ascend310P3"
    assert torch.npu.is_bf16_supported() is False


# ---------------------------------------------------------------- torch_npu.npu_* ops

def test_npu_format_cast_is_an_identity_layout_op() -> None:
    x = torch.randn(2, 3, 4, 5)
    n = x.npu()
    for fmt in (0, 2, 3, 29):
        out = pycann.torch.npu_format_cast(n, fmt)
        assert out is n
        torch.testing.assert_close(out.cpu(), x, rtol=0, atol=0)
    assert pycann.torch.npu_format_cast_(n, 29) is n
    assert pycann.torch.npu_format_cast_(n, torch.zeros(1).npu()) is n
    assert pycann.torch.get_npu_format(n) == 0 and pycann.torch.get_npu_format(torch.zeros(3).npu()) == 2
    assert pycann.torch.get_npu_format(torch.zeros(1, 1, 1, 1, 1).npu()) == 30


def test_npu_format_cast_bad_input() -> None:
    n = torch.randn(2, 3).npu()
    with pytest.raises(ValueError, match=r"npu_format_cast\(\): acl_format 7 is not an ACL format; known: .*29 \(FRACTAL_NZ\)"):
        pycann.torch.npu_format_cast(n, 7)
    with pytest.raises(RuntimeError, match=r"expected an npu tensor, got one on cpu"):
        pycann.torch.npu_format_cast(torch.zeros(2), 2)
    with pytest.raises(TypeError, match="must be a Tensor"):
        pycann.torch.npu_format_cast([1, 2], 2)


def test_missing_npu_op_says_pycann_does_not_provide_it() -> None:
    with pytest.raises(AttributeError, match=r"torch_npu\.npu_rotary_mul is not provided by pycann.*docs/torch\.md"):
        pycann.torch.npu_rotary_mul  # noqa: B018
    assert not hasattr(pycann.torch, "npu_fusion_attention")  # feature checks still answer False
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        pycann.torch.no_such_name  # noqa: B018


SHIM_NPU_OPS = r"""
import torch, torch_npu
x = torch.randn(2, 3)
assert torch_npu.npu_format_cast(x.npu(), 29).cpu().equal(x) and torch_npu.get_npu_format(x.npu()) == 2
assert not hasattr(torch_npu, "npu_fusion_attention")
try:
    torch_npu.npu_rotary_mul
except AttributeError as e:
    assert "not provided by pycann" in str(e) and "docs/torch.md" in str(e), e
else:
    raise AssertionError("no error")
print("OK")
"""


def test_missing_npu_op_under_pycann_run_shim() -> None:
    e = dict(os.environ, PYTHONPATH=str(ROOT), PYCANN_TORCH_REPORT="0")
    r = subprocess.run([sys.executable, "-m", "pycann.tools.run", "-c", SHIM_NPU_OPS], capture_output=True,
                       text=True, env=e, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


# ---------------------------------------------------------------- pinned memory

def test_pin_memory_reports_pinned_and_keeps_cpu_semantics() -> None:
    t = torch.arange(12.0).reshape(4, 3).t()  # non-contiguous: strides kept, as CUDA's pin_memory
    p = t.pin_memory()
    assert p.is_pinned() and p[1:].is_pinned() and p.untyped_storage().is_pinned()
    assert p.device.type == "cpu" and p.stride() == t.stride() and p.data_ptr() != t.data_ptr()
    torch.testing.assert_close(p, t, rtol=0, atol=0)
    assert not t.is_pinned() and not torch.zeros(3).is_pinned()  # never pinned: unpinned, as in CPU torch
    assert p.pin_memory() is p  # pinned already: itself, as CUDA's
    assert t.untyped_storage().pin_memory().is_pinned()
    assert not p.npu().is_pinned()  # device memory is not pinned host memory
    torch.testing.assert_close(p.to("npu", non_blocking=True).cpu(), t, rtol=0, atol=0)


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("device", ["", "npu"])
def test_dataloader_pin_memory_gives_pinned_batches(workers: int, device: str) -> None:
    ds = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (pin_memory_device is deprecated in torch 2.13)
        batches = list(torch.utils.data.DataLoader(ds, batch_size=3, pin_memory=True, pin_memory_device=device,
                                                   num_workers=workers))
    assert len(batches) == 2
    for i, (x, y) in enumerate(batches):
        assert x.is_pinned() and y.is_pinned() and x.device.type == "cpu"
        torch.testing.assert_close(x, ds.tensors[0][3 * i:3 * i + 3], rtol=0, atol=0)
        torch.testing.assert_close(y, ds.tensors[1][3 * i:3 * i + 3], rtol=0, atol=0)


# ---------------------------------------------------------------- TransformerEncoder's nested-tensor path

def _encoder(batch_first: bool, norm: bool, mask_check: bool) -> torch.nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=batch_first)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (batch_first=False: torch warns its fast path is off)
        return torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(16) if norm else None,
                                           mask_check=mask_check).eval()


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("mask_check", [True, False])
@pytest.mark.parametrize("grad", [False, True])
def test_transformer_encoder_padding_mask_matches_cpu(batch_first: bool, norm: bool, mask_check: bool,
                                                      grad: bool) -> None:
    """eval + no_grad + src_key_padding_mask: CPU torch packs the batch into a NestedTensor (zeros at
    the padded positions); on the npu that crashed ("NestedTensorImpl doesn't support sizes")."""
    enc = _encoder(batch_first, norm, mask_check)
    x = torch.randn(3, 5, 16) if batch_first else torch.randn(5, 3, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    n = copy.deepcopy(enc).npu()
    with torch.set_grad_enabled(grad):
        ref = enc(x, src_key_padding_mask=pad)
        out = n(x.npu(), src_key_padding_mask=pad.npu())
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    # the module is left as it was
    assert n.use_nested_tensor == enc.use_nested_tensor and (n.norm is None) == (not norm)


def test_transformer_encoder_not_left_aligned_and_float_mask_match_cpu() -> None:
    enc = _encoder(True, True, True)
    x = torch.randn(2, 4, 16)
    n = copy.deepcopy(enc).npu()
    middle = torch.tensor([[False, True, False, False], [False, False, False, True]])  # CPU: not nested
    additive = torch.tensor([[0.0, 0.0, 0.0, float("-inf")], [0.0, 0.0, 0.0, 0.0]])
    with torch.no_grad():
        for pad in (middle, additive):
            torch.testing.assert_close(n(x.npu(), src_key_padding_mask=pad.npu()).cpu(),
                                       enc(x, src_key_padding_mask=pad), rtol=1e-5, atol=1e-5)


def test_nested_tensor_result_on_npu_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="cannot be nested tensors"):
        torch._nested_tensor_from_mask(torch.ones(2, 3, 4).npu(), torch.ones(2, 3, dtype=torch.bool).npu())
