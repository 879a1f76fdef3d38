"""The fused attention inside transformers-style DFlash drafters (SpecForge's, or any drafter whose attention
layers call ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation](module, q, k, v, attention_mask, ...)``).

    import dflash.integrations as di

    di.register()                                   # "anchor_block" in transformers' AttentionInterface
    drafter.config._attn_implementation = "anchor_block"   # or from_pretrained(..., attn_implementation=...)
    mask = di.block_mask(anchor_positions, block_keep_mask, block_size, seq_len)  # O(N), not O(N*B x S)
    hidden = drafter(..., attention_mask=mask)      # every layer's attention gets it

A drafter forward passes its ``attention_mask`` (and its ``**kwargs``) on to the attention function of each layer,
so the mask arguments reach it either way: as ``attention_mask`` (where SpecForge's ``OnlineDFlashModel`` passes the
mask it builds from the anchors), or as the keyword ``anchor_block_mask=`` through the forward's kwargs (which wins
over ``attention_mask``; a dense mask passed beside it is then not read). A dense boolean mask (what SpecForge's
SDPA path builds, ``[b, 1, N*B, S + N*B]``) also works unchanged: the anchors and keep flags are read back from it
and checked to give exactly that mask, at the cost of a pass over the dense mask per layer.

The layer's ``sliding_window`` keyword (SpecForge passes it for sliding layers) sets the op's window, so one mask
serves full and sliding layers.

Why "anchor_block" and not "dflash": transformers 5 takes any attention implementation name containing "flash"
for a flash-attention kernel (``is_flash_attention_requested``) and tries to load it from the hub, so a function
registered as "dflash" cannot be selected. transformers is imported only by :func:`register`: ``import dflash``
and this module need only torch.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _checks
from .attention import anchor_block_attention_bhsd
from .masks import BlockMaskArgs, block_mask_args

ATTENTION_NAME = "anchor_block"


def register(name: str = ATTENTION_NAME) -> str:
    """Registers :func:`anchor_block_attention_forward` in transformers' ``AttentionInterface`` under ``name`` (for
    every model of the process) and returns the name to set as ``config._attn_implementation``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"register: name must be a non-empty str, got {type(name).__name__} {name!r}")
    if "flash" in name:
        raise ValueError(f"attention name {name!r} contains 'flash': transformers 5 would take it for a flash-attention "
                         "hub kernel and fail to load it; use a name without 'flash' (default 'anchor_block')")
    from transformers import AttentionInterface

    AttentionInterface.register(name, anchor_block_attention_forward)
    return name


def block_mask(anchor_positions: torch.Tensor, block_keep_mask: Optional[torch.Tensor], block_size: int, seq_len: int,
               document_ids: Optional[torch.Tensor] = None) -> BlockMaskArgs:
    """SpecForge-style ``anchor_positions [b, N]`` / ``block_keep_mask [b, N]`` (what its collator samples) -> the mask
    arguments to pass as ``attention_mask`` (or ``anchor_block_mask=``). ``seq_len``: S, the context length.
    No window: each layer's ``sliding_window`` sets it. ``document_ids``: packed rows (see
    :func:`dflash.block_mask_args`)."""
    return block_mask_args(anchor_positions, block_keep_mask, block_size, seq_len, 0, document_ids)


def block_mask_from_dense(mask: torch.Tensor, block_size: int, window: int = 0) -> BlockMaskArgs:
    """A dense DFlash mask, boolean ``[b, N*B, S + N*B]`` or ``[b, 1, N*B, S + N*B]`` (True = may attend), -> the
    anchors and keep flags that give it, with ``window``. Raises ``ValueError`` when ``mask`` is not exactly such a
    mask (a window inside the block narrower than the block, packed documents, another layout)."""
    _checks.tensor("block_mask_from_dense", "mask", mask)
    block_size = _checks.integer("block_mask_from_dense", "block_size", block_size, 1)
    window = _checks.integer("block_mask_from_dense", "window", window, 0)
    if mask.dtype != torch.bool:
        raise ValueError(f"block_mask_from_dense: expected a boolean mask (True = may attend), got {mask.dtype}")
    m = mask
    if m.dim() == 4:
        if m.size(1) != 1 and not bool((m == m[:, :1]).all()):
            raise ValueError("block_mask_from_dense: the mask differs between heads; the DFlash mask is the same "
                             "for every head")
        m = m[:, 0]
    if m.dim() != 3:
        raise ValueError(f"block_mask_from_dense: expected [b, N*B, S+N*B] or [b, 1, N*B, S+N*B], got "
                         f"{list(mask.shape)}")
    b, T, kv = m.shape
    if T % block_size != 0 or kv < T:
        raise ValueError(f"block_mask_from_dense: {T} query rows and {kv} keys do not make N blocks of "
                         f"{block_size} after S context keys")
    n, S = T // block_size, kv - T
    blocks = m.reshape(b, n, block_size, kv)
    keep = blocks.any(-1).any(-1)
    # A block sees context [.., anchor): the anchor is one past the last context key any of its rows sees.
    seen = blocks[..., :S].any(2)
    last = (seen * torch.arange(1, S + 1, device=m.device)).amax(-1) if S > 0 else torch.zeros_like(keep, dtype=torch.long)
    args = block_mask_args(last, keep, block_size, S, window)
    rebuilt = args.dense_mask(b)
    if not torch.equal(rebuilt, m):
        bi, qi, ki = (rebuilt != m).nonzero()[0].tolist()
        raise ValueError(
            f"block_mask_from_dense: attention_mask is not the DFlash mask of any anchors (block size {block_size}, "
            f"window {window}): row {bi}, query {qi}, key {ki} is {bool(m[bi, qi, ki])}, the mask of anchors "
            f"{last[bi].tolist()} says {bool(rebuilt[bi, qi, ki])}; pass dflash.integrations.block_mask(...) instead "
            "(with document_ids for packed rows)")
    return args


