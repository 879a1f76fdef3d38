"""Hostile family settings and shapes through the command line (issue 49, classes 2, 3 and 6):
- a setting a family does not implement (a draft vocabulary with DSpark or DFlash2, an `architectures` list naming
  two families) is refused in one line by the first command that reads it, before anything is written;
- every family setting has a finite range (docs/ERRORS.md "Limits of numeric settings"), and a step that diverges
  names the loss settings that can cause it and leaves no run folder behind when no checkpoint was written;
- `bench step`, `plan` and `train` refuse nonsense shapes and shapes the device cannot hold before allocating, naming
  the planned peak and the memory available (DFLASH_TEST_AVAILABLE_MEMORY stands in for the machine's).
"""
import json
import os
import shutil
import subprocess

import pytest
import torch

from cli_errors import one_line_error
from test_drafter_family_cli import DFLASH2_DRAFT_VOCAB, DSPARK, DSPARK_DRAFT_VOCAB
from test_train import (HIDDEN, TARGET_LAYER_IDS, base_args, make_token_samples, offline_dir,  # noqa: F401
                        target_dir, train, write_dflash_shard)


def run(dflash_bin, *args, env=None, cwd=None, timeout=120):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})))


def write(path, obj):
    path.write_text(json.dumps(obj))
    return path


def dflash_config(**extra):
    c = dict(DSPARK, architectures=["DFlashDraftModel"], dflash_config={"mask_token_id": 31})
    for k in ("markov_rank", "markov_head_type", "mask_token_id"):
        c.pop(k)
    c.update(extra)
    return c


# ---- class 2: what a family does not implement is refused where it is first read ----

@pytest.mark.parametrize("family", ["dspark", "dflash2"])
def test_a_family_config_with_a_draft_vocabulary_is_refused_by_every_command(dflash_bin, tmp_path, family):
    cfg = dict(DSPARK, draft_vocab_size=8) if family == "dspark" else dflash_config(
        architectures=["DFlash2DraftModel"], draft_vocab_size=8,
        dflash_config={"mask_token_id": 31, "conv_kernel_size": 2, "conv_group_size": 4, "selector_rank": 6,
                       "selector_top_k": 5})
    arch, why = ("Qwen3DSparkModel", DSPARK_DRAFT_VOCAB) if family == "dspark" else ("DFlash2DraftModel",
                                                                                  DFLASH2_DRAFT_VOCAB)
    path = write(tmp_path / "d.json", cfg)
    want = (f"d.json: field 'draft_vocab_size': expected absent with architectures [\"{arch}\"] ({why}), got 8")
    # plan used to plan it, train to train the full vocabulary while the saved config kept draft_vocab_size
    one_line_error(run(dflash_bin, "plan", "--config", path), want)
    one_line_error(run(dflash_bin, "bench", "step", "--drafter-config", path), want)
    r = run(dflash_bin, "train", "--target", tmp_path / "t", "--data", tmp_path / "d.jsonl", "--out", tmp_path / "run",
            "--drafter-config", path)
    one_line_error(r, want)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("archs", [["DFlashDraftModel", "Qwen3DSparkModel"], ["Qwen3DSparkModel", "DFlashDraftModel"],
                                   ["DFlash2DraftModel", "LlamaForCausalLM"], []])
def test_architectures_must_name_one_family(dflash_bin, tmp_path, archs):
    """A list of two used to be read as its first entry."""
    path = write(tmp_path / "d.json", dict(DSPARK, architectures=archs))
    one_line_error(run(dflash_bin, "plan", "--config", path), "d.json: field 'architectures': expected "
                   "[\"DFlashDraftModel\"], [\"Qwen3DSparkModel\"] or [\"DFlash2DraftModel\"], got " +
                   json.dumps(archs, separators=(",", ":")))


@pytest.mark.parametrize("extra,field,got", [({"is_causal": True}, "is_causal", "true"),
                                             ({"is_causal": "no"}, "is_causal", '"no"'),
                                             ({"dflash_config": {"mask_token_id": 31, "causal": True}},
                                              "dflash_config.causal", "true")])
