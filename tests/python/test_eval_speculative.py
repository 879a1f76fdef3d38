"""`dflash eval` on tiny random HF Llama targets: an oracle proposer (the target's own continuation) gives
tau = B and a lossless decode; a random proposer gives tau ~ 1 and is still lossless; a random DFlash drafter
folder runs through the real drafter path losslessly, with either attention backend and with auto falling back
from a broken fused op; speculative sampling reproduces the target's own token distribution (chi-square over many
samples against exact probabilities from transformers)."""
import json
import math
import os
import subprocess

import pytest
import torch
from safetensors.torch import save_file

from eval_cli import run_eval, write_prompts
from hf_greedy import hf_greedy
from joint_chi2 import assert_matches_joint
from tiny_drafters import TARGET_LAYER_IDS, drafter_backbone
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def _tiny(vocab, layers=2, seed=0, scale=1.0):
    return tiny_llama(vocab=vocab, layers=layers, seed=seed, weight_scale=scale)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    m = _tiny(300, layers=4)
    d = tmp_path_factory.mktemp("target")
    m.save_pretrained(str(d))
    return m, d


_prompts = write_prompts


def _eval(dflash_bin, target_dir, data, tmp_path, *extra):
    return run_eval(dflash_bin, target_dir, data, tmp_path, *extra, env=ENV, timeout=None)


def test_oracle_gives_tau_b_and_lossless(dflash_bin, target, tmp_path):
    model, d = target
    data = _prompts(tmp_path / "p.jsonl", 3, 300)
    B, max_new = 4, 25
    res, toks, table = _eval(dflash_bin, d, data, tmp_path, "--proposer", "oracle", "--block-size", str(B),
                             "--max-new", str(max_new))
    ds = res["datasets"][0]
    assert ds["name"] == "tiny" and ds["prompts"] == 3 and ds["lossless"] is True
    prompts = [json.loads(l)["prompt_ids"] for l in open(data)]
    for rec, p in zip(toks, prompts):
        assert rec["baseline"] == hf_greedy(model, p, max_new)  # the baseline is the target's greedy decode
        assert rec["tokens"] == rec["baseline"]
        # Every cycle but a last one cut short by eos / max_new commits all B tokens.
        assert all(k == B for k in rec["accept_lengths"][:-1]), rec["accept_lengths"]
    full = sum(len(r["tokens"]) - 1 == B * len(r["accept_lengths"]) for r in toks)
    assert full >= 1  # 25 = 1 + 6 * 4: an uninterrupted prompt has tau exactly B
    assert ds["tau"] > B - 1
    assert ds["slot_acceptance"] == [1.0] * (B - 1)
    assert sum(ds["accept_hist"]) == ds["cycles"] and len(ds["accept_hist"]) == B + 1
    for key in ["tokens_per_s", "baseline_tokens_per_s", "speedup"]:
        assert ds[key] > 0
    # The phases of a cycle are timed; together they cannot exceed the speculative wall time per cycle.
    phases = ds["cycle_ms"]
    assert set(phases) == {"draft", "verify_forward", "verify_lm_head", "commit"}
    assert all(v >= 0 for v in phases.values()) and phases["verify_forward"] > 0
    wall_ms_per_cycle = 1e3 * ds["new_tokens"] / ds["tokens_per_s"] / ds["cycles"]
    assert sum(phases.values()) <= wall_ms_per_cycle * 1.01
    assert "tiny" in table and "tau" in table and "ms per cycle" in table


def test_random_proposer_tau_near_one_and_lossless(dflash_bin, target, tmp_path):
    _, d = target
    data = _prompts(tmp_path / "p.jsonl", 3, 300)
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--proposer", "random", "--block-size", "8",
                         "--max-new", "24")
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["mismatches"] == []
    assert 1.0 <= ds["tau"] < 1.3
    for rec in toks:
        assert rec["tokens"] == rec["baseline"]
    # tau's standard error over prompts, recomputed from the per-cycle record.
    per = {}
    for rec in toks:
        a, c = per.get(rec["index"], (0, 0))
        per[rec["index"]] = (a + sum(rec["accept_lengths"]), c + len(rec["accept_lengths"]))
    A, C, n = sum(a for a, _ in per.values()), sum(c for _, c in per.values()), len(per)
    se = math.sqrt(n / (n - 1) * sum((a - A / C * c) ** 2 for a, c in per.values())) / C
    assert A / C == pytest.approx(ds["tau"]) and ds["tau_stderr"] == pytest.approx(se, abs=1e-12)


def _random_drafter(path, target_cfg, B=4, seed=0):
    torch.manual_seed(seed)
    backbone, w = drafter_backbone(target_cfg, B)
    cfg = {"architectures": ["DFlashDraftModel"], **backbone,
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 3, "tie_word_embeddings": True,
           "dflash_config": {"mask_token_id": target_cfg.vocab_size - 1, "target_layer_ids": TARGET_LAYER_IDS}}
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, str(path / "model.safetensors"))
    return path


