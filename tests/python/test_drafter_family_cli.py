"""drafter_family across the commands: one spelling (--drafter-family, or a drafter config's architectures), and each
command that cannot yet run a family refuses it in one line before loading anything big (issue 39, step 1)."""
import json
import subprocess

import pytest

DSPARK = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "block_size": 4, "num_target_layers": 8,
          "num_hidden_layers": 2, "mask_token_id": 31, "target_layer_ids": [1, 5], "hidden_size": 16,
          "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 32, "markov_rank": 8,
          "markov_head_type": "vanilla"}

DFLASH2_SETTINGS = {"mask_token_id": 31, "conv_kernel_size": 2, "conv_group_size": 4, "selector_rank": 6,
                    "selector_top_k": 5}


def run(dflash_bin, cwd, *args):
    return subprocess.run([dflash_bin, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "dspark.json").write_text(json.dumps(DSPARK))
    dflash = dict(DSPARK, architectures=["DFlashDraftModel"], dflash_config={"mask_token_id": 31})
    for k in ("markov_rank", "markov_head_type", "mask_token_id"):
        dflash.pop(k)
    (tmp_path / "dflash.json").write_text(json.dumps(dflash))
    (tmp_path / "dflash2.json").write_text(json.dumps(dict(dflash, architectures=["DFlash2DraftModel"],
                                                           dflash_config=DFLASH2_SETTINGS)))
    run_dir = tmp_path / "run"
    (run_dir / "export").mkdir(parents=True)
    (run_dir / "export" / "config.json").write_text(json.dumps(DSPARK))
    (run_dir / "export" / "model.safetensors").write_text("")  # never read: the family is refused first
    (run_dir / "drafter_config.json").write_text(json.dumps(DSPARK))
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "cfg.json").write_text(json.dumps({"target": "t", "data": "d", "out": "o",
                                                   "drafter_config": "dspark.json"}))
    return tmp_path


@pytest.mark.parametrize("args", [
    ["--target", "x", "--data", "y", "--out", "z", "--drafter-config", "dspark.json"],
    ["--target", "x", "--data", "y", "--out", "z", "--drafter-family", "dspark"],
])
def test_train_runs_dspark(dflash_bin, files, args):
    """train takes DSpark (issue 39 step 4): it goes past the family check and stops at the missing target."""
    out = run(dflash_bin, files, "train", *args)
    assert out.returncode == 1, out.stderr
    assert "drafter_family" not in out.stderr, out.stderr


def test_eval_runs_dspark(dflash_bin, files):
    """eval takes DSpark (issue 39 step 6, test_eval_dspark.py): it goes past the family check and stops at the
    missing target."""
    out = run(dflash_bin, files, "eval", "--target", "x", "--drafter", "run", "--data", "a=p.jsonl")
    assert out.returncode == 1, out.stderr
    assert "drafter_family" not in out.stderr, out.stderr


