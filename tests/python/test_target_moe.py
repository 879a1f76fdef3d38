"""Mixture-of-experts targets (src/models/moe_block.h) against transformers' own implementations on tiny random
models: Qwen3-MoE (dense and routed layers mixed by decoder_sparse_step / mlp_only_layers) and Qwen3.5-MoE in
both layouts (flat qwen3_5_moe_text; nested qwen3_5_moe beside a vision tower, weights under
model.language_model.*). Logits and captured layers in float32 (prefill, cached decode, block verify, pipeline),
greedy generation, the fused expert tensors, router ties and top-k edge cases, batched regeneration, dump-hidden,
a few online training steps; bad MoE configs are clear errors (gpt-oss: test_target_gpt_oss.py)."""
import json
import math
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration,
                          Qwen3_5MoeTextConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM)
from hidden_format import read_folder
from target_run import (ENV, TIMEOUT, assert_greedy_matches_hf, check, generate_error, hf_forward, randomize,
                        regenerate_equals_hf_greedy, run_target)

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOCAB = 200


def qwen3_moe(seed=0, vocab=VOCAB, eos=None, **over):
    kw = dict(vocab_size=vocab, hidden_size=32, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=6, num_experts_per_tok=2,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[2], max_position_embeddings=512,
              eos_token_id=eos)
    kw.update(over)
    torch.manual_seed(seed)
    return randomize(Qwen3MoeForCausalLM(Qwen3MoeConfig(**kw)).float().eval(), seed)


Q35 = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
           linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
           moe_intermediate_size=12, shared_expert_intermediate_size=20, num_experts=5, num_experts_per_tok=2,
           max_position_embeddings=512, num_hidden_layers=4,
           layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])


def qwen3_5_moe(layout, seed=0, vocab=VOCAB, eos=None):
    torch.manual_seed(seed)
    if layout == "text":
        m = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(vocab_size=vocab, eos_token_id=eos, **Q35))
    else:
        cfg = Qwen3_5MoeConfig(text_config=dict(Q35, vocab_size=vocab, eos_token_id=eos), tie_word_embeddings=True,
                               vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                                  out_hidden_size=Q35["hidden_size"]))
        m = Qwen3_5MoeForConditionalGeneration(cfg)
    return randomize(m.float().eval(), seed)


@pytest.fixture(scope="module", params=["qwen3_moe", "qwen3_5_moe_text", "qwen3_5_moe_nested"])
def tiny(request, tmp_path_factory):
    kind = request.param
    m = qwen3_moe() if kind == "qwen3_moe" else qwen3_5_moe(kind.rsplit("_", 1)[1])
    d = tmp_path_factory.mktemp(kind)
    m.save_pretrained(str(d))
    return m, d




@pytest.mark.parametrize("mode", [[], ["--prefill", "9", "--block", "1"],
                                  ["--prefill", "7", "--block", "5", "--rollback"],
                                  ["--stages", "2", "--prefill", "4", "--block", "8", "--rollback"]],
                         ids=["full", "decode", "verify_rollback", "pipeline_rollback"])
def test_forward_matches_hf_float32(dflash_bin, tiny, tmp_path, mode):
    model, d = tiny
    ids = torch.randint(0, VOCAB, (2 if not mode else 1, 40), generator=torch.Generator().manual_seed(1))
    capture = [0, 1, 2, 3]
    check(run_target(dflash_bin, d, ids, tmp_path, capture, *mode)[0], hf_forward(model, ids), capture)


def test_greedy_generation_matches_hf(dflash_bin, tiny):
    model, d = tiny
    prompt = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(5))
    assert_greedy_matches_hf(dflash_bin, model, d, prompt, 24)


def test_fused_expert_tensors_load_as_per_expert_ones(dflash_bin, tmp_path):
    """transformers' in-memory layout (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) in the file."""
    model = qwen3_moe(seed=4)
    d = tmp_path / "fused"
    model.save_pretrained(str(d))
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in sd)  # the fused names, as the module holds them
    (d / "model.safetensors").unlink()
    save_file(sd, str(d / "model.safetensors"))
    ids = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(2))
    check(run_target(dflash_bin, d, ids, tmp_path, [0, 3])[0], hf_forward(model, ids), [0, 3])


@pytest.mark.parametrize("case", ["ties", "top1", "all_experts", "sparse_step"])
def test_router_edge_cases(dflash_bin, tmp_path, case):
    over = {"top1": dict(num_experts_per_tok=1, norm_topk_prob=False),
            "all_experts": dict(num_experts_per_tok=6),
            "sparse_step": dict(decoder_sparse_step=2, mlp_only_layers=[]),
            "ties": {}}[case]
    model = qwen3_moe(seed=6, **over)
    if case == "ties":  # every expert scores the same: top-k picks by at::topk's tie order, weights 1/k each
        with torch.no_grad():
            for layer in model.model.layers:
                if hasattr(layer.mlp, "gate"):
                    layer.mlp.gate.weight.zero_()
    d = tmp_path / case
    model.save_pretrained(str(d))
    ids = torch.randint(0, VOCAB, (1, 25), generator=torch.Generator().manual_seed(3))
    check(run_target(dflash_bin, d, ids, tmp_path, [0, 1, 2, 3], "--prefill", "6", "--block", "4")[0],
          hf_forward(model, ids), [0, 1, 2, 3])


