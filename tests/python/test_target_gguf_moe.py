"""Qwen3-MoE targets from llama.cpp GGUF files (src/models/target_gguf_moe.h): a tiny random transformers
Qwen3MoeForCausalLM is written as GGUF the way llama.cpp's converter writes it (architecture qwen3moe, the
`qwen3moe.expert_*` keys, each layer's experts stacked into ffn_{gate,up,down}_exps [E, ...] tensors, the router
ffn_gate_inp kept in F32) and must give transformers' logits, hidden states and greedy tokens, in f32, f16 and
Q8_0 (the reference then holds the dequantised weights). Missing or misshapen expert tensors and unsupported
routing keys are errors naming the tensor or key."""
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from target_run import ENV, TIMEOUT, assert_greedy_matches_hf, hf_forward, run_target

gguf = pytest.importorskip("gguf")

VOCAB = 200
LAYERS = 3
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
    "self_attn.o_proj.weight": "attn_output", "self_attn.q_norm.weight": "attn_q_norm",
    "self_attn.k_norm.weight": "attn_k_norm", "mlp.gate.weight": "ffn_gate_inp",
    "mlp.experts.down_proj": "ffn_down_exps",
}
TOP = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm", "lm_head.weight": "output"}


def tiny_qwen3_moe(seed=0, **over):
    kw = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=6,
              num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=256, tie_word_embeddings=False)
    kw.update(over)
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**kw)).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # larger-than-init weights, so that routing decides something
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def converter_tensors(model):
    """(GGUF name, float32 array) as convert_hf_to_gguf.py's Qwen3MoeModel yields them: the fused gate_up_proj
    [E, 2I, H] split into ffn_gate_exps / ffn_up_exps [E, I, H], down_proj [E, H, I] as ffn_down_exps."""
    out = []
    for name, t in model.state_dict().items():
        a = t.float().numpy()
        if name in TOP:
            out.append((TOP[name] + ".weight", a))
            continue
        parts = name.split(".")
        layer, rest = parts[2], ".".join(parts[3:])
        if rest == "mlp.experts.gate_up_proj":
            i = a.shape[1] // 2
            out.append((f"blk.{layer}.ffn_gate_exps.weight", a[:, :i]))
            out.append((f"blk.{layer}.ffn_up_exps.weight", a[:, i:]))
        else:
            out.append((f"blk.{layer}.{LAYER_NAMES[rest]}.weight", a))
    return out


def keep_in_f32(name, a):
    # the converter keeps 1-D tensors and the router in F32 whatever the output type
    return a.ndim == 1 or ".ffn_gate_inp." in name


