"""Hostile numbers and ignored settings through the command line and the Python op (issue 36, classes 4, 5, 9):
every numeric setting has a finite range checked where it is read (util/number_range.h; docs/ERRORS.md "Limits"),
a setting a command does not use is refused instead of dropped, and messages name the real cause.
"""
import json
import math
import os
import subprocess

import pytest
import torch

from conftest import ROOT

from cli_errors import one_line_error

VOCAB = 64
QWEN3_8B = ROOT / "configs" / "targets" / "qwen3-8b.json"


def run(dflash_bin, *args, env=None, timeout=120):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})))


def llama_config(**extra):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": VOCAB, "hidden_size": 16,
           "intermediate_size": 32, "num_hidden_layers": 6, "num_attention_heads": 2, "num_key_value_heads": 1,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}
    cfg.update(extra)
    return cfg


def write_json(path, obj, raw=None):
    text = json.dumps(obj)
    if raw:  # numbers JSON cannot spell through json.dumps (subnormals as written, 1e308 kept exact)
        for k, v in raw.items():
            text = text.replace(k, v)
    path.write_text(text)
    return path


# ---- class 4: non-finite, subnormal and absurd numbers are refused with the field, value and range ----

@pytest.mark.parametrize("flag,value,want", [
    ("--gpu-memory", "inf", "--gpu-memory: must be a size of at least 1 byte and below 1e18 bytes, got 'inf'"),
    ("--gpu-memory", "1e308", "below 1e18 bytes, got '1e308'"),
    ("--gpu-memory", "1e-300", "at least 1 byte"),
    ("--gpu-memory", "100MB", "--gpu-memory must be a size in [1GB, 100TB], got '100MB'"),
    ("--gpu-tflops", "inf", "--gpu-tflops must be a finite number in [1, 1000000], got inf"),
    ("--gpu-tflops", "nan", "--gpu-tflops must be a finite number in [1, 1000000], got nan"),
    ("--gpu-tflops", "1e308", "--gpu-tflops must be a finite number in [1, 1000000], got 1e+308"),
    ("--gpu-tflops", "1e-300", "--gpu-tflops must be a finite number in [1, 1000000], got 1e-300"),
    ("--target-efficiency", "1e-300", "--target-efficiency must be a finite number in [0.01, 1]"),
    ("--usable-memory", "nan", "--usable-memory must be a finite number in [0.05, 1], got nan"),
    ("--kl-weight", "nan", "--kl-weight must be a finite number in [0, 1] (0: hard labels only), got nan"),
    ("--max-len", "0", "--max-len must be an integer in [2, 1048576], got 0"),
])
def test_plan_node_number_flags(dflash_bin, flag, value, want):
    one_line_error(run(dflash_bin, "plan", "--node", "--preset", "qwen3-8b", flag, value), "plan", want)


@pytest.mark.parametrize("value", ["inf", "nan", "1e-300", "1e400"])
def test_budget_must_be_a_real_size(dflash_bin, value):
    one_line_error(run(dflash_bin, "plan", "--preset", "qwen3-8b", "--budget", value), "--budget", value)


def test_train_budget_and_float_settings(dflash_bin, tmp_path):
    base = ["train", "--target", tmp_path / "t", "--data", tmp_path / "d.jsonl", "--out", tmp_path / "run",
            "--mask-token-id", 5]
    one_line_error(run(dflash_bin, *base, "--budget", "inf"), "'budget' must be a size like 90GB, 80GiB or 512MB, of 1 byte to 1e18 bytes", "'inf'")
    # A settings file can spell what a flag cannot: subnormal and huge values are outside every range.
    for key, raw, want in [("lr", "1e-310", "'lr' must be a finite number in [1e-12, 10], got 1e-310"),
                           ("init_std", "1e308", "'init_std' must be a finite number in [1e-08, 10], got 1e+308"),
                           ("eps", "0.0", "'eps' must be a finite number in [1e-30, 1], got 0.0")]:
        cfg = write_json(tmp_path / f"{key}.json", {key: 0.5}, raw={f'"{key}": 0.5': f'"{key}": {raw}'})
        one_line_error(run(dflash_bin, *base, "--config", cfg), want)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("scaling,field,want", [
    ({"rope_type": "linear", "factor": "@1e-39"}, "rope_scaling.factor", "a finite number in [0.001, 1000000], got 1e-39"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": "@1e308"}, "rope_scaling.attention_factor",
     "a finite number in [0.001, 100], got 1e+308"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": -1.0}, "rope_scaling.beta_fast", "(0: the default 32), got -1.0"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, "rope_scaling.low_freq_factor", "a finite number in [0.001, 1000], got 0.0"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 2.0,
      "original_max_position_embeddings": 32}, "rope_scaling.high_freq_factor", "a number above low_freq_factor (2.0)"),
    (None, "rope_theta", "a finite number in (1, 1000000000000], got 1e-310"),
])
def test_rope_numbers_that_gave_nan_tables(dflash_bin, tmp_path, scaling, field, want):
    raw = {}
    cfg = llama_config()
    if scaling is None:
        raw['"rope_theta": 10000.0'] = '"rope_theta": 1e-310'
    else:
        for k, v in list(scaling.items()):
            if isinstance(v, str) and v.startswith("@"):  # written as is
                scaling[k] = 0.5
                raw[f'"{k}": 0.5'] = f'"{k}": {v[1:]}'
        cfg["rope_scaling"] = scaling
    write_json(tmp_path / "config.json", cfg, raw)
    # plan reads the target's config only: a target that would have produced NaN tables is refused up front
    one_line_error(run(dflash_bin, "plan", "--target-config", tmp_path / "config.json", "--drafter-layers", 1),
                   "config.json", f"'{field}'", want)


