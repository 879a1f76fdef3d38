"""A transformers-style DFlash drafter (the shape of SpecForge's) trained with dflash's fused attention, selected
through transformers' attention interface by `dflash.integrations`.

    pip install .                                   # dflash, built against this environment's torch
    python examples/transformers_drafter.py         # 5 AdamW steps on the CPU, attention "anchor_block"
    python examples/transformers_drafter.py --attn sdpa   # the same drafter on SDPA with the dense mask

The drafter is written the way transformers models are: its attention layers call
`ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, ...)(self, q, k, v, attention_mask, scaling=...,
sliding_window=...)`
with q/k/v in `[batch, heads, seq, head_dim]`, keys ordered context first, then the blocks. With
`dflash.integrations.register()` and `set_attn_implementation("anchor_block")`, the only other change a
SpecForge-style trainer needs is the mask: `dflash.integrations.block_mask(anchors, keep, block_size, seq_len)`
(O(N)) where it built the dense `[b, 1, N*B, S+N*B]` mask. A dense boolean mask still works (the anchors are read
back from it), but then it is still built.

A tiny random Qwen3 target supplies the hidden states, the embedding and the (frozen) LM head; the loss is
dflash's chunked LM-head loss. Data are random tokens: the loss falls because the drafter learns the batch.
"""
from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.nn as nn
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import (Qwen3MLP, Qwen3PreTrainedModel, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, eager_attention_forward, rotate_half)

import dflash
import dflash.integrations as di