def write_qwen3moe_gguf(model, path, qtype="f32", arch="qwen3moe", skip=(), replace=None, extra_keys=None):
    """Writes the GGUF and loads the weights the file holds back into `model` (f16 / Q8_0 rounding), so that
    the reference sees exactly what we load. `skip` / `replace` leave out or swap tensors (error cases)."""
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_expert_count(c.num_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_vocab_size(c.vocab_size)
    w.add_eos_token_id(2)
    for k, v in (extra_keys or {}).items():
        v(w) if callable(v) else w.add_uint32(k, v)
    held = {}
    for name, a in converter_tensors(model):
        if name in skip:
            continue
        if replace and name in replace:
            a = replace[name]
        a = np.ascontiguousarray(a, dtype=np.float32)
        if keep_in_f32(name, a) or qtype == "f32":
            w.add_tensor(name, a)
            held[name] = a
        elif qtype == "f16":
            w.add_tensor(name, a.astype(np.float16))
            held[name] = a.astype(np.float16).astype(np.float32)
        else:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            held[name] = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if skip or replace:
        return
    # the reference takes the values the file holds
    by_gguf = dict(held)
    sd = model.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            if name in TOP:
                t.copy_(torch.from_numpy(by_gguf[TOP[name] + ".weight"]))
                continue
            parts = name.split(".")
            layer, rest = parts[2], ".".join(parts[3:])
            if rest == "mlp.experts.gate_up_proj":
                t.copy_(torch.from_numpy(np.concatenate([by_gguf[f"blk.{layer}.ffn_gate_exps.weight"],
                                                         by_gguf[f"blk.{layer}.ffn_up_exps.weight"]], axis=1)))
            else:
                t.copy_(torch.from_numpy(by_gguf[f"blk.{layer}.{LAYER_NAMES[rest]}.weight"]))


def check(got, ref, tol=1e-4):
    def diff(a, b):
        assert a.shape == b.shape, (a.shape, b.shape)
        return (a.double() - b.double()).abs().max().item() / max(1.0, b.abs().max().item())
    for i in range(LAYERS - 1):
        assert diff(got[f"hidden.{i}"], ref.hidden_states[i + 1]) <= tol, i
    assert diff(got["last_hidden"], ref.hidden_states[-1]) <= tol
    assert diff(got["logits"], ref.logits) <= tol


@pytest.mark.parametrize("qtype", ["f32", "f16", "q8_0"])
def test_qwen3moe_gguf_matches_transformers(dflash_bin, tmp_path, qtype):
    model = tiny_qwen3_moe(seed=1)
    path = tmp_path / f"tiny-{qtype}.gguf"
    write_qwen3moe_gguf(model, path, qtype)
    ids = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    ref = hf_forward(model, ids)
    check(run_target(dflash_bin, path, ids, tmp_path, list(range(LAYERS - 1)))[0], ref)
    # the cached paths (prefill, blocks verified after a rolled-back junk block) through the same experts
    check(run_target(dflash_bin, path, ids[:1], tmp_path, list(range(LAYERS - 1)), "--prefill", "7", "--block", "5",
                     "--rollback")[0], hf_forward(model, ids[:1]))


def test_qwen3moe_gguf_greedy_generation_matches_transformers(dflash_bin, tmp_path):
    model = tiny_qwen3_moe(seed=2)
    path = tmp_path / "tiny.gguf"
    write_qwen3moe_gguf(model, path, "q8_0")
    prompt = torch.randint(3, VOCAB, (1, 7), generator=torch.Generator().manual_seed(5))
    assert_greedy_matches_hf(dflash_bin, model, path, prompt, 24)


def test_expert_weights_norm_false_is_followed(dflash_bin, tmp_path):
    """No renormalisation of the top-k weights when the file says so (transformers' norm_topk_prob false)."""
    model = tiny_qwen3_moe(seed=3, norm_topk_prob=False)
    path = tmp_path / "nonorm.gguf"
    write_qwen3moe_gguf(model, path, "f32", extra_keys={"norm": lambda w: w.add_expert_weights_norm(False)})
    ids = torch.randint(0, VOCAB, (1, 20), generator=torch.Generator().manual_seed(2))
    check(run_target(dflash_bin, path, ids, tmp_path, list(range(LAYERS - 1)))[0], hf_forward(model, ids))


def run_error(dflash_bin, path, tmp_path):
    ids = tmp_path / "ids.safetensors"
    save_file({"input_ids": torch.zeros(1, 4, dtype=torch.long)}, str(ids))
    r = subprocess.run([dflash_bin, "target", "run", "--model", str(path), "--input", str(ids), "--output",
                        str(tmp_path / "o.safetensors"), "--capture", "0"], capture_output=True, text=True, env=ENV,
                       timeout=TIMEOUT)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "terminate called" not in r.stderr
    return r.stderr


def test_missing_and_misshapen_expert_tensors_are_named(dflash_bin, tmp_path):
    model = tiny_qwen3_moe()
    p = tmp_path / "missing.gguf"
    write_qwen3moe_gguf(model, p, skip={"blk.1.ffn_up_exps.weight"})
    assert "missing tensor 'blk.1.ffn_up_exps.weight'" in run_error(dflash_bin, p, tmp_path)
    p = tmp_path / "router.gguf"
    write_qwen3moe_gguf(model, p, skip={"blk.2.ffn_gate_inp.weight"})
    assert "missing tensor 'blk.2.ffn_gate_inp.weight'" in run_error(dflash_bin, p, tmp_path)
    # down_proj written with gate's layout [E, I, H] instead of [E, H, I]
    p = tmp_path / "shape.gguf"
    write_qwen3moe_gguf(model, p, replace={"blk.0.ffn_down_exps.weight": np.zeros((6, 32, 64), np.float32)})
    err = run_error(dflash_bin, p, tmp_path)
    assert "tensor 'blk.0.ffn_down_exps.weight' has shape [6, 32, 64], expected [6, 64, 32]" in err, err
    # two experts fewer than expert_count
    p = tmp_path / "count.gguf"
    write_qwen3moe_gguf(model, p, replace={"blk.1.ffn_gate_exps.weight": np.zeros((4, 32, 64), np.float32)})
    assert "tensor 'blk.1.ffn_gate_exps.weight' has shape [4, 32, 64], expected [6, 32, 64]" in run_error(
        dflash_bin, p, tmp_path)


@pytest.mark.parametrize("case", ["used_count", "sigmoid", "scale", "shared", "qwen35moe", "no_count"])
def test_unsupported_metadata_is_named(dflash_bin, tmp_path, case):
    model = tiny_qwen3_moe()
    p = tmp_path / f"{case}.gguf"
    extra, arch = {}, "qwen3moe"
    if case == "used_count":
        model.config.num_experts_per_tok = 7
    elif case == "sigmoid":
        extra = {"g": lambda w: w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)}
    elif case == "scale":
        extra = {"s": lambda w: w.add_expert_weights_scale(2.5)}
    elif case == "shared":
        extra = {"s": lambda w: w.add_expert_shared_count(1)}
    elif case == "qwen35moe":
        arch = "qwen35moe"
    if case == "no_count":  # a file without qwen3moe.expert_count: the writer's call made a no-op
        orig = gguf.GGUFWriter.add_expert_count
        gguf.GGUFWriter.add_expert_count = lambda self, n: None
        try:
            write_qwen3moe_gguf(model, p, skip={"none"})
        finally:
            gguf.GGUFWriter.add_expert_count = orig
    else:
        write_qwen3moe_gguf(model, p, arch=arch, extra_keys=extra, skip={"none"})
    err = run_error(dflash_bin, p, tmp_path)
    want = {"used_count": "qwen3moe.expert_used_count", "sigmoid": "qwen3moe.expert_gating_func is 2, expected 1",
            "scale": "qwen3moe.expert_weights_scale is 2.5", "shared": "qwen3moe.expert_shared_count is 1",
            "qwen35moe": "general.architecture is 'qwen35moe' (supported: llama, qwen3, qwen3moe)",
            "no_count": "qwen3moe.expert_count"}[case]
    assert want in err, err
