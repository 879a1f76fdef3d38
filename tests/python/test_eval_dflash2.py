"""`dflash eval` with DFlash2 drafters (dflash2_drafting.h) on tiny random HF Llama targets: greedy decoding is
lossless (the drafts are the selector's greedy path, B - 1 of them, B verified); one drafting cycle through
build/dflash2_draft_probe gives the path (and at T > 0 the sparse q) of an independent fp64 walk over the top-K of
U = lm_head(h) (family_reference.py), and that path is not the unary argmax, so a walk that ignores the selector
fails; the rejection rule with a sparse selector q emits exactly the target's distribution (enumerated over every
draft, with build/rejection_probe's acceptance and residual); a seeded sampled run reproduces the target's own joint
distribution of three tokens (chi-square, as test_eval_speculative.py does for DFlash); refusals are one line."""
import json
import os
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

import family_reference as fr
from eval_cli import run_eval, write_prompts
from hf_greedy import hf_greedy
from joint_chi2 import assert_matches_joint
from tiny_drafters import TARGET_LAYER_IDS, drafter_backbone
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
V = 300


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    m = tiny_llama(vocab=V, layers=4, seed=1, weight_scale=2.0)
    d = tmp_path_factory.mktemp("target")
    m.save_pretrained(str(d))
    return m, d


