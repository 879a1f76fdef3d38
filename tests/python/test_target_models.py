"""The C++ target forward (`dflash target run|generate`) against Hugging Face transformers on tiny random
Llama and Qwen3 models: logits and captured hidden states, KV-cache decode, block verify with rollback,
two pipeline stages, and greedy generation."""
import copy
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

TOL = 1e-4


def _make_llama():
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      rope_theta=500000.0, max_position_embeddings=256,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                      bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg)


def _make_qwen3():
    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=32, tie_word_embeddings=False,
                      max_position_embeddings=256, rope_theta=1000000.0, eos_token_id=5)
    return Qwen3ForCausalLM(cfg)


MAKERS = {"llama": _make_llama, "qwen3": _make_qwen3}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def tiny(request, tmp_path_factory):
    torch.manual_seed(0)
    model = MAKERS[request.param]().float().eval()
    with torch.no_grad():
        # Larger-than-init weights so that errors are not hidden by near-zero activations.
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1.0 / p.shape[-1] ** 0.5)
    d = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(str(d))
    return model, d


def _hf_forward(model, ids):
    with torch.no_grad():
        return model(ids, output_hidden_states=True)


def _run(dflash_bin, model_dir, ids, tmp_path, capture, *extra):
    inp, out = tmp_path / "ids.safetensors", tmp_path / "out.safetensors"
    save_file({"input_ids": ids}, str(inp))
    cmd = [dflash_bin, "target", "run", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
           "--capture", ",".join(map(str, capture)), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return load_file(str(out))


def _max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.double() - b.double()).abs().max().item()


def _check(got, ref, capture):
    assert _max_diff(got["logits"], ref.logits) <= TOL
    assert _max_diff(got["last_hidden"], ref.hidden_states[-1]) <= TOL
    assert sorted(k for k in got if k.startswith("hidden.")) == sorted(f"hidden.{i}" for i in capture)
    for i in capture:
        assert _max_diff(got[f"hidden.{i}"], ref.hidden_states[i + 1]) <= TOL, i


def test_full_forward_matches_hf(dflash_bin, tiny, tmp_path):
    model, d = tiny
    L = model.config.num_hidden_layers
    ids = torch.randint(0, model.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    capture = list(range(L))
    _check(_run(dflash_bin, d, ids, tmp_path, capture), _hf_forward(model, ids), capture)


@pytest.mark.parametrize("mode", [["--prefill", "9", "--block", "1"],
                                  ["--prefill", "7", "--block", "5"],
                                  ["--prefill", "7", "--block", "5", "--rollback"],
                                  ["--stages", "2", "--prefill", "4", "--block", "8", "--rollback"],
                                  ["--stages", "2"],
                                  ["--devices", "cpu,cpu,cpu", "--prefill", "3", "--block", "16"]],
                         ids=["decode", "verify", "verify_rollback", "pipeline_rollback", "pipeline", "devices"])
def test_cached_paths_match_hf_full_forward(dflash_bin, tiny, tmp_path, mode):
    model, d = tiny
    ids = torch.randint(0, model.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    capture = [0, model.config.num_hidden_layers - 2]
    _check(_run(dflash_bin, d, ids, tmp_path, capture, *mode), _hf_forward(model, ids), capture)


def test_bf16_forward_is_close_to_hf_bf16(dflash_bin, tiny, tmp_path):
    model, d = tiny
    ids = torch.randint(0, model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(4))
    ref = _hf_forward(copy.deepcopy(model).to(torch.bfloat16), ids)
    got = _run(dflash_bin, d, ids, tmp_path, [1], "--dtype", "bf16", "--prefill", "8", "--block", "4")
    assert got["hidden.1"].dtype == torch.bfloat16
    scale = ref.logits.float().abs().max().item()
    # bf16 rounding differs with op order; the two must still agree to a few bf16 ulps of the range.
    assert _max_diff(got["logits"], ref.logits.float()) <= 0.05 * scale
    assert (got["logits"].argmax(-1) == ref.logits.float().argmax(-1)).float().mean() >= 0.9


def test_greedy_generation_matches_hf(dflash_bin, tiny):
    model, d = tiny
    prompt = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model.generate(prompt, max_new_tokens=32, do_sample=False, eos_token_id=None, pad_token_id=0,
                             min_new_tokens=32)[0, prompt.shape[1]:].tolist()
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(d), "--max-new", "32", "--eos", "none",
                        "--prompt-ids", ",".join(map(str, prompt[0].tolist()))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [int(t) for t in r.stdout.split()]
    assert got == ref
    assert "tokens/s" in r.stderr


def test_sharded_checkpoint_loads(dflash_bin, tiny, tmp_path):
    model, _ = tiny
    d = tmp_path / "sharded"
    model.save_pretrained(str(d), max_shard_size="100KB")
    assert (d / "model.safetensors.index.json").exists()
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    got = _run(dflash_bin, d, ids, tmp_path, [0])
    ref = _hf_forward(model, ids)
    assert _max_diff(got["logits"], ref.logits) <= TOL


def test_bad_model_folder_errors(dflash_bin, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "vocab_size": 10}')
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(tmp_path), "--prompt-ids", "1"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "config.json" in r.stderr and "hidden_size" in r.stderr, r.stderr
