"""Loading the target from GGUF: tiny random Llama / Qwen3 models are written as GGUF the way llama.cpp's
converter does (Hugging Face -> GGUF names, Llama Q/K rows permuted for its interleaved RoPE), and the
C++ forward from that file must match the Hugging Face model. Plus a smoke run of the real SmolLM2 GGUF."""
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

gguf = pytest.importorskip("gguf")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def llama_cpp_permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: HF rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_cpp_rope_factors(rope, head_dim):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for llama3 rope scaling."""
    base, factor = rope["rope_theta"], rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    old_len = rope["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen, high_wavelen = old_len / low, old_len / high
    factors = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    layer, kind, suffix = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{layer}.{LAYER_NAMES[kind]}.{suffix}"


def write_gguf(model, path, arch, dtype):
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(c.head_dim)
    if arch == "qwen3":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    w.add_vocab_size(c.vocab_size)
    rope = c.rope_parameters
    if rope.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama_cpp_rope_factors(rope, c.head_dim))
    w.add_eos_token_id(2)
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.float().numpy()
        if arch == "llama" and name.endswith("q_proj.weight"):
            a = llama_cpp_permute(a, c.num_attention_heads)
        if arch == "llama" and name.endswith("k_proj.weight"):
            a = llama_cpp_permute(a, c.num_key_value_heads)
        w.add_tensor(gguf_name(name), np.ascontiguousarray(a.astype(dtype if a.ndim == 2 else np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _random_init(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1.0 / p.shape[-1] ** 0.5)


CASES = {
    "llama_tied": ("llama", lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5,
        max_position_embeddings=128))),
    "llama_untied": ("llama", lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=8, tie_word_embeddings=False, max_position_embeddings=128))),
    "llama3_rope": ("llama", lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=128, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}))),
    "qwen3": ("qwen3", lambda: Qwen3ForCausalLM(Qwen3Config(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, tie_word_embeddings=False, max_position_embeddings=128))),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_gguf_target_matches_hf(dflash_bin, tmp_path, case, dtype):
    arch, make = CASES[case]
    torch.manual_seed(0)
    model = make().float().eval()
    _random_init(model)
    if dtype == np.float16:  # the reference sees exactly the weights the file holds
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2:
                    p.copy_(p.half().float())
    path = tmp_path / "tiny.gguf"
    write_gguf(model, path, arch, dtype)
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(1))
    save_file({"input_ids": ids}, str(tmp_path / "ids.safetensors"))
    r = subprocess.run([dflash_bin, "target", "run", "--model", str(path), "--input", str(tmp_path / "ids.safetensors"),
                        "--output", str(tmp_path / "out.safetensors"), "--capture", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = load_file(str(tmp_path / "out.safetensors"))
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True)
    assert (got["hidden.0"] - ref.hidden_states[1]).abs().max().item() <= 1e-4
    assert (got["logits"] - ref.logits).abs().max().item() <= 1e-4


@pytest.mark.skipif(not SMOLLM2.exists(), reason="SmolLM2 GGUF not set up (scripts/setup.sh)")
def test_smollm2_gguf_answers_a_chat_prompt(dflash_bin):
    # "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n
    #  <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    prompt = ("1,9690,198,2683,359,253,5356,5646,11173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,198,"
              "1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198")
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(SMOLLM2), "--prompt-ids", prompt,
                        "--max-new", "12"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ids = [int(t) for t in r.stdout.split()]
    # "The capital of France is Paris." then <|im_end|> (eos from the GGUF metadata stops generation).
    assert ids == [504, 3575, 282, 4649, 314, 7042, 30, 2]
    assert "tokens/s" in r.stderr
    # The same through the GGUF's own tokenizer and chat template.
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(SMOLLM2), "--prompt",
                        "What is the capital of France?", "--max-new", "12"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "The capital of France is Paris."
    assert "ids: " + " ".join(map(str, ids)) in r.stderr
