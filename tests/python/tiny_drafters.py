"""The Qwen3 backbone that every tiny random drafter export of the eval tests shares (DFlash, DFlash2, DSpark):
its config fields and weights. Each test adds its family's keys and tensors on top."""
import torch

LAYERS = 2
TARGET_LAYER_IDS = [0, 3]  # the target layers whose hidden states feed fc
HEADS, KV_HEADS, HEAD_DIM, FFN = 4, 2, 8, 48


def drafter_backbone(target_cfg, B, per_layer=None):
    """(config dict, weight dict) of a random 2-layer drafter backbone for target_cfg with block size B.
    Draws from torch's global generator (the caller seeds it); per_layer(w, prefix) runs after each layer's own
    tensors, so a family's per-layer tensors are drawn in the same order as when written inline."""
    H = target_cfg.hidden_size
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    cfg = {"model_type": "qwen3", "block_size": B, "num_target_layers": target_cfg.num_hidden_layers,
           "num_hidden_layers": LAYERS, "hidden_size": H, "intermediate_size": FFN, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "vocab_size": target_cfg.vocab_size}
    w = {"fc.weight": torch.randn(H, len(TARGET_LAYER_IDS) * H) * 0.1, "hidden_norm.weight": torch.ones(H),
         "norm.weight": torch.ones(H)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        for name, shape in [("self_attn.q_proj", (q, H)), ("self_attn.k_proj", (kv, H)), ("self_attn.v_proj", (kv, H)),
                            ("self_attn.o_proj", (H, q)), ("mlp.gate_proj", (FFN, H)), ("mlp.up_proj", (FFN, H)),
                            ("mlp.down_proj", (H, FFN))]:
            w[p + name + ".weight"] = torch.randn(*shape) * 0.1
        for name, n in [("self_attn.q_norm", HEAD_DIM), ("self_attn.k_norm", HEAD_DIM), ("input_layernorm", H),
                        ("post_attention_layernorm", H)]:
            w[p + name + ".weight"] = torch.ones(n)
        if per_layer is not None:
            per_layer(w, p)
    return cfg, w
