"""The chunked LM-head loss (torch.ops.dflash.chunked_lm_loss): cross-entropy (+ optional soft labels)
through the frozen LM head without ever holding all the logits."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from . import _checks


class LossWithStats(NamedTuple):
    loss: torch.Tensor         # scalar, with autograd to hidden
    row_ce: torch.Tensor       # [R] cross-entropy of each row (0 for rows with weight 0), no gradient
    row_correct: torch.Tensor  # [R] bool: the row's argmax is its label (False for rows with weight 0)


def _flat_rows(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return x.reshape(-1, x.size(-1)) if x is not None and x.dim() > 2 else x


def chunked_lm_loss_with_stats(hidden: torch.Tensor, lm_head_weight: torch.Tensor, labels: torch.Tensor,
                               weights: torch.Tensor, *, teacher_hidden: Optional[torch.Tensor] = None,
                               teacher_index: Optional[torch.Tensor] = None, kl_weight: float = 0.0,
                               chunk_rows: int = 1024, fused_ce: bool = True) -> LossWithStats:
    """:func:`chunked_lm_loss` that also returns each row's cross-entropy and argmax hit (for accuracy)."""
    # What the op cannot say itself: a non-tensor or non-number argument, and tensors with no data (meta). Devices
    # are named the op's way; shapes, dtypes and ranges come from the op (the same ValueError text).
    fn = "chunked_lm_loss"
    for name, t in (("hidden", hidden), ("lm_head_weight", lm_head_weight), ("labels", labels), ("weights", weights)):
        _checks.tensor(fn, name, t)
    for name, t in (("teacher_hidden", teacher_hidden), ("teacher_index", teacher_index)):
        if t is not None:
            _checks.tensor(fn, name, t)
    chunk_rows = _checks.integer(fn, "chunk_rows", chunk_rows)
    if isinstance(kl_weight, bool) or not isinstance(kl_weight, (int, float)):
        raise TypeError(f"{fn}: kl_weight must be a float, got {type(kl_weight).__name__} {kl_weight!r}")
    _checks.one_device(fn, [("hidden", hidden), ("lm_head", lm_head_weight), ("labels", labels), ("weights", weights),
                            ("teacher_hidden", teacher_hidden), ("teacher_index", teacher_index)], op_devices=False)
    if lm_head_weight.requires_grad and torch.is_grad_enabled():
        raise ValueError("chunked_lm_loss: lm_head_weight requires grad, but the LM head is frozen here (it gets no "
                         "gradient); pass lm_head.weight.detach() or call requires_grad_(False) on it")
    h = _flat_rows(hidden)
    out = torch.ops.dflash.chunked_lm_loss(
        h, lm_head_weight, labels.reshape(-1), weights.reshape(-1), _flat_rows(teacher_hidden),
        None if teacher_index is None else teacher_index.reshape(-1), chunk_rows, kl_weight, fused_ce)
    return LossWithStats(*out)


def chunked_lm_loss(hidden: torch.Tensor, lm_head_weight: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor,
                    *, teacher_hidden: Optional[torch.Tensor] = None, teacher_index: Optional[torch.Tensor] = None,
                    kl_weight: float = 0.0, chunk_rows: int = 1024, fused_ce: bool = True) -> torch.Tensor:
    """``sum(w * loss_row) / sum(w)`` over rows of ``hidden @ lm_head_weight.T``, ``chunk_rows`` rows at a time.

    - ``hidden``: ``[..., H]`` (e.g. the drafter's ``[batch, N*B, H]`` output), flattened to R rows; the
      only input that gets a gradient;
    - ``lm_head_weight``: ``[V, H]``, the target's frozen LM head (must not require grad), same dtype as
      hidden;
    - ``labels``: R int64 token ids (any shape with R elements); rows with weight 0 are never read, so
      ignored rows may hold any value (e.g. -100);
    - ``weights``: R floats (any shape): DFlash's ``exp(-(k-1)/gamma) * keep * loss_mask``, see
      :func:`dflash.block_targets`; rows with weight 0 are skipped entirely;
    - soft labels: ``loss_row = (1 - kl_weight) * CE + kl_weight * KL(teacher || student)``, where row r's
      teacher distribution is ``softmax(teacher_hidden[teacher_index[r]] @ lm_head_weight.T)``
      (``teacher_hidden [M, H]`` or ``[..., H]``: the target's last hidden states, flattened);
      both are needed when ``kl_weight > 0``.

    Memory: one chunk of logits (``chunk_rows x V``, fp32) plus a few row vectors, never all R x V. The
    gradient w.r.t. hidden is computed in the forward while each chunk's logits exist, so backward
    recomputes nothing. Returns a scalar (float32, float64 for float64 hidden). Bad arguments raise
    ``ValueError`` with the op's message (shapes, dtypes, ranges, tensors on different devices or on meta), or
    ``TypeError`` for an argument that is not a tensor / number, naming the argument, what was expected and what it
    got.
    """
    return chunked_lm_loss_with_stats(hidden, lm_head_weight, labels, weights, teacher_hidden=teacher_hidden,
                                      teacher_index=teacher_index, kl_weight=kl_weight, chunk_rows=chunk_rows,
                                      fused_ce=fused_ce).loss
