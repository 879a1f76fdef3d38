"""The DFlash2 drafter for transformers (written by `dflash export` next to dflash.py, which it builds on).

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    tokens = model.draft(target_hidden, anchor_tokens, anchors, target.get_input_embeddings(),
                         target.get_output_embeddings())      # [b, N, B-1]: the selector's greedy path

z-lab's DFlash2: the DFlash backbone (dflash.py) with each layer's attention and MLP sublayers wrapped in grouped
dynamic causal block convolutions, and a low-rank candidate selector on top of the LM head. With u the sublayer's
normed input and delta = reshape(kernel_projection(u), [L, 2, K, d/G]):

    Conv(v; base, delta)[t, c] = sum_{o<K} (base[o, c] + delta[t, o, c // G]) * v[t-o, c],  0 where t mod B < o
    x = x + Conv(sublayer(Conv(u; base[0], delta[:, 0])); base[1], delta[:, 1])

(the kernel indexed by the output position, the post-sublayer side computed from u, taps never crossing a block).
The selector re-ranks the top-K unary candidates C_k of each drafted slot k = 1..B-1 by the previous token p:

    S_k(p, c) = U_k[c] + < A[p] * (W_h h_k), Bc[c] >,   U = lm_head(h)
    greedy walk: p_1 = the anchor token, c_k = argmax_{c in C_k} S_k(p_k, c), p_{k+1} = c_k

A, Bc: candidate_selector.predecessor_codebook / successor_codebook [V, r] (bare names, as z-lab stores them),
W_h: candidate_selector.hidden_projection [r, d]. The settings are dflash_config's conv_kernel_size,
conv_group_size, selector_rank and selector_top_k. The token embedding and the LM head are the target's.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch
import torch.nn as nn

from .dflash import DFlashDecoderLayer, DFlashDraftModel, block_size_of, draft_setting


class DFlash2BlockConv(nn.Module):
    """The two grouped dynamic causal convolutions around one sublayer."""

    def __init__(self, hidden: int, kernel_size: int, group_size: int, block_size: int):
        super().__init__()
        if group_size < 1 or hidden % group_size:
            raise ValueError(f"config.json: dflash_config.conv_group_size {group_size} must divide hidden_size "
                             f"{hidden}")
        self.kernel_size, self.group_size, self.block_size = kernel_size, group_size, block_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel_size * (hidden // group_size), bias=False)

    def reset_to_identity(self):
        with torch.no_grad():
            self.base_kernel.zero_()
            self.base_kernel[:, 0] = 1
            self.kernel_projection.weight.zero_()

    def _conv(self, v: torch.Tensor, base: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """v [b, L, d] (L a multiple of the block), base [K, d], delta [b, L, K, d/G]."""
        b, L, d = v.shape
        B, G = self.block_size, self.group_size
        blocks = v.view(b, L // B, B, d)
        out = 0
        for o in range(min(self.kernel_size, B)):  # a tap o >= B reads only the zeros before the block
            shifted = nn.functional.pad(blocks[:, :, :B - o], (0, 0, o, 0))
            grouped = shifted.reshape(b, L, d // G, G)
            out = out + base[o].view(d // G, G) * grouped  # z-lab's order: base, then dynamic (bf16 rounds alike)
            out = out + delta[:, :, o].unsqueeze(-1) * grouped
        return out.reshape(b, L, d)

    def forward(self, u: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        b, L, d = u.shape
        delta = self.kernel_projection(u).view(b, L, 2, self.kernel_size, d // self.group_size)
        pre = self._conv(u, self.base_kernel[0], delta[:, :, 0])
        return self._conv(sublayer(pre), self.base_kernel[1], delta[:, :, 1])


class DFlash2DecoderLayer(DFlashDecoderLayer):
    def __init__(self, config, index: int):
        super().__init__(config, index)
        args = (config.hidden_size, int(draft_setting(config, "conv_kernel_size")),
                int(draft_setting(config, "conv_group_size")), block_size_of(config))
        self.attention_conv = DFlash2BlockConv(*args)
        self.mlp_conv = DFlash2BlockConv(*args)

    def forward(self, x, context, q_pos, k_pos, masks, rope):
        attention = lambda u: self.self_attn(u, context, q_pos, k_pos, masks[self.window], rope)  # noqa: E731
        x = x + self.attention_conv(self.input_layernorm(x), attention)
        return x + self.mlp_conv(self.post_attention_layernorm(x), self.mlp)


class DFlash2CandidateSelector(nn.Module):
    def __init__(self, vocab: int, hidden: int, rank: int, top_k: int):
        super().__init__()
        if not 1 <= top_k <= vocab:
            raise ValueError(f"config.json: dflash_config.selector_top_k must be in [1, {vocab}], got {top_k}")
        self.top_k = top_k
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.empty(vocab, rank))
        self.successor_codebook = nn.Parameter(torch.empty(vocab, rank))

    def candidates(self, unary: torch.Tensor) -> torch.Tensor:
        """The top-K ids [..., K] of unary [..., V], by descending logit, equal logits by ascending id."""
        return torch.sort(unary, dim=-1, descending=True, stable=True).indices[..., :self.top_k]

    def scores(self, unary_at_ids: torch.Tensor, hidden: torch.Tensor, predecessors: torch.Tensor,
               ids: torch.Tensor) -> torch.Tensor:
        """S(p, c) [..., K] for candidates ids [..., K] with their unary logits, hidden [..., d], predecessors [...]."""
        query = self.predecessor_codebook[predecessors] * self.hidden_projection(hidden)        # [..., r]
        bonus = (self.successor_codebook[ids] * query.unsqueeze(-2).to(self.successor_codebook.dtype)).sum(-1)
        return unary_at_ids + bonus.to(unary_at_ids.dtype)

    def walk(self, hidden: torch.Tensor, unary: torch.Tensor, anchor_tokens: torch.Tensor):
        """The greedy path over the drafted slots: hidden [..., L, d], unary [..., L, V], anchor_tokens [...] (p_1)
        -> (path [..., L], candidates [..., L, K], scores [..., L, K] along the path)."""
        ids = self.candidates(unary)
        at_ids = unary.gather(-1, ids)
        p, path, scores = anchor_tokens, [], []
        for k in range(unary.size(-2)):
            s = self.scores(at_ids[..., k, :], hidden[..., k, :], p, ids[..., k, :])
            p = ids[..., k, :].gather(-1, s.argmax(-1, keepdim=True)).squeeze(-1)  # first of equal scores
            path.append(p)
            scores.append(s)
        return torch.stack(path, -1), ids, torch.stack(scores, -2)


class DFlash2DraftModel(DFlashDraftModel):
    """The DFlash backbone with block convolutions in every layer and the candidate selector."""

    _no_split_modules = ["DFlash2DecoderLayer"]
    layer_class = DFlash2DecoderLayer

    def add_family_modules(self, config):
        dc = getattr(config, "dflash_config", None) or {}
        for key, neutral in (("output_multiplier", 1.0), ("final_logit_softcapping", 0.0),
                             ("input_embedding_scale", 1.0)):
            if dc.get(key) is not None and dc[key] != neutral:  # as dflash's own drafter: neutral values only
                raise ValueError(f"config.json: dflash_config.{key} is {dc[key]!r}; only {neutral} or absent is "
                                 f"supported")
        self.candidate_selector = DFlash2CandidateSelector(
            config.vocab_size, config.hidden_size, int(draft_setting(config, "selector_rank")),
            int(draft_setting(config, "selector_top_k")))

    def _init_weights(self, module):
        """As the trainers start DFlash2: identity convs (so it drafts as its DFlash backbone), a zero successor
        codebook (the selector a no-op)."""
        if isinstance(module, DFlash2BlockConv):
            module.reset_to_identity()
        elif isinstance(module, DFlash2CandidateSelector):
            std = getattr(self.config, "initializer_range", 0.02)
            nn.init.normal_(module.predecessor_codebook, std=std)
            nn.init.zeros_(module.successor_codebook)
            nn.init.normal_(module.hidden_projection.weight, std=std)
        elif not any(module is c.kernel_projection for c in self._convs()):
            super()._init_weights(module)

    def _convs(self):
        return [c for layer in self.layers for c in (layer.attention_conv, layer.mlp_conv)]

    @torch.no_grad()
    def draft(self, target_hidden: torch.Tensor, anchor_tokens: torch.Tensor, anchors: torch.Tensor,
              embed_tokens: Union[nn.Module, torch.Tensor], lm_head: Union[nn.Module, torch.Tensor],
              keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Greedy proposals [b, N, B-1] from the selector's walk over slots 1..B-1 (slot k proposes the token at
        anchor + k). The inputs are DFlashDraftModel.draft's."""
        hidden = self.block_hidden(target_hidden, anchor_tokens, anchors, embed_tokens, keep)[:, :, 1:]
        w = lm_head if isinstance(lm_head, torch.Tensor) else lm_head.weight
        return self.candidate_selector.walk(hidden, hidden.to(w.dtype) @ w.T, anchor_tokens)[0]