def test_causal_drafter_layers_are_refused(dflash_bin, tmp_path, extra, field, got):
    """Engines read is_causal true as every layer causal; no family here implements it, so it is not read as false."""
    path = write(tmp_path / "d.json", dflash_config(**extra))
    one_line_error(run(dflash_bin, "plan", "--config", path), f"d.json: field '{field}': expected false or absent "
                   f"(causal drafter layers are not implemented: the block attends both ways), got {got}")


def test_a_dflash_config_draft_vocabulary_is_the_runs(dflash_bin, target_dir, offline_dir, tmp_path):
    """A DFlash drafter config's draft_vocab_size is what the run trains (draft_vocab unset takes it); a different
    draft_vocab is refused naming both. It used to train the full vocabulary and save draft_vocab_size anyway."""
    normal = tmp_path / "normal"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], normal, steps=1))
    cfg = json.loads((normal / "drafter_config.json").read_text())
    path = write(tmp_path / "k.json", dict(cfg, draft_vocab_size=24))
    run_dir = tmp_path / "run"
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], run_dir, steps=1) + ["--drafter-config", str(path)])
    assert "draft vocabulary: 24 of 256" in r.stderr, r.stderr
    assert json.loads((run_dir / "drafter_config.json").read_text())["draft_vocab_size"] == 24
    assert (run_dir / "draft_vocab.safetensors").exists()
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "other", steps=1, draft_vocab=12) +
              ["--drafter-config", str(path)], check=False)
    one_line_error(r, "train: 'draft_vocab' is 12 (flag --draft-vocab) but 24 (drafter config", "k.json")
    assert not (tmp_path / "other").exists()


# ---- class 3: bounded family settings; a divergence names the settings that can cause it ----

@pytest.mark.parametrize("key,value,family,want", [
    ("selector_loss_weight", "1e300", "dflash2", "'selector_loss_weight' must be a finite number in [0, 1000], got 1e+300"),
    ("selector_loss_weight", "1001", "dflash2", "'selector_loss_weight' must be a finite number in [0, 1000], got 1001.0"),
    ("l1_loss_weight", "1e300", "dspark", "'l1_loss_weight' must be a finite number in [0, 1000], got 1e+300"),
    ("markov_rank", "65537", "dspark", "'markov_rank': expected an integer in [0, 65536]"),
    ("selector_rank", "65537", "dflash2", "'selector_rank': expected an integer in [1, 65536]"),
    ("conv_kernel_size", "65", "dflash2", "'conv_kernel_size': expected an integer in [1, 64]"),
    ("selector_top_k", "1025", "dflash2", "'selector_top_k': expected an integer in [1, 1024]"),
    ("gamma", "1e300", "dspark", "'gamma' must be a finite number in [0, 10000] (0: by block size), got 1e+300"),
])
def test_family_settings_have_finite_ranges(dflash_bin, tmp_path, key, value, family, want):
    cfg = write(tmp_path / "c.json", {key: float(value) if "." in value or "e" in value else int(value)})
    r = run(dflash_bin, "train", "--target", tmp_path / "t", "--data", tmp_path / "d.jsonl", "--out",
            tmp_path / "run", "--mask-token-id", 5, "--drafter-family", family, "--config", cfg)
    one_line_error(r, "train config: " + want)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("family,names", [
    ("dflash", ["kl_weight (now 0)", "gamma (now 0)"]),
    ("dflash2", ["kl_weight (now 0)", "selector_loss_weight (now 1000)"]),
])
def test_a_diverged_first_step_names_the_loss_settings_and_leaves_no_run(dflash_bin, target_dir, offline_dir, tmp_path,
                                                                          family, names):
    """An overflowing LM head makes step 1 non-finite (finite weights, 3e38, so nothing refuses them on load;
    features with NaN would be skipped as damaged samples): the rows of tokens 0-2, which no sample holds and which
    are not the mask token, so the drafter's inputs stay finite and those logits overflow; the message says it is not the learning rate and names
    the loss settings of the family (it used to blame only the target's RoPE settings), and the run folder, which
    holds no checkpoint, is taken away again."""
    from safetensors.torch import load_file, save_file
    target = tmp_path / "target"
    shutil.copytree(target_dir[0], target)
    weights = load_file(target / "model.safetensors")
    weights["model.embed_tokens.weight"][:3] = 3e38  # tied: rows of the frozen LM head
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    data = offline_dir[0]
    extra = ["--drafter-family", family] + (["--selector-loss-weight", "1000"] if family == "dflash2" else [])
    r = train(dflash_bin, base_args(target, data, tmp_path / "run", steps=2) + extra, check=False)
    # the run's opening lines (data, drafter, attention) come first; the error is the last line, and the only one
    assert r.returncode == 1 and "frame #" not in r.stderr, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("dflash: error: ")]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    line = errors[0]
    for part in ("training diverged at step 1", "before any update: not the learning rate", "check the loss settings (",
                 *names):
        assert part in line, (part, line)
    assert "rope_theta" in line
    assert not (tmp_path / "run").exists()


