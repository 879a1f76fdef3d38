"""The DFlash drafter for transformers (written next to the weights by `dflash export`).

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    tokens = model.draft(target_hidden, anchor_tokens, anchors, target.get_input_embeddings(),
                         target.get_output_embeddings())

The drafter proposes a block of `block_size` tokens in one forward pass from the target's hidden states.
Its context features are the target's layer outputs at `dflash_config.target_layer_ids`, concatenated on the
feature axis, through `fc` and `hidden_norm`; every decoder layer (Qwen3: RMSNorm, attention with per-head
q/k norms and RoPE, SwiGLU MLP) takes them as extra keys and values next to the block tokens' own, while
queries come from the block tokens only. Block n, anchored at position a, is `[token[a], MASK, ...]` at
positions a .. a+B-1: its queries see context positions < a and the keys of their own block (sliding-window
layers: context within the window and only earlier slots). The token embedding and the LM head are the
target's and are not part of this model.

The DSpark and DFlash2 drafters (dspark.py, dflash2.py, written next to this file for those families) are
built on this backbone.

This file needs only torch and transformers. It builds the attention mask densely (fine for inference and
small checks); the trainer that wrote it uses a fused kernel instead.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PreTrainedModel, Qwen3Config
from transformers.modeling_outputs import BaseModelOutput


class DFlashRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        y = x.to(acc)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", 1e6))


def _rope_frequencies(config, dim: int, seq_len: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [dim / 2] (float64) and the cos/sin scaling of config's RoPE for a forward whose largest
    position is seq_len - 1. Scaled types (linear, dynamic, yarn, llama3) come from transformers' own
    ROPE_INIT_FUNCTIONS, as its Qwen3 rotary embedding computes them (float32); the default type in float64."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return _rope_theta(config) ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"config.json: rope_type {rope_type!r} is not a RoPE type transformers knows")
    grown = None
    if rope_type == "dynamic" and seq_len > config.max_position_embeddings:
        grown = torch.tensor(seq_len)  # transformers' rotary forward passes the length as a tensor
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=grown)
    return inv_freq.to(torch.float64), float(scaling)


def _apply_rope(x: torch.Tensor, positions: torch.Tensor, rope: tuple[torch.Tensor, float]) -> torch.Tensor:
    """x [b, L, heads, D] rotated (first half / second half pairs) at integer positions [b, L]; rope from
    _rope_frequencies."""
    inv_freq, scaling = rope
    half = x.size(-1) // 2
    angle = positions.to(torch.float64).unsqueeze(-1) * inv_freq.to(x.device)
    cos = (angle.cos() * scaling).repeat(1, 1, 2).unsqueeze(2).to(x.dtype)
    sin = (angle.sin() * scaling).repeat(1, 1, 2).unsqueeze(2).to(x.dtype)
    lo, hi = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-hi, lo], -1) * sin


def _block_mask(anchors: torch.Tensor, keep: torch.Tensor, context_len: int, block_size: int,
                window: int) -> torch.Tensor:
    """[b, N*B, S + N*B] bool: which keys each block token may attend to."""
    b, n = anchors.shape
    dev = anchors.device
    slot = torch.arange(block_size, device=dev)
    q_block = torch.arange(n, device=dev).repeat_interleave(block_size)       # [T]
    q_slot = slot.repeat(n)                                                    # [T]
    a = anchors[:, q_block].unsqueeze(-1)                                      # [b, T, 1]
    ctx_pos = torch.arange(context_len, device=dev)
    sees_ctx = ctx_pos < a                                                     # [b, T, S]
    k_block = torch.arange(n, device=dev).repeat_interleave(block_size)
    sees_blk = (k_block.unsqueeze(0) == q_block.unsqueeze(1)).unsqueeze(0).expand(b, -1, -1)
    if window > 0:
        first = a + q_slot.view(1, -1, 1) - (window - 1)
        sees_ctx = sees_ctx & (ctx_pos >= first)
        sees_blk = sees_blk & (slot.repeat(n).unsqueeze(0) <= q_slot.unsqueeze(1)).unsqueeze(0)
    return torch.cat([sees_ctx, sees_blk], -1) & keep[:, q_block].unsqueeze(-1)


class DFlashAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        h, d = config.hidden_size, self.head_dim
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.q_norm = DFlashRMSNorm(d, config.rms_norm_eps)
        self.k_norm = DFlashRMSNorm(d, config.rms_norm_eps)

    def forward(self, x, context, q_pos, k_pos, mask, rope):
        b, t, _ = x.shape
        s = context.size(1)
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        q = _apply_rope(q, q_pos, rope)
        kv_in = torch.cat([context, x], 1)  # context features are keys/values of every layer
        k = self.k_norm(self.k_proj(kv_in).view(b, s + t, self.kv_heads, self.head_dim))
        k = _apply_rope(k, k_pos, rope)
        v = self.v_proj(kv_in).view(b, s + t, self.kv_heads, self.head_dim)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_dim)
        allowed = mask.unsqueeze(1)
        scores = scores.masked_fill(~allowed, float("-inf"))
        seen = allowed.any(-1, keepdim=True)
        probs = torch.softmax(torch.where(seen, scores, torch.zeros_like(scores)), -1) * seen
        out = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out)


class DFlashMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config, index: int):
        super().__init__()
        types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        self.window = 0
        if types[index] == "sliding_attention":
            if not config.sliding_window:  # Qwen3Config drops sliding_window unless use_sliding_window is true
                raise ValueError(f"config.json: layer_types[{index}] is \"sliding_attention\" but sliding_window is "
                                 f"{config.sliding_window!r}; set sliding_window and \"use_sliding_window\": true")
            self.window = int(config.sliding_window)
        self.input_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DFlashAttention(config)
        self.post_attention_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = DFlashMLP(config)

    def forward(self, x, context, q_pos, k_pos, masks, rope):
        x = x + self.self_attn(self.input_layernorm(x), context, q_pos, k_pos, masks[self.window], rope)
        return x + self.mlp(self.post_attention_layernorm(x))


def draft_setting(config, key: str):
    """A drafter setting from `dflash_config` first, then the top level (DeepSpec's flat DSpark keys);
    block_size is read by block_size_of."""
    dc = getattr(config, "dflash_config", None) or {}
    value = dc.get(key, getattr(config, key, None))
    if value is None:
        raise ValueError(f"config.json: {key} is missing (expected in dflash_config or at the top level)")
    return value


def block_size_of(config) -> int:
    dc = getattr(config, "dflash_config", None) or {}
    return int(getattr(config, "block_size", None) or dc.get("block_size", 16))


class DFlashDraftModel(PreTrainedModel):
    """fc + hidden_norm over the target's features, Qwen3 decoder layers with KV injection, final norm."""

    config_class = Qwen3Config
    base_model_prefix = "dflash"
    _no_split_modules = ["DFlashDecoderLayer"]
    layer_class = DFlashDecoderLayer  # a family with its own layer (DFlash2) names it here

    def __init__(self, config):
        super().__init__(config)
        self.block_size = block_size_of(config)
        self.mask_token_id = int(draft_setting(config, "mask_token_id"))
        self.target_layer_ids = list(draft_setting(config, "target_layer_ids"))
        h = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = DFlashRMSNorm(h, config.rms_norm_eps)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = DFlashRMSNorm(h, config.rms_norm_eps)
        # A draft vocabulary (config.draft_vocab_size < vocab_size): the drafter's own LM head over K target
        # tokens, with vLLM's d2t (int64 [K] offsets: target id = draft id + d2t[draft id]) and t2d (bool [V]).
        k = getattr(config, "draft_vocab_size", None)
        self.draft_vocab_size = int(k) if k is not None and int(k) != int(config.vocab_size) else 0
        if self.draft_vocab_size:
            self.lm_head = nn.Linear(h, self.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(self.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(int(config.vocab_size), dtype=torch.bool))
        self.add_family_modules(config)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """PreTrainedModel.from_pretrained, except that a tensor missing from the weights, one the model has no
        parameter for, or one of another shape is an error: transformers would only warn, and leave a missing
        parameter at its random initialisation."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(pretrained_model_name_or_path, *args, output_loading_info=True,
                                              **kwargs)
        bad = [f"{what} {sorted(map(str, info.get(key) or []))}" for key, what in
               (("missing_keys", "missing"), ("unexpected_keys", "unexpected"), ("mismatched_keys", "mismatched"))
               if info.get(key)]
        if bad:
            raise ValueError(f"{pretrained_model_name_or_path}: the weights do not fit {cls.__name__}: "
                             + "; ".join(bad))
        return (model, info) if want_info else model

    def add_family_modules(self, config):
        """The modules a family adds on top of the backbone (DSpark's heads, DFlash2's selector), built before
        post_init; DFlash has none."""

    def _init_weights(self, module):
        if isinstance(module, DFlashRMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=getattr(self.config, "initializer_range", 0.02))
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def target_features(self, hidden_states) -> torch.Tensor:
        """The context input from a target's `output_hidden_states=True` tuple: outputs of the target layers
        in `target_layer_ids` (layer i's output is `hidden_states[i + 1]`), concatenated."""
        return torch.cat([hidden_states[i + 1] for i in self.target_layer_ids], -1)

    def forward(self, block_embeds: torch.Tensor, target_hidden: torch.Tensor, anchors: torch.Tensor,
                keep: Optional[torch.Tensor] = None, **kwargs) -> BaseModelOutput:
        """block_embeds [b, N*B, H] (embedded block tokens), target_hidden [b, S, n*H] (target features),
        anchors [b, N] (each block's first position, in [0, S]), keep [b, N] bool (None: all) ->
        last_hidden_state [b, N*B, H] (apply the target's LM head for logits)."""
        b, t, _ = block_embeds.shape
        n, s = anchors.size(1), target_hidden.size(1)
        if t != n * self.block_size:
            raise ValueError(f"block_embeds has {t} tokens, expected {n} blocks x block_size {self.block_size}")
        if keep is None:
            keep = torch.ones_like(anchors, dtype=torch.bool)
        q_pos = (anchors.unsqueeze(-1) + torch.arange(self.block_size, device=anchors.device)).reshape(b, t)
        k_pos = torch.cat([torch.arange(s, device=anchors.device).expand(b, s), q_pos], 1)
        windows = {layer.window for layer in self.layers}
        masks = {w: _block_mask(anchors, keep.bool(), s, self.block_size, w) for w in windows}
        context = self.hidden_norm(self.fc(target_hidden.to(self.fc.weight.dtype)))
        x = block_embeds.to(self.fc.weight.dtype)
        rope = _rope_frequencies(self.config, self.layers[0].self_attn.head_dim, int(k_pos.max()) + 1)
        for layer in self.layers:
            x = layer(x, context, q_pos, k_pos, masks, rope)
        return BaseModelOutput(last_hidden_state=self.norm(x))

    def block_hidden(self, target_hidden: torch.Tensor, anchor_tokens: torch.Tensor, anchors: torch.Tensor,
                     embed_tokens: Union[nn.Module, torch.Tensor], keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The final-normed hidden states [b, N, B, H] of the blocks `[anchor_tokens[:, n], MASK, ...]` at
        anchors[:, n] (embedded with the target's embed_tokens module or weight)."""
        b, n = anchors.shape
        ids = torch.full((b, n, self.block_size), self.mask_token_id, dtype=torch.long, device=anchors.device)
        ids[:, :, 0] = anchor_tokens
        ids = ids.view(b, -1)
        emb = embed_tokens(ids) if isinstance(embed_tokens, nn.Module) else F.embedding(ids, embed_tokens)
        return self.forward(emb, target_hidden, anchors, keep).last_hidden_state.view(b, n, self.block_size, -1)

    @torch.no_grad()
    def draft(self, target_hidden: torch.Tensor, anchor_tokens: torch.Tensor, anchors: torch.Tensor,
              embed_tokens: Union[nn.Module, torch.Tensor], lm_head: Union[nn.Module, torch.Tensor],
              keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Greedy proposals [b, N, B-1]: block n is `[anchor_tokens[:, n], MASK, ...]` at anchors[:, n];
        slot k (k >= 1) proposes the token at anchors + k. At inference N = 1 and the anchor is the
        number of committed tokens whose features are in target_hidden. embed_tokens / lm_head: the
        target's modules (or their weights)."""
        hidden = self.block_hidden(target_hidden, anchor_tokens, anchors, embed_tokens, keep)[:, :, 1:]
        if self.draft_vocab_size:  # argmax over the draft vocabulary, then draft id -> target id
            w = self.lm_head.weight
            best = (hidden.to(w.dtype) @ w.T).argmax(-1)
            return best + self.d2t[best]
        w = lm_head if isinstance(lm_head, torch.Tensor) else lm_head.weight
        return (hidden.to(w.dtype) @ w.T).argmax(-1)