def dflash2_drafter(path, target_cfg, B=4, top_k=4, rank=8, conv_kernel=2, group=8, seed=0, selector_scale=1.0):
    """A random DFlash2 export in z-lab's contract (dflash_config's conv/selector keys, bare codebook names) with
    non-identity convs and a selector strong enough to re-rank the candidates."""
    torch.manual_seed(seed)
    H, Vt = target_cfg.hidden_size, target_cfg.vocab_size

    def convs(w, p):
        for conv in ("attention_conv", "mlp_conv"):
            base = torch.zeros(2, conv_kernel, H)
            base[:, 0] = 1
            w[p + conv + ".base_kernel"] = base + 0.3 * torch.randn(2, conv_kernel, H)
            w[p + conv + ".kernel_projection.weight"] = 0.1 * torch.randn(2 * conv_kernel * (H // group), H)
    backbone, w = drafter_backbone(target_cfg, B, per_layer=convs)
    cfg = {"architectures": ["DFlash2DraftModel"], **backbone, "is_causal": False, "tie_word_embeddings": True,
           "dflash_config": {"mask_token_id": Vt - 1, "target_layer_ids": TARGET_LAYER_IDS,
                             "conv_kernel_size": conv_kernel, "conv_group_size": group, "selector_rank": rank,
                             "selector_top_k": top_k}}
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    w["candidate_selector.hidden_projection.weight"] = selector_scale * torch.randn(rank, H) / H ** 0.5
    w["candidate_selector.predecessor_codebook"] = selector_scale * torch.randn(Vt, rank)
    w["candidate_selector.successor_codebook"] = selector_scale * torch.randn(Vt, rank)
    save_file({k: v.contiguous() for k, v in w.items()}, str(path / "model.safetensors"))
    return path


def _eval(dflash_bin, target_dir, data, tmp_path, *extra):
    return run_eval(dflash_bin, target_dir, data, tmp_path, *extra, env=ENV, timeout=None)


@pytest.mark.parametrize("B,top_k,conv_kernel,max_draft", [(4, 4, 2, 0), (5, 1, 3, 0), (5, 6, 2, 2)])
def test_greedy_dflash2_eval_is_lossless(dflash_bin, target, tmp_path, B, top_k, conv_kernel, max_draft):
    model, d = target
    drafter = dflash2_drafter(tmp_path / "drafter", model.config, B=B, top_k=top_k, conv_kernel=conv_kernel)
    data = write_prompts(tmp_path / "p.jsonl", 2, V)
    res, toks, table = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "20",
                             "--max-draft", str(max_draft))
    ds = res["datasets"][0]
    assert ds["lossless"] is True and ds["mismatches"] == []
    assert res["drafter_family"] == "dflash2" and res["block_size"] == B and res["verified_per_cycle"] == B
    assert len(ds["accept_hist"]) == B + 1 and len(ds["slot_acceptance"]) == B - 1
    prompts = [json.loads(line)["prompt_ids"] for line in open(data)]
    for rec, p in zip(toks, prompts):
        assert rec["tokens"] == hf_greedy(model, p, 20)
        assert all(1 <= k <= (max_draft or B - 1) + 1 for k in rec["accept_lengths"])
    assert "tiny" in table and "tau" in table


@pytest.fixture(scope="module")
def probe(dflash_bin):
    path = pathlib.Path(dflash_bin).parent / "dflash2_draft_probe"
    if not path.exists():
        pytest.fail(f"{path} not found: build the dflash2_draft_probe target")
    return str(path)


def _reference_walk(model, drafter, hidden, last, temperature, uniforms, n):
    """The fp64 walk of family_reference.py on the probe's hidden states: U = lm_head(h) over slots 1..n."""
    w = load_file(str(drafter / "model.safetensors"))
    top_k = json.load(open(drafter / "config.json"))["dflash_config"]["selector_top_k"]
    params = fr.SelectorParams(w["candidate_selector.hidden_projection.weight"].double(),
                               w["candidate_selector.predecessor_codebook"].double(),
                               w["candidate_selector.successor_codebook"].double(), top_k)
    h = hidden[1:n + 1]
    unary = h @ model.lm_head.weight.detach().double().T
    u = torch.tensor(uniforms, dtype=torch.float64) if temperature > 0 else None
    return fr.selector_walk(unary, h, last, params, temperature, u), unary


@pytest.mark.parametrize("temperature,max_draft", [(0.0, 0), (0.8, 0), (1.5, 3)])
def test_drafted_path_is_the_reference_walk(probe, target, tmp_path, temperature, max_draft):
    model, d = target
    drafter = dflash2_drafter(tmp_path / "drafter", model.config, B=6, top_k=5, selector_scale=2.0)
    B = 6
    n = max_draft or B - 1
    g = torch.Generator().manual_seed(11)
    unary_differs = False
    for trial in range(4):
        prompt = torch.randint(3, V - 1, (5 + 3 * trial,), generator=g).tolist()
        last = int(torch.randint(3, V - 1, (), generator=g))
        uniforms = torch.rand(n, generator=g, dtype=torch.float64).tolist() if temperature > 0 else []
        src = tmp_path / "in.json"
        src.write_text(json.dumps({"prompt": prompt, "last": last, "temperature": temperature, "uniforms": uniforms,
                                   "max_draft": max_draft}))
        r = subprocess.run([probe, str(d), str(drafter), str(src)], capture_output=True, text=True, env=ENV,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        hidden = torch.tensor(out["hidden"], dtype=torch.float64)
        assert hidden.shape == (B, model.config.hidden_size)
        ref, unary = _reference_walk(model, drafter, hidden, last, temperature, uniforms, n)
        assert out["tokens"] == ref.path.tolist(), trial
        if temperature > 0:
            q = torch.tensor(out["probs"], dtype=torch.float64)
            dense = fr.sparse_to_dense(ref.q, ref.candidates, V)
            assert q.shape == (n, V) and torch.allclose(q, dense, rtol=0, atol=1e-6)
            assert ((q > 0).sum(-1) <= 5).all()  # zero outside the top-K
        else:
            assert out["probs"] == []
        unary_differs |= out["tokens"] != unary.argmax(-1).tolist()
    if temperature == 0:
        assert unary_differs  # the selector re-ranks: a walk that ignored it would fail above


def test_rejection_rule_with_a_sparse_selector_q_emits_the_target_distribution(dflash_bin, tmp_path):
    """Exact: for every draft x the sparse q can produce, the C++ acceptance a(x) and residual r give the emitted
    distribution sum_x q(x) [a(x) e_x + (1 - a(x)) r]; it must be the target's p, including p's mass outside the
    top-K (reachable only through the residual)."""
    from test_eval_rejection_rule import run_probe
    probe = str(pathlib.Path(dflash_bin).parent / "rejection_probe")
    g = torch.Generator().manual_seed(5)
    Vs, K, T = 9, 4, 0.7
    cases, meta = [], []
    for trial in range(6):
        params = fr.random_selector_params(Vs, 6, 3, K, g, scale=0.8)
        unary = 2 * torch.randn(1, Vs, generator=g, dtype=torch.float64)
        hidden = torch.randn(1, 6, generator=g, dtype=torch.float64)
        walk = fr.selector_walk(unary, hidden, trial % Vs, params, T, torch.zeros(1, dtype=torch.float64))
        q = fr.sparse_to_dense(walk.q, walk.candidates, Vs)[0]
        p = torch.softmax(2 * torch.randn(Vs, generator=g, dtype=torch.float64), -1)
        for x in walk.candidates[0].tolist():
            cases.append((torch.stack([p, p]), q[None], torch.tensor([x]), torch.zeros(1, dtype=torch.float64), 0.5))
        meta.append((p, q, walk.candidates[0].tolist()))
    outs = iter(run_probe(probe, tmp_path, cases))
    for p, q, cands in meta:
        emitted = torch.zeros(Vs, dtype=torch.float64)
        for x in cands:
            out = next(outs)
            a = out["acceptance"][0]
            emitted[x] += q[x] * a
            emitted += q[x] * (1 - a) * torch.tensor(out["residual"][0], dtype=torch.float64)
        assert (q[[c for c in range(Vs) if c not in cands]] == 0).all() and (p > 0).all()
        assert torch.allclose(emitted, p, rtol=0, atol=1e-14)


@pytest.mark.slow
def test_sampled_dflash2_eval_matches_the_target_distribution(dflash_bin, tmp_path):
    Vs, T, N = 8, 1.0, 3000
    m = tiny_llama(vocab=Vs, layers=4, seed=4, weight_scale=3.0)
    d = tmp_path / "t8"
    m.save_pretrained(str(d))
    prompt = [3, 5, 4]
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt_ids": prompt}) + "\n")
    drafter = dflash2_drafter(tmp_path / "drafter", m.config, B=3, top_k=3, selector_scale=2.0)
    res, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", "3",
                         "--temperature", str(T), "--repeats", str(N), "--baseline", "0", "--eos", "none",
                         "--seed", "7")
    seqs = [tuple(r["tokens"]) for r in toks]
    assert len(seqs) == N and all(len(s) == 3 for s in seqs)
    ds = res["datasets"][0]
    assert 0.05 < ds["slot_acceptance"][0] < 0.95, ds  # accepts and residual draws both happen often
    assert_matches_joint(m, prompt, seqs, Vs, T)


def test_refusals_are_one_line(dflash_bin, target, tmp_path):
    model, d = target
    data = write_prompts(tmp_path / "p.jsonl", 1, V)
    drafter = dflash2_drafter(tmp_path / "ok", model.config)

    def fails(*args):
        r = subprocess.run([dflash_bin, "eval", "--target", str(d), "--data", f"tiny={data}", *args],
                           capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        return lines[-1]
    big_k = dflash2_drafter(tmp_path / "bigk", model.config, top_k=V + 1)
    msg = fails("--drafter", str(big_k))
    assert "selector_top_k" in msg and str(V) in msg and "config.json" in msg, msg
    assert "--confidence-threshold applies to dspark drafters only" in fails("--drafter", str(drafter),
                                                                             "--confidence-threshold", "0.5")
    assert "disagrees with" in fails("--drafter", str(drafter), "--drafter-family", "dspark")
    small = tiny_llama(vocab=V - 10, layers=4, seed=1)
    small_dir = tmp_path / "small"
    small.save_pretrained(str(small_dir))
    r = subprocess.run([dflash_bin, "eval", "--target", str(small_dir), "--data", f"tiny={data}", "--drafter",
                        str(drafter)], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode != 0 and "vocab_size" in r.stderr.strip().splitlines()[-1]