# ---- class 6: shapes refused before allocating ----

HUGE = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16, "num_target_layers": 64,
        "num_hidden_layers": 1, "hidden_size": 8192, "intermediate_size": 24576, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "vocab_size": 1 << 24, "dflash_config": {"mask_token_id": 0, "target_layer_ids": [1]}}


@pytest.mark.parametrize("family", ["dflash", "dspark", "dflash2"])
def test_bench_step_refuses_a_shape_the_machine_cannot_hold(dflash_bin, tmp_path, family):
    """Vocabulary 2^24 and hidden 8192 (DSpark: rank 65536, DFlash2: selector rank 65536) plan to terabytes: refused
    with the planned peak and the memory available before anything is allocated (it used to end in an allocator
    failure with a 26-frame stack trace). The available memory is the test's, not the machine's."""
    cfg = dict(HUGE)
    if family == "dspark":
        cfg.update(architectures=["Qwen3DSparkModel"], markov_rank=65536, markov_head_type="vanilla")
    if family == "dflash2":
        cfg.update(architectures=["DFlash2DraftModel"], dflash_config=dict(
            HUGE["dflash_config"], conv_kernel_size=2, conv_group_size=16, selector_rank=65536, selector_top_k=16))
    path = write(tmp_path / "huge.json", cfg)
    r = run(dflash_bin, "bench", "step", "--drafter-config", path, "--max-len", 4096, "--num-anchors", 512,
            env={"DFLASH_TEST_AVAILABLE_MEMORY": "64GB"})
    one_line_error(r, "bench step: planned peak ", " per worker (at ",
                   "exceeds 64.00 GB available on cpu (refused before allocating)")


def test_bench_step_and_train_compare_with_the_memory_available(dflash_bin, target_dir, offline_dir, tmp_path):
    """A shape that runs on any machine is refused when the (test's) available memory is smaller than its plan."""
    small = {"DFLASH_TEST_AVAILABLE_MEMORY": "1MB"}
    r = run(dflash_bin, "bench", "step", "--model", "cpu-small", "--max-len", 64, "--num-anchors", 4, env=small)
    one_line_error(r, "bench step: planned peak", "exceeds 1.0 MB available on cpu")
    tiny = {"DFLASH_TEST_AVAILABLE_MEMORY": "16KB"}  # the test's tiny drafter plans well under 1 MB
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", steps=1), env=tiny, check=False)
    one_line_error(r, "train: planned peak", "per worker (at ", "exceeds 16000 B available on cpu",
                   "(refused before allocating)")
    assert not (tmp_path / "run").exists()
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", steps=1),
              env={"DFLASH_TEST_AVAILABLE_MEMORY": "lots"}, check=False)
    one_line_error(r, "DFLASH_TEST_AVAILABLE_MEMORY must be a size like 4GB or 512MB", "got 'lots'")
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "fits", steps=1),
          env={"DFLASH_TEST_AVAILABLE_MEMORY": "1TB"})


@pytest.mark.parametrize("cmd", [["bench", "step", "--model", "cpu-small"], ["plan", "--preset", "qwen3-8b"],
                                 ["plan", "--node", "--preset", "qwen3-8b"]])
def test_more_anchors_than_positions_is_refused(dflash_bin, cmd):
    where = {"bench": "bench step", "plan": "plan --node" if "--node" in cmd else "plan"}[cmd[0]]
    one_line_error(run(dflash_bin, *cmd, "--max-len", 16, "--num-anchors", 64),
                   f"{where}: --num-anchors must be at most --max-len (one anchor per context position), got 64 anchors "
                   "for 16 positions")
