"""`dflash train` with drafter_family dflash2 on the tiny random Llama target of test_train.py (hidden 32, vocab
256): a few steps offline and online, the selector's metrics in metrics.jsonl and the progress line, z-lab's tensor
names in the checkpoint, and an exact resume (docs/DFLASH2.md)."""
import json
import math

import pytest
import torch

from test_train import (TARGET_LAYER_IDS, base_args, final_weights, make_token_samples, metrics,  # noqa: F401
                        offline_dir, target_dir, train)

DFLASH2 = dict(drafter_family="dflash2", conv_group_size=8, selector_rank=4, selector_top_k=8,
               selector_candidates="inject")
KEYS = ["selector_loss", "unary_recall_at_k", "teacher_forced_selector_acc", "self_conditioned_path_accepted_length",
        "unary_top_k_oracle_accepted_length"]


def test_dflash2_trains_offline_with_its_metrics(dflash_bin, target_dir, offline_dir, tmp_path):
    run = tmp_path / "run"
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=8, lr=1e-2, **DFLASH2))
    m = metrics(run)
    assert [x["step"] for x in m] == list(range(1, 9))
    for x in m:
        for k in KEYS:
            assert math.isfinite(x[k]), (k, x)
        assert 0 <= x["unary_recall_at_k"] <= 1 and 0 <= x["teacher_forced_selector_acc"] <= x["unary_recall_at_k"]
        # block 4: 1 + at most 3 accepted slots; the walk never beats the top-K oracle
        assert 1 <= x["self_conditioned_path_accepted_length"] <= x["unary_top_k_oracle_accepted_length"] <= 4
    assert m[-1]["loss"] < m[0]["loss"]
    assert "tau-path" in r.stderr and "recall@K" in r.stderr
    cfg = json.loads((run / "train_config.json").read_text())
    assert cfg["drafter_family"] == "dflash2" and cfg["selector_candidates"] == "inject" and cfg["selector_rank"] == 4
    w = final_weights(run, 8)
    assert w["candidate_selector.successor_codebook"].shape == (256, 4)
    assert w["layers.0.attention_conv.kernel_projection.weight"].shape == (2 * 2 * 32 // 8, 32)
    assert w["layers.0.mlp_conv.base_kernel"].shape == (2, 2, 32)
    assert w["candidate_selector.successor_codebook"].abs().sum() > 0  # it started at 0 and learnt


def test_dflash2_trains_online_and_resumes_exactly(dflash_bin, target_dir, tmp_path):
    samples = make_token_samples(n=4, seed=5)
    jl = tmp_path / "tokens.jsonl"
    jl.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                      "loss_mask": s["loss_mask"].long().tolist()}) + "\n" for s in samples))
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(dflash_bin, base_args(target_dir[0], jl, straight, **DFLASH2))
    train(dflash_bin, base_args(target_dir[0], jl, split, stop_after=2, **DFLASH2))
    train(dflash_bin, ["--out", str(split), "--resume"])
    a, b = metrics(straight), metrics(split)
    assert [x["loss"] for x in a] == [x["loss"] for x in b]
    assert [x["self_conditioned_path_accepted_length"] for x in a] == \
        [x["self_conditioned_path_accepted_length"] for x in b]
    wa, wb = final_weights(straight, 4), final_weights(split, 4)
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_a_dflash_drafter_is_the_starting_point(dflash_bin, target_dir, offline_dir, tmp_path):
    """init_from a DFlash drafter's model.safetensors: the DFlash2 run's first unary loss is the DFlash run's from
    the same file (identity convs), and its selector starts as a no-op (successor codebook 0)."""
    from safetensors.torch import save_file
    base = tmp_path / "base"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], base, steps=2))
    start = tmp_path / "dflash.safetensors"
    save_file({k: v.contiguous() for k, v in final_weights(base, 2).items()}, str(start))
    a, b = tmp_path / "a", tmp_path / "b"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], a, steps=1, init_from=start))
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], b, steps=1, init_from=start, selector_loss_weight=0.0,
                                **DFLASH2))
    la, lb = metrics(a)[0], metrics(b)[0]
    assert la["loss"] == lb["loss"] and la["acc"] == lb["acc"]
    assert "selector_loss" in lb and "selector_loss" not in la
    # the DFlash2 drafter equals DFlash, so the walk proposes the unary greedy path: tau-path from the same top-K
    assert lb["self_conditioned_path_accepted_length"] <= lb["unary_top_k_oracle_accepted_length"]
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "c", init_from=start,
                                    init_from_target_layer=0), check=False)
    assert r.returncode != 0
    assert "'init_from' must be empty with init_from_target_layer set (one starting point)" in r.stderr


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_strict_selector_with_no_gold_in_its_top_k_trains(dflash_bin, target_dir, offline_dir, tmp_path, dtype):
    """The default strict candidates from scratch: at step 1 no row's gold is in its top-K (recall@K = 0, here
    with top-K 1), so the selector term is 0 with gradient 0 and the step is DFlash's. It used to diverge at step 1
    with a NaN gradient norm (the trainer's loss scale over a FLT_MIN divisor overflowed, times the rows' weight 0)."""
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=3, dtype=dtype, drafter_family="dflash2",
                                conv_group_size=8, selector_rank=4, selector_top_k=1))
    m = metrics(run)
    assert json.loads((run / "train_config.json").read_text())["selector_candidates"] == "strict"
    assert m[0]["unary_recall_at_k"] == 0, "the case needs no gold in the top-K at step 1"
    assert m[0]["selector_loss"] == 0
    for x in m:
        assert math.isfinite(x["loss"]) and math.isfinite(x["grad_norm"]), x
    # nothing covered: the first step's loss is DFlash's unary loss of the same drafter (selector weight 0)
    ref = tmp_path / "ref"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], ref, steps=1, dtype=dtype, drafter_family="dflash2",
                                conv_group_size=8, selector_rank=4, selector_top_k=1, selector_loss_weight=0.0))
    assert metrics(ref)[0]["loss"] == m[0]["loss"] and metrics(ref)[0]["grad_norm"] == m[0]["grad_norm"]