@pytest.mark.parametrize("family", ["dspark", "dflash2"])
def test_plan_node_takes_the_families(dflash_bin, files, family):
    """plan --node plans both families (test_plan_node.py checks the numbers): the family comes from the flag."""
    out = run(dflash_bin, files, "plan", "--preset", "cpu-small", "--node", "--drafter-family", family)
    assert out.returncode == 1, out.stderr  # cpu-small drafts for no real target: refused after the family
    assert "drafter_family" not in out.stderr and "drafts for no real target" in out.stderr, out.stderr
    out = run(dflash_bin, files, "plan", "--preset", "qwen3-8b", "--node", "--drafter-family", family, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["drafter_family"] == family


def test_a_flag_that_disagrees_with_the_config_names_both(dflash_bin, files):
    out = run(dflash_bin, files, "plan", "--config", "dflash.json", "--drafter-family", "dspark")
    assert out.returncode == 1
    assert "plan: --drafter-family dspark disagrees with dflash.json (dflash, by its architectures)" in out.stderr
    out = run(dflash_bin, files, "train", "--target", "x", "--data", "y", "--out", "z",
              "--drafter-config", "dflash.json", "--drafter-family", "dspark")
    assert out.returncode == 1
    assert ("train: 'drafter_family' is dspark (flag --drafter-family) but dflash (drafter config dflash.json)"
            in out.stderr)
    out = run(dflash_bin, files, "plan", "--preset", "cpu-small", "--drafter-family", "DSpark")
    assert "plan: --drafter-family must be dflash, dspark or dflash2, got 'DSpark'" in out.stderr


def test_doctor_config_reads_the_family_as_train_does(dflash_bin, files):
    """doctor --config reads a config through train's own validation: train runs dspark, so doctor passes the family,
    and a DSpark setting train refuses fails doctor's config row with train's message."""
    out = run(dflash_bin, files, "doctor", "--config", "cfg.json", "--quick")
    assert "drafter_family" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    (files / "bad.json").write_text(json.dumps({"target": "t", "data": "d", "out": "o", "drafter_config": "dspark.json",
                                                "markov_head_type": "lstm"}))
    doctor = run(dflash_bin, files, "doctor", "--config", "bad.json", "--quick")
    train = run(dflash_bin, files, "train", "--config", "bad.json")
    assert train.returncode == 1 and doctor.returncode != 0
    message = train.stderr.strip().splitlines()[-1].removeprefix("dflash: error: ")
    assert "markov_head_type" in message and message in doctor.stdout + doctor.stderr


def test_plan_counts_the_dspark_heads_and_objective(dflash_bin, files):
    """plan takes DSpark (--config's architectures, or --drafter-family on another source): its parameters are the
    backbone's plus the heads' (2 V r + d + r + 1 here) and its peak is above the same drafter as DFlash."""
    def plan(*args):
        out = run(dflash_bin, files, "plan", *args, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    dspark, dflash = plan("--config", "dspark.json"), plan("--config", "dflash.json")
    assert dspark["drafter_config"]["architectures"] == ["Qwen3DSparkModel"]
    assert dspark["settings"]["params"] - dflash["settings"]["params"] == 2 * 32 * 8 + 16 + 8 + 1
    assert dspark["peak_bytes"] > dflash["peak_bytes"]
    flagged = plan("--preset", "cpu-small", "--drafter-family", "dspark")
    assert flagged["drafter_config"]["markov_rank"] == 32  # train's rank for H 256 (docs/TRAINING.md head rank rule)
    assert flagged["settings"]["params"] > plan("--preset", "cpu-small")["settings"]["params"]
    out = run(dflash_bin, files, "plan", "--config", "dspark.json", "--draft-vocab", "8")
    assert out.returncode == 1 and "--draft-vocab must be 0 with drafter_family dspark" in out.stderr


def test_plan_counts_the_dflash2_convs_and_selector(dflash_bin, files):
    """plan takes DFlash2 (--config's architectures, or --drafter-family on a preset): its parameters are the
    backbone's plus the convs' and the selector's, and its breakdown names the DFlash2 terms."""
    def plan(*args):
        out = run(dflash_bin, files, "plan", *args, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    d2, d1 = plan("--config", "dflash2.json"), plan("--config", "dflash.json")
    assert d2["drafter_config"]["architectures"] == ["DFlash2DraftModel"]
    # per layer 2 convs x (base_kernel 2 K d + kernel_projection 2 K d/G x d), selector r d + 2 V r
    conv = 2 * (2 * 2 * 16 + (2 * 2 * 16 // 4) * 16)
    assert d2["settings"]["params"] - d1["settings"]["params"] == 2 * conv + 6 * 16 + 2 * 32 * 6
    names = {t["name"]: t["bytes"] for t in d2["breakdown"]}
    assert names["dflash2 selector (saved for backward)"] > 0 and names["dflash2 convs (saved per layer)"] > 0
    assert d2["peak_bytes"] > d1["peak_bytes"]
    flagged = plan("--preset", "cpu-small", "--drafter-family", "dflash2")
    assert flagged["drafter_config"]["architectures"] == ["DFlash2DraftModel"]
    assert flagged["settings"]["params"] > plan("--preset", "cpu-small")["settings"]["params"]
    out = run(dflash_bin, files, "plan", "--config", "dflash2.json", "--draft-vocab", "8")
    assert out.returncode == 1 and "--draft-vocab must be 0 with drafter_family dflash2" in out.stderr


def bench_step(dflash_bin, files, *args):
    out = run(dflash_bin, files, "bench", "step", "--max-len", "32", "--num-anchors", "3", "--iters", "1",
              "--loss-chunk-rows", "8", "--dtype", "fp32", "--policies", "none,layer", "--threads", "1",
              "--json", "b.json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads((files / "b.json").read_text()), out.stdout


@pytest.mark.parametrize("family,source", [
    ("dspark", ["--drafter-config", "dspark.json"]),
    ("dflash2", ["--drafter-config", "dflash2.json"]),
    ("dflash2", ["--drafter-family", "dflash2", "--model", "cpu-small", "--max-len", "16", "--num-anchors", "1"]),
])
def test_bench_step_runs_the_family_step_against_the_planner(dflash_bin, files, family, source):
    result, stdout = bench_step(dflash_bin, files, *source)
    assert result["drafter_family"] == family and f"({family})" in stdout
    assert [r["policy"] for r in result["runs"]] == ["none", "layer"]
    for r in result["runs"]:
        assert r["loss"] > 0 and r["planned_peak_bytes"] > 0 and r["measured_peak_bytes"] > 0
        assert r["plan_within_10_percent"] == (abs(r["ratio"] - 1) <= 0.10)
        assert ("the planner is off by" in stdout) or r["plan_within_10_percent"]
    assert abs(result["runs"][0]["loss"] - result["runs"][1]["loss"]) <= 1e-5 * result["runs"][0]["loss"]
    assert "reference" not in result  # the plain-PyTorch step is DFlash's
    assert ("dspark_objective" in result) == (family == "dspark")
    assert result["generic_ce"]["loss"] > 0  # the generic loss passes, DSpark's objective included
    # DFlash's step on the same shapes: the measured ratio next to the planner's FLOP floor (each family adds FLOPs)
    v = result["vs_dflash"]
    assert v["policy"] == "none" and v["dflash_mean_seconds"] > 0 and v["flop_floor_ratio"] > 1
    assert v["measured_ratio"] == pytest.approx(result["runs"][0]["mean_seconds"] / v["dflash_mean_seconds"])
    assert f"({family} none: " in stdout and "FLOP floor" in stdout
    off, _ = bench_step(dflash_bin, files, *source, "--vs-dflash", "0")
    assert "vs_dflash" not in off


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("fp64", 1e-12)])
def test_bench_step_dspark_naive_and_chunked_objectives_agree(dflash_bin, files, dtype, tol):
    result, stdout = bench_step(dflash_bin, files, "--drafter-config", "dspark.json", "--dtype", dtype)
    d = result["dspark_objective"]
    assert d["rows"] == 3 * 4 and d["vocab"] == 32 and d["chunk_rows"] == 8
    assert d["chunked"]["loss"] > 0 and d["naive"]["mean_seconds"] > 0 and d["naive"]["measured_peak_bytes"] >= 0
    assert d["loss_abs_diff"] <= tol * d["chunked"]["loss"] and d["grad_max_abs_diff"] <= tol
    # the generic ATen passes of the same chunks (fp32: the fused CPU kernel's comparison; fp64: the same code)
    assert d["generic"]["loss"] > 0 and d["generic"]["mean_seconds"] > 0
    assert d["generic_loss_abs_diff"] <= tol * d["chunked"]["loss"] and d["generic_grad_max_abs_diff"] <= tol
    assert "generic ATen passes" in stdout
    assert "|loss difference|" in stdout
    off, _ = bench_step(dflash_bin, files, "--drafter-config", "dspark.json", "--objective-naive", "0")
    assert "dspark_objective" not in off


def test_bench_step_the_objective_benchmarks_old_flag_names_the_new_one(dflash_bin, files):
    """--dspark-naive became the family hook's generic --objective-naive: the old spelling stops with the new one."""
    out = run(dflash_bin, files, "bench", "step", "--drafter-config", "dspark.json", "--dspark-naive", "0")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["dflash: error: bench step: --dspark-naive is now --objective-naive"]


def test_bench_step_refuses_a_draft_vocabulary_for_the_families(dflash_bin, files):
    out = run(dflash_bin, files, "bench", "step", "--drafter-config", "dspark.json", "--draft-vocab", "8")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "dflash: error: bench step: --draft-vocab must be 0 with drafter_family dspark (" + DSPARK_DRAFT_VOCAB + ")"]
    out = run(dflash_bin, files, "bench", "step", "--drafter-config", "dflash2.json", "--draft-vocab", "8")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "dflash: error: bench step: --draft-vocab must be 0 with drafter_family dflash2 (" + DFLASH2_DRAFT_VOCAB + ")"]


# Why the families have no draft vocabulary here (docs/DSPARK.md "Draft vocabulary"): one wording in every command.
DSPARK_DRAFT_VOCAB = ("not supported yet: vLLM and speculators serve it with lm_head and markov_w2 over the K draft "
                      "tokens and markov_w1 over the target's vocabulary, which train, eval and export do not implement")
DFLASH2_DRAFT_VOCAB = ("the selector spans the full vocabulary: its codebooks and top-K index the target's vocabulary, "
                       "and no source defines a draft vocabulary for it")


@pytest.mark.parametrize("family,why", [("dspark", DSPARK_DRAFT_VOCAB), ("dflash2", DFLASH2_DRAFT_VOCAB)])
def test_every_command_refuses_a_family_draft_vocabulary_saying_why(dflash_bin, files, family, why):
    out = run(dflash_bin, files, "plan", "--config", f"{family}.json", "--draft-vocab", "8")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"dflash: error: plan: --draft-vocab must be 0 with drafter_family {family} ({why})"]
    out = run(dflash_bin, files, "train", "--target", "x", "--data", "y", "--out", "z",
              "--drafter-family", family, "--draft-vocab", "8")
    assert out.returncode == 1
    assert f"'draft_vocab' must be 0 with drafter_family {family} ({why})" in out.stderr, out.stderr


def test_plan_block_size_meets_a_drafter_config_under_the_rule(dflash_bin, files):
    """plan builds the drafter spec train builds (drafter/sourced_spec.h): --block-size that differs from a drafter
    config's is an error naming both sources (it used to replace the file's without a word); the same value is
    fine; a preset's drafter takes the flag over its own (the preset is its default)."""
    out = run(dflash_bin, files, "plan", "--config", "dflash.json", "--block-size", "8")
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [
        "dflash: error: plan: 'block_size' is 8 (flag --block-size) but 4 (drafter config dflash.json); give it once, "
        "or the same in both"], out.stderr
    same = run(dflash_bin, files, "plan", "--config", "dflash.json", "--block-size", "4", "--json")
    assert same.returncode == 0, same.stderr
    preset = run(dflash_bin, files, "plan", "--preset", "cpu-small", "--block-size", "8", "--json")
    assert preset.returncode == 0, preset.stderr
    assert json.loads(preset.stdout)["drafter_config"]["block_size"] == 8
