"""A random Qwen3-MoE model (transformers' Qwen3MoeForCausalLM) or gpt-oss model (GptOssForCausalLM) for
benchmarks of the mixture-of-experts target: `dflash bench decode --model DIR --prefill-lengths ...` runs it in both
our target and transformers.

usage: make_random_moe.py OUT_DIR [--family qwen3_moe|gpt_oss] [--layers 8] [--hidden 512] [--experts 16]
                          [--top-k 4] [--seed 0]
Default shape: 8 layers, hidden 512, 8 query heads x 64 (2 KV heads), 16 experts of width 256 with 4 routed per
token, vocab 8192, untied. qwen3_moe: q/k norms, top-k renormalised. gpt_oss: sliding window 128 on even layers,
attention sinks, biases, YaRN RoPE (transformers' defaults), eager attention."""
import argparse

import torch
from transformers import GptOssConfig, GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--family", choices=["qwen3_moe", "gpt_oss"], default="qwen3_moe")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.family == "gpt_oss":
        cfg = GptOssConfig(vocab_size=8192, hidden_size=a.hidden, intermediate_size=a.hidden // 2,
                           num_local_experts=a.experts, num_experts_per_tok=a.top_k, num_hidden_layers=a.layers,
                           num_attention_heads=a.hidden // 64, num_key_value_heads=2, head_dim=64,
                           sliding_window=128, tie_word_embeddings=False, attn_implementation="eager")
        torch.manual_seed(a.seed)
        model = GptOssForCausalLM(cfg).float().eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(1.0, 0.2)
                elif name.endswith(("gate_up_proj", "down_proj")):  # [E, in, out]
                    p.normal_(0, p.shape[-2] ** -0.5)
                else:
                    p.normal_(0, p.shape[-1] ** -0.5)
        model.save_pretrained(a.out)
        return
    cfg = Qwen3MoeConfig(vocab_size=8192, hidden_size=a.hidden, intermediate_size=3 * a.hidden,
                         moe_intermediate_size=a.hidden // 2, num_experts=a.experts, num_experts_per_tok=a.top_k,
                         norm_topk_prob=True, num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64,
                         num_key_value_heads=2, head_dim=64, max_position_embeddings=16384, tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    model = Qwen3MoeForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
            else:
                p.normal_(0, p.shape[-1] ** -0.5)
    model.save_pretrained(a.out)


if __name__ == "__main__":
    main()
