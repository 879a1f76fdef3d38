"""gpt-oss targets (model_type gpt_oss) against transformers' GptOssForCausalLM (eager attention) on tiny random
models: alternating sliding-window / full attention with sinks over prompts longer than the window, biased router
and experts with the clamped SwiGLU, YaRN RoPE, float32 norms. Logits and captured layers in float32 (prefill,
cached decode, block verify, pipeline; bf16 near transformers' bf16), config defaults, greedy generation across the
window, MXFP4 expert weights (random blocks) dequantised as transformers' own convert_moe_packed_tensors does,
router ties and top-k edges, batched regeneration (also on two replicas of two stages), dump-hidden, a few online
training steps, clear errors for bad configs and checkpoints, plan --node on the presets."""
import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

from hidden_format import read_folder
from target_run import (ENV, TIMEOUT, assert_greedy_matches_hf, check, generate_error, hf_forward,
                        regenerate_equals_hf_greedy, run_target)
from test_target_moe import online_training_losses

VOCAB = 200
WINDOW = 8  # sliding_window: the prompts below are several windows long


def gpt_oss(seed=0, vocab=VOCAB, eos=None, **over):
    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=5, num_experts_per_tok=2, sliding_window=WINDOW,
              max_position_embeddings=131072, eos_token_id=eos, pad_token_id=0)
    kw.update(over)
    torch.manual_seed(seed)
    m = GptOssForCausalLM(GptOssConfig(**kw, attn_implementation="eager")).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("gate_up_proj"):  # large enough that the SwiGLU's clamps at +-7 are reached
                p.copy_(3 * torch.randn(p.shape, generator=g) / p.shape[-2] ** 0.5)
            elif name.endswith("down_proj"):
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-2] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return m


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    m = gpt_oss()
    d = tmp_path_factory.mktemp("gpt_oss")
    m.save_pretrained(str(d))
    return m, d


def test_swiglu_clamps_are_reached(tiny):
    """The fixture's experts see gate values beyond the limit (else the clamp would go untested)."""
    model, _ = tiny
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(1))
    seen = []
    experts = model.model.layers[0].mlp.experts
    hook = experts.register_forward_hook(lambda mod, inp, out: seen.append(inp[0] @ mod.gate_up_proj[0]))
    hf_forward(model, ids)
    hook.remove()
    assert seen[0].abs().max() > 7


@pytest.mark.parametrize("mode", [[], ["--prefill", "9", "--block", "1"],
                                  ["--prefill", "7", "--block", "5", "--rollback"],
                                  ["--stages", "2", "--prefill", "4", "--block", "8", "--rollback"]],
                         ids=["full", "decode", "verify_rollback", "pipeline_rollback"])
def test_forward_matches_hf_float32(dflash_bin, tiny, tmp_path, mode):
    model, d = tiny
    ids = torch.randint(0, VOCAB, (2 if not mode else 1, 40), generator=torch.Generator().manual_seed(1))
    capture = [0, 1, 2, 3]
    check(run_target(dflash_bin, d, ids, tmp_path, capture, *mode)[0], hf_forward(model, ids), capture)


def test_bf16_forward_is_close_to_hf_bf16(dflash_bin, tiny, tmp_path):
    """bf16 weights, the norms' weights multiplying in float32 (GptOssRMSNorm), as transformers loads them."""
    _, d = tiny
    model = GptOssForCausalLM.from_pretrained(str(d), dtype=torch.bfloat16, attn_implementation="eager").eval()
    ids = torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(4))
    ref = hf_forward(model, ids)
    got, _ = run_target(dflash_bin, d, ids, tmp_path, [1], "--dtype", "bf16", "--prefill", "8", "--block", "4")
    assert got["hidden.1"].dtype == torch.bfloat16
    scale = ref.logits.float().abs().max().item()
    # bf16 rounding differs with op order; the two must still agree to a few bf16 ulps of the range
    assert (got["logits"].float() - ref.logits.float()).abs().max().item() <= 0.05 * scale
    assert (got["logits"].argmax(-1) == ref.logits.float().argmax(-1)).float().mean() >= 0.9


def test_greedy_generation_across_the_window_matches_hf(dflash_bin, tiny):
    model, d = tiny
    prompt = torch.randint(0, VOCAB, (1, 11), generator=torch.Generator().manual_seed(5))
    assert_greedy_matches_hf(dflash_bin, model, d, prompt, 24)


