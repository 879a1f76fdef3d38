"""RoPE scaling (rope.h, one implementation for the target and the drafter) against transformers.

- The frequencies, attention scaling and cos/sin tables of every supported type (default, linear, dynamic below and
  above max_position_embeddings, yarn with and without mscale / attention_factor / beta / truncate, llama3), from
  `dflash target rope`, equal transformers' Qwen3 rotary embedding bit for bit in float32 (the drafter's float64
  frequencies to rounding); both config layouts read the same; unsupported types and bad values are refused.
- Tiny targets with yarn (Qwen3, and the Qwen3.5 hybrid's partial RoPE), linear and dynamic scaling: logits equal
  transformers' (full forward, cached block verification with rollback, greedy generation past
  max_position_embeddings for dynamic).
"""
import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3Config,
                          Qwen3ForCausalLM)
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from test_target_models import _check, _hf_forward, _run

MAX_POS = 32
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    "yarn_default_length": {"rope_type": "yarn", "factor": 2.0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "mscale": 1.0,
                    "mscale_all_dim": 0.5, "beta_fast": 16, "beta_slow": 2, "truncate": False},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 16,
                              "attention_factor": 0.8},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
}


def qwen3_config(scaling, head_dim=32, theta=10000.0):
    return Qwen3Config(hidden_size=64, num_attention_heads=2, head_dim=head_dim, max_position_embeddings=MAX_POS,
                       rope_theta=theta, rope_scaling=scaling)


def ours(dflash_bin, config_path, positions, tmp_path, dtype="fp32"):
    out = tmp_path / f"rope_{dtype}.safetensors"
    r = subprocess.run([dflash_bin, "target", "rope", "--config", str(config_path), "--positions",
                        ",".join(map(str, positions)), "--dtype", dtype, "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return load_file(str(out))


def transformers_tables(config, positions):
    """What Qwen3's rotary embedding computes for one forward at `positions` (a fresh module: transformers' dynamic
    RoPE keeps the longest length it has seen)."""
    rotary = Qwen3RotaryEmbedding(config)
    cos, sin = rotary(torch.zeros(1), torch.tensor([positions]))
    return rotary.inv_freq, rotary.attention_scaling, cos[0], sin[0]


@pytest.mark.parametrize("name", sorted(SCALINGS))
@pytest.mark.parametrize("positions", [[0, 5, 17, 31], [0, 3, 40, 99]], ids=["within", "beyond"])
def test_frequencies_equal_transformers(dflash_bin, tmp_path, name, positions):
    config = qwen3_config(SCALINGS[name])
    config.save_pretrained(str(tmp_path))
    inv_freq, scaling, cos, sin = transformers_tables(config, positions)
    got = ours(dflash_bin, tmp_path / "config.json", positions, tmp_path)
    assert got["inv_freq"].dtype == torch.float32 and torch.equal(got["inv_freq"], inv_freq)
    assert got["attention_scaling"].item() == scaling
    assert torch.equal(got["cos"], cos) and torch.equal(got["sin"], sin)
    default_inv_freq = transformers_tables(qwen3_config(None), positions)[0]
    scaled = not torch.equal(inv_freq, default_inv_freq) or scaling != 1.0
    assert scaled == (name != "default" and not (name == "dynamic" and positions[-1] < MAX_POS))  # not vacuous
    exact = ours(dflash_bin, tmp_path / "config.json", positions, tmp_path, "fp64")  # the drafter's arithmetic
    assert exact["inv_freq"].dtype == torch.float64
    assert torch.allclose(exact["inv_freq"], inv_freq.double(), rtol=1e-6, atol=0)


def test_dynamic_grows_with_the_forward_length(dflash_bin, tmp_path):
    qwen3_config(SCALINGS["dynamic"]).save_pretrained(str(tmp_path))
    at_limit = ours(dflash_bin, tmp_path / "config.json", [MAX_POS - 1], tmp_path)["inv_freq"]
    beyond = [ours(dflash_bin, tmp_path / "config.json", [n], tmp_path)["inv_freq"] for n in (MAX_POS, 2 * MAX_POS)]
    default = transformers_tables(qwen3_config(None), [0])[0]
    assert torch.equal(at_limit, default)
    assert (beyond[0][1:] < default[1:]).all() and (beyond[1][1:] < beyond[0][1:]).all()


def test_legacy_layout_reads_the_same(dflash_bin, tmp_path):
    """transformers 4's top-level rope_theta + rope_scaling (with the older `type` key) == transformers 5's
    rope_parameters."""
    qwen3_config(SCALINGS["yarn_mscale"]).save_pretrained(str(tmp_path))
    new = ours(dflash_bin, tmp_path / "config.json", [0, 9, 50], tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params.pop("rope_theta")
    params["type"] = params.pop("rope_type")
    cfg["rope_scaling"] = params
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps(cfg))
    old = ours(dflash_bin, legacy, [0, 9, 50], tmp_path)
    for k in new:
        assert torch.equal(new[k], old[k]), k


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["rope_parameters"].update(rope_type="longrope"),
     "field 'rope_parameters.rope_type': expected one of \"default\", \"linear\", \"dynamic\", \"yarn\", \"llama3\""),
    (lambda c: c["rope_parameters"].pop("factor"), "field 'rope_parameters.factor': expected a number"),
    (lambda c: c["rope_parameters"].update(factor=-2.0),
     "field 'rope_parameters.factor': expected a finite number in [0.001, 1000000], got -2.0"),
    (lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 2.0}),
     "field 'rope_scaling': expected the scaling of rope_parameters"),
    (lambda c: c.update(rope_theta=5.0), "field 'rope_theta': expected the value of rope_parameters.rope_theta"),
    (lambda c: (c["rope_parameters"].update(rope_type="dynamic"), c.pop("max_position_embeddings")),
     "field 'max_position_embeddings': expected a positive integer (rope_type \"dynamic\""),
])
def test_bad_rope_settings_name_the_field(dflash_bin, tmp_path, edit, message):
    qwen3_config({"rope_type": "yarn", "factor": 2.0}).save_pretrained(str(tmp_path))
    cfg = json.loads((tmp_path / "config.json").read_text())
    edit(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([dflash_bin, "target", "rope", "--config", str(tmp_path / "config.json"), "--out",
                        str(tmp_path / "o.safetensors")], capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr, r.stderr


TARGETS = {
    "qwen3_yarn": lambda: Qwen3ForCausalLM(Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rope_theta=10000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})),
    "llama_linear": lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 2.5})),
    "qwen3_dynamic": lambda: Qwen3ForCausalLM(Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=16, rope_theta=10000.0,
        rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
}