def _mask_args(attention_mask, kwargs, block_size: Optional[int], window: int, query: torch.Tensor,
               key: torch.Tensor) -> BlockMaskArgs:
    fn = "anchor_block attention"
    if block_size is not None:
        block_size = _checks.integer(fn, "the module's config.block_size", block_size, 1)
    given = kwargs.get("anchor_block_mask")
    m = given if given is not None else attention_mask
    name = "anchor_block_mask" if given is not None else "attention_mask"
    batch, rows, keys = query.size(0), query.size(2), key.size(2)  # [b, Hq, N*B, D], [b, Hkv, S + N*B, D]
    if isinstance(m, torch.Tensor):
        if block_size is None:
            raise ValueError("anchor_block attention: a dense attention_mask needs the block size: give the module's "
                             "config a block_size, or pass dflash.integrations.block_mask(...) as the mask")
        want = f"[{batch}, {rows}, {keys}] or [{batch}, 1, {rows}, {keys}] (query rows N*B, keys S + N*B)"
        if m.dim() not in (3, 4) or tuple(m.shape[-2:]) != (rows, keys) or m.size(0) != batch:
            raise ValueError(f"{fn}: a dense {name} must be {want}, got shape {list(m.shape)}")
        m = block_mask_from_dense(m, block_size, window)
    elif not isinstance(m, BlockMaskArgs):
        raise ValueError(f"anchor_block attention needs the DFlash mask: pass dflash.integrations.block_mask(...) as "
                         f"attention_mask or anchor_block_mask=, or a dense boolean mask; got {type(m).__name__}")
    if m.window and window and m.window != window:
        raise ValueError(f"anchor_block attention: the mask arguments have window {m.window} but the layer's "
                         f"sliding_window is {window}")
    if block_size is not None and m.block_size != block_size:
        raise ValueError(f"{fn}: {name} has block_size {m.block_size} but the module's config says {block_size}")
    # The op takes S from the keys: mask arguments made for another S (or N) would silently mask the wrong keys.
    if m.num_blocks * m.block_size != rows or m.context_len + rows != keys:
        raise ValueError(f"{fn}: {name} is for {m.num_blocks} blocks of {m.block_size} after S = {m.context_len} "
                         f"context keys ({m.num_blocks * m.block_size} query rows, "
                         f"{m.context_len + m.num_blocks * m.block_size} keys), but query has {rows} rows and key "
                         f"has {keys} keys")
    if m.anchors.dim() == 2 and m.anchors.size(0) != batch:
        raise ValueError(f"{fn}: {name} has anchors for batch {m.anchors.size(0)} but query has batch {batch}")
    return m


def anchor_block_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                   value: torch.Tensor, attention_mask, dropout: float = 0.0,
                                   scaling: Optional[float] = None, sliding_window: Optional[int] = None,
                                   **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query [b, Hq, N*B, D]``, ``key``/``value``
    ``[b, Hkv, S + N*B, D]`` (context keys first, then the blocks'; GQA heads are not expanded) -> the output
    ``[b, N*B, Hq, D]`` and no attention weights. The mask comes from ``anchor_block_mask=``, else
    ``attention_mask`` (mask arguments or a dense boolean mask; module docstring). ``dropout`` must be 0 (the op
    has none); ``scaling``: the softmax scale (None: 1/sqrt(D)); ``sliding_window``: the layer's window (None or
    0: full attention)."""
    if dropout:
        raise ValueError(f"anchor_block attention has no dropout: set attention_dropout to 0 (got {dropout})")
    if kwargs.get("softcap") is not None:
        raise ValueError("anchor_block attention has no logit soft-capping (softcap)")
    window = 0 if sliding_window is None else _checks.integer("anchor_block attention", "sliding_window",
                                                              sliding_window, 0)
    for name, t in (("query", query), ("key", key), ("value", value)):
        _checks.tensor("anchor_block attention", name, t, "float")
        _checks.shape("anchor_block attention", name, t, "[batch, heads, seq, head_dim]", t.dim() == 4)
    block_size = getattr(getattr(module, "config", None), "block_size", None)
    m = _mask_args(attention_mask, kwargs, block_size, window, query, key)
    out = anchor_block_attention_bhsd(query, key, value, m.anchors, m.keep, m.block_size, window or m.window, scaling,
                                      m.ctx_start)
    return out.transpose(1, 2), None