def test_config_defaults_are_transformers_defaults(dflash_bin, tiny, tmp_path):
    """A config.json without the fields GptOssConfig defaults (YaRN RoPE, layer_types, window 128, biases, SwiGLU
    constants, eps, top-k 4) runs as transformers runs it; the prompt crosses the default window."""
    _, good = tiny
    cfg = json.loads((good / "config.json").read_text())
    for k in ("rope_parameters", "layer_types", "attention_bias", "swiglu_alpha", "swiglu_limit", "sliding_window",
              "rms_norm_eps", "num_experts_per_tok"):
        del cfg[k]
    d = tmp_path / "defaults"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").symlink_to(good / "model.safetensors")
    model = GptOssForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.sliding_window == 128 and model.config.num_experts_per_tok == 4
    ids = torch.randint(0, VOCAB, (1, 140), generator=torch.Generator().manual_seed(8))
    check(run_target(dflash_bin, d, ids, tmp_path, [0, 3], "--prefill", "100", "--block", "8")[0],
          hf_forward(model, ids), [0, 3])


def mxfp4_folder(model, d, seed=0):
    """Replace the model's expert matrices by random MXFP4 blocks + scales: the file holds the published
    checkpoints' names and layout, the model the values transformers dequantises them to."""
    g = torch.Generator().manual_seed(seed)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            for proj in ("gate_up_proj", "down_proj"):
                E, K, N = getattr(ex, proj).shape  # [E, in, out]; stored [E, out, in / 32, 16]
                blocks = torch.randint(0, 256, (E, N, K // 32, 16), generator=g, dtype=torch.uint8)
                scales = torch.randint(118, 125, (E, N, K // 32), generator=g, dtype=torch.uint8)
                getattr(ex, proj).copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
                p = f"model.layers.{i}.mlp.experts.{proj}"
                del sd[p]
                sd[p + "_blocks"], sd[p + "_scales"] = blocks, scales
    model.save_pretrained(str(d))
    (d / "model.safetensors").unlink()
    save_file(sd, str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    (d / "config.json").write_text(json.dumps(cfg))
    return sd


def test_mxfp4_experts_dequantise_as_transformers_does(dflash_bin, tmp_path):
    model = gpt_oss(seed=2)
    d = tmp_path / "mxfp4"
    mxfp4_folder(model, d)
    ids = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(2))
    got, err = run_target(dflash_bin, d, ids, tmp_path, [0, 1, 2, 3], "--prefill", "12", "--block", "5")
    assert "MXFP4 expert weights are dequantised" in err
    check(got, hf_forward(model, ids), [0, 1, 2, 3])


@pytest.mark.parametrize("case", ["ties", "top1", "all_experts"])
def test_router_edge_cases(dflash_bin, tmp_path, case):
    over = {"top1": dict(num_experts_per_tok=1), "all_experts": dict(num_experts_per_tok=5), "ties": {}}[case]
    model = gpt_oss(seed=6, **over)
    if case == "ties":  # every expert scores the same: top-k picks by at::topk's tie order, weights 1/k each
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.router.weight.zero_()
                layer.mlp.router.bias.zero_()
    d = tmp_path / case
    model.save_pretrained(str(d))
    ids = torch.randint(0, VOCAB, (1, 25), generator=torch.Generator().manual_seed(3))
    check(run_target(dflash_bin, d, ids, tmp_path, [0, 1, 2, 3], "--prefill", "6", "--block", "4")[0],
          hf_forward(model, ids), [0, 1, 2, 3])


def test_regenerate_batched_and_dump_hidden_equal_transformers(dflash_bin, tmp_path):
    model = gpt_oss(seed=3, vocab=12, eos=2)
    d = tmp_path / "v12"
    model.save_pretrained(str(d))
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 11, (4 + 3 * i,), generator=g).tolist() for i in range(4)]
    data, out, samples = regenerate_equals_hf_greedy(dflash_bin, model, d, prompts, tmp_path)
    # two replicas of two pipeline stages each give the same replies
    out2 = tmp_path / "s2.jsonl"
    r = subprocess.run([dflash_bin, "data", "regenerate", "--model", str(d), "--input", str(data), "--output",
                        str(out2), "--threads", "2", "--max-new", "12", "--batch", "2", "--devices", "cpu,cpu;cpu,cpu"],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(l)["input_ids"] for l in out2.read_text().splitlines()) == \
        sorted(s["input_ids"] for s in samples)
    dump = tmp_path / "dump"
    r = subprocess.run([dflash_bin, "data", "dump-hidden", "--target", str(d), "--data", str(out), "--out",
                        str(dump), "--threads", "1", "--target-layer-ids", "2,1"], capture_output=True,
                       text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    got = [v for _, v in sorted(read_folder(dump).items())]
    assert len(got) == len(samples)
    for s, (_, _, hidden, _) in zip(samples, got):
        ref = hf_forward(model, torch.tensor([s["input_ids"]])).hidden_states
        torch.testing.assert_close(hidden.float(), torch.cat([ref[3][0], ref[2][0]], -1), rtol=2 ** -7, atol=1e-4)


def test_online_training_equals_offline_features(dflash_bin, tmp_path):
    online, offline = online_training_losses(dflash_bin, tmp_path, gpt_oss(seed=3, vocab=12), hidden=64)
    for x, y in zip(online, offline):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)


def test_bad_configs_and_checkpoints_are_clear_errors(dflash_bin, tmp_path):
    model = gpt_oss(seed=1)
    good = tmp_path / "good"
    model.save_pretrained(str(good))
    cfg = json.loads((good / "config.json").read_text())

    def folder(name, sd=None, **over):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(dict(cfg, **over)))
        if sd is None:
            (d / "model.safetensors").symlink_to(good / "model.safetensors")
        else:
            save_file(sd, str(d / "model.safetensors"))
        return d

    assert "layer_types[1]' is \"linear_attention\"" in generate_error(
        dflash_bin, folder("lt", layer_types=["sliding_attention", "linear_attention"] * 2))
    assert "'sliding_window' is 0" in generate_error(dflash_bin, folder("sw", sliding_window=0))
    assert "quant_method' is bitsandbytes" in generate_error(
        dflash_bin, folder("q", quantization_config={"quant_method": "bitsandbytes"}))
    sd = load_file(str(good / "model.safetensors"))
    del sd["model.layers.2.mlp.experts.down_proj"]
    assert "'model.layers.2.mlp.experts.down_proj' (nor its MXFP4" in generate_error(dflash_bin, folder("missing", sd))
    mx = mxfp4_folder(gpt_oss(seed=1), tmp_path / "mx")
    del mx["model.layers.1.mlp.experts.gate_up_proj_scales"]
    assert "'model.layers.1.mlp.experts.gate_up_proj_scales'" in generate_error(dflash_bin, folder("noscales", mx))
    mx["model.layers.1.mlp.experts.gate_up_proj_scales"] = torch.zeros(5, 64, 2, dtype=torch.float32)
    assert "must be uint8" in generate_error(dflash_bin, folder("f32scales", mx))


def test_plan_node_counts_active_experts_for_flops_and_all_for_memory(dflash_bin):
    sizes = {}
    for preset in ("gpt-oss-20b", "gpt-oss-120b"):
        j = json.loads(subprocess.run([dflash_bin, "plan", "--node", "--preset", preset, "--gpu", "h100", "--json"],
                                      capture_output=True, text=True, env=ENV, timeout=TIMEOUT).stdout)
        sizes[preset] = j
    # the published totals: 20.9B and 116.8B parameters (their 3.6B and 5.1B active count the LM head too)
    r = subprocess.run([dflash_bin, "plan", "--node", "--preset", "gpt-oss-20b", "--gpu", "h100"],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert "20.9B params" in r.stdout
    r = subprocess.run([dflash_bin, "plan", "--node", "--preset", "gpt-oss-120b", "--gpu", "h100"],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert "116.8B params" in r.stdout
    # 8000 tokens x 2 x the matrix weights a token multiplies (attention + router + 4 experts, no LM head)
    for preset, (lo, hi) in {"gpt-oss-20b": (2.9e9, 3.1e9), "gpt-oss-120b": (4.4e9, 4.7e9)}.items():
        active = sizes[preset]["target_flops"]["linear"] / (2 * 8000)
        assert lo < active < hi, (preset, active)