def test_norm_eps_range(dflash_bin, tmp_path):
    write_json(tmp_path / "config.json", llama_config(rms_norm_eps=0.0))
    one_line_error(run(dflash_bin, "plan", "--target-config", tmp_path / "config.json"),
                   "'rms_norm_eps' must be a finite number in [1e-12, 1], got 0.0")


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1.0, 0.0, 1e-310])
def test_attention_scale_must_be_finite_and_positive(scale):
    import dflash
    q = torch.randn(1, 8, 2, 8)
    k = torch.randn(1, 12, 1, 8)
    v = torch.randn(1, 12, 1, 8)
    anchors = torch.tensor([2, 3])
    keep = torch.tensor([True, True])
    for backend in ("fused", "reference"):
        with pytest.raises(RuntimeError, match=r"scale must be a finite number in \(0, 1000\]"):
            dflash.anchor_block_attention(q, k, v, anchors, keep, 4, scale=scale, backend=backend)
    out = dflash.anchor_block_attention(q, k, v, anchors, keep, 4, scale=0.25, backend="reference")
    assert torch.isfinite(out).all()


def test_loss_kl_weight_nan_is_refused():
    import dflash
    h, w = torch.randn(4, 8), torch.randn(16, 8)
    labels, weights = torch.tensor([1, 2, 3, 4]), torch.ones(4)
    with pytest.raises(ValueError, match=r"kl_weight must be a finite number in \[0, 1\], got nan"):
        dflash.chunked_lm_loss(h, w, labels, weights, teacher_hidden=h, teacher_index=torch.arange(4),
                               kl_weight=math.nan)


# ---- class 5: a setting the command would not use is refused, never dropped ----

@pytest.mark.parametrize("extra,unused", [
    (["--budget", "90GB"], "--budget"),
    (["--activation-checkpoint", "layer"], "--activation-checkpoint"),
    (["--loss-chunk-rows", "64"], "--loss-chunk-rows"),
    (["--optimizer", "sgd"], "--optimizer"),
    (["--draft-vocab", "100"], "--draft-vocab"),
    (["--drafter-layers", "3"], "--drafter-layers"),
])
def test_plan_node_refuses_what_it_does_not_use(dflash_bin, extra, unused):
    one_line_error(run(dflash_bin, "plan", "--node", "--preset", "qwen3-8b", *extra), f"{unused} is not used with", code=2)


def test_plan_node_reads_block_size_and_checks_it(dflash_bin):
    one_line_error(run(dflash_bin, "plan", "--node", "--preset", "qwen3-8b", "--block-size", 0),
                   "--block-size must be an integer in [2, 1024], got 0")
    r = run(dflash_bin, "plan", "--node", "--preset", "qwen3-8b", "--block-size", 8)
    assert r.returncode == 0, r.stderr
    assert "x block 8;" in r.stdout, r.stdout


def test_plan_without_node_refuses_node_flags(dflash_bin):
    for flag, value in [("--gpus", 4), ("--gpu-tflops", 100), ("--usable-memory", 0.5)]:
        one_line_error(run(dflash_bin, "plan", "--preset", "qwen3-8b", flag, value), f"{flag} is not used without --node", code=2)


