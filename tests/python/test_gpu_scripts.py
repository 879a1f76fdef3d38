"""The one-shot GPU scripts, dry-run on the CPU at a scaled-down shape (no GPU here): every step of the seed-step
run (issue 24) and of the whole-pipeline run (issue 25) passes and writes the records the GPU run will commit,
with the fields their readers use."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_seed_step_dry_run(tmp_path, dflash_bin):
    env = dict(os.environ, OUT=str(tmp_path), DFLASH_BUILD_DIR=os.path.dirname(dflash_bin), OMP_WAIT_POLICY="passive")
    # No wall-clock limit here or in the script (a dry run's steps have none): a busy machine only makes it slower.
    r = subprocess.run(["bash", "scripts/gpu_seed_step.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    summary = (tmp_path / "summary.txt").read_text()
    assert r.returncode == 0 and "0 failed step(s)" in summary, summary + r.stdout[-3000:]
    assert "(no time limit)" in r.stdout and "(limit " not in r.stdout, r.stdout[-3000:]
    for pol in ("none", "layer"):
        plan = json.loads((tmp_path / f"plan_{pol}.json").read_text())
        assert plan["peak_bytes"] > 0 and plan["settings"]["checkpoint_every"] == (0 if pol == "none" else 1)
    step = json.loads((tmp_path / "bench_step.json").read_text())
    assert step["settings"]["max_len"] == 256 and step["settings"]["num_anchors"] == 16
    assert [run["policy"] for run in step["runs"]] == ["none", "layer"]
    for run in step["runs"]:
        assert run["measured_peak_bytes"] > 0 and run["plan"]["peak_bytes"] > 0 and run["mean_seconds"] > 0
    workers = json.loads((tmp_path / "bench_step_workers.json").read_text())
    assert [run["workers"] for run in workers["runs"]] == [1, 2, 3]
    assert all(run["max_diff_vs_single_worker"] == 0 for run in workers["runs"][1:])  # threads compute alike
    py = json.loads((tmp_path / "python_step.json").read_text())
    losses = {row["impl"]: row["loss"] for row in py["results"]}
    assert set(losses) == {"dflash", "per_block_sdpa"}
    assert abs(losses["dflash"] - losses["per_block_sdpa"]) < 1e-4 * abs(losses["dflash"])


ARCHITECTURES = {"dflash": "DFlashDraftModel", "dspark": "Qwen3DSparkModel", "dflash2": "DFlash2DraftModel"}


def _check_family_eval(ev):
    assert ev["block_size"] == 16
    assert [d["name"] for d in ev["datasets"]] == ["gsm8k_test", "humaneval", "mt_bench"]
    for d in ev["datasets"]:
        assert d["lossless"] is True and d["prompts"] >= 1 and d["tau"] >= 1.0


@pytest.mark.slow
def test_pipeline_dry_run(tmp_path, dflash_bin):
    """The --full recipe end to end at a tiny scale for each drafter family on the same answers: regenerate once,
    train online, export, eval on three datasets, the same in llama.cpp (dflash in OUT, the others in
    OUT/<family>)."""
    env = dict(os.environ, OUT=str(tmp_path), DFLASH_BUILD_DIR=os.path.dirname(dflash_bin), OMP_WAIT_POLICY="passive")
    # No wall-clock limit (the dry run's steps have none either): on a busy machine a family's step once ran past
    # a per-step limit sized for the GPU and was killed.
    r = subprocess.run(["bash", "scripts/gpu_pipeline.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    summary = (tmp_path / "summary.txt").read_text()
    # Every family trains, exports and evaluates: no failed step (a DFlash2 run from scratch once diverged at step 1).
    assert "FAIL" not in summary and r.returncode == 0, summary + r.stdout[-3000:]
    assert "(no time limit)" in r.stdout and "(limit " not in r.stdout, r.stdout[-3000:]
    assert (tmp_path / "full" / "data" / "train.jsonl").exists()  # one data stage, shared
    for fam, arch in ARCHITECTURES.items():
        out = tmp_path if fam == "dflash" else tmp_path / fam
        cfg = json.loads((out / "drafter_config.json").read_text())
        assert (cfg["num_hidden_layers"], cfg["block_size"]) == (4, 16)  # the --full recipe's drafter
        assert cfg["architectures"] == [arch]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        rows = [row for row in rows if "event" not in row]
        assert rows and all(row["loss"] > 0 for row in rows)
        if fam == "dspark":  # DeepSpec's metrics: the probabilistic accepted length and per-slot acceptance
            assert all(row["tau_probabilistic"] >= 1.0 and 0 <= row["accept_rate@1"] <= 1 for row in rows)
        if fam == "dflash2":  # the selector's path next to the unary top-K oracle's
            assert all(row["self_conditioned_path_accepted_length"] >= 0 and row["selector_loss"] >= 0 for row in rows)
        assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        _check_family_eval(json.loads((out / "eval.json").read_text()))
        assert (out / "acceptance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # The demo's llama.cpp stage: the run through llama.cpp's converter and llama-speculative-simple on the
        # same prompts, its table printed beside ours.
        llama = json.loads((out / "eval_llama_cpp.json").read_text())["llama_cpp"]
        assert [d["name"] for d in llama["datasets"]] == ["gsm8k_test", "humaneval", "mt_bench"]
        for d in llama["datasets"]:
            assert d["prompts"] == 1 and d["n_predict"] >= 1 and d["accepted_per_cycle"] >= 1.0, d
        log = (tmp_path / f"demo-{fam}.log").read_text()
        assert "== 4/5 llama.cpp on the same prompts" in log and "llama tau" in log, log[-3000:]


def test_gpu_scripts_parse_and_build_for_the_gpu_they_find(tmp_path):
    """gpu_check.sh has no dry run: its bash must parse, gpu_arch (gpu_common.sh) turns nvidia-smi's compute
    capability into DFLASH_CUDA_ARCHS (12.0 -> 120; 90 without nvidia-smi), and its first check is `dflash doctor`."""
    for script in ("gpu_check.sh", "gpu_seed_step.sh", "gpu_pipeline.sh", "gpu_common.sh"):
        subprocess.run(["bash", "-n", f"scripts/{script}"], cwd=ROOT, check=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 12.0\n")
    (fake / "nvidia-smi").chmod(0o755)
    probe = 'OUTDIR=$1 ROOT=$PWD BUDGET=1; source scripts/gpu_common.sh; gpu_arch'
    for path, want in ((f"{fake}:/usr/bin:/bin", "120"), ("/usr/bin:/bin", "90")):
        r = subprocess.run(["bash", "-c", probe, "probe", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                           env=dict(os.environ, PATH=path), check=True)
        assert r.stdout.strip() == want, (path, r.stdout, r.stderr)
    # gpu_check.sh runs `dflash doctor --json` before any other check, and its report stays among the outputs.
    with open(os.path.join(ROOT, "scripts", "gpu_check.sh")) as f:
        steps = [line for line in f if line.startswith("step ")]
    checks = [line for line in steps if not line.startswith(('step "build', 'step "configure'))]
    assert '"$BUILD/dflash" doctor --json "$OUTDIR/doctor.json"' in checks[0], checks[0]


def test_dry_run_steps_have_no_time_limit(tmp_path):
    """gpu_common.sh's step: BUDGET=0 (every --dry-run's default) runs a step past its GPU-sized limit to the end;
    a GPU run's budget still stops it (exit 124, the summary says timed out)."""
    probe = 'OUTDIR=$1 ROOT=$PWD BUDGET=$2; source scripts/gpu_common.sh; step slow 1 "$OUTDIR/log" sleep 2; ' \
            'echo "failures=$failures"'
    for budget, want in (("0", "failures=0"), ("600", "failures=1")):
        r = subprocess.run(["bash", "-c", probe, "probe", str(tmp_path), budget], cwd=ROOT, capture_output=True,
                           text=True, check=True)
        assert r.stdout.strip().endswith(want), (budget, r.stdout, r.stderr)
    summary = (tmp_path / "summary.txt").read_text()
    assert "FAIL  slow: exit 124 (timed out)" in summary, summary
