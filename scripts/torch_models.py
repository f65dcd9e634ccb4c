"""Plain-PyTorch model definitions for the synthetic (and MiniLM) models of the real model set.

Only ``torch`` is needed (torchvision and transformers are not importable beside the local torch build):

* :class:`ResNet50`     torchvision's ResNet-50 v1.5 layout (stride 2 on the 3x3 conv of a bottleneck).
* :class:`BertLike`     a BERT encoder with Hugging Face's parameter names, so that a ``BertModel``
  state dict (for example all-MiniLM-L6-v2's ``model.safetensors``) loads into it unchanged.
* :class:`SentenceEmbedder`  :class:`BertLike` + attention-mask mean pooling + L2 normalisation
  (sentence-transformers' all-MiniLM-L6-v2 pipeline).
* :class:`GPT2Like`     a GPT-2 decoder (pre-LayerNorm, causal mask, tanh GELU, LM head tied to ``wte``).
* :class:`GPT2WithPast` the same decoder with a KV cache (``past_key_values`` in, ``present`` out), as
                        Hugging Face's exporters write it: K/V concatenated on the sequence axis.

The ``build_*`` functions return models in eval mode with reproducible weights for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = [
    "BertConfig",
    "BertLike",
    "GPT2Config",
    "GPT2Like",
    "GPT2WithPast",
    "ResNet50",
    "SentenceEmbedder",
    "build_bert_base",
    "build_gpt2_6l",
    "build_gpt2_6l_kv",
    "build_minilm_l6",
    "build_resnet50",
]


# --------------------------------------------------------------------------------------------- ResNet-50
class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 -> 3x3 (carries the stride) -> 1x1 (x4), plus a projection shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """torchvision ``resnet50`` (v1.5): stem, stages [3, 4, 6, 3], global average pool, fc (1000 classes)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_ch = 64
        stages = []
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(in_ch, width, stride if i == 0 else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def randomize_batchnorm_affine(self) -> None:
        """Draw BatchNorm scales from U(0.5, 1.5) and shifts from N(0, 0.1) (instead of 1 and 0)."""
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_resnet50(seed: int = 0) -> ResNet50:
    """A ResNet-50 with random weights (fixed ``seed``) and calibrated BatchNorm statistics, in eval mode.

    Convolutions use torchvision's Kaiming initialisation, BatchNorm affine parameters are random
    (:meth:`ResNet50.randomize_batchnorm_affine`), the fc layer keeps PyTorch's default initialisation.

    With default BatchNorm statistics (mean 0, var 1) activations grow layer after layer. Two forward
    passes in training mode over N(0,1) images (cumulative moving average) give each BatchNorm the real
    statistics of its input, so the eval-mode network keeps activations of order 1, as a trained one does.
    """
    torch.manual_seed(seed)
    model = ResNet50()
    model.randomize_batchnorm_affine()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = None  # cumulative average
        bn.reset_running_stats()
    model.train()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(8, 3, 224, 224, generator=gen))
    for bn in bns:
        bn.momentum = 0.1
    return model.eval()


# --------------------------------------------------------------------------------------------- BERT
@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of :class:`BertLike` (defaults = BERT-base uncased)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm (HF names)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + self.token_type_embeddings(token_type_ids))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention with an additive mask (HF names: query/key/value)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def _split(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + additive_mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, _, s, _ = ctx.shape
        return ctx.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)


class BertSelfOutput(nn.Module):
    """Projection + residual + LayerNorm after attention (HF ``attention.output``)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    """HF ``attention`` block: ``self`` + ``output``."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        return self.output(self.self(x, additive_mask), x)


class BertIntermediate(nn.Module):
    """Feed-forward expansion with exact (erf) GELU."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.gelu(self.dense(x))


class BertOutput(nn.Module):
    """Feed-forward contraction + residual + LayerNorm."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertLayer(nn.Module):
    """One post-LayerNorm transformer encoder layer."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertOutput(cfg)

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        x = self.attention(x, additive_mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    """The stack of :class:`BertLayer` (HF ``encoder.layer.<i>``)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        for layer in self.layer:
            x = layer(x, additive_mask)
        return x


class BertLike(nn.Module):
    """BERT encoder without pooler: ``(input_ids, attention_mask, token_type_ids) -> last_hidden_state``.

    Parameter names follow Hugging Face's ``BertModel`` (``embeddings.*``, ``encoder.layer.<i>.*``).
    The attention mask becomes an additive mask of ``(1 - mask) * finfo(float32).min``, as in transformers.
    """

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        self.config = cfg or BertConfig()
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config)

    def init_weights(self, std: float = 0.02) -> None:
        """BERT's initialisation (N(0, std) weights), with random biases and LayerNorm affine parameters.

        A fresh Hugging Face model has zero biases and unit LayerNorm scales; drawing them at random
        (N(0, std) biases, LayerNorm scale 1 + N(0, 0.1), shift N(0, 0.1)) makes every parameter matter
        when an engine's output is compared with ONNX Runtime's.
        """
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.bias, 0.0, std)
            elif isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.1)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        additive = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        return self.encoder(self.embeddings(input_ids, token_type_ids), additive)


class SentenceEmbedder(nn.Module):
    """Sentence-transformers pipeline: :class:`BertLike`, mean pooling over the attention mask, L2 norm."""

    def __init__(self, bert: BertLike) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        hidden = self.bert(input_ids, attention_mask, token_type_ids)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=1)


def build_bert_base(seed: int = 0) -> BertLike:
    """BERT-base (12 layers, 768 hidden, 12 heads, 3072 FFN, vocab 30522) with random weights, eval mode."""
    torch.manual_seed(seed)
    model = BertLike(BertConfig())
    model.init_weights()
    return model.eval()


