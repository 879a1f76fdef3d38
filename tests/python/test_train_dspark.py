"""`dflash train --drafter-family dspark` end to end on the tiny random Llama target of test_train.py: online
(the teacher from the target pass already run) equals offline (shards with the last hidden state) step by step,
DeepSpec's metrics in metrics.jsonl and the progress line, the heads in the checkpoint under DeepSpec's names, the
loss falling, the Markov variants, and offline shards without the last hidden state refused in one line."""
import json
import math
import pathlib

import pytest
import torch
from safetensors.torch import load_file

from hidden_format import write_shard as write_dflash_shard
from test_train import (HIDDEN, TARGET_LAYER_IDS, base_args, final_weights, make_token_samples, metrics, target_dir,
                        train)

assert target_dir  # the module fixture, shared with test_train.py

DSPARK = {"drafter_family": "dspark", "markov_rank": 8}


def dspark_args(target, data, out, **kw):
    return base_args(target, data, out, **{**DSPARK, **kw})


@pytest.fixture(scope="module")
def shards(target_dir, tmp_path_factory):
    """The same samples as tokens (online) and as shards with the target's features and last hidden state."""
    _, model = target_dir
    d = tmp_path_factory.mktemp("dspark_data")
    samples = make_token_samples(n=4, seed=5)
    (d / "tokens.jsonl").write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                                        "loss_mask": s["loss_mask"].long().tolist()}) + "\n"
                                            for s in samples))
    with torch.no_grad():
        for s in samples:
            hs = model(s["input_ids"].unsqueeze(0), output_hidden_states=True).hidden_states
            s["hidden_states"] = torch.cat([hs[i + 1][0] for i in TARGET_LAYER_IDS], -1)
            s["last_hidden"] = hs[-1][0]  # final-normed: DSpark's teacher
    write_dflash_shard(d / "with_last.safetensors", samples, TARGET_LAYER_IDS, HIDDEN)
    for s in samples:
        del s["last_hidden"]
    write_dflash_shard(d / "no_last.safetensors", samples, TARGET_LAYER_IDS, HIDDEN)
    return d


def test_online_equals_offline_with_deepspec_metrics(dflash_bin, target_dir, shards, tmp_path):
    tdir, _ = target_dir
    a, b = tmp_path / "online", tmp_path / "offline"
    ra = train(dflash_bin, dspark_args(tdir, shards / "tokens.jsonl", a, steps=3))
    train(dflash_bin, dspark_args(tdir, shards / "with_last.safetensors", b, steps=3))
    ma, mb = metrics(a), metrics(b)
    assert len(ma) == len(mb) == 3
    for x, y in zip(ma, mb):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)
        assert x["tau_probabilistic"] == pytest.approx(y["tau_probabilistic"], rel=1e-4)
    m = ma[-1]
    for k in ["ce_loss", "l1_loss", "confidence_loss", "tau_probabilistic", "confidence_abs_error",
              "confidence_bias", "confidence_cumprod_bias"] + [f"accept_rate@{j}" for j in range(4)]:
        assert k in m and math.isfinite(m[k]), k
    # the combined loss is DeepSpec's weighted sum of its terms (each over the same denominator)
    assert m["loss"] == pytest.approx(0.1 * m["ce_loss"] + 0.9 * m["l1_loss"] + m["confidence_loss"], rel=1e-4)
    assert 1.0 <= m["tau_probabilistic"] <= 5.0
    assert all(0.0 <= m[f"accept_rate@{j}"] <= 1.0 for j in range(4))
    assert 0.0 <= m["l1_loss"] <= 2.0
    assert " tau " in ra.stderr and " l1 " in ra.stderr
    saved = json.loads((a / "train_config.json").read_text())
    assert saved["drafter_family"] == "dspark" and saved["markov_rank"] == 8


def test_heads_are_checkpointed_under_deepspec_names_and_the_loss_falls(dflash_bin, target_dir, shards, tmp_path):
    tdir, _ = target_dir
    run = tmp_path / "run"
    train(dflash_bin, dspark_args(tdir, shards / "with_last.safetensors", run, steps=12, lr=1e-2))
    m = metrics(run)
    assert m[-1]["loss"] < m[0]["loss"]
    w = final_weights(run, 12)
    assert w["markov_head.markov_w1.weight"].shape == (256, 8)
    assert w["markov_head.markov_w2.weight"].shape == (256, 8)
    assert w["confidence_head.proj.weight"].shape == (1, HIDDEN + 8)
    assert w["confidence_head.proj.bias"].shape == (1,)
    assert not any(k.startswith("markov_head.gate_proj") or k.startswith("markov_head.joint_proj") for k in w)
    assert w["markov_head.markov_w2.weight"].abs().sum() > 0


@pytest.mark.parametrize("head_type,extra", [("gated", {}), ("rnn", {"enable_confidence_head": "false",
                                                                     "confidence_loss_weight": 0})])
def test_markov_variants_train(dflash_bin, target_dir, shards, tmp_path, head_type, extra):
    tdir, _ = target_dir
    run = tmp_path / head_type
    train(dflash_bin, dspark_args(tdir, shards / "with_last.safetensors", run, steps=2, markov_head_type=head_type,
                                  **extra))
    w = final_weights(run, 2)
    prefix = "markov_head.gate_proj" if head_type == "gated" else "markov_head.joint_proj"
    assert f"{prefix}.weight" in w and f"{prefix}.bias" in w
    assert ("confidence_head.proj.weight" in w) == (head_type == "gated")
    m = metrics(run)[-1]
    assert ("confidence_abs_error" in m) == (head_type == "gated")


def test_offline_shards_without_last_hidden_are_refused(dflash_bin, target_dir, shards, tmp_path):
    tdir, _ = target_dir
    r = train(dflash_bin, dspark_args(tdir, shards / "no_last.safetensors", tmp_path / "run", steps=2), check=False)
    assert r.returncode != 0
    assert "drafter_family dspark needs the target's last hidden states" in r.stderr
    assert "--last-hidden" in r.stderr


def test_resume_keeps_the_family_and_is_exact(dflash_bin, target_dir, shards, tmp_path):
    """--resume keeps drafter_family dspark and its heads (from the run's saved settings) and gives the straight run's
    losses, DSpark metrics and weights, the heads and their AdamW moments included."""
    tdir, _ = target_dir
    data = shards / "with_last.safetensors"
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(dflash_bin, dspark_args(tdir, data, straight, markov_head_type="gated"))
    train(dflash_bin, dspark_args(tdir, data, split, markov_head_type="gated", stop_after=2))
    train(dflash_bin, ["--out", str(split), "--resume"])
    a, b = metrics(straight), metrics(split)
    assert [x["step"] for x in b] == [1, 2, 3, 4]
    for k in ("loss", "tau_probabilistic", "l1_loss", "confidence_loss"):
        assert [x[k] for x in a] == [x[k] for x in b], k
    ta = load_file(str(straight / "checkpoints" / "step-4.safetensors"))
    tb = load_file(str(split / "checkpoints" / "step-4.safetensors"))
    assert any("markov_head.gate_proj.weight" in k for k in ta)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
