"""Tensor-parallel inference of the GPT-2-6L bench model (scripts/torch_models.py) over hccl,
Megatron-style: attention heads and MLP columns split over the ranks with one all-reduce after
each row-parallel projection, the tied LM head split by vocabulary and all-gathered. Every rank
also runs the whole model; the logits must agree."""

import datetime
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import pycann.hccl  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from torch_models import build_gpt2_6l, gelu_new  # noqa: E402

r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=60))
torch.set_num_threads(1)
full = build_gpt2_6l(seed=0)
cfg = full.config
C, H, D = cfg.n_embd, cfg.n_head, cfg.n_embd // cfg.n_head
hl = H // w  # heads on this rank
cols = slice(r * hl * D, (r + 1) * hl * D)


def attn(block, x):
    a = block.attn
    wq, wk, wv = a.c_attn.weight.split(C, 0)
    bq, bk, bv = a.c_attn.bias.split(C, 0)
    b, s, _ = x.shape
    q, k, v = (torch.nn.functional.linear(x, wt[cols], bt[cols]).view(b, s, hl, D).transpose(1, 2)
               for wt, bt in ((wq, bq), (wk, bk), (wv, bv)))
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    scores = torch.where(a.bias[:, :, :s, :s], scores, torch.tensor(torch.finfo(scores.dtype).min))
    ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, s, hl * D)
    out = ctx @ a.c_proj.weight[:, cols].t()  # row-parallel: partial sums
    dist.all_reduce(out)
    return out + a.c_proj.bias


def mlp(block, x):
    m = block.mlp
    f = m.c_fc.weight.shape[0] // w
    fc = slice(r * f, (r + 1) * f)
    h = gelu_new(torch.nn.functional.linear(x, m.c_fc.weight[fc], m.c_fc.bias[fc]))
    out = h @ m.c_proj.weight[:, fc].t()
    dist.all_reduce(out)
    return out + m.c_proj.bias


@torch.no_grad()
def tp_forward(ids):
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    x = full.wte(ids) + full.wpe(pos)
    for block in full.h:
        x = x + attn(block, block.ln_1(x))
        x = x + mlp(block, block.ln_2(x))
    hfin = full.ln_f(x)
    vocab = cfg.vocab_size
    per = -(-vocab // w)
    shard = full.wte.weight[r * per : min(vocab, (r + 1) * per)]
    part = torch.zeros(*hfin.shape[:2], per)
    part[..., : shard.shape[0]] = hfin @ shard.t()
    parts = [torch.empty_like(part) for _ in range(w)]
    dist.all_gather(parts, part.contiguous())
    return torch.cat(parts, -1)[..., :vocab]


torch.manual_seed(7)
ids = torch.randint(0, cfg.vocab_size, (2, 12))
got = tp_forward(ids)
with torch.no_grad():
    want = full(ids)
diff = (got - want).abs().max().item()
assert got.shape == want.shape and torch.allclose(got, want, atol=1e-4, rtol=1e-4), diff
assert torch.equal(got.argmax(-1), want.argmax(-1))
if r == 0:
    print(f"TP ok: GPT-2-6L over {w} ranks, logits {tuple(got.shape)}, max |diff| to one rank {diff:.2e}", flush=True)
dist.destroy_process_group()
