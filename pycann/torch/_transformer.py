"""``nn.TransformerEncoder`` on the npu without its nested-tensor fast path.

In eval mode under ``no_grad`` with a ``src_key_padding_mask``, ``TransformerEncoder.forward``
packs the padded batch into a NestedTensor (``torch._nested_tensor_from_mask``) when
``enable_nested_tensor`` is True (the default), for any device it lists as supported, PrivateUse1
included. pycann's npu tensors are DLPack views of host memory, and a NestedTensor is no strided
tensor: the op crashed with "NestedTensorImpl doesn't support sizes", and the layers' fused
NestedTensor kernels have no npu form anyway. For an npu input the encoder runs as if built with
``enable_nested_tensor=False``: each layer gets the padding mask (and may still take its own dense
fast path, ``_transformer_encoder_layer_fwd``). Where CPU torch would have taken the nested path
(``_would_nest``: the conditions of its ``forward``) its result has zeros at the padded positions
(``to_padded_tensor(0.0)``, then the final norm): the same is done here, so the values equal CPU
torch's everywhere. CPU and other devices are untouched.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

_lock = threading.Lock()
_depth: dict[int, tuple[int, Any]] = {}  # id(encoder) -> (npu calls inside, its use_nested_tensor before)


def _would_nest(enc: torch.nn.TransformerEncoder, src: torch.Tensor, mask: Any, pad: Any) -> bool:
    """Whether ``TransformerEncoder.forward`` (torch 2.x) takes its nested-tensor path for these
    arguments: its checks, in its order (``use_nested_tensor`` already holds the layer checks made in
    ``__init__``)."""
    first = enc.layers[0]
    if (not torch.backends.mha.get_fastpath_enabled() or first.training or src.dim() != 3 or pad is None
            or mask is not None or src.is_nested or torch.is_autocast_enabled()):
        return False
    if getattr(enc, "mask_check", True) and not torch._nested_tensor_from_mask_left_aligned(src, pad.logical_not()):
        return False
    attn = first.self_attn
    params = (attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
              first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias,
              first.linear1.weight, first.linear1.bias, first.linear2.weight, first.linear2.bias)
    if torch.overrides.has_torch_function((src, *params)):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in (src, *params)))


def _wrap(orig: Any) -> Any:
    @functools.wraps(orig)
    def forward(self: torch.nn.TransformerEncoder, src: torch.Tensor, mask: Any = None,
                src_key_padding_mask: Any = None, is_causal: Any = None) -> Any:
        if (not getattr(self, "use_nested_tensor", False) or not isinstance(src, torch.Tensor)
                or src.device.type != "npu" or torch.compiler.is_compiling()):
            return orig(self, src, mask, src_key_padding_mask, is_causal)
        nest = _would_nest(self, src, mask, src_key_padding_mask)
        key = id(self)
        # the nested path off (and, where it would have run, the final norm applied below): a count,
        # not a save/restore per call, so threads running the same encoder at once all see it off
        # until the last one leaves
        with _lock:
            n, saved = _depth.get(key, (0, None))
            if n == 0:
                saved = (self.use_nested_tensor, self.norm)
                self.use_nested_tensor = False
                self.norm = None
            _depth[key] = (n + 1, saved)
        try:
            out = orig(self, src, mask, src_key_padding_mask, is_causal)
            if nest:
                # CPU torch's nested path: zeros at the padded positions (to_padded_tensor(0.0))
                rows = src_key_padding_mask if self.layers[0].self_attn.batch_first else src_key_padding_mask.t()
                out = out.masked_fill(rows.unsqueeze(-1).to(torch.bool), 0.0)
            norm = saved[1]
        finally:
            with _lock:
                n, saved = _depth.pop(key)
                if n > 1:
                    _depth[key] = (n - 1, saved)
                else:
                    self.use_nested_tensor, self.norm = saved
        return norm(out) if norm is not None else out

    return forward


_installed: list[bool] = []


def install() -> None:
    """Wrap ``nn.TransformerEncoder.forward`` (once)."""
    if _installed:
        return
    enc = torch.nn.TransformerEncoder
    enc.forward = _wrap(enc.forward)  # type: ignore[method-assign]
    _installed.append(True)
