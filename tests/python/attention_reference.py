"""Dense reference of the DFlash anchor-block attention, written from SPEC.md "The attention mask".

It materialises the full [Tq, S + N*B] mask and expands K/V to every query head: slow and memory
hungry on purpose, so it shares nothing with the fused kernel it checks.
"""
import torch


def anchor_block_mask(anchors, keep, S, N, B, window=0):
    """Boolean [batch, Tq, S + N*B]: query (block qb, slot j) may attend key kv."""
    device = anchors.device
    if anchors.dim() == 1:
        anchors, keep = anchors[None], keep[None]
    Tq = N * B
    kv = torch.arange(S + Tq, device=device)
    qi = torch.arange(Tq, device=device)
    qb, j = qi // B, qi % B
    a = anchors[:, qb][..., None]                       # [batch, Tq, 1]
    ctx = (kv < S) & (kv < a)
    blk = (kv >= S) & ((kv - S) // B == qb[:, None])
    if window > 0:
        ctx = ctx & (kv >= a + j[:, None] - (window - 1))
        blk = blk & ((kv - S) % B <= j[:, None])
    return (ctx | blk) & keep[:, qb][..., None]


def dense_attention(q, k, v, anchors, keep, block_size, window=0, scale=None):
    """q [batch, N*B, Hq, D], k/v [batch, S+N*B, Hkv, D] -> [batch, N*B, Hq, D], in q's dtype."""
    batch, Tq, Hq, D = q.shape
    Hkv = k.shape[2]
    S = k.shape[1] - Tq
    N = Tq // block_size
    scale = D ** -0.5 if scale is None else scale
    mask = anchor_block_mask(anchors, keep, S, N, block_size, window)[:, None]  # [batch, 1, Tq, Tk]
    kx = k.repeat_interleave(Hq // Hkv, dim=2).transpose(1, 2)
    vx = v.repeat_interleave(Hq // Hkv, dim=2).transpose(1, 2)
    s = torch.matmul(q.transpose(1, 2), kx.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    any_key = mask.any(-1, keepdim=True)
    s = torch.where(any_key, s, torch.zeros_like(s))     # rows that see nothing output zero
    p = torch.softmax(s, dim=-1) * any_key
    return torch.matmul(p, vx).transpose(1, 2)
