"""`dflash eval` with DSpark drafters (dspark_drafting.h) on a tiny random HF Llama target: greedy decoding
is lossless with every Markov head variant (the drafts are the Markov-corrected argmax, B of them, B + 1 verified);
a Markov head built to predict the target's own greedy successor of each token gets long acceptances, which a wrong
previous token, slot alignment or missing bias would not; --confidence-threshold cuts drafts by the cumulative
confidence product (1 cuts every draft: one token per cycle); sampling runs with the drafts' own distributions in
the rejection rule (the rule itself: test_eval_rejection_rule.py); refusals are one line."""
import json
import os
import subprocess

import pytest
import torch
from safetensors.torch import save_file

from eval_cli import run_eval, write_prompts
from hf_greedy import hf_greedy
from tiny_drafters import TARGET_LAYER_IDS, drafter_backbone
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
V = 300


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    m = tiny_llama(vocab=V, layers=4, seed=0, weight_scale=1.0)
    d = tmp_path_factory.mktemp("target")
    m.save_pretrained(str(d))
    return m, d


@pytest.fixture(scope="module")
def varied_target(tmp_path_factory):
    """A target whose greedy decodes rarely repeat a token (unlike `target`'s, which settle into runs of one token):
    a draft that follows the wrong previous token is then wrong."""
    m = tiny_llama(vocab=V, layers=4, seed=1, weight_scale=2.0)
    d = tmp_path_factory.mktemp("varied_target")
    m.save_pretrained(str(d))
    return m, d


def dspark_drafter(path, target_cfg, B=4, rank=8, head_type="vanilla", confidence=True, with_markov=True, seed=0,
                   markov=None, conf_bias=0.0):
    """A random DSpark export (DeepSpec's flat config keys and tensor names). markov: (w1, w2) to use instead of
    random ones; conf_bias: the confidence head's bias (its weight is 0 when given, so every slot has that logit)."""
    torch.manual_seed(seed)
    H = target_cfg.hidden_size
    backbone, w = drafter_backbone(target_cfg, B)
    cfg = {"architectures": ["Qwen3DSparkModel"], **backbone, "mask_token_id": target_cfg.vocab_size - 1,
           "target_layer_ids": TARGET_LAYER_IDS, "markov_rank": rank, "markov_head_type": head_type,
           "enable_confidence_head": confidence, "confidence_head_with_markov": with_markov}
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    Vt = target_cfg.vocab_size
    if rank > 0:
        w1, w2 = markov if markov is not None else (torch.randn(Vt, rank), torch.randn(Vt, rank))
        w["markov_head.markov_w1.weight"], w["markov_head.markov_w2.weight"] = w1, w2
        if head_type == "gated":
            w["markov_head.gate_proj.weight"], w["markov_head.gate_proj.bias"] = torch.randn(rank, H + rank), torch.randn(rank)
        if head_type == "rnn":
            w["markov_head.joint_proj.weight"] = torch.randn(3 * rank, 2 * rank + H)
            w["markov_head.joint_proj.bias"] = torch.randn(3 * rank)
    if confidence:
        width = H + (rank if with_markov and rank > 0 else 0)
        cw = torch.zeros(1, width) if markov is not None else torch.randn(1, width)
        w["confidence_head.proj.weight"], w["confidence_head.proj.bias"] = cw, torch.full((1,), conf_bias)
    save_file({k: v.contiguous() for k, v in w.items()}, str(path / "model.safetensors"))
    return path


def _eval(dflash_bin, target_dir, data, tmp_path, *extra):
    return run_eval(dflash_bin, target_dir, data, tmp_path, *extra, env=ENV, timeout=None)


@pytest.mark.parametrize("head_type,rank,confidence,with_markov", [
    ("vanilla", 8, True, True), ("gated", 4, True, False), ("rnn", 5, False, True), ("vanilla", 0, True, True)])
def test_greedy_dspark_eval_is_lossless(dflash_bin, target, tmp_path, head_type, rank, confidence, with_markov):
    model, d = target
    drafter = dspark_drafter(tmp_path / "drafter", model.config, rank=rank, head_type=head_type,
                             confidence=confidence, with_markov=with_markov)
    data = write_prompts(tmp_path / "p.jsonl", 2, V)
    extra = ["--confidence-threshold", "0.3"] if confidence else []
    res, toks, table = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "20", *extra)
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["mismatches"] == []
    assert res["drafter_family"] == "dspark" and res["block_size"] == 4 and res["verified_per_cycle"] == 5
    # B drafts: up to B + 1 tokens a cycle (the dataset's block_size counts the verified tokens)
    assert ds["block_size"] == 5 and len(ds["accept_hist"]) == 6 and len(ds["slot_acceptance"]) == 4
    prompts = [json.loads(line)["prompt_ids"] for line in open(data)]
    for rec, p in zip(toks, prompts):
        assert rec["tokens"] == hf_greedy(model, p, 20)
    assert "tiny" in table and "tau" in table


