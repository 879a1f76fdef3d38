"""`dflash plan --node` through the command line: the seed's node (8 x RTX PRO 6000, Qwen3.6-27B, seq 8000, 1024
anchors) gets a table and a best split that uses target replicas, JSON agrees with the text, a GPU too small for
anything exits 3 with the reason, and bad flags are one-line errors."""
import json
import pathlib
import subprocess

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
                        "--seq-len", "64", "--anchors", "8", "--repeats", "1", "--gemm-size", "128", "--threads", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    j = json.loads(out.read_text())
    for part in ("target forward", "drafter step"):
        assert j[part]["flops"] > 0 and j[part]["measured_seconds"] > 0, j
        assert j[part]["efficiency"] == j[part]["predicted_seconds"] / j[part]["measured_seconds"]
        assert part in r.stdout