def test_eval_oracle_refuses_drafter_settings(dflash_bin, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt_ids": [5, 6, 7]}) + "\n")
    one_line_error(run(dflash_bin, "eval", "--target", QWEN3_8B, "--proposer", "oracle", "--data", f"p={prompts}",
                       "--drafter-device", "gpu:7"), "--drafter-device is not used with --proposer oracle", code=2)
    one_line_error(run(dflash_bin, "eval", "--target", QWEN3_8B, "--proposer", "oracle", "--data", f"p={prompts}",
                       "--temperature", "nan"), "--temperature must be a finite number in [0, 100] (0: greedy), got nan")


def test_environment_switches_are_checked_by_every_command(dflash_bin, tmp_path):
    for env, want in [({"DFLASH_FAULT_INJECT": "junk"}, "DFLASH_FAULT_INJECT: expected attention_wrong, attention_throw "
                                                          "or cross_entropy_wrong (a test-only switch), got 'junk'"),
                      ({"DFLASH_CUDA_SMEM_LIMIT": "99KB"}, "DFLASH_CUDA_SMEM_LIMIT must be a positive number of bytes"),
                      # used to be named on stderr only while the best ISA ran
                      ({"DFLASH_CPU_ISA": "junk"}, "DFLASH_CPU_ISA: expected base, avx2 or avx512, got 'junk'")]:
        one_line_error(run(dflash_bin, "plan", "--preset", "qwen3-8b", env=env), want)
        # train used to take a bad fault switch for a failing fused kernel and fall back without a word
        one_line_error(run(dflash_bin, "train", "--target", tmp_path / "t", "--data", tmp_path / "d", "--out",
                           tmp_path / "run", env=env), want)
    one_line_error(run(dflash_bin, "train", "--target", tmp_path / "t", "--data", tmp_path / "d", "--out",
                       tmp_path / "run", env={"DFLASH_TEST_FAIL_WORKER": "junk"}),
                   "DFLASH_TEST_FAIL_WORKER must be an integer in [0, 1024]", "'junk'")
    assert not (tmp_path / "run").exists()


def test_stages_with_devices_is_refused(dflash_bin, tmp_path):
    one_line_error(run(dflash_bin, "target", "generate", "--target", QWEN3_8B, "--prompt-ids", "5", "--devices", "cpu",
                       "--stages", 2), "--stages is not used with --devices", code=2)


# ---- class 9: the message names the real cause ----

def test_too_many_drafter_layers_names_the_layer_count(dflash_bin, tmp_path):
    write_json(tmp_path / "config.json", llama_config(num_hidden_layers=4))
    line = one_line_error(run(dflash_bin, "plan", "--target-config", tmp_path / "config.json", "--drafter-layers", 5),
                          "drafter_layers 5 is too many for a target of 4 layers")
    assert "also at index" not in line
    # a drafter config.json without target_layer_ids: its own fields are named
    d = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 16, "intermediate_size": 32,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "num_hidden_layers": 6,
         "num_target_layers": 4, "vocab_size": VOCAB, "block_size": 4, "dflash_config": {"mask_token_id": 5}}
    p = write_json(tmp_path / "drafter.json", d)
    one_line_error(run(dflash_bin, "plan", "--config", p), p, "num_hidden_layers and num_target_layers",
                   "drafter_layers 6 is too many for a target of 4 layers")


def test_train_refuses_drafter_settings_its_drafter_config_overrides(dflash_bin, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    target = tmp_path / "target"
    LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                 tie_word_embeddings=True)).save_pretrained(str(target))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"input_ids": list(range(3, 20)), "loss_mask": [0] * 5 + [1] * 12}) + "\n")
    d = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 16, "intermediate_size": 32,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "num_hidden_layers": 1,
         "num_target_layers": 3, "vocab_size": VOCAB, "block_size": 4, "rope_theta": 10000.0,
         "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1]}}
    cfg = write_json(tmp_path / "drafter.json", d)
    base = ["train", "--target", target, "--data", data, "--drafter-config", cfg, "--steps", 1]
    # 16 and 1 are the defaults: given explicitly, they conflict with the file's 4 and 3 all the same (they used to
    # be taken for "not given" and dropped without a word)
    for flag, value, want in [("--block-size", 8, "'block_size' is 8 (flag --block-size) but 4 (drafter config"),
                              ("--block-size", 16, "'block_size' is 16 (flag --block-size) but 4 (drafter config"),
                              ("--drafter-layers", 2, "'drafter_layers' is 2 (flag --drafter-layers) but 1 (drafter config"),
                              ("--target-layer-ids", "0",
                               "'target_layer_ids' is [0] (flag --target-layer-ids) but [1] (drafter config")]:
        one_line_error(run(dflash_bin, *base, "--out", tmp_path / f"run{flag}{value}", flag, value), want, cfg)
    # the same in a settings file: block_size 16 written beside a drafter config saying 4; both files are named
    settings = write_json(tmp_path / "train.json", {"block_size": 16})
    one_line_error(run(dflash_bin, *base, "--out", tmp_path / "run-file", "--config", settings),
                   f"train: 'block_size' is 16 (train config {settings}) but 4 (drafter config {cfg})")
    # given once (or the same twice), the drafter config's value is the run's: no error from the rule
    for i, extra in enumerate(([], ["--block-size", 4], ["--config", write_json(tmp_path / "same.json", {"block_size": 4})])):
        r = run(dflash_bin, *base, "--out", tmp_path / f"run-ok{i}", *extra)
        assert r.returncode == 0, r.stderr
