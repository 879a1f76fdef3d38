"""The Qwen3.5 / Qwen3.6 hybrid target (Gated DeltaNet + gated attention) against transformers' own qwen3_5
implementation on tiny random models in both layouts (Qwen3_5ForCausalLM with a flat qwen3_5_text config;
Qwen3_5ForConditionalGeneration with text_config nested beside a vision tower, weights under
model.language_model.*): logits and every captured layer in float32 and float64 (~1e-10), the cached paths
(chunked prefill, recurrent decode, block verify with rollback, pipeline stages), bf16, greedy generation; then
every command that runs a target: lossless `dflash eval` (greedy with oracle / random proposers, partial
acceptances included; speculative sampling against the exact distribution), batched `data regenerate`,
`data dump-hidden`, online `train`; bad configs and checkpoints; `dflash plan --target-config` on the
Qwen3.6-27B config."""
import contextlib
import copy
import json
import math
import pathlib
import subprocess

import pytest
import torch
import transformers.models.qwen3_5.modeling_qwen3_5 as q35
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5TextConfig)
from hf_greedy import hf_greedy
from eval_cli import run_eval, write_prompts
from hidden_format import read_folder
from joint_chi2 import assert_matches_joint
from target_run import (ENV, TIMEOUT, assert_greedy_matches_hf, check, generate_error, hf_forward, max_diff, randomize,
                        run_target)

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, max_position_embeddings=1024, rms_norm_eps=1e-6)
# Six layers mixing both kinds (the flat layout lists them, the nested one uses full_attention_interval).
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "linear_attention", "linear_attention",
               "full_attention"]


def make_model(layout, vocab=300, seed=0, eos=None, layers=6, tie=False):
    torch.manual_seed(seed)
    if layout == "text":
        cfg = Qwen3_5TextConfig(vocab_size=vocab, num_hidden_layers=layers, layer_types=LAYER_TYPES[:layers],
                                tie_word_embeddings=tie, eos_token_id=eos, **TEXT)
        m = Qwen3_5ForCausalLM(cfg)
    else:
        text = dict(TEXT, vocab_size=vocab, num_hidden_layers=layers, full_attention_interval=3, eos_token_id=eos)
        cfg = Qwen3_5Config(text_config=text, tie_word_embeddings=tie,
                            vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                               out_hidden_size=TEXT["hidden_size"]))
        m = Qwen3_5ForConditionalGeneration(cfg)
    return randomize(m.float().eval(), seed)


def text_config(model):
    return model.config.get_text_config()


@pytest.fixture(scope="module", params=["text", "nested"])
def tiny(request, tmp_path_factory):
    m = make_model(request.param, tie=request.param == "nested")
    d = tmp_path_factory.mktemp(f"qwen3_5_{request.param}")
    m.save_pretrained(str(d))
    return m, d


# --- float64 reference: transformers runs its norms and the delta rule in float32 whatever the model dtype;
# for a float64 comparison those are swapped for float64 versions (the rule as an independent token loop,
# checked against transformers' own chunked rule in float32 below).

