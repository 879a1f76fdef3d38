"""Dense reference of the DFlash anchor-block attention, written from docs/DFLASH.md "The attention mask".

It materialises the full [Tq, S + N*B] mask and expands K/V to every query head: slow and memory
hungry on purpose, so it shares nothing with the fused kernel it checks. The one dense reference of the Python
tests (the op's, the CUDA kernel's and the reference drafter's).
"""
import torch


def anchor_block_mask(anchors, keep, S, N, B, window=0, ctx_start=None):
    """Boolean [batch, Tq, S + N*B]: query (block qb, slot j) may attend key kv. ctx_start [batch, N] (packed rows:
    each block's document start) also hides context keys before it; None = 0."""
    device = anchors.device
    if anchors.dim() == 1:
        anchors, keep = anchors[None], keep[None]
        ctx_start = None if ctx_start is None else ctx_start[None]
    Tq = N * B
    kv = torch.arange(S + Tq, device=device)
    qi = torch.arange(Tq, device=device)
    qb, j = qi // B, qi % B
    a = anchors[:, qb][..., None]                       # [batch, Tq, 1]
    ctx = (kv < S) & (kv < a)
    if ctx_start is not None:
        ctx = ctx & (kv >= ctx_start[:, qb][..., None])
    blk = (kv >= S) & ((kv - S) // B == qb[:, None])
    if window > 0:
        ctx = ctx & (kv >= a + j[:, None] - (window - 1))
        blk = blk & ((kv - S) % B <= j[:, None])
    return (ctx | blk) & keep[:, qb][..., None]


def masked_attention(q, k, v, mask, scale):
    """q [batch, T, Hq, D], k/v [batch, Tk, Hkv, D], mask [batch, T, Tk] -> [batch, T, Hq, D] in q's dtype; GQA
    expanded here. Rows that see no key output zero."""
    G = q.shape[2] // k.shape[2]
    kx = k.repeat_interleave(G, dim=2).transpose(1, 2)
    vx = v.repeat_interleave(G, dim=2).transpose(1, 2)
    s = torch.matmul(q.transpose(1, 2), kx.transpose(-1, -2)) * scale
    m = mask[:, None]
    s = s.masked_fill(~m, float("-inf"))
    seen = m.any(-1, keepdim=True)
    p = torch.softmax(torch.where(seen, s, torch.zeros_like(s)), dim=-1) * seen
    return torch.matmul(p, vx).transpose(1, 2)


def masked_lse(q, k, mask, scale):
    """The row log-sum-exp [batch, Hq, T] of the masked scores (-inf for rows that see nothing)."""
    G = q.shape[2] // k.shape[2]
    kx = k.repeat_interleave(G, dim=2).transpose(1, 2)
    s = torch.matmul(q.transpose(1, 2), kx.transpose(-1, -2)) * scale
    return torch.logsumexp(s.masked_fill(~mask[:, None], float("-inf")), dim=-1)


def dense_attention(q, k, v, anchors, keep, block_size, window=0, scale=None, ctx_start=None):
    """q [batch, N*B, Hq, D], k/v [batch, S+N*B, Hkv, D] -> [batch, N*B, Hq, D], in q's dtype."""
    Tq, D = q.shape[1], q.shape[3]
    S = k.shape[1] - Tq
    mask = anchor_block_mask(anchors, keep, S, Tq // block_size, block_size, window, ctx_start)
    return masked_attention(q, k, v, mask, D ** -0.5 if scale is None else scale)
