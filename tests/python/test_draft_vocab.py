"""The draft vocabulary end to end: `dflash train --draft-vocab K` picks the K most frequent answer tokens (+ EOS),
trains over them (targets outside counted in metrics.jsonl), keeps the mapping in checkpoints and resumes with
it; `dflash export` writes d2t/t2d/lm_head the way vLLM loads them (and our dflash.py loads them in
transformers); `dflash eval` maps draft ids to target ids before verification and stays lossless."""
import json
import os
import subprocess
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file, save_file

from test_eval_speculative import ENV, _eval, _prompts, _random_drafter
from test_eval_speculative import target as eval_target  # noqa: F401 (fixture)
from test_hf_export import load_with_transformers, write_batch
from test_train import (HIDDEN, MASK_ID, TIMEOUT, VOCAB, base_args, final_weights, metrics, offline_dir,  # noqa: F401
                        target_dir, train)

K = 24
EOS = 2  # tiny_llama's eos_token_id


def expected_ids(samples, k, max_len=64, keep=(EOS,)):
    """The rule of docs/TRAINING.md, written independently: keep ids, then count desc / id asc, then lowest unseen."""
    c = Counter()
    for s in samples:
        ids, m = s["input_ids"][:max_len], s["loss_mask"][:max_len]
        c.update(ids[m].tolist())
    chosen = list(dict.fromkeys(keep))
    for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) < k and t not in chosen:
            chosen.append(t)
    t = 0
    while len(chosen) < k:
        if t not in chosen:
            chosen.append(t)
        t += 1
    return sorted(chosen)


def export(dflash_bin, run, out, dtype="fp32"):
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", dtype, "--engine", "vllm"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return out


def test_train_counts_restricts_checkpoints_and_resumes(dflash_bin, target_dir, offline_dir, tmp_path):
    data, samples = offline_dir
    run = tmp_path / "run"
    r = train(dflash_bin, base_args(target_dir[0], data, run, steps=3, draft_vocab=K))
    assert "draft vocabulary: 24 of 256" in r.stderr
    v = load_file(str(run / "draft_vocab.safetensors"))
    want = expected_ids(samples, K)
    assert v["draft_ids"].tolist() == want
    counts = Counter()
    for s in samples:
        counts.update(s["input_ids"][:64][s["loss_mask"][:64]].tolist())
    assert v["counts"].tolist() == [counts.get(t, 0) for t in range(VOCAB)]
    # The head rows are the target's (tied: its embedding).
    tw = load_file(str(target_dir[0] / "model.safetensors"))
    emb = tw.get("lm_head.weight", tw["model.embed_tokens.weight"])
    assert torch.equal(v["lm_head"], emb[want].to(v["lm_head"].dtype))
    cfg = json.loads((run / "drafter_config.json").read_text())
    assert cfg["draft_vocab_size"] == K and cfg["vocab_size"] == VOCAB
    m = metrics(run)
    # Random tokens over 253 ids: many targets fall outside 24 of them, and the log says how many.
    assert all(0.2 < x["out_of_vocab"] < 1 for x in m), [x["out_of_vocab"] for x in m]
    ck = load_file(str(run / "checkpoints" / "step-3.safetensors"))
    assert ck["draft_vocab.draft_ids"].tolist() == want
    # Without a draft vocabulary the metrics carry no out_of_vocab field.
    full = tmp_path / "full"
    train(dflash_bin, base_args(target_dir[0], data, full, steps=1))
    assert "out_of_vocab" not in metrics(full)[0]
    # Resume: 2 + 1 steps equal 3 straight, with the checkpoint's mapping; a different K is refused.
    part = tmp_path / "part"
    train(dflash_bin, base_args(target_dir[0], data, part, steps=3, stop_after=2, draft_vocab=K))
    train(dflash_bin, base_args(target_dir[0], data, part, steps=3, draft_vocab=K) + ["--resume"])
    a, b = final_weights(run, 3), final_weights(part, 3)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    bad = train(dflash_bin, base_args(target_dir[0], data, part, steps=4, draft_vocab=K + 1) + ["--resume"],
                check=False)
    assert bad.returncode != 0 and "draft_vocab" in bad.stderr and str(K) in bad.stderr, bad.stderr
    bad = train(dflash_bin, base_args(target_dir[0], data, tmp_path / "big", steps=1, draft_vocab=VOCAB + 1),
                check=False)
    assert bad.returncode != 0 and f"'draft_vocab' must be in [1, {VOCAB}]" in bad.stderr, bad.stderr