def delta_rule_reference(query, key, value, g, beta, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, **kwargs):
    B, T, Hk, Dk = key.shape
    Hv, Dv = value.shape[-2:]
    if use_qk_l2norm_in_kernel:
        query = query / torch.sqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key / torch.sqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    query = query.repeat_interleave(Hv // Hk, 2) * Dk ** -0.5
    key = key.repeat_interleave(Hv // Hk, 2)
    dt = value.dtype if value.dtype == torch.float64 else torch.float32
    query, key, value, g, beta = (x.to(dt) for x in (query, key, value, g, beta))
    S = torch.zeros(B, Hv, Dk, Dv, dtype=dt) if initial_state is None else initial_state.to(dt)
    out = torch.empty(B, T, Hv, Dv, dtype=dt)
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        pred = torch.einsum("bhk,bhkv->bhv", key[:, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", key[:, t], (value[:, t] - pred) * beta[:, t][..., None])
        out[:, t] = torch.einsum("bhk,bhkv->bhv", query[:, t], S)
    return out.to(query.dtype if dt == torch.float64 else value.dtype), (S if output_final_state else None)


def _norm64(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def _gated_norm64(self, x, gate):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * x * torch.nn.functional.silu(gate)


@contextlib.contextmanager
def reference_rule(norms_in_input_dtype):
    saved = (q35.torch_chunk_gated_delta_rule, q35.torch_recurrent_gated_delta_rule, q35.Qwen3_5RMSNorm.forward,
             q35.Qwen3_5RMSNormGated.forward)
    q35.torch_chunk_gated_delta_rule = q35.torch_recurrent_gated_delta_rule = delta_rule_reference
    if norms_in_input_dtype:
        q35.Qwen3_5RMSNorm.forward, q35.Qwen3_5RMSNormGated.forward = _norm64, _gated_norm64
    try:
        yield
    finally:
        (q35.torch_chunk_gated_delta_rule, q35.torch_recurrent_gated_delta_rule, q35.Qwen3_5RMSNorm.forward,
         q35.Qwen3_5RMSNormGated.forward) = saved




def test_reference_rule_equals_transformers_rule_in_float32(tiny):
    model, _ = tiny
    ids = torch.randint(0, 300, (2, 150), generator=torch.Generator().manual_seed(7))
    a = hf_forward(model, ids)
    with reference_rule(norms_in_input_dtype=False):
        b = hf_forward(model, ids)
    assert max_diff(a.logits, b.logits) < 1e-4 * a.logits.abs().max().item()


def test_full_forward_matches_hf_float32(dflash_bin, tiny, tmp_path):
    model, d = tiny
    ids = torch.randint(0, 300, (2, 150), generator=torch.Generator().manual_seed(1))  # 3 chunks of 64
    capture = list(range(6))
    got, err = run_target(dflash_bin, d, ids, tmp_path, capture)
    check(got, hf_forward(model, ids), capture, 1e-4)
    if "nested" in str(d):
        assert "vision tower" in err and "ignored" in err


@pytest.mark.parametrize("mode", [[], ["--prefill", "70", "--block", "1"], ["--prefill", "9", "--block", "6", "--rollback"],
                                  ["--stages", "3", "--prefill", "5", "--block", "16", "--rollback"]],
                         ids=["full", "decode", "verify_rollback", "pipeline_rollback"])
def test_float64_matches_hf_to_1e10(dflash_bin, tiny, tmp_path, mode):
    model, d = tiny
    ids = torch.randint(0, 300, (1, 100), generator=torch.Generator().manual_seed(2))
    capture = list(range(6))
    got, _ = run_target(dflash_bin, d, ids, tmp_path, capture, "--dtype", "f64", *mode)
    assert got["hidden.0"].dtype == torch.float64
    with reference_rule(norms_in_input_dtype=True):
        ref = hf_forward(copy.deepcopy(model).double(), ids)
    check(got, ref, capture, 1e-10)


@pytest.mark.parametrize("mode", [["--prefill", "9", "--block", "1"],
                                  ["--prefill", "7", "--block", "5"],
                                  ["--prefill", "7", "--block", "5", "--rollback"],
                                  ["--stages", "2", "--prefill", "4", "--block", "8", "--rollback"],
                                  ["--devices", "cpu,cpu,cpu", "--prefill", "3", "--block", "16"]],
                         ids=["decode", "verify", "verify_rollback", "pipeline_rollback", "devices"])
def test_cached_paths_match_hf_float32(dflash_bin, tiny, tmp_path, mode):
    model, d = tiny
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(3))
    capture = [0, 1, 4]
    got, _ = run_target(dflash_bin, d, ids, tmp_path, capture, *mode)
    check(got, hf_forward(model, ids), capture, 1e-4)


def test_bf16_forward_is_as_close_as_hf_bf16(dflash_bin, tiny, tmp_path):
    model, d = tiny
    ids = torch.randint(0, 300, (1, 80), generator=torch.Generator().manual_seed(4))
    ref32 = hf_forward(model, ids).logits
    ref16 = hf_forward(copy.deepcopy(model).to(torch.bfloat16), ids).logits.float()
    got, _ = run_target(dflash_bin, d, ids, tmp_path, [1], "--dtype", "bf16", "--prefill", "70", "--block", "4")
    assert got["hidden.1"].dtype == torch.bfloat16
    # bf16 moves these random logits by ~25% of their range; ours must be about as close to the float32 result
    # as transformers' bf16, and nearer to transformers' bf16 (same rounding points) than that is to float32.
    noise = max_diff(ref16, ref32)
    assert max_diff(got["logits"], ref32) <= 1.5 * noise
    assert max_diff(got["logits"], ref16) <= 0.5 * noise
    agree = lambda x: (x.argmax(-1) == ref32.argmax(-1)).float().mean().item()
    assert agree(got["logits"]) >= agree(ref16) - 0.05


def test_greedy_generation_matches_hf(dflash_bin, tiny):
    model, d = tiny
    prompt = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(5))
    assert_greedy_matches_hf(dflash_bin, model, d, prompt, 40)


def test_mtp_weights_and_vision_tower_are_ignored(dflash_bin, tmp_path):
    model = make_model("nested", layers=4)
    d = tmp_path / "with_mtp"
    model.save_pretrained(str(d))
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["mtp_num_hidden_layers"] = 1
    (d / "config.json").write_text(json.dumps(cfg))
    w = load_file(str(d / "model.safetensors"))
    w["mtp.fc.weight"] = torch.zeros(64, 128)
    w["mtp.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 3)
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(6))
    got, err = run_target(dflash_bin, d, ids, tmp_path, [3])
    assert "multi-token-prediction head" in err and "vision tower" in err
    check(got, hf_forward(model, ids), [3], 1e-4)


def test_bad_configs_and_checkpoints_are_clear_errors(dflash_bin, tiny, tmp_path):
    model, d = tiny
    nested = "nested" in str(d)
    cfg = json.loads((d / "config.json").read_text())
    text = cfg["text_config"] if nested else cfg
    weights = load_file(str(d / "model.safetensors"))
    prefix = "model.language_model." if nested else "model."

    def folder(name, config=None, tensors=None):
        f = tmp_path / name
        f.mkdir()
        (f / "config.json").write_text(json.dumps(config or cfg))
        save_file(tensors or weights, str(f / "model.safetensors"), metadata={"format": "pt"})
        return f

    bad = copy.deepcopy(cfg)
    (bad["text_config"] if nested else bad)["layer_types"][2] = "mamba2"
    err = generate_error(dflash_bin, folder("unknown_type", bad))
    assert "config.json" in err and "'layer_types[2]' is \"mamba2\"" in err, err

    missing = dict(weights)
    del missing[prefix + "layers.3.linear_attn.dt_bias"]
    err = generate_error(dflash_bin, folder("missing", tensors=missing))
    assert f"missing tensor '{prefix}layers.3.linear_attn.dt_bias'" in err, err

    shaped = dict(weights)
    shaped[prefix + "layers.0.linear_attn.in_proj_qkv.weight"] = torch.zeros(10, 64)
    err = generate_error(dflash_bin, folder("shape", tensors=shaped))
    assert f"'{prefix}layers.0.linear_attn.in_proj_qkv.weight' has shape [10, 64], expected [96, 64]" in err, err

    bad = copy.deepcopy(cfg)
    (bad["text_config"] if nested else bad)["linear_num_value_heads"] = 3
    err = generate_error(dflash_bin, folder("heads", bad))
    assert "linear_num_key_heads" in err and "must divide" in err, err
    assert text["linear_num_key_heads"] == 2


# --- every command that runs a target

_prompts = write_prompts


def _eval(dflash_bin, target_dir, data, tmp_path, *extra):
    report, tokens, _ = run_eval(dflash_bin, target_dir, data, tmp_path, *extra, env=ENV, timeout=TIMEOUT)
    return report, tokens


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
    """Vocabulary 12: random proposals are accepted now and then, so verified blocks are cut at several lengths."""
    m = make_model("text", vocab=12, seed=3, eos=2)
    d = tmp_path_factory.mktemp("qwen3_5_v12")
    m.save_pretrained(str(d))
    return m, d


def test_eval_oracle_is_lossless_with_tau_b(dflash_bin, tiny, tmp_path):
    model, d = tiny
    data = _prompts(tmp_path / "p.jsonl", 2, 300)
    B = 5
    res, toks = _eval(dflash_bin, d, data, tmp_path, "--proposer", "oracle", "--block-size", str(B),
                      "--max-new", "21", "--eos", "none")
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["tau"] == B
    for rec, p in zip(toks, [json.loads(l)["prompt_ids"] for l in open(data)]):
        assert rec["baseline"] == hf_greedy(model, p, 21, eos=-1)


def test_eval_random_proposer_is_lossless_with_partial_acceptance(dflash_bin, small_vocab, tmp_path):
    model, d = small_vocab
    data = _prompts(tmp_path / "p.jsonl", 4, 12)
    res, toks = _eval(dflash_bin, d, data, tmp_path, "--proposer", "random", "--block-size", "6", "--max-new", "30",
                      "--eos", "none", "--seed", "3")
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["mismatches"] == []
    lengths = {k for rec in toks for k in rec["accept_lengths"]}
    # Verified blocks of 6 cut after 0 and after 1 accepted draft: the state is rolled back to 1 and to 2 tokens
    # into the verify forward.
    assert {1, 2} <= lengths, lengths
    for rec in toks:  # (the baseline is the target's own greedy decode, shown equal to transformers' above)
        assert rec["tokens"] == rec["baseline"]


@pytest.mark.slow
def test_speculative_sampling_matches_target_distribution(dflash_bin, tmp_path):
    V, N = 8, 2000
    m = make_model("text", vocab=V, seed=4, layers=4)
    with torch.no_grad():
        m.lm_head.weight.mul_(0.5)  # a flatter distribution: repeated tokens are accepted ~10% of the time
    d = tmp_path / "v8"
    m.save_pretrained(str(d))
    prompt = [3, 5, 4]
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt_ids": prompt}) + "\n")
    # The oracle without a reference re-proposes the last token: accepted with probability p(last), so accepts,
    # rejections with resampling and the rollback of the rejected tail all happen.
    res, toks = _eval(dflash_bin, d, data, tmp_path, "--proposer", "oracle", "--block-size", "3", "--max-new", "3",
                      "--temperature", "1", "--repeats", str(N), "--baseline", "0", "--eos", "none")
    seqs = [tuple(r["tokens"]) for r in toks]
    assert len(seqs) == N and all(len(s) == 3 for s in seqs)
    assert 0.05 < res["datasets"][0]["slot_acceptance"][0] < 0.95
    assert_matches_joint(m, prompt, seqs, V, min_df=8)


def test_regenerate_batched_equals_hf_greedy(dflash_bin, small_vocab, tmp_path):
    model, d = small_vocab
    data = _prompts(tmp_path / "p.jsonl", 5, 12, seed=2)
    outs = {}
    for b in ["1", "3"]:
        out = tmp_path / f"s{b}.jsonl"
        r = subprocess.run([dflash_bin, "data", "regenerate", "--model", str(d), "--input", str(data), "--output",
                            str(out), "--threads", "1", "--max-new", "16", "--batch", b], capture_output=True,
                           text=True, env=ENV, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        outs[b] = out.read_text()
    assert outs["1"] == outs["3"]
    samples = [json.loads(l) for l in outs["3"].splitlines()]
    for s, p in zip(samples, [json.loads(l)["prompt_ids"] for l in open(data)]):
        assert s["input_ids"] == p + hf_greedy(model, p, 16, eos=2)


def test_dump_hidden_equals_transformers(dflash_bin, tiny, tmp_path):
    model, d = tiny
    g = torch.Generator().manual_seed(8)
    recs = []
    for i in range(2):
        ids = torch.randint(3, 299, (20 + 50 * i,), generator=g).tolist()
        recs.append({"index": i, "source": "p.jsonl", "split": "train", "input_ids": ids,
                     "loss_mask": [0] * 5 + [1] * (len(ids) - 5), "prompt_tokens": 5,
                     "response_tokens": len(ids) - 5, "finish": "length"})
    data = tmp_path / "samples.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "dump"
    r = subprocess.run([dflash_bin, "data", "dump-hidden", "--target", str(d), "--data", str(data), "--out", str(out),
                        "--threads", "1", "--target-layer-ids", "4,1", "--last-hidden"], capture_output=True,
                       text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    got = [v for _, v in sorted(read_folder(out).items())]
    assert len(got) == len(recs)
    for rec, (_, _, hidden, last) in zip(recs, got):
        ref = hf_forward(model, torch.tensor([rec["input_ids"]])).hidden_states
        want = torch.cat([ref[5][0], ref[2][0]], -1)  # HF hidden_states[id + 1], in the asked order
        torch.testing.assert_close(hidden.float(), want, rtol=2 ** -7, atol=1e-4)
        torch.testing.assert_close(last.float(), ref[-1][0], rtol=2 ** -7, atol=1e-4)


def test_online_training_on_a_hybrid_target(dflash_bin, small_vocab, tmp_path):
    """Online features from our hybrid target equal transformers' (the same losses as training on features
    computed by transformers), and the drafter config comes from the target (sliding layers, target ids)."""
    model, d = small_vocab
    g = torch.Generator().manual_seed(9)
    samples = []
    for i in range(4):
        ids = torch.randint(3, 11, (24 + 4 * i,), generator=g)
        samples.append({"input_ids": ids, "loss_mask": (torch.arange(ids.numel()) >= 6)})
    jl = tmp_path / "tokens.jsonl"
    jl.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                      "loss_mask": s["loss_mask"].long().tolist()}) + "\n" for s in samples))
    layers = [1, 3]  # the default (docs/DFLASH.md) for 2 drafter layers over 6 target layers: round(1 + i * (6 - 4) / 1)
    shard = {}
    for i, s in enumerate(samples):
        hs = hf_forward(model, s["input_ids"].unsqueeze(0)).hidden_states
        shard[f"{i}.input_ids"] = s["input_ids"]
        shard[f"{i}.loss_mask"] = s["loss_mask"].to(torch.uint8)
        shard[f"{i}.hidden_states"] = torch.cat([hs[l + 1][0] for l in layers], -1).contiguous()
    off = tmp_path / "offline.safetensors"
    save_file(shard, str(off), metadata={"format": "dflash-hidden-v1", "target_layer_ids": "1,3",
                                         "hidden_size": str(TEXT["hidden_size"])})

    def train(data, out):
        args = {"target": d, "data": data, "out": out, "mask_token_id": 11, "drafter_layers": 2, "dtype": "fp32",
                "num_anchors": 5, "block_size": 4, "batch_size": 1, "log_every": 1, "checkpoint_every": 10,
                "threads": 1, "max_len": 64, "lr": 3e-3, "steps": 3, "init_std": 0.05}
        argv = [x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        r = subprocess.run([dflash_bin, "train", *argv], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        return [x for x in rows if "event" not in x]

    online, offline = train(jl, tmp_path / "online"), train(off, tmp_path / "offline")
    assert len(online) == 3 and all(math.isfinite(x["loss"]) for x in online)
    for x, y in zip(online, offline):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)
    dcfg = json.loads((tmp_path / "online" / "drafter_config.json").read_text())
    assert dcfg["layer_types"] == ["sliding_attention", "full_attention"] and dcfg["sliding_window"] == 2048
    assert dcfg["dflash_config"]["target_layer_ids"] == layers
    # A small hybrid keeps its own attention layout (the released 32 x 128 layout is for hidden >= 4096).
    assert (dcfg["num_attention_heads"], dcfg["num_key_value_heads"], dcfg["head_dim"]) == (4, 2, 32)


def test_plan_target_config_qwen3_6_27b(dflash_bin):
    r = subprocess.run([dflash_bin, "plan", "--target-config", str(ROOT / "configs/targets/qwen3.6-27b.json"),
                        "--max-len", "8000", "--num-anchors", "1024", "--json"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    c = plan["drafter_config"]
    # The released Qwen3.6-27B drafter's layout (z-lab/Qwen3.6-27B-DFlash).
    assert (c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]) == (5, 5120, 17408)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (32, 8, 128)
    assert c["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"] and c["sliding_window"] == 2048
    assert c["dflash_config"] == {"mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]}
    assert c["num_target_layers"] == 64 and c["vocab_size"] == 248320 and c["rope_theta"] == 1e7
    assert plan["settings"]["params"] == pytest.approx(1.73e9, rel=0.01)
    assert plan["peak_bytes"] > 0
    bad = subprocess.run([dflash_bin, "plan", "--target-config", str(ROOT / "configs/targets/qwen3.6-27b.json"),
                          "--preset", "qwen3-8b"], capture_output=True, text=True, env=ENV)
    assert bad.returncode != 0 and "only one of" in bad.stderr


@pytest.mark.slow
def test_bench_decode_prefill_runs_both_sides(dflash_bin, tiny, tmp_path):
    _, d = tiny
    out = tmp_path / "b.json"
    r = subprocess.run([dflash_bin, "bench", "decode", "--model", str(d), "--prompt-ids", "5,6,7", "--new-tokens", "6",
                        "--prefill-lengths", "16,70", "--json", str(out)], capture_output=True, text=True, env=ENV,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out))
    assert res["same_tokens"] is True
    assert [row["T"] for row in res["prefill"]] == [16, 70]
    for row in res["prefill"]:
        assert row["same_next_token"] is True and row["dflash_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0
        assert row["linear_state_bytes"] > 0 and row["rollback_bytes_verify16"] > row["linear_state_bytes"]