class DraftAttention(nn.Module):
    """Qwen3 attention whose keys and values also come from the context features (KV injection)."""

    def __init__(self, config: Qwen3Config, layer: int):
        super().__init__()
        self.config = config
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = False
        self.sliding_window = config.sliding_window if config.layer_types[layer] == "sliding_attention" else None
        h, q, kv = config.hidden_size, config.num_attention_heads * self.head_dim, config.num_key_value_heads * self.head_dim
        self.q_proj, self.k_proj = nn.Linear(h, q, bias=False), nn.Linear(h, kv, bias=False)
        self.v_proj, self.o_proj = nn.Linear(h, kv, bias=False), nn.Linear(q, h, bias=False)
        self.q_norm = Qwen3RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x, context, cos, sin, attention_mask, **kwargs):
        """x [b, T, H] block tokens, context [b, S, H]; cos/sin [b, S+T, D] at the key positions (queries: the
        last T)."""
        b, t, _ = x.shape
        s = context.size(1)
        q = self.q_norm(self.q_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)
        kv_in = torch.cat([context, x], 1)
        k = self.k_norm(self.k_proj(kv_in).view(b, s + t, -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(kv_in).view(b, s + t, -1, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos[:, :, s:] + rotate_half(q) * sin[:, :, s:]
        k = k * cos + rotate_half(k) * sin
        # As transformers' own models look it up (and how set_attn_implementation knows this model can switch).
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        out, _ = attention(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling,
                           sliding_window=self.sliding_window, **kwargs)
        return self.o_proj(out.reshape(b, t, -1))


class DraftLayer(nn.Module):
    def __init__(self, config: Qwen3Config, layer: int):
        super().__init__()
        self.layer_type = config.layer_types[layer]
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DraftAttention(config, layer)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)

    def forward(self, x, context, cos, sin, attention_mask, **kwargs):
        x = x + self.self_attn(self.input_layernorm(x), context, cos, sin, attention_mask, **kwargs)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(Qwen3PreTrainedModel):
    """fc + hidden_norm over the target's features, KV-injecting Qwen3 layers, final norm (released drafters'
    parameter names)."""

    def __init__(self, config: Qwen3Config):
        super().__init__(config)
        h = config.hidden_size
        self.fc = nn.Linear(len(config.dflash_config["target_layer_ids"]) * h, h, bias=False)
        self.hidden_norm = Qwen3RMSNorm(h, config.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(h, config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.post_init()

    def forward(self, block_embeds, target_hidden, position_ids, attention_mask, **kwargs):
        """attention_mask: dflash's mask arguments (every layer), or a dense mask, or a dict of them per layer
        type (as SpecForge passes sliding and full layers their own dense masks). **kwargs reach the attention
        function (e.g. anchor_block_mask=...)."""
        context = self.hidden_norm(self.fc(target_hidden))
        cos, sin = self.rotary_emb(block_embeds, position_ids)
        x = block_embeds
        for layer in self.layers:
            mask = attention_mask[layer.layer_type] if isinstance(attention_mask, dict) else attention_mask
            x = layer(x, context, cos, sin, mask, **kwargs)
        return self.norm(x)


def drafter_config(target: Qwen3Config, block_size=8, window=12, target_layer_ids=(0, 2)) -> Qwen3Config:
    c = Qwen3Config(hidden_size=target.hidden_size, intermediate_size=target.intermediate_size,
                    num_attention_heads=target.num_attention_heads, num_key_value_heads=target.num_key_value_heads,
                    head_dim=target.head_dim, num_hidden_layers=2, vocab_size=target.vocab_size,
                    rope_theta=target.rope_parameters["rope_theta"], layer_types=["sliding_attention", "full_attention"],
                    use_sliding_window=True, sliding_window=window, max_position_embeddings=target.max_position_embeddings)
    c.block_size = block_size
    c.dflash_config = {"mask_token_id": target.vocab_size - 1, "target_layer_ids": list(target_layer_ids)}
    return c


def sample_anchors(loss_mask: torch.Tensor, num_anchors: int, g: torch.Generator):
    """Per row, up to num_anchors sorted positions a with loss_mask[a] and loss_mask[a+1]; the rest padding blocks
    (keep False), as SpecForge's sampler gives them."""
    b, S = loss_mask.shape
    anchors = torch.zeros(b, num_anchors, dtype=torch.long)
    keep = torch.zeros(b, num_anchors, dtype=torch.bool)
    for i in range(b):
        ok = (loss_mask[i, :-1] & loss_mask[i, 1:]).nonzero().squeeze(1)
        pick = ok[torch.randperm(ok.numel(), generator=g)[:num_anchors]].sort().values
        anchors[i, :pick.numel()], keep[i, :pick.numel()] = pick, True
    return anchors, keep


@dataclasses.dataclass
class Batch:
    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    features: torch.Tensor
    anchors: torch.Tensor
    keep: torch.Tensor


def make_batch(target: Qwen3ForCausalLM, layer_ids, g: torch.Generator, b=2, S=48, num_anchors=5) -> Batch:
    ids = torch.randint(0, target.config.vocab_size - 1, (b, S), generator=g)
    loss_mask = torch.ones(b, S, dtype=torch.bool)
    loss_mask[:, :8] = False  # a "prompt": no anchors, no labels
    with torch.no_grad():
        hs = target(ids, output_hidden_states=True).hidden_states
    features = torch.cat([hs[i + 1] for i in layer_ids], -1)  # layer i's output is hidden_states[i + 1]
    anchors, keep = sample_anchors(loss_mask, num_anchors, g)
    keep[-1, -1] = False  # a dropped block, as padding gives them
    return Batch(ids, loss_mask, features, anchors, keep)


def drafter_loss(drafter: DFlashDrafter, target: Qwen3ForCausalLM, batch: Batch) -> torch.Tensor:
    B, S = drafter.config.block_size, batch.input_ids.size(1)
    m = di.block_mask(batch.anchors, batch.keep, B, S)
    t = dflash.block_targets(batch.input_ids, batch.loss_mask, m, drafter.config.dflash_config["mask_token_id"])
    embeds = target.get_input_embeddings()(t.block_ids).detach()
    if drafter.config._attn_implementation == di.ATTENTION_NAME:
        mask = m  # O(N): anchors and keep flags only
    else:  # the dense [b, 1, N*B, S+N*B] masks SDPA needs, one per layer type
        mask = {"full_attention": m.dense_mask()[:, None],
                "sliding_attention": dataclasses.replace(m, window=drafter.config.sliding_window).dense_mask()[:, None]}
    hidden = drafter(embeds, batch.features, m.key_positions, mask)
    return dflash.chunked_lm_loss(hidden, target.lm_head.weight.detach(), t.labels, t.weights)


def tiny_target(seed=0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    return Qwen3ForCausalLM(config).eval().requires_grad_(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--attn", default=di.ATTENTION_NAME, help="anchor_block (dflash) or sdpa (dense mask)")
    args = ap.parse_args()
    di.register()
    target = tiny_target()
    torch.manual_seed(1)
    drafter = DFlashDrafter(drafter_config(target.config))
    drafter.set_attn_implementation(args.attn)  # transformers checks the name is registered (and not "flash")
    batch = make_batch(target, drafter.config.dflash_config["target_layer_ids"], torch.Generator().manual_seed(2))
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    for step in range(1, args.steps + 1):
        loss = drafter_loss(drafter, target, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f} ({drafter.config._attn_implementation})", flush=True)


if __name__ == "__main__":
    main()