def test_export_writes_vllm_mapping_and_transformers_loads_it(dflash_bin, target_dir, offline_dir, tmp_path):
    data, samples = offline_dir
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], data, run, steps=2, draft_vocab=K))
    out = export(dflash_bin, run, tmp_path / "hf")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["draft_vocab_size"] == K and cfg["vocab_size"] == VOCAB
    w = load_file(str(out / "model.safetensors"))
    ids = torch.tensor(expected_ids(samples, K))
    assert w["d2t"].dtype == torch.int64 and w["d2t"].shape == (K,)
    assert torch.equal(torch.arange(K) + w["d2t"], ids)  # vLLM: target = arange(K) + d2t
    assert w["t2d"].dtype == torch.bool and w["t2d"].shape == (VOCAB,)
    assert w["t2d"].nonzero().view(-1).tolist() == ids.tolist()
    assert torch.equal(w["lm_head.weight"], load_file(str(run / "draft_vocab.safetensors"))["lm_head"].float())
    ref = final_weights(run, 2)
    for k in ref:
        assert torch.equal(w[k], ref[k]), k
    # transformers + our dflash.py: every tensor loads, and draft() returns target ids of the best draft row.
    B, b, S, N = 4, 1, 12, 2
    anchors, keep = torch.tensor([[3, 7]]), torch.ones(1, N, dtype=torch.bool)
    batch = tmp_path / "batch.safetensors"
    write_batch(batch, 0, b, S, HIDDEN, HIDDEN, VOCAB, anchors, keep)
    rep, hf = load_with_transformers(out, batch, tmp_path)
    assert rep["missing"] == [] and rep["unexpected"] == [] and rep["differ"] == [], rep
    assert {"d2t", "t2d", "lm_head.weight"} <= set(rep["params"])
    assert hf["drafts"].shape == (b, N, B - 1)
    assert set(hf["drafts"].view(-1).tolist()) <= set(ids.tolist())


def test_eval_maps_draft_ids_to_target_ids_and_stays_lossless(dflash_bin, eval_target, tmp_path):  # noqa: F811
    model, d = eval_target
    data = _prompts(tmp_path / "p.jsonl", 3, 300)
    max_new, B = 24, 4
    # The target's own output first (a random proposer: tau ~ 1, lossless): its most frequent token t*.
    _, toks, _ = _eval(dflash_bin, d, data, tmp_path, "--proposer", "random", "--block-size", str(B),
                       "--max-new", str(max_new))
    c = Counter(t for r in toks for t in r["baseline"][1:])
    star, _ = c.most_common(1)[0]
    never = next(t for t in range(3, 300) if t not in c and t != 299)
    H = model.config.hidden_size
    for tok, name in ((star, "star"), (never, "never")):
        # K = 1: every proposal is draft id 0, which stands for target id `tok` (d2t = [tok]).
        drafter = _random_drafter(tmp_path / name, model.config, B=B)
        cfg = json.loads((drafter / "config.json").read_text())
        cfg["draft_vocab_size"] = 1
        (drafter / "config.json").write_text(json.dumps(cfg))
        w = load_file(str(drafter / "model.safetensors"))
        t2d = torch.zeros(300, dtype=torch.bool)
        t2d[tok] = True
        w.update({"lm_head.weight": torch.randn(1, H).to(torch.bfloat16), "d2t": torch.tensor([tok]), "t2d": t2d})
        save_file(w, str(drafter / "model.safetensors"))
        res, got, _ = _eval(dflash_bin, d, data, tmp_path, "--drafter", str(drafter), "--max-new", str(max_new))
        assert res["datasets"][0]["lossless"] is True
        for rec in got:
            # Exact acceptance of always proposing `tok`: each cycle accepts the run of `tok` ahead (< B).
            toks_, pos, lengths = rec["baseline"], 1, []
            while pos < len(toks_):
                a = 0
                while a < B - 1 and pos + a < len(toks_) and toks_[pos + a] == tok:
                    a += 1
                n = min(a + 1, len(toks_) - pos)
                lengths.append(n)
                pos += n
            assert rec["tokens"] == rec["baseline"]
            assert rec["accept_lengths"] == lengths, (name, rec["accept_lengths"], lengths)
        if name == "never":
            assert res["datasets"][0]["tau"] == 1.0
        else:
            assert res["datasets"][0]["tau"] > 1.0
    # A d2t outside the vocabulary is a clear error naming the file.
    w["d2t"] = torch.tensor([300])
    save_file(w, str(tmp_path / "never" / "model.safetensors"))
    r = subprocess.run([dflash_bin, "eval", "--target", str(d), "--data", str(data), "--drafter",
                        str(tmp_path / "never")], capture_output=True, text=True, env=ENV)
    assert r.returncode != 0 and "d2t" in r.stderr and "model.safetensors" in r.stderr, r.stderr


def test_train_export_eval_with_draft_vocab(dflash_bin, eval_target, tmp_path):  # noqa: F811
    """Online training on the eval target's own greedy answers, --draft-vocab 32, export, eval: lossless."""
    model, d = eval_target
    g = torch.Generator().manual_seed(5)
    lines = []
    for i in range(6):
        prompt = torch.randint(3, 298, (5 + i,), generator=g).tolist()
        ans = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0, len(prompt):].tolist()
        lines.append(json.dumps({"input_ids": prompt + ans, "loss_mask": [0] * len(prompt) + [1] * len(ans)}))
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    r = train(dflash_bin, base_args(d, data, run, steps=4, draft_vocab=32, mask_token_id=299, num_anchors=4))
    assert "draft vocabulary: 32 of 300" in r.stderr
    export(dflash_bin, run, run / "export")
    res, toks, _ = _eval(dflash_bin, d, _prompts(tmp_path / "p.jsonl", 2, 300), tmp_path, "--drafter", str(run),
                         "--max-new", "16")
    assert res["datasets"][0]["lossless"] is True and res["datasets"][0]["tau"] >= 1.0
