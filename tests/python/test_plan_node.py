"""`dflash plan --node` through the command line: the seed's node (8 x RTX PRO 6000, Qwen3.6-27B, seq 8000, 1024
anchors) gets a table and a best split that uses target replicas, JSON agrees with the text, a GPU too small for
anything exits 3 with the reason, and bad flags are one-line errors."""
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# the preset table (configs/targets/), in the order the error message lists it
PRESETS = sorted(p.stem for p in (ROOT / "configs" / "targets").glob("*.json"))


def _plan(dflash_bin, *argv):
    return subprocess.run([dflash_bin, "plan", "--node", *map(str, argv)], capture_output=True, text=True, timeout=60)


def test_seed_node_table_and_json(dflash_bin):
    r = _plan(dflash_bin, "--preset", "qwen3.6-27b", "--gpu", "rtx-pro-6000", "--gpus", 8)
    assert r.returncode == 0, r.stderr
    assert "node: 8 x rtx-pro-6000 (96 GB, 503.8 dense bf16 TFLOP/s)" in r.stdout, r.stdout
    assert "replicas x stages" in r.stdout and "best: " in r.stdout
    j = json.loads(_plan(dflash_bin, "--preset", "qwen3.6-27b", "--json").stdout)
    best = j["splits"][0]
    assert best["replicas"] * best["stages"] + best["workers"] == 8
    assert best["samples_per_s"] == min(best["target_samples_per_s"], best["drafter_samples_per_s"])
    assert f"best: {best['replicas']} replica(s) x {best['stages']} stage(s) + {best['workers']}" in r.stdout
    # the same target from its config file plans the same target forward
    f = _plan(dflash_bin, "--target-config", ROOT / "configs/targets/qwen3.6-27b.json", "--json")
    assert f.returncode == 0, f.stderr
    assert json.loads(f.stdout)["target_flops"]["total"] == j["target_flops"]["total"]


def test_nothing_fits_exits_3_with_the_reason(dflash_bin):
    r = _plan(dflash_bin, "--preset", "qwen3.6-27b", "--gpu-memory", "8GB")
    assert r.returncode == 3, r.stderr
    assert "a drafter worker does not fit one GPU" in r.stdout, r.stdout


def test_bad_flags(dflash_bin):
    for argv, needle in [
        (["--preset", "qwen3.6-27b", "--gpu", "a100"], "--gpu expects one of h100, h200, b200, rtx-pro-6000"),
        (["--preset", "qwen3.6-27b", "--gpus", 1], "--gpus must be an integer in [2, 256]"),
        (["--preset", "qwen3.6-27b", "--target-efficiency", 2], "--target-efficiency must be a finite number in [0.01, 1], got 2"),
        (["--gpus", 8], "plan --node: give the target as --preset " + "|".join(PRESETS) + " or --target-config FILE"),
    ]:
        r = _plan(dflash_bin, *argv)
        assert r.returncode == 1, (argv, r.stderr)
        assert needle in r.stderr, (argv, r.stderr)