def test_dflash_drafter_path_is_lossless(dflash_bin, target, tmp_path):
    model, d = target
    drafter = _random_drafter(tmp_path / "drafter", model.config)
    data = _prompts(tmp_path / "p.jsonl", 2, 300)
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "20")
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["block_size"] == 4 and ds["tau"] >= 1.0
    assert res["drafter"] == str(drafter)
    # A run directory holding export/ works too; a folder without a drafter is a clear error.
    run = tmp_path / "run"
    run.mkdir()
    (drafter).rename(run / "export")
    _eval(dflash_bin, d, data, tmp_path, "--drafter", str(run), "--max-new", "5")
    r = subprocess.run([dflash_bin, "eval", "--target", str(d), "--data", str(data), "--drafter", str(tmp_path)],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode != 0 and "config.json + model.safetensors" in r.stderr


def test_speculative_sampling_matches_target_distribution(dflash_bin, tmp_path):
    V, T, N = 8, 1.0, 4000
    m = _tiny(V, seed=4, scale=3.0)
    d = tmp_path / "t8"
    m.save_pretrained(str(d))
    prompt = [3, 5, 4]
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt_ids": prompt}) + "\n")
    # Oracle without a reference proposes the last token again: accepted with probability p(last), so
    # both the accept and the reject/resample paths (and the bonus token) are exercised.
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--proposer", "oracle", "--block-size", "3",
                         "--max-new", "3", "--temperature", str(T), "--repeats", str(N), "--baseline", "0",
                         "--eos", "none")
    seqs = [tuple(r["tokens"]) for r in toks]
    assert len(seqs) == N and all(len(s) == 3 for s in seqs)
    acc = res["datasets"][0]["slot_acceptance"]
    assert 0.05 < acc[0] < 0.95  # both paths taken often
    assert_matches_joint(m, prompt, seqs, V, T)


def test_bench_decode_runs_both_and_agrees(dflash_bin, target, tmp_path):
    _, d = target
    out = tmp_path / "b.json"
    r = subprocess.run([dflash_bin, "bench", "decode", "--model", str(d), "--prompt-ids", "5,6,7", "--new-tokens",
                        "8", "--json", str(out)], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out))
    assert res["same_tokens"] is True
    assert res["dflash_tokens_per_s"] > 0 and res["hf_tokens_per_s"] > 0


def test_max_draft_limits_verified_tokens(dflash_bin, target, tmp_path):
    _, d = target
    data = _prompts(tmp_path / "p.jsonl", 1, 300)
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--proposer", "oracle", "--block-size", "8",
                         "--max-draft", "2", "--max-new", "13", "--eos", "none")
    ds = res["datasets"][0]
    assert toks[0]["accept_lengths"] == [3] * 4 and ds["tau"] == 3.0 and ds["lossless"] is True
    assert ds["slot_acceptance"][:2] == [1.0, 1.0] and ds["slot_acceptance"][2:] == [0.0] * 5


def test_drafter_attention_backend_and_fallback(dflash_bin, target, tmp_path):
    """--attention-backend: reference proposes what fused does; auto falls back (one line, eval.json) when the
    fused op is broken (test-only DFLASH_FAULT_INJECT), and fused then refuses."""
    model, d = target
    drafter = _random_drafter(tmp_path / "drafter", model.config)
    data = _prompts(tmp_path / "p.jsonl", 2, 300)
    runs = {}
    for name, backend, fault in [("fused", "fused", ""), ("reference", "reference", ""), ("auto_broken", "auto",
                                                                                         "attention_wrong")]:
        out = tmp_path / name
        out.mkdir()
        cmd = [dflash_bin, "eval", "--target", str(d), "--data", f"tiny={data}", "--drafter", str(drafter),
               "--max-new", "16", "--threads", "1", "--json", str(out / "eval.json"), "--tokens-out",
               str(out / "tokens.jsonl"), "--attention-backend", backend]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(ENV, DFLASH_FAULT_INJECT=fault))
        assert r.returncode == 0, r.stderr
        runs[name] = (r.stderr, json.load(open(out / "eval.json")), [json.loads(l) for l in open(out / "tokens.jsonl")])
    assert "attention: cpu: fused (self-check against the reference passed: " in runs["fused"][0]
    assert "attention: cpu: reference (attention_backend reference, no self-check)" in runs["reference"][0]
    stderr, res, toks = runs["auto_broken"]
    lines = [l for l in stderr.splitlines() if "falling back to the reference attention on cpu" in l]
    assert len(lines) == 1 and lines[0].startswith("attention: cpu: the fused op failed its self-check (cpu fp32, "
                                                   "S 528, Hq 4, Hkv 2, D 8, B 4, window 0, forward: out max error")
    assert res["attention_backend"] == {"requested": "auto", "backend": "reference", "device": "cpu", "line": lines[0]}
    for name in ("fused", "reference", "auto_broken"):
        assert runs[name][1]["datasets"][0]["lossless"] is True
    proposals = {name: [r["accept_lengths"] for r in runs[name][2]] for name in runs}
    assert proposals["reference"] == proposals["fused"] == proposals["auto_broken"]
    r = subprocess.run([dflash_bin, "eval", "--target", str(d), "--data", f"tiny={data}", "--drafter", str(drafter),
                        "--max-new", "4", "--attention-backend", "fused"], capture_output=True, text=True,
                       env=dict(ENV, DFLASH_FAULT_INJECT="attention_throw"))
    assert r.returncode == 1 and "attention_backend fused: the fused attention failed its self-check against the " \
                                 "reference on cpu" in r.stderr, r.stderr
