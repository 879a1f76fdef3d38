"""From what a DFlash data collator has (anchor positions, keep flags, block size) to the op's arguments.

How a flex_attention DFlash trainer maps onto :func:`dflash.anchor_block_attention`:

==========================================  ==========================================================
flex / SDPA trainer                          dflash
==========================================  ==========================================================
``anchor_positions [b, N]``                  ``BlockMaskArgs.anchors`` (int64)
``block_keep_mask [b, N]``                   ``BlockMaskArgs.keep`` (bool)
``S`` (context length), ``Q_LEN = N*B``      ``context_len``; q holds N*B rows, k/v hold S + N*B
KV = ``[context | block_0 | ... | block_N-1]``  the same: ``k = cat([k_context, k_blocks], seq dim)``
``mask_mod(b, h, q_idx, kv_idx)``            ``BlockMaskArgs.mask_mod`` (the same rule, for checking)
``create_block_mask(...)`` + ``flex_attention(q, k, v, block_mask=..., enable_gqa=True)``
                                             ``anchor_block_attention_bhsd(q, k, v, anchors, keep, B)``
position ids ``cat([arange(S), anchor+k])``  ``key_positions`` (and ``query_positions`` for q)
packed rows: ``document_ids [b, S]``         ``block_mask_args(..., document_ids=...)``: ``ctx_start`` for
                                             the op, positions restarting per document
==========================================  ==========================================================

No mask is ever built for the op: it derives the rule from anchors, keep (and ctx_start) in O(N) memory.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch

from . import _checks


@dataclasses.dataclass(frozen=True)
class BlockMaskArgs:
    """The DFlash mask as the op takes it. Pass ``anchors, keep, block_size, window`` to the op."""

    anchors: torch.Tensor  # [b, N] (or [N]) int64: block n's anchor position in the sequence
    keep: torch.Tensor     # same shape, bool: False = padding block (zero output, zero gradient)
    block_size: int        # B
    context_len: int       # S: context keys come first in k/v, block keys after them
    window: int = 0        # sliding window of the layer (0 = full attention)
    ctx_start: Optional[torch.Tensor] = None  # packed rows: [b, N] first position of each block's document
    doc_start: Optional[torch.Tensor] = None  # packed rows: [b, S] first position of each token's document

    @property
    def num_blocks(self) -> int:
        return self.anchors.size(-1)

    @property
    def query_positions(self) -> torch.Tensor:
        """RoPE positions of the block tokens, ``[b, N*B]`` (``[N*B]`` for 1-D anchors): anchor + slot, counted
        from the block's document start in packed rows."""
        first = self.anchors if self.ctx_start is None else self.anchors - self.ctx_start
        pos = first.unsqueeze(-1) + torch.arange(self.block_size, device=self.anchors.device)
        return pos.flatten(-2)

    @property
    def key_positions(self) -> torch.Tensor:
        """RoPE positions of all keys, ``[b, S + N*B]``: the context at 0..S-1 (packed rows: restarting at 0 in
        every document), then the block tokens."""
        q = self.query_positions
        ctx = torch.arange(self.context_len, device=q.device)
        if self.doc_start is not None:
            ctx = ctx - self.doc_start
        return torch.cat([ctx.expand(*q.shape[:-1], self.context_len), q], -1)

    @property
    def mask_mod(self):
        """flex_attention's ``mask_mod(b, h, q_idx, kv_idx)`` for the same mask (a plain function, for
        ``create_block_mask`` and for checks; the op itself needs no mask).

        Query ``q_idx`` is slot ``j = q_idx % B`` of block ``n = q_idx // B``; it sees context key ``kv_idx``
        when ``kv_idx < anchors[n]`` (and, with a window, ``kv_idx >= anchors[n] + j - (window - 1)``; in packed
        rows ``kv_idx >= ctx_start[n]``), and the keys of its own block ``S + n*B .. S + n*B + B-1`` (with a
        window only slots ``<= j``); nothing when ``keep[n]`` is False.
        """
        S, B, W = self.context_len, self.block_size, self.window
        anchors, keep, starts = self.anchors, self.keep, self.ctx_start

        def mask_mod(b, h, q_idx, kv_idx):
            n, j = q_idx // B, q_idx % B
            a = anchors[n] if anchors.dim() == 1 else anchors[b, n]
            kept = keep[n] if keep.dim() == 1 else keep[b, n]
            ctx = (kv_idx < S) & (kv_idx < a)
            if starts is not None:
                ctx = ctx & (kv_idx >= (starts[n] if starts.dim() == 1 else starts[b, n]))
            own = (kv_idx >= S) & ((kv_idx - S) // B == n)
            if W > 0:
                ctx = ctx & (kv_idx >= a + j - (W - 1))
                own = own & ((kv_idx - S) % B <= j)
            return (ctx | own) & kept

        return mask_mod

    def dense_mask(self, batch: Optional[int] = None) -> torch.Tensor:
        """The whole mask, ``[b, N*B, S + N*B]`` bool (O(N*B x S): for checking small cases only)."""
        if batch is None:
            batch = self.anchors.size(0) if self.anchors.dim() == 2 else 1
        dev = self.anchors.device
        T = self.num_blocks * self.block_size
        b = torch.arange(batch, device=dev).view(-1, 1, 1)
        q = torch.arange(T, device=dev).view(1, -1, 1)
        kv = torch.arange(self.context_len + T, device=dev).view(1, 1, -1)
        return self.mask_mod(b, None, q, kv).expand(batch, T, self.context_len + T)


def _bad(msg: str) -> ValueError:
    return ValueError("block_mask_args: " + msg)


def _document_starts(ids: torch.Tensor) -> torch.Tensor:
    """[..., S] document ids -> [..., S] int64: the first position of each token's run of equal ids."""
    S = ids.size(-1)
    pos = torch.arange(S, device=ids.device).expand_as(ids)
    new = torch.ones_like(ids, dtype=torch.bool)
    new[..., 1:] = ids[..., 1:] != ids[..., :-1]
    return torch.where(new, pos, torch.zeros_like(pos)).cummax(-1).values


def block_mask_args(anchor_positions: torch.Tensor, block_keep_mask: Optional[torch.Tensor], block_size: int,
                    seq_len: int, window: int = 0, document_ids: Optional[torch.Tensor] = None) -> BlockMaskArgs:
    """What a SpecForge-style collator has -> the op's inputs, checked.

    ``anchor_positions``: ``[b, N]`` or ``[N]``, any integer dtype (sorted or not, duplicates allowed; padding
    blocks may hold any anchor in ``[0, seq_len]``, e.g. 0). ``block_keep_mask``: same shape, bool or 0/1
    (None: every block kept). ``seq_len``: S, the number of context positions (the target's sequence
    length). ``window``: the layer's sliding window (0 = full attention). ``document_ids``: packed rows,
    ``[b, S]`` or ``[S]`` integers, a document being a run of equal ids (as vLLM speculators' collator gives
    them): each block then sees only its anchor's document (``ctx_start``), RoPE positions restart at every
    document, and :func:`block_targets` drops labels past the document's end.

    Raises ``TypeError`` for a non-int size or a float keep mask, ``ValueError`` for shapes, dtypes, values
    or anchors outside ``[0, S]`` (the op's message).
    """
    block_size = _checks.integer("block_mask_args", "block_size", block_size)
    seq_len = _checks.integer("block_mask_args", "seq_len", seq_len)
    window = _checks.integer("block_mask_args", "window", window)
    a = torch.as_tensor(anchor_positions)
    if a.dim() not in (1, 2):
        raise _bad(f"anchor_positions must be [N] or [batch, N], got shape {list(a.shape)}")
    if a.dtype.is_floating_point or a.dtype.is_complex or a.dtype == torch.bool:
        raise _bad(f"anchor_positions must hold integers, got {a.dtype}")
    if block_size < 1:
        raise _bad(f"block_size must be >= 1, got {block_size}")
    if window < 0:
        raise _bad(f"window must be >= 0 (0 = no sliding window), got {window}")
    if seq_len < 0:
        raise _bad(f"seq_len must be >= 0, got {seq_len}")
    a = a.to(torch.long).contiguous()
    keep = (torch.ones_like(a, dtype=torch.bool) if block_keep_mask is None
            else torch.as_tensor(block_keep_mask, device=a.device))
    if keep.shape != a.shape:
        raise _bad(f"block_keep_mask must have the shape of anchor_positions {list(a.shape)}, "
                   f"got {list(keep.shape)}")
    if keep.dtype.is_floating_point or keep.dtype.is_complex:  # 0.5 would silently count as kept
        raise TypeError(f"block_mask_args: block_keep_mask must be bool or integer 0/1, got {keep.dtype}")
    if keep.dtype != torch.bool and bool(((keep != 0) & (keep != 1)).any()):
        raise _bad(f"block_keep_mask must hold only 0 and 1, got {sorted(set(keep.unique().tolist()) - {0, 1})[:3]}")
    keep = (keep != 0).contiguous()
    bad = ((a < 0) | (a > seq_len)).nonzero()
    if bad.numel():
        idx = bad[0].tolist() if a.dim() == 2 else [0] + bad[0].tolist()
        raise _bad(f"anchors[{idx[0]}, {idx[1]}] = {int(a.view(-1, a.size(-1))[idx[0], idx[1]])} is outside "
                   f"[0, S] with context length S = {seq_len}")
    if document_ids is None:
        return BlockMaskArgs(a, keep, int(block_size), int(seq_len), int(window))
    ids = torch.as_tensor(document_ids, device=a.device)
    if ids.dim() not in (1, 2) or ids.size(-1) != seq_len or (ids.dim() == 2 and a.dim() == 2 and ids.size(0) != a.size(0)):
        raise _bad(f"document_ids must be [S] or [batch, S] with S = {seq_len} (and the anchors' batch), "
                   f"got shape {list(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise _bad(f"document_ids must hold integers, got {ids.dtype}")
    if ids.dim() == 2 and a.dim() == 1:
        a, keep = a.expand(ids.size(0), -1).contiguous(), keep.expand(ids.size(0), -1).contiguous()
    doc_start = _document_starts(ids)
    if seq_len == 0:
        starts = torch.zeros_like(a)
    else:
        idx = a.clamp(max=seq_len - 1)
        starts = doc_start.expand(*a.shape[:-1], seq_len).gather(-1, idx) if a.dim() == 2 else doc_start.gather(-1, idx)
    return BlockMaskArgs(a, keep, int(block_size), int(seq_len), int(window), starts.contiguous(), doc_start)


def default_gamma(block_size: int) -> float:
    """The loss decay of DFlash: 7 for B=16, 5 for B=10, 4 for B=8, else B/2 (at least 1)."""
    block_size = _checks.integer("default_gamma", "block_size", block_size, 1)
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, max(1.0, block_size / 2))


class BlockTargets(NamedTuple):
    block_ids: torch.Tensor      # [b, N*B] int64: [token[a], mask, ..., mask] per block (embed these)
    labels: torch.Tensor         # [b, N*B] int64: slot k predicts token[a + k] (0 past the sequence end)
    weights: torch.Tensor        # [b, N*B] float32: exp(-(k-1)/gamma) * keep * loss_mask[a+k] * (a+k < S) * (k > 0)
    teacher_index: torch.Tensor  # [b*N*B] int64: row of the flattened [b*S, H] target hidden that is the
    #                              soft-label teacher of each block token (position a+k-1)


def block_targets(input_ids: torch.Tensor, loss_mask: torch.Tensor, args: BlockMaskArgs, mask_token_id: int,
                  gamma: Optional[float] = None) -> BlockTargets:
    """Block inputs, labels and loss weights of DFlash training for ``input_ids``/``loss_mask`` ``[b, S]``.

    Labels are not shifted: slot k of the block anchored at a predicts ``input_ids[a + k]``; slot 0 and
    blocks with ``keep`` False weigh 0, and so do tokens past the end (of the row, or in packed rows of the
    anchor's document) or outside the loss mask. ``gamma``: the decay ``exp(-(k-1)/gamma)`` of slot k's weight;
    None: :func:`default_gamma` (the paper's); ``math.inf``: no decay, every counted label weighs 1 (SpecForge's
    default, ``loss_decay: none`` of ``dflash train``).
    """
    fn = "block_targets"
    if not isinstance(args, BlockMaskArgs):
        raise TypeError(f"{fn}: args must be the BlockMaskArgs of dflash.block_mask_args(...), got {type(args).__name__}")
    _checks.tensor(fn, "input_ids", input_ids, "int")
    _checks.tensor(fn, "loss_mask", loss_mask)
    mask_token_id = _checks.integer(fn, "mask_token_id", mask_token_id, 0)
    _checks.one_device(fn, [("input_ids", input_ids), ("loss_mask", loss_mask), ("args.anchors", args.anchors)],
                       op_devices=False)
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float))):
        raise TypeError(f"{fn}: gamma must be a float or None, got {type(gamma).__name__} {gamma!r}")
    if gamma is not None and not gamma > 0:
        raise ValueError(f"block_targets: gamma must be > 0 (None: by block size, math.inf: no decay), got {gamma}")
    if input_ids.dim() != 2 or loss_mask.shape != input_ids.shape:
        raise ValueError(f"block_targets: input_ids and loss_mask must both be [batch, S], got "
                         f"{list(input_ids.shape)} and {list(loss_mask.shape)}")
    if loss_mask.dtype.is_complex or bool(((loss_mask != 0) & (loss_mask != 1)).any()):
        raise ValueError(f"{fn}: loss_mask must hold only 0 and 1 (or False/True), got dtype {loss_mask.dtype} "
                         "with other values")
    bsz, S = input_ids.shape
    if args.anchors.dim() == 2 and args.anchors.size(0) != bsz:
        raise ValueError(f"{fn}: input_ids has batch {bsz} but the mask args' anchors have {args.anchors.size(0)} rows")
    if S != args.context_len:
        raise ValueError(f"block_targets: input_ids has {S} positions but the mask args have S = {args.context_len}")
    B = args.block_size
    gamma = default_gamma(B) if gamma is None else gamma
    dev = input_ids.device
    anchors = args.anchors.expand(bsz, -1) if args.anchors.dim() == 1 else args.anchors
    keep = args.keep.expand(bsz, -1) if args.keep.dim() == 1 else args.keep
    k = torch.arange(B, device=dev)
    pos = anchors.unsqueeze(-1) + k                                   # [b, N, B]
    inside = pos < S
    safe = pos.clamp(max=max(S - 1, 0)).flatten(1)
    labels = torch.where(inside.flatten(1), input_ids.gather(1, safe), 0)
    decay = torch.exp(-(k - 1).clamp(min=0).double() / gamma) * (k > 0)
    in_loss = loss_mask.gather(1, safe).view_as(pos).bool() & inside
    if args.doc_start is not None:  # packed rows: a label in the next document is not the block's to predict
        doc = args.doc_start.expand(bsz, S)
        in_loss = in_loss & (doc.gather(1, safe).view_as(pos) == doc.gather(1, anchors.clamp(max=max(S - 1, 0))).unsqueeze(-1))
    weights = (decay * (in_loss & keep.unsqueeze(-1))).to(torch.float32).flatten(1)
    block_ids = torch.full_like(labels, mask_token_id)
    first = input_ids.gather(1, anchors.clamp(max=max(S - 1, 0)))
    block_ids.view(bsz, -1, B)[:, :, 0] = torch.where(anchors < S, first, mask_token_id)
    teacher = (pos - 1).clamp(0, max(S - 1, 0)).flatten(1) + S * torch.arange(bsz, device=dev).unsqueeze(1)
    return BlockTargets(block_ids, labels, weights, teacher.reshape(-1))

