"""A random Qwen3.5-architecture model (transformers' Qwen3_5ForCausalLM) for benchmarks of the hybrid target:
`dflash bench decode --model DIR --prefill-lengths ...` runs it in both our target and transformers.

usage: make_random_qwen3_5.py OUT_DIR [--layers 8] [--hidden 512] [--all-linear] [--seed 0]
Default shape: 8 layers (every 4th full attention, the others Gated DeltaNet), hidden 512, 8 query heads x
64 (2 KV heads, a quarter of each head rotated), DeltaNet 4 q/k heads x 64 and 8 v heads x 64, conv kernel 4,
MLP 1536, vocab 8192, untied. --all-linear makes every layer a Gated DeltaNet layer."""
import argparse

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--all-linear", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    types = ["linear_attention" if a.all_linear or (i + 1) % 4 else "full_attention" for i in range(a.layers)]
    cfg = Qwen3_5TextConfig(vocab_size=8192, hidden_size=a.hidden, intermediate_size=3 * a.hidden,
                            num_hidden_layers=a.layers, layer_types=types, num_attention_heads=a.hidden // 64,
                            num_key_value_heads=2, head_dim=64, linear_num_key_heads=a.hidden // 128,
                            linear_num_value_heads=a.hidden // 64, linear_key_head_dim=64, linear_value_head_dim=64,
                            linear_conv_kernel_dim=4, max_position_embeddings=16384, tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    model = Qwen3_5ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.02, 2.0).log())
            elif name.endswith("dt_bias") or "norm" in name:
                p.normal_(0, 0.2 if "linear_attn.norm" not in name else 0.0).add_(1.0 if "linear_attn.norm" in name else 0.0)
            elif "conv1d" in name:
                p.normal_(0, 0.5)
            else:
                p.normal_(0, p.shape[-1] ** -0.5)
    model.save_pretrained(a.out)


if __name__ == "__main__":
    main()