def _successor_markov(model, prompts, max_new, rank_scale=40.0):
    """A vanilla Markov head whose bias W2 W1[p] is rank_scale at the token that follows p in the target's own greedy
    decodes of `prompts` (first occurrence wins) and 0 elsewhere: rank V, W1 = scale * I, W2[next(p), p] = 1."""
    w1 = rank_scale * torch.eye(V)
    w2 = torch.zeros(V, V)
    seen = set()
    for p in prompts:
        seq = p + hf_greedy(model, p, max_new)
        for a, b in zip(seq[len(p) - 1:], seq[len(p):]):
            if a not in seen:
                seen.add(a)
                w2[b, a] = 1.0
    return w1, w2


def test_markov_head_that_knows_the_target_gets_long_acceptances(dflash_bin, varied_target, tmp_path):
    model, d = varied_target
    data = write_prompts(tmp_path / "p.jsonl", 3, V)
    prompts = [json.loads(line)["prompt_ids"] for line in open(data)]
    markov = _successor_markov(model, prompts, 24)
    good = dspark_drafter(tmp_path / "good", model.config, rank=V, markov=markov)
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(good), "--max-new", "24")
    ds = res["datasets"][0]
    assert ds["lossless"] is True
    # Drafts follow the target's greedy successors: far more than the one token a cycle of a random drafter.
    assert ds["tau"] > 2.1, ds  # 2.46 here; 1.60 when every draft reads the last committed token
    assert max(k for rec in toks for k in rec["accept_lengths"]) == 5  # B = 4 drafts all accepted, plus one
    # The same head with W2 shifted by one token is wrong everywhere: tau falls to ~1 (the test can fail).
    bad = dspark_drafter(tmp_path / "bad", model.config, rank=V, markov=(markov[0], markov[1].roll(1, 0)))
    res_bad, _, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(bad), "--max-new", "24")
    assert res_bad["datasets"][0]["lossless"] is True and res_bad["datasets"][0]["tau"] < 1.5


def test_confidence_threshold_truncates_by_the_cumulative_product(dflash_bin, varied_target, tmp_path):
    """Every slot's confidence logit is 0 (sigmoid 1/2): the cumulative products are 1/2, 1/4, 1/8, 1/16, so
    threshold 0.2 keeps 2 drafts (3 tokens verified), 0.6 keeps none (one token a cycle), 0 keeps all 4."""
    model, d = varied_target
    data = write_prompts(tmp_path / "p.jsonl", 3, V)
    prompts = [json.loads(line)["prompt_ids"] for line in open(data)]
    drafter = dspark_drafter(tmp_path / "drafter", model.config, rank=V, markov=_successor_markov(model, prompts, 24),
                             conf_bias=0.0)
    for threshold, most in [(0.2, 3), (0.6, 1), (0.0, 5)]:
        res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "24",
                             "--confidence-threshold", str(threshold))
        ds = res["datasets"][0]
        assert ds["lossless"] is True and res["confidence_threshold"] == threshold
        lengths = [k for rec in toks for k in rec["accept_lengths"]]
        assert max(lengths) == most, (threshold, lengths)
        assert all(rate == 0 for rate in ds["slot_acceptance"][most - 1:])  # slots past the cut: never verified
    assert ds["tau"] > 2.1  # threshold 0: as without the head


def test_sampled_dspark_eval_runs_with_its_draft_distribution(dflash_bin, varied_target, tmp_path):
    model, d = varied_target
    data = write_prompts(tmp_path / "p.jsonl", 2, V)
    prompts = [json.loads(line)["prompt_ids"] for line in open(data)]
    drafter = dspark_drafter(tmp_path / "drafter", model.config, rank=V, markov=_successor_markov(model, prompts, 20))
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "20",
                         "--temperature", "0.5", "--seed", "3")
    ds = res["datasets"][0]
    assert ds["cycles"] > 0 and ds["tau"] >= 1.0 and ds["lossless"] is None  # no greedy check when sampling
    assert all(0 <= t < V for rec in toks for t in rec["tokens"])
    assert all(1 <= k <= 5 for rec in toks for k in rec["accept_lengths"])


def test_refusals_are_one_line(dflash_bin, target, tmp_path):
    model, d = target
    data = write_prompts(tmp_path / "p.jsonl", 1, V)
    no_conf = dspark_drafter(tmp_path / "noconf", model.config, confidence=False)

    def fails(*args):
        r = subprocess.run([dflash_bin, "eval", "--target", str(d), "--data", f"tiny={data}", *args],
                           capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode != 0
        return r.stderr.strip().splitlines()[-1]
    assert "--confidence-threshold needs a confidence head" in fails("--drafter", str(no_conf),
                                                                     "--confidence-threshold", "0.5")
    assert "--confidence-threshold must be a finite number in [0, 1]" in fails("--drafter", str(no_conf),
                                                                                "--confidence-threshold", "1.5")
    assert "--confidence-threshold is not used with --proposer oracle" in fails("--proposer", "oracle",
                                                                                 "--confidence-threshold", "0.5")
    from test_eval_speculative import _random_drafter
    dflash = _random_drafter(tmp_path / "dflash", model.config)
    assert "--confidence-threshold applies to dspark drafters only" in fails("--drafter", str(dflash),
                                                                             "--confidence-threshold", "0.5")
