"""The DSpark drafter for transformers (written by `dflash export` next to dflash.py, which it builds on).

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    out = model.draft(target_hidden, anchor_tokens, anchors, target.get_input_embeddings(),
                      target.get_output_embeddings())
    out.tokens, out.confidence          # [b, N, B] drafts and their confidence logits

DeepSpec's DSpark: the DFlash backbone (dflash.py), then a low-rank previous-token ("Markov") bias added to each
slot's logits and a per-slot confidence head, under DeepSpec's tensor names. Slot j of the block `[x_a, MASK, ...]`
at anchor a predicts x[a+j+1], so all B slots are drafts. With previous tokens p_j (p_0 = x_a, then the token drafted
or given for slot j-1) and the slot's final-normed hidden state h_j:

    logits_j = lm_head(h_j) + W2 u_j
    vanilla: u_j = W1[p_j]
    gated:   u_j = sigmoid(Wg [h_j; W1[p_j]] + bg) * W1[p_j]
    rnn:     [g, c, o] = Wj [s; W1[p_j]; h_j] + bj;  s <- sigmoid(g) s + (1 - sigmoid(g)) tanh(c);  u_j = tanh(o)
             (s = 0 before slot 0)
    confidence_j = w . [h_j; W1[p_j]] + b   ([h_j] alone without confidence_head_with_markov)

W1 = markov_head.markov_w1 (an embedding [V, r]), W2 = markov_head.markov_w2 (a Linear r -> V). The settings are the
flat top-level keys of DeepSpec's config: markov_rank, markov_head_type, enable_confidence_head,
confidence_head_with_markov. The token embedding and the LM head are the target's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn as nn
from transformers.utils import ModelOutput

from .dflash import DFlashDraftModel


class DSparkMarkovHead(nn.Module):
    def __init__(self, vocab: int, hidden: int, rank: int, head_type: str):
        super().__init__()
        if head_type not in ("vanilla", "gated", "rnn"):
            raise ValueError(f"config.json: markov_head_type must be vanilla, gated or rnn, got {head_type!r}")
        self.rank, self.head_type = rank, head_type
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)
        if head_type == "gated":
            self.gate_proj = nn.Linear(hidden + rank, rank)
        elif head_type == "rnn":
            self.joint_proj = nn.Linear(2 * rank + hidden, 3 * rank)

    def step(self, hidden: torch.Tensor, prev: torch.Tensor, state: Optional[torch.Tensor]):
        """One slot: hidden [..., H], previous tokens [...], the rnn state (None before slot 0) ->
        (the feature u [..., r], the next state)."""
        e = self.markov_w1(prev).to(hidden.dtype)
        if self.head_type == "vanilla":
            return e, None
        if self.head_type == "gated":
            return torch.sigmoid(self.gate_proj(torch.cat([hidden, e], -1))) * e, None
        if state is None:
            state = torch.zeros_like(e)
        g, c, o = self.joint_proj(torch.cat([state, e, hidden], -1)).split(self.rank, -1)
        g = torch.sigmoid(g)
        return torch.tanh(o), g * state + (1 - g) * torch.tanh(c)

    def forward(self, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """The bias W2 u [..., B, V] of every slot of blocks hidden [..., B, H] with previous tokens [..., B]."""
        features, state = [], None
        for j in range(hidden.size(-2)):
            u, state = self.step(hidden[..., j, :], prev[..., j], state)
            features.append(u)
        return self.markov_w2(torch.stack(features, -2))


class DSparkConfidenceHead(nn.Module):
    def __init__(self, hidden: int, rank: int):
        super().__init__()
        self.proj = nn.Linear(hidden + rank, 1)


@dataclass
class DSparkDraftOutput(ModelOutput):
    tokens: torch.Tensor = None                 # [b, N, B] greedy drafts; slot j proposes the token at anchor + j + 1
    logits: torch.Tensor = None                 # [b, N, B, V] the Markov-corrected logits each draft is the argmax of
    confidence: Optional[torch.Tensor] = None   # [b, N, B] confidence logits (sigmoid: the chance it is accepted)


class Qwen3DSparkModel(DFlashDraftModel):
    """The DFlash backbone with DeepSpec's Markov head and confidence head."""

    def add_family_modules(self, config):
        self.markov_rank = int(getattr(config, "markov_rank", 0) or 0)
        self.with_markov = bool(getattr(config, "confidence_head_with_markov", False)) and self.markov_rank > 0
        if self.markov_rank > 0:
            self.markov_head = DSparkMarkovHead(config.vocab_size, config.hidden_size, self.markov_rank,
                                                str(getattr(config, "markov_head_type", "vanilla")))
        if getattr(config, "enable_confidence_head", False):
            self.confidence_head = DSparkConfidenceHead(config.hidden_size, self.markov_rank if self.with_markov else 0)

    def block_logits(self, hidden: torch.Tensor, prev_tokens: torch.Tensor,
                     lm_head: Union[nn.Module, torch.Tensor]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Teacher-forced: hidden [..., B, H] (final-normed, from block_hidden), prev_tokens [..., B] (slot j's previous
        token: x_a for slot 0, then x[a+j]) -> (the Markov-corrected logits [..., B, V], the confidence logits
        [..., B], or None without the confidence head)."""
        w = lm_head if isinstance(lm_head, torch.Tensor) else lm_head.weight
        logits = hidden.to(w.dtype) @ w.T
        if self.markov_rank > 0:
            logits = logits + self.markov_head(hidden, prev_tokens).to(logits.dtype)
        return logits, self.confidence(hidden, prev_tokens)

    def confidence(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> Optional[torch.Tensor]:
        if not hasattr(self, "confidence_head"):
            return None
        x = hidden
        if self.with_markov:
            x = torch.cat([hidden, self.markov_head.markov_w1(prev_tokens).to(hidden.dtype)], -1)
        return self.confidence_head.proj(x).squeeze(-1)

    @torch.no_grad()
    def draft(self, target_hidden: torch.Tensor, anchor_tokens: torch.Tensor, anchors: torch.Tensor,
              embed_tokens: Union[nn.Module, torch.Tensor], lm_head: Union[nn.Module, torch.Tensor],
              keep: Optional[torch.Tensor] = None) -> DSparkDraftOutput:
        """Greedy drafts of the B slots, left to right: slot j's previous token is the anchor token (j = 0) or the
        draft of slot j-1, and its draft is the argmax of its Markov-corrected logits (DeepSpec's draft_ops at
        temperature 0). The inputs are DFlashDraftModel.draft's."""
        hidden = self.block_hidden(target_hidden, anchor_tokens, anchors, embed_tokens, keep)
        w = lm_head if isinstance(lm_head, torch.Tensor) else lm_head.weight
        unary = hidden.to(w.dtype) @ w.T
        if self.markov_rank == 0:
            tokens = unary.argmax(-1)
            prev = torch.cat([anchor_tokens.unsqueeze(-1), tokens[..., :-1]], -1)
            return DSparkDraftOutput(tokens, unary, self.confidence(hidden, prev))
        prev, state, tokens, logits = anchor_tokens, None, [], []
        for j in range(self.block_size):
            u, state = self.markov_head.step(hidden[..., j, :], prev, state)
            logits.append(unary[..., j, :] + self.markov_head.markov_w2(u).to(unary.dtype))
            tokens.append(logits[-1].argmax(-1))
            prev = tokens[-1]
        tokens = torch.stack(tokens, -1)
        prev = torch.cat([anchor_tokens.unsqueeze(-1), tokens[..., :-1]], -1)
        return DSparkDraftOutput(tokens, torch.stack(logits, -2), self.confidence(hidden, prev))
