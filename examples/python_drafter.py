"""A small DFlash drafter in plain PyTorch that trains with dflash's two ops, one replica per Python thread.

    pip install .                       # the dflash package, built against this environment's torch
    python examples/python_drafter.py   # 3 threads, each training its own replica: fwd + bwd + AdamW

The model is the DFlash drafter (docs/DFLASH.md): the target's hidden states at a few layers, concatenated, go
through `fc` and `hidden_norm` and are injected as extra keys/values into every decoder layer; the queries
are the tokens of N blocks `[token[a], MASK, ..., MASK]`, each anchored at a position a of the sequence.
The two memory walls of training it are dflash's ops:
- attention: `dflash.anchor_block_attention` (no mask tensor, GQA heads never expanded, own backward);
- loss: `dflash.chunked_lm_loss` through the frozen LM head (never all the logits at once).
Nothing here is compiled (no torch.compile), so threads can train side by side without racing.
Parameter names are those of released DFlash drafters (fc, hidden_norm, layers.i.self_attn.q_proj, ...).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import threading
import time
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import dflash


@dataclasses.dataclass
class DrafterConfig:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    num_hidden_layers: int = 2
    num_target_features: int = 3      # target layers concatenated into the context features
    block_size: int = 8
    vocab_size: int = 512
    mask_token_id: int = 511
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    sliding_window: int = 0           # > 0: every other layer is a sliding-window layer
    loss_chunk_rows: int = 1024
    kl_weight: float = 0.0

    def window(self, layer: int) -> int:
        return self.sliding_window if self.sliding_window > 0 and layer % 2 == 0 else 0


# attention(q, k, v, mask_args) with q [b, N*B, Hq, D], k/v [b, S+N*B, Hkv, D] -> [b, N*B, Hq, D].
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, dflash.BlockMaskArgs], torch.Tensor]


def dflash_attention(q, k, v, m: dflash.BlockMaskArgs) -> torch.Tensor:
    return dflash.anchor_block_attention(q, k, v, m.anchors, m.keep, m.block_size, m.window)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE (rotate-half layout) of x [b, L, heads, D] at integer positions pos [b, L]."""
    d = x.size(-1)
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = pos.float().unsqueeze(-1) * inv_freq
    cos = torch.cat([ang.cos(), ang.cos()], -1).unsqueeze(2).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).unsqueeze(2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        hq, hkv, d, h = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
        self.q_proj = nn.Linear(h, hq * d, bias=False)
        self.k_proj = nn.Linear(h, hkv * d, bias=False)
        self.v_proj = nn.Linear(h, hkv * d, bias=False)
        self.o_proj = nn.Linear(hq * d, h, bias=False)
        self.q_norm = RMSNorm(d, c.rms_norm_eps)
        self.k_norm = RMSNorm(d, c.rms_norm_eps)

    def forward(self, x, ctx, m: dflash.BlockMaskArgs, attention: AttentionFn):
        c = self.c
        b, T, _ = x.shape
        S = ctx.size(1)
        q = self.q_norm(self.q_proj(x).view(b, T, c.num_attention_heads, c.head_dim))
        q = rotate(q, m.query_positions.expand(b, -1), c.rope_theta)
        kv_in = torch.cat([ctx, x], 1)  # KV injection: the context features are keys/values of every layer
        k = self.k_norm(self.k_proj(kv_in).view(b, S + T, c.num_key_value_heads, c.head_dim))
        k = rotate(k, m.key_positions.expand(b, -1), c.rope_theta)
        v = self.v_proj(kv_in).view(b, S + T, c.num_key_value_heads, c.head_dim)
        return self.o_proj(attention(q, k, v, m).reshape(b, T, -1))


class MLP(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: DrafterConfig, layer: int):
        super().__init__()
        self.window = c.window(layer)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, ctx, m: dflash.BlockMaskArgs, attention: AttentionFn):
        m = dataclasses.replace(m, window=self.window)
        h = self.input_layernorm(x)
        # The context features bypass the input norm: they were normed once by hidden_norm.
        x = x + self.self_attn(h, ctx, m, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        self.fc = nn.Linear(c.num_target_features * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, block_embeds, target_features, m: dflash.BlockMaskArgs,
                attention: AttentionFn = dflash_attention) -> torch.Tensor:
        """block_embeds [b, N*B, H], target_features [b, S, n*H] -> final hidden states [b, N*B, H]."""
        ctx = self.hidden_norm(self.fc(target_features))
        x = block_embeds
        for layer in self.layers:
            x = layer(x, ctx, m, attention)
        return self.norm(x)


@dataclasses.dataclass
class Batch:
    """What a DFlash data pipeline gives: tokens, their loss mask, the target's features and anchors."""
    input_ids: torch.Tensor        # [b, S]
    loss_mask: torch.Tensor        # [b, S] bool
    target_features: torch.Tensor  # [b, S, n*H]
    target_last: torch.Tensor      # [b, S, H]: the target's last hidden states (soft-label teacher)
    anchors: torch.Tensor          # [b, N]
    keep: torch.Tensor             # [b, N]


def make_batch(c: DrafterConfig, gen: torch.Generator, batch=2, seq=96, num_anchors=8,
               dtype=torch.float32, device="cpu") -> Batch:
    """Synthetic data with the structure of real samples (prompt not in the loss, sorted anchors, padding)."""
    ids = torch.randint(0, c.vocab_size - 1, (batch, seq), generator=gen)
    loss_mask = torch.ones(batch, seq, dtype=torch.bool)
    loss_mask[:, : seq // 4] = False
    anchors, keep = [], []
    for _ in range(batch):
        cand = torch.nonzero(loss_mask[0, :-1] & loss_mask[0, 1:]).flatten()
        pick = cand[torch.randperm(len(cand), generator=gen)[:num_anchors]].sort().values
        k = torch.ones(num_anchors, dtype=torch.bool)
        k[num_anchors - num_anchors // 4:] = False  # padding blocks, as a collator pads to a fixed N
        anchors.append(torch.where(k, pick, 0))
        keep.append(k)
    n = c.num_target_features * c.hidden_size
    return Batch(ids.to(device), loss_mask.to(device), torch.randn(batch, seq, n, generator=gen).to(device, dtype),
                 torch.randn(batch, seq, c.hidden_size, generator=gen).to(device, dtype),
                 torch.stack(anchors).to(device), torch.stack(keep).to(device))


class Trainer:
    """One replica: the drafter, the frozen target embedding / LM head, and its optimizer."""

    def __init__(self, c: DrafterConfig, seed: int, dtype=torch.float32, attention: AttentionFn = dflash_attention,
                 loss: str = "dflash", device="cpu"):
        g = torch.Generator().manual_seed(seed)
        self.c, self.attention, self.loss_kind = c, attention, loss
        self.model = DFlashDrafter(c).to(dtype)
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.size(-1)) if p.dim() > 1
                        else 1 + 0.1 * torch.randn(p.shape, generator=g))
        # The target's embedding and LM head: frozen (here random; in practice the target's own).
        self.embed = (torch.randn(c.vocab_size, c.hidden_size, generator=g) * 0.5).to(device, dtype)
        self.lm_head = (torch.randn(c.vocab_size, c.hidden_size, generator=g) / math.sqrt(c.hidden_size)).to(device, dtype)
        self.model.to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.0)

    def loss(self, batch: Batch) -> torch.Tensor:
        c = self.c
        m = dflash.block_mask_args(batch.anchors, batch.keep, c.block_size, batch.input_ids.size(1))
        t = dflash.block_targets(batch.input_ids, batch.loss_mask, m, c.mask_token_id)
        hidden = self.model(F.embedding(t.block_ids, self.embed), batch.target_features, m, self.attention)
        if self.loss_kind == "dense":  # logits of every row at once: the baselines' loss
            logits = (hidden @ self.lm_head.T).float().flatten(0, 1)
            row = F.cross_entropy(logits, t.labels.flatten(), reduction="none")
            if c.kl_weight > 0:  # soft labels: the target's own next-token distribution at position a+k-1
                teacher = (batch.target_last.flatten(0, 1)[t.teacher_index] @ self.lm_head.T).float()
                log_t, log_s = F.log_softmax(teacher, -1), F.log_softmax(logits, -1)
                row = (1 - c.kl_weight) * row + c.kl_weight * (log_t.exp() * (log_t - log_s)).sum(-1)
            w = t.weights.flatten()
            return (row * w).sum() / w.sum()
        teacher = batch.target_last.flatten(0, 1) if c.kl_weight > 0 else None
        return dflash.chunked_lm_loss(hidden, self.lm_head, t.labels, t.weights, teacher_hidden=teacher,
                                      teacher_index=t.teacher_index if c.kl_weight > 0 else None,
                                      kl_weight=c.kl_weight, chunk_rows=c.loss_chunk_rows)

    def step(self, batch: Batch) -> tuple[float, dict[str, torch.Tensor]]:
        """forward + backward + AdamW; returns the loss and a copy of the gradients."""
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters()}
        self.opt.step()
        return loss.item(), grads