MINILM_CONFIG = BertConfig(hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536)


def build_minilm_l6(state_dict: dict[str, Tensor]) -> SentenceEmbedder:
    """all-MiniLM-L6-v2 from a ``BertModel`` state dict (``embeddings.*``, ``encoder.layer.*``).

    Extra HF entries (``pooler.*``, ``embeddings.position_ids``) are ignored; every parameter of
    :class:`BertLike` must be present.
    """
    bert = BertLike(MINILM_CONFIG)
    wanted = bert.state_dict().keys()
    missing = [k for k in wanted if k not in state_dict]
    if missing:
        raise KeyError(f"MiniLM weights lack {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    bert.load_state_dict({k: state_dict[k] for k in wanted}, strict=True)
    return SentenceEmbedder(bert).eval()


# --------------------------------------------------------------------------------------------- GPT-2
@dataclass(frozen=True)
class GPT2Config:
    """Hyper-parameters of :class:`GPT2Like` (defaults: GPT-2 small with 6 layers)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 6
    n_head: int = 12
    layer_norm_eps: float = 1e-5


def gelu_new(x: Tensor) -> Tensor:
    """GPT-2's tanh approximation of GELU (``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))``)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention; the mask is a slice of a fixed lower-triangular buffer."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.bias: Tensor
        causal = torch.tril(torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, cfg.n_positions, cfg.n_positions), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        b, s, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (t.view(b, s, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        mask = self.bias[:, :, :s, :s]
        scores = torch.where(mask, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.c_proj(ctx.transpose(1, 2).reshape(b, s, c))


class GPT2MLP(nn.Module):
    """GPT-2 feed-forward: 4x expansion, tanh GELU, projection."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    """Pre-LayerNorm decoder block."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Like(nn.Module):
    """GPT-2 language model without KV cache: ``input_ids [batch, seq] -> logits [batch, seq, vocab]``.

    The LM head is tied to the token embedding ``wte`` (``logits = h @ wte.T``).
    """

    def __init__(self, cfg: GPT2Config | None = None) -> None:
        super().__init__()
        self.config = cfg or GPT2Config()
        c = self.config
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.n_positions, c.n_embd)
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)

    def init_weights(self, std: float = 0.02) -> None:
        """GPT-2's initialisation (1/sqrt(2 n_layer) scaling of the residual projections), random biases.

        As in :meth:`BertLike.init_weights`, biases and LayerNorm affine parameters are drawn at random
        rather than left at 0 / 1, so that comparisons exercise them.
        """
        for name, m in self.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                scale = 1.0 / math.sqrt(2 * self.config.n_layer) if name.endswith("c_proj") else 1.0
                nn.init.normal_(m.weight, 0.0, std * scale)
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.bias, 0.0, std)
            elif isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.1)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, input_ids: Tensor) -> Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


def build_gpt2_6l(seed: int = 0) -> GPT2Like:
    """GPT-2-like, 6 layers / 768 / 12 heads, vocab 50257, random weights (fixed ``seed``), eval mode."""
    torch.manual_seed(seed)
    model = GPT2Like(GPT2Config())
    model.init_weights()
    return model.eval()


class GPT2WithPast(nn.Module):
    """:class:`GPT2Like` with a KV cache, in the form Hugging Face's ONNX exports have.

    ``forward(input_ids [B, S], past_key_0, past_value_0, ..., past_value_{L-1})`` with each past
    ``[B, H, P, D]`` (``P`` may be 0 for the prompt) returns ``(logits [B, S, V], present_key_0,
    present_value_0, ...)`` with each present ``[B, H, P + S, D]``: ``Concat(past, new)`` on axis 2.
    The causal mask is the slice ``bias[:, :, P:P+S, :P+S]`` of a fixed lower-triangular buffer and
    positions are ``arange(P, P + S)``. Weights are those of the wrapped :class:`GPT2Like`.
    """

    def __init__(self, base: GPT2Like) -> None:
        super().__init__()
        self.base = base

    def _attn(self, a: GPT2Attention, x: Tensor, pk: Tensor, pv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, s, c = x.shape
        q, k, v = a.c_attn(x).split(c, dim=2)
        q, k, v = (t.view(b, s, a.n_head, a.head_dim).transpose(1, 2) for t in (q, k, v))
        k = torch.cat([pk, k], dim=2)
        v = torch.cat([pv, v], dim=2)
        p = pk.shape[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(a.head_dim)
        mask = a.bias[:, :, p : p + s, : p + s]
        scores = torch.where(mask, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return a.c_proj(ctx.transpose(1, 2).reshape(b, s, c)), k, v

    def forward(self, input_ids: Tensor, *past: Tensor) -> tuple[Tensor, ...]:
        m = self.base
        p = past[0].shape[2]
        pos = torch.arange(p, p + input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = m.wte(input_ids) + m.wpe(pos)
        presents: list[Tensor] = []
        for i, block in enumerate(m.h):
            h, k, v = self._attn(block.attn, block.ln_1(x), past[2 * i], past[2 * i + 1])
            x = x + h
            x = x + block.mlp(block.ln_2(x))
            presents += [k, v]
        return (torch.matmul(m.ln_f(x), m.wte.weight.t()), *presents)


def build_gpt2_6l_kv(seed: int = 0) -> GPT2WithPast:
    """:func:`build_gpt2_6l`'s weights (same ``seed``) wrapped with a KV cache, eval mode."""
    return GPT2WithPast(build_gpt2_6l(seed)).eval()