def test_bench_flops_reports_model_and_measured_time(dflash_bin, tmp_path):
    out = tmp_path / "flops.json"
    r = subprocess.run([dflash_bin, "bench", "flops", "--target-config", str(ROOT / "configs/small-hybrid-target.json"),
                        "--max-len", "64", "--num-anchors", "8", "--repeats", "1", "--gemm-size", "128", "--threads", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    j = json.loads(out.read_text())
    assert j["target_dtype"] == "fp32"  # the target's dtype, named as train names it
    for part in ("target forward", "drafter step"):
        assert j[part]["flops"] > 0 and j[part]["measured_seconds"] > 0, j
        assert j[part]["efficiency"] == j[part]["predicted_seconds"] / j[part]["measured_seconds"]
        assert part in r.stdout


# Drafter families (issues 39, 40): the node plan's drafter worker is the single-GPU plan of the same drafter, with the
# family's heads / convs / selector and objective, and a DSpark producer ships the target's last hidden state.
TARGET = ROOT / "configs/targets/qwen3-8b.json"
SHAPE = ["--max-len", 2048, "--num-anchors", 256]  # T = 256 x 16 block tokens per sample
ARCH = {"dspark": "Qwen3DSparkModel", "dflash2": "DFlash2DraftModel"}


def _family_config(dflash_bin, tmp_path, family, rank):
    """The qwen3-8b drafter of `family` as `dflash plan` writes it, with markov_rank / selector_rank `rank`."""
    r = subprocess.run([dflash_bin, "plan", "--preset", "qwen3-8b", "--drafter-family", family, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)["drafter_config"]
    if family == "dspark":
        cfg["markov_rank"] = rank
    else:
        cfg["dflash_config"]["selector_rank"] = rank
    path = tmp_path / f"{family}-{rank}.json"
    path.write_text(json.dumps(cfg))
    return path


def _node_json(dflash_bin, *argv):
    r = _plan(dflash_bin, *argv, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("family", ["dspark", "dflash2"])
def test_node_drafter_memory_is_the_family_plan(dflash_bin, tmp_path, family):
    config = _family_config(dflash_bin, tmp_path, family, 128)
    # --node plans a target's drafter with soft labels (kl_weight 0.15, DSpark: 0); plan's default is train's, 0
    shape = SHAPE + ([] if family == "dspark" else ["--kl-weight", 0.15])
    node = _node_json(dflash_bin, "--target-config", TARGET, "--config", config, *shape, "--gpu-memory", "24GB",
                      "--usable-memory", 1)
    single = subprocess.run([dflash_bin, "plan", "--config", str(config), *map(str, shape), "--budget", "24GB", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert single.returncode == 0, single.stderr
    single = json.loads(single.stdout)
    worker = node["drafter_plan"]
    assert node["drafter_family"] == family and worker["drafter_config"]["architectures"] == [ARCH[family]]
    assert node["drafter_fits"] and single["fits"]
    for key in ("checkpoint_every", "loss_chunk_rows", "params", "kl_weight"):
        assert worker["settings"][key] == single["settings"][key], key
    assert worker["breakdown"] == single["breakdown"] and worker["phases"] == single["phases"]
    assert node["drafter_peak_bytes"] == worker["peak_bytes"] == single["peak_bytes"]
    assert node["splits"] and all(s["drafter_bytes"] == single["peak_bytes"] for s in node["splits"])
    # the same drafter planned as DFlash (the architectures switched) needs less
    dflash = json.loads(config.read_text())
    dflash["architectures"] = ["DFlashDraftModel"]
    for k in ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"):
        dflash.pop(k, None)
    for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
        dflash["dflash_config"].pop(k, None)
    (tmp_path / "dflash.json").write_text(json.dumps(dflash))
    base = _node_json(dflash_bin, "--target-config", TARGET, "--config", tmp_path / "dflash.json", *SHAPE,
                      "--gpu-memory", "1TB", "--usable-memory", 1)
    same = _node_json(dflash_bin, "--target-config", TARGET, "--config", config, *SHAPE, "--gpu-memory", "1TB",
                      "--usable-memory", 1)
    assert base["drafter_family"] == "dflash" and same["drafter_peak_bytes"] > base["drafter_peak_bytes"]
    assert base["drafter_flops"]["heads"] == 0 < same["drafter_flops"]["heads"]
    if family == "dflash2":  # DSpark's teacher runs once per target position: here fewer rows than soft labels' T
        assert same["drafter_flops"]["total"] > base["drafter_flops"]["total"]


@pytest.mark.parametrize("family", ["dspark", "dflash2"])
def test_node_drafter_grows_with_the_rank_as_the_formulas_say(dflash_bin, tmp_path, family):
    V, d, e, a, T, B, K = 151936, 4096, 2, 4, 256 * 16, 16, 16
    rows = T * (B - 1) / B  # DFlash2's drafted slots
    plans = {}
    for rank in (64, 320):
        config = _family_config(dflash_bin, tmp_path, family, rank)
        plans[rank] = _node_json(dflash_bin, "--target-config", TARGET, "--config", config, *SHAPE,
                                 "--gpu-memory", "1TB", "--usable-memory", 1)
        s = plans[rank]["drafter_plan"]["settings"]
        assert (s["checkpoint_every"], s["loss_chunk_rows"]) == (0, 4096)  # the same settings for both ranks
    dr = 320 - 64
    lo, hi = plans[64], plans[320]

    def term(p, name):
        (t,) = [x["bytes"] for x in p["drafter_plan"]["breakdown"] if x["name"] == name]
        return t

    dparams = hi["drafter_plan"]["settings"]["params"] - lo["drafter_plan"]["settings"]["params"]
    dflops = {k: hi["drafter_flops"][k] - lo["drafter_flops"][k] for k in hi["drafter_flops"]}
    if family == "dspark":
        # W1, W2 [V, r] and the confidence head's r inputs from W1[p]
        assert dparams == 2 * V * dr + dr
        # dW2 [V, r] fp32, W2's fp32 copy (bf16 weights: the op holds it for the pass) and ~6 r per row of Markov
        # features, gradients and head activations
        assert term(hi, "loss chunk") - term(lo, "loss chunk") == pytest.approx(2 * V * dr * a + 6 * T * dr * e)
        # W2 u in the logits GEMM, g W2, dW2 = g^T u; the confidence head's r extra inputs, fwd + bwd
        assert dflops["lm_head"] == pytest.approx(3 * 2 * T * V * dr)
        assert dflops["heads"] == pytest.approx(3 * T * 2 * dr)
    else:
        # hidden projection [r, d], predecessor and successor codebooks [V, r]
        assert dparams == dr * d + 2 * V * dr
        assert (term(hi, "dflash2 selector (saved for backward)") - term(lo, "dflash2 selector (saved for backward)")
                == pytest.approx(rows * (K + 3) * dr * e))
        # projection and scores (fwd + bwd), the metrics' walk (projection + K x K lattice, forward)
        assert dflops["heads"] == pytest.approx(3 * 2 * rows * (dr * d + K * dr) + 2 * rows * (dr * d + K * K * dr))
        assert dflops["lm_head"] == 0
    for name in ("weights", "grads"):
        assert term(hi, name) - term(lo, name) == dparams * e
    assert term(hi, "optimizer state") - term(lo, "optimizer state") == 2 * dparams * 4
    assert hi["drafter_peak_bytes"] > lo["drafter_peak_bytes"]


def test_dspark_producer_ships_the_last_hidden_state(dflash_bin):
    """DSpark's teacher is the target's last hidden state: the target keeps it (as for soft labels) and the LM head
    runs the teacher's pass, whatever --kl-weight DFlash would have; --kl-weight is refused for DSpark."""
    def node(*argv):
        return _node_json(dflash_bin, "--preset", "qwen3-8b", *argv)
    dspark, soft, hard = node("--drafter-family", "dspark"), node("--kl-weight", 0.15), node("--kl-weight", 0)
    stage = lambda p: p["splits"][0]["target_stage_bytes"]  # noqa: E731
    assert stage(dspark) == stage(soft) > stage(hard)
    T, S, V, H, r = 1024 * 16, 8000, 151936, 4096, 256
    # soft labels: the teacher's pass over every drafted row; DSpark's teacher once per distinct target position, at
    # most batch x S of them (the preset's 8000 tokens < T), plus the Markov bias's GEMMs
    assert soft["drafter_flops"]["lm_head"] == pytest.approx(1.5 * hard["drafter_flops"]["lm_head"])
    assert dspark["drafter_flops"]["lm_head"] == pytest.approx(hard["drafter_flops"]["lm_head"] + 2 * S * V * H
                                                               + 6 * T * V * r)
    r = _plan(dflash_bin, "--preset", "qwen3-8b", "--drafter-family", "dspark", "--kl-weight", 0.15)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "dflash: error: plan --node: --kl-weight must be 0 with drafter_family dspark (its L1 to the target replaces "
        "soft labels)"]
