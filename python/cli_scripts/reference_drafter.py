"""A plain-PyTorch DFlash drafter written from docs/DFLASH.md, with a dense [T, S+T] attention mask.

Slow and memory-hungry on purpose: it is the test oracle for the C++ drafter (same weights, same batch
-> same logits, loss and gradients). Nothing here is shared with the C++ code.
"""
import math

import torch
import torch.nn.functional as F

from attention_reference import anchor_block_mask, masked_attention

LAYER_KEYS = [
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
]


def weight_names(num_layers):
    names = ["fc.weight", "hidden_norm.weight", "norm.weight"]
    for i in range(num_layers):
        names += [f"layers.{i}.{k}" for k in LAYER_KEYS]
    return names


def default_gamma(block_size):
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, max(1.0, block_size / 2))


def rms_norm(x, w, eps):
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def rope(x, pos, theta):
    """x [b, L, heads, D] at integer positions pos [b, L] (HF rotate_half layout)."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.to(torch.float64)[..., None] * inv_freq
    emb = torch.cat([ang, ang], -1)[:, :, None, :]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def layer_window(cfg, i):
    return cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else 0


def drafter_hidden(cfg, W, embed, feats, block_ids, anchors, keep):
    eps, theta, B = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["block_size"]
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    b, S, _ = feats.shape
    T = block_ids.shape[1]
    ctx = rms_norm(feats @ W["fc.weight"].T, W["hidden_norm.weight"], eps)
    x = embed[block_ids]
    block_pos = (anchors[:, :, None] + torch.arange(B)).reshape(b, -1)
    key_pos = torch.cat([torch.arange(S).expand(b, S), block_pos], 1)
    for i in range(cfg["num_hidden_layers"]):
        L = {k: W[f"layers.{i}.{k}"] for k in LAYER_KEYS}
        h = rms_norm(x, L["input_layernorm.weight"], eps)
        q = (h @ L["self_attn.q_proj.weight"].T).view(b, T, hq, d)
        q = rope(rms_norm(q, L["self_attn.q_norm.weight"], eps), block_pos, theta)
        kv_in = torch.cat([ctx, h], 1)  # context features are injected as keys/values in every layer
        k = (kv_in @ L["self_attn.k_proj.weight"].T).view(b, S + T, hkv, d)
        k = rope(rms_norm(k, L["self_attn.k_norm.weight"], eps), key_pos, theta)
        v = (kv_in @ L["self_attn.v_proj.weight"].T).view(b, S + T, hkv, d)
        o = masked_attention(q, k, v, anchor_block_mask(anchors, keep, S, anchors.shape[1], B, layer_window(cfg, i)),
                             q.shape[-1] ** -0.5)
        x = x + o.reshape(b, T, hq * d) @ L["self_attn.o_proj.weight"].T
        h2 = rms_norm(x, L["post_attention_layernorm.weight"], eps)
        mlp = (F.silu(h2 @ L["mlp.gate_proj.weight"].T) * (h2 @ L["mlp.up_proj.weight"].T))
        x = x + mlp @ L["mlp.down_proj.weight"].T
    return rms_norm(x, W["norm.weight"], eps)


def block_targets(input_ids, loss_mask, anchors, keep, B, mask_id, gamma):
    """Block inputs, labels, weights and teacher positions with plain loops (docs/DFLASH.md sample construction)."""
    b, S = input_ids.shape
    N = anchors.shape[1]
    block_ids = torch.full((b, N * B), mask_id, dtype=torch.long)
    labels = torch.zeros((b, N * B), dtype=torch.long)
    weights = torch.zeros((b, N * B), dtype=torch.float64)
    teacher_pos = torch.zeros((b, N * B), dtype=torch.long)
    for bi in range(b):
        for n in range(N):
            a = int(anchors[bi, n])
            block_ids[bi, n * B] = input_ids[bi, a]
            for k in range(B):
                r = n * B + k
                pos = a + k
                if pos < S:
                    labels[bi, r] = input_ids[bi, pos]
                    teacher_pos[bi, r] = pos - 1
                    if k > 0 and bool(keep[bi, n]) and bool(loss_mask[bi, pos]):
                        weights[bi, r] = math.exp(-(k - 1) / gamma)
    return block_ids, labels, weights, teacher_pos


def drafter_loss(hidden, lm_head, labels, weights, last_hidden=None, teacher_pos=None, kl_weight=0.0):
    """sum(w * ((1-kl) CE + kl KL(teacher || student))) / sum(w); teacher = lm_head(last_hidden[a+k-1])."""
    b, T, H = hidden.shape
    logits = hidden @ lm_head.T
    acc = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(acc), -1)
    ce = -logp.gather(-1, labels[..., None]).squeeze(-1)
    row = ce
    if kl_weight:
        t_h = torch.stack([last_hidden[bi, teacher_pos[bi]] for bi in range(b)])
        logq = torch.log_softmax((t_h @ lm_head.T).to(acc), -1)
        kl = (logq.exp() * (logq - logp)).sum(-1)
        row = (1 - kl_weight) * ce + kl_weight * kl
    w = weights.to(acc)
    return (w * row).sum() / w.sum(), logits