def qwen3_5_yarn():
    """The hybrid: yarn over its partial RoPE (a quarter of each head)."""
    import test_target_qwen3_5 as q35
    text = dict(q35.TEXT, max_position_embeddings=64)
    return q35.randomize(Qwen3_5ForCausalLM(Qwen3_5TextConfig(
        vocab_size=300, num_hidden_layers=6, layer_types=q35.LAYER_TYPES, **text,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                         "rope_theta": 10000.0, "partial_rotary_factor": 0.25})).float().eval())


TARGETS["qwen3_5_yarn"] = qwen3_5_yarn


def scaled_target(name, directory):
    torch.manual_seed(0)
    model = TARGETS[name]().float().eval()
    if name != "qwen3_5_yarn":  # randomize() drew the hybrid's weights
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" not in n:
                    p.normal_(0, 1.0 / p.shape[-1] ** 0.5)
    model.save_pretrained(str(directory))
    return model


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_scaled_target_matches_transformers(dflash_bin, tmp_path, name):
    model = scaled_target(name, tmp_path / "model")
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(1))
    _check(_run(dflash_bin, tmp_path / "model", ids, tmp_path, [0]), _hf_forward(model, ids), [0])
    if name == "qwen3_dynamic":  # block verification sees other lengths than one forward: compare generation
        fresh = scaled_target(name, tmp_path / "model")  # transformers' dynamic RoPE keeps state across calls
        prompt = ids[:, :9]
        with torch.no_grad():
            ref = fresh.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0,
                                 min_new_tokens=24)[0, 9:].tolist()
        r = subprocess.run([dflash_bin, "target", "generate", "--model", str(tmp_path / "model"), "--max-new", "24",
                            "--eos", "none", "--prompt-ids", ",".join(map(str, prompt[0].tolist()))],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert [int(t) for t in r.stdout.split()] == ref
    else:
        got = _run(dflash_bin, tmp_path / "model", ids, tmp_path, [0], "--prefill", "7", "--block", "5", "--rollback")
        _check(got, _hf_forward(model, ids), [0])
