"""Greedy decode speed of a target in Hugging Face transformers (the reference the C++ target is compared
with by `dflash bench decode`). Prints one JSON line: tokens_per_s, new_tokens, seconds, threads.

usage: bench_decode_hf.py MODEL PROMPT_IDS NEW_TOKENS THREADS
       bench_decode_hf.py MODEL prefill T1,T2,... THREADS   (prefill tokens/s of synthetic T-token prompts)
MODEL is a Llama .gguf file (dequantised to fp32 with the `gguf` package and loaded into transformers'
LlamaForCausalLM; transformers' own GGUF path needs `accelerate`, which we do not install) or an HF folder."""
import json
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


def _unpermute(w, n_head):
    """Inverse of llama.cpp's convert permute (HF rotate-half rows -> interleaved pairs) for q/k rows."""
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def load_llama_gguf(path):
    import gguf
    import numpy as np
    from gguf.quants import dequantize
    r = gguf.GGUFReader(path)

    def meta(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]
    arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
    if arch != "llama":
        raise SystemExit(f"{path}: architecture {arch!r}; this benchmark reads llama GGUFs")
    heads, kv = int(meta("llama.attention.head_count")), int(meta("llama.attention.head_count_kv"))
    names = {t.name for t in r.tensors}
    cfg = LlamaConfig(vocab_size=int(meta("llama.vocab_size")), hidden_size=int(meta("llama.embedding_length")),
                      intermediate_size=int(meta("llama.feed_forward_length")),
                      num_hidden_layers=int(meta("llama.block_count")), num_attention_heads=heads,
                      num_key_value_heads=kv, rms_norm_eps=float(meta("llama.attention.layer_norm_rms_epsilon")),
                      rope_theta=float(meta("llama.rope.freq_base")),
                      max_position_embeddings=int(meta("llama.context_length")),
                      tie_word_embeddings="output.weight" not in names)
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
    state = {}
    for t in r.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim > 1 or len(t.shape) > 1 else w
        if t.name in fixed:
            name = fixed[t.name]
        else:
            _, layer, kind, _ = t.name.split(".")
            name = f"model.layers.{layer}.{per_layer[kind]}.weight"
            if kind == "attn_q":
                w = _unpermute(w, heads)
            elif kind == "attn_k":
                w = _unpermute(w, kv)
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
    model = LlamaForCausalLM(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise SystemExit(f"{path}: tensors do not map onto Llama: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.float()


def load_hf_folder(path):
    """The class the checkpoint names (a Qwen3_5ForConditionalGeneration folder loaded as a causal LM would lose
    its tied LM head), else AutoModelForCausalLM."""
    import transformers
    with open(os.path.join(path, "config.json")) as f:
        archs = json.load(f).get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    return (cls or AutoModelForCausalLM).from_pretrained(path, dtype=torch.float32)


def prefill(model, lengths, repeats=3):
    """Prompt token i = (i * 7919 + 13) % vocab, as `dflash bench decode --prefill-lengths` builds it; the cache
    is filled as for decoding and only the last position's logits are computed, as on our side. After a warm-up
    forward, each length is timed `repeats` times; medians are reported."""
    vocab = model.config.get_text_config().vocab_size
    with torch.no_grad():
        model(torch.arange(64).remainder(vocab).view(1, -1), use_cache=True, logits_to_keep=1)
    rows = []
    for T in lengths:
        ids = ((torch.arange(T) * 7919 + 13) % vocab).view(1, -1)
        walls, cpus = [], []
        for _ in range(repeats):
            with torch.no_grad():
                c0, t0 = time.process_time(), time.perf_counter()
                out = model(ids, use_cache=True, logits_to_keep=1)
                nxt = int(out.logits[0, -1].argmax())
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
        wall, cpu = sorted(walls)[repeats // 2], sorted(cpus)[repeats // 2]
        rows.append({"T": T, "tokens_per_s": T / wall, "tokens_per_cpu_s": T / cpu, "next_token": nxt})
    return rows


def main():
    model_path, prompt, n, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if threads > 0:
        torch.set_num_threads(threads)
    if os.path.isfile(model_path):
        model = load_llama_gguf(model_path)
    else:
        model = load_hf_folder(model_path)
    model.eval()
    if prompt == "prefill":
        print(json.dumps({"prefill": prefill(model, [int(t) for t in n.split(",")]),
                          "threads": torch.get_num_threads()}))
        return
    n = int(n)
    ids = torch.tensor([[int(t) for t in prompt.split(",")]])
    with torch.no_grad():
        # Same work as the C++ loop: prefill once, then one token per forward on the KV cache.
        c0 = time.process_time()
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        t1 = time.perf_counter()
        tokens = [int(tok)]
        for _ in range(n - 1):
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
            tokens.append(int(tok))
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
    print(json.dumps({"tokens_per_s": (n - 1) / (t2 - t1), "tokens_per_cpu_s": n / cpu, "prefill_s": t1 - t0, "new_tokens": n,
                      "seconds": t2 - t1, "threads": torch.get_num_threads(), "tokens": tokens}))


if __name__ == "__main__":
    main()