def test_regenerate_batched_and_dump_hidden_equal_transformers(dflash_bin, tmp_path):
    model = qwen3_moe(seed=3, vocab=12, eos=2)
    d = tmp_path / "v12"
    model.save_pretrained(str(d))
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 11, (4 + i,), generator=g).tolist() for i in range(4)]
    _, out, samples = regenerate_equals_hf_greedy(dflash_bin, model, d, prompts, tmp_path)
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


def online_training_losses(dflash_bin, tmp_path, model, hidden=32):
    """Three drafter training steps on `model` (vocab 12) as the online target and on its transformers features
    (layers 1, 2) offline: the metrics rows of each."""
    d = tmp_path / "target"
    model.save_pretrained(str(d))
    g = torch.Generator().manual_seed(9)
    samples = []
    for i in range(3):
        ids = torch.randint(3, 11, (24 + 4 * i,), generator=g)
        samples.append({"input_ids": ids, "loss_mask": (torch.arange(ids.numel()) >= 6)})
    jl = tmp_path / "tokens.jsonl"
    jl.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                      "loss_mask": s["loss_mask"].long().tolist()}) + "\n" for s in samples))
    layers = [1, 2]
    shard = {}
    for i, s in enumerate(samples):
        hs = hf_forward(model, s["input_ids"].unsqueeze(0)).hidden_states
        shard[f"{i}.input_ids"] = s["input_ids"]
        shard[f"{i}.loss_mask"] = s["loss_mask"].to(torch.uint8)
        shard[f"{i}.hidden_states"] = torch.cat([hs[l + 1][0] for l in layers], -1).contiguous()
    off = tmp_path / "offline.safetensors"
    save_file(shard, str(off), metadata={"format": "dflash-hidden-v1", "target_layer_ids": "1,2",
                                         "hidden_size": str(hidden)})

    def train(data, out):
        args = {"target": d, "data": data, "out": out, "mask_token_id": 11, "drafter_layers": 2, "dtype": "fp32",
                "num_anchors": 5, "block_size": 4, "batch_size": 1, "log_every": 1, "checkpoint_every": 10,
                "threads": 1, "max_len": 64, "lr": 3e-3, "steps": 3, "init_std": 0.05, "target_layer_ids": "1,2"}
        argv = [x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        r = subprocess.run([dflash_bin, "train", *argv], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        return [x for x in rows if "event" not in x]

    online, offline = train(jl, tmp_path / "online"), train(off, tmp_path / "offline")
    assert len(online) == 3 and all(math.isfinite(x["loss"]) for x in online)
    return online, offline


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_moe"])
def test_online_training_equals_offline_features(dflash_bin, tmp_path, family):
    model = qwen3_moe(seed=3, vocab=12) if family == "qwen3_moe" else qwen3_5_moe("text", seed=3, vocab=12)
    online, offline = online_training_losses(dflash_bin, tmp_path, model)
    for x, y in zip(online, offline):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)


def test_bad_moe_configs_and_checkpoints_are_clear_errors(dflash_bin, tmp_path):
    model = qwen3_moe(seed=1)
    good = tmp_path / "good"
    model.save_pretrained(str(good))
    cfg = json.loads((good / "config.json").read_text())

    def folder(name, **over):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(dict(cfg, **over)))
        (d / "model.safetensors").symlink_to(good / "model.safetensors")
        return d

    assert "num_experts_per_tok' is 9, expected 1..6" in generate_error(dflash_bin, folder("topk", num_experts_per_tok=9))
    assert "mlp_only_layers' lists layer 7" in generate_error(dflash_bin, folder("only", mlp_only_layers=[7]))
    # a missing expert tensor is named
    sd = load_file(str(good / "model.safetensors"))
    del sd["model.layers.1.mlp.experts.4.up_proj.weight"]
    d = tmp_path / "missing"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(sd, str(d / "model.safetensors"))
    assert "'model.layers.1.mlp.experts.4.up_proj.weight'" in generate_error(dflash_bin, d)


def test_plan_node_counts_active_experts_for_flops_and_all_for_memory(dflash_bin):
    r = subprocess.run([dflash_bin, "plan", "--node", "--preset", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8"],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert "30.5B params (bf16 weights 61.1 GB)" in r.stdout
    j = json.loads(subprocess.run([dflash_bin, "plan", "--node", "--preset", "qwen3-30b-a3b", "--gpu", "h100",
                                   "--json"], capture_output=True, text=True, env=ENV, timeout=TIMEOUT).stdout)
    # 8000 tokens x 2 x the ~2.73B matrix weights a token multiplies (attention + router + 8 of 128 experts)
    active = j["target_flops"]["linear"] / (2 * 8000)
    assert 2.6e9 < active < 2.9e9