def train_replica(trainer: Trainer, batches: list[Batch], out: list, errors: Optional[list] = None) -> None:
    """Every step's loss and gradients into `out`; an exception goes to `errors` (threads cannot raise)."""
    try:
        for b in batches:
            out.append(trainer.step(b))
    except BaseException as e:  # noqa: BLE001 - reported by the caller
        if errors is None:
            raise
        errors.append(e)


def train_threads(trainers: list[Trainer], data: list[list[Batch]]) -> list[list]:
    """One Python thread per replica, all at once."""
    results: list[list] = [[] for _ in trainers]
    errors: list = []
    threads = [threading.Thread(target=train_replica, args=(t, d, r, errors))
               for t, d, r in zip(trainers, data, results)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=3, help="drafter replicas, one Python thread each")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kl-weight", type=float, default=0.15)
    a = p.parse_args()
    c = DrafterConfig(kl_weight=a.kl_weight, sliding_window=24)
    trainers = [Trainer(c, seed=0) for _ in range(a.threads)]  # same init, different data, as the seed did
    data = [[make_batch(c, torch.Generator().manual_seed(1000 * r + s)) for s in range(a.steps)]
            for r in range(a.threads)]
    t0 = time.perf_counter()
    results = train_threads(trainers, data)
    dt = time.perf_counter() - t0
    for r, res in enumerate(results):
        losses = [loss for loss, _ in res]
        print(f"replica {r}: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
    print(f"{a.threads} threads x {a.steps} steps in {dt:.2f} s, no torch.compile")


if __name__ == "__main__":
    main()
