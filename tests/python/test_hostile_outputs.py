"""Hostile outputs and starts (issue 36), through the command line:
- class 1: every output path is checked before any work: a file output refuses a folder, a trailing '/', an empty
  path or a missing folder; a device is written as a stream and stays a device; a symlink is followed; a resumable
  output (regenerate --output) refuses a FIFO; an output folder (train, export, dump-hidden, --hidden-out) refuses
  a file;
- class 2: a target config claiming 2^31 - 1 layers is refused at once by `plan --node`, not planned for minutes;
- class 6: a start refused after reading the target (too many pipeline stages, a layer the target lacks, a prompt
  longer than its context) leaves no run folder, output file, settings record or feature folder behind;
- class 7: doctor --json's destination fails before any check runs;
- doctor --config reads a config through train's own validation: the same bad configs fail with the same message.
"""
import json
import os
import stat
import subprocess

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cli_errors import PREFIX, one_line_error

VOCAB = 64


def run(dflash_bin, *args, timeout=120):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY="passive"))


def tree(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    d = tmp_path_factory.mktemp("target")
    LlamaForCausalLM(cfg).float().save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Samples for train / dump-hidden and prompts for regenerate, outside the folders the tests list."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "samples.jsonl").write_text("".join(json.dumps({"input_ids": [3 + i, 4, 5, 6, 7, 8], "loss_mask": [0, 0, 1, 1, 1, 1]})
                                             + "\n" for i in range(4)))
    (d / "prompts.jsonl").write_text(json.dumps({"prompt_ids": [3, 4, 5]}) + "\n")
    (d / "long.jsonl").write_text(json.dumps({"prompt_ids": list(range(3, 43))}) + "\n")  # 40 tokens, context 32
    return d


def bad_file_destinations(tmp_path):
    return [(tmp_path, "is a folder"), (f"{tmp_path}/new.json/", "ends in '/'"), ("", "is empty"),
            (tmp_path / "missing" / "x.json", "does not exist")]


# ---- class 1: bench attention --json (src/ops, now through the same check as every other --json) ----

def test_bench_attention_json_destination_is_checked_before_the_runs(dflash_bin, tmp_path):
    for dest, why in bad_file_destinations(tmp_path):
        r = run(dflash_bin, "bench", "attention", "--configs", "quick", "--impls", "fused", "--reps", 1, "--json", dest)
        one_line_error(r, "bench attention: --json", why)
        assert "quick" not in r.stdout, r.stdout  # no config ran
    assert tree(tmp_path) == []


def test_bench_attention_json_to_a_device_and_through_a_symlink(dflash_bin, tmp_path):
    r = run(dflash_bin, "bench", "attention", "--configs", "quick", "--impls", "fused", "--reps", 1, "--threads", 1,
            "--json", "/dev/null", timeout=300)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    real = tmp_path / "real.json"
    real.write_text("old\n")
    (tmp_path / "link.json").symlink_to(real)
    r = run(dflash_bin, "bench", "attention", "--configs", "quick", "--impls", "fused", "--reps", 1, "--threads", 1,
            "--json", tmp_path / "link.json", timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads(real.read_text())["configs"][0]["impl"] == "fused"
    assert tree(tmp_path) == ["link.json", "real.json"]  # no temporary left


# ---- class 1: data regenerate --output (resumable: appended to and read back) and --hidden-out ----

def test_regenerate_output_destinations(dflash_bin, tiny_target, inputs, tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for dest, why in bad_file_destinations(tmp_path) + [(fifo, "is a device or FIFO")]:
        r = run(dflash_bin, "data", "regenerate", "--model", tiny_target, "--input", inputs / "prompts.jsonl",
                "--output", dest, "--max-new", 2, "--eos", "none", timeout=30)
        one_line_error(r, "data regenerate: --output", why)  # "" too: it used to be the usage error (exit 2)
    f = tmp_path / "file"
    f.write_text("x")
    r = run(dflash_bin, "data", "regenerate", "--model", tiny_target, "--input", inputs / "prompts.jsonl",
            "--output", tmp_path / "out.jsonl", "--hidden-out", f, "--max-new", 2, "--eos", "none", timeout=30)
    one_line_error(r, "data regenerate: --hidden-out", "is a file")
    assert tree(tmp_path) == ["file", "pipe.jsonl"] and f.read_text() == "x"


# ---- class 1: output folders refuse a file (and a path under a file) before any work ----

@pytest.mark.parametrize("command", ["train", "export", "dump-hidden"])
def test_output_folders_refuse_a_file(dflash_bin, tiny_target, inputs, tmp_path, command):
    f = tmp_path / "file"
    f.write_text("x")
    for dest, why in [(f, "is a file"), (f / "sub", "is not a folder"), ("", "is empty")]:
        if command == "train":
            r = run(dflash_bin, "train", "--target", tiny_target, "--data", inputs / "samples.jsonl", "--out", dest,
                    "--mask-token-id", 5, "--steps", 1, "--threads", 1)
            if dest == "":  # an empty --out is a missing setting, refused by the config check
                one_line_error(r, "'out'")
                continue
            one_line_error(r, "train config: 'out'", why)
        elif command == "export":
            r = run(dflash_bin, "export", tmp_path / "no-run", "--out", dest)
            one_line_error(r, "export: --out", why)
        else:
            r = run(dflash_bin, "data", "dump-hidden", "--model", tiny_target, "--data", inputs / "samples.jsonl",
                    "--out", dest)
            one_line_error(r, "data dump-hidden: --out", why)
    assert tree(tmp_path) == ["file"] and f.read_text() == "x"


# ---- class 6: a start refused after reading the target leaves nothing behind ----

@pytest.mark.parametrize("flags,why", [
    (["--target-devices", "cpu,cpu,cpu,cpu"], "has 4 pipeline stages per replica for a target of 3 layers"),
    (["--target-layer-ids", "0,7"], "7"),                                    # a layer the target lacks
])
def test_refused_train_start_leaves_no_run_folder(dflash_bin, tiny_target, inputs, tmp_path, flags, why):
    r = run(dflash_bin, "train", "--target", tiny_target, "--data", inputs / "samples.jsonl", "--out",
            tmp_path / "run", "--mask-token-id", 5, "--steps", 1, "--threads", 1, *flags)
    one_line_error(r, why)
    assert tree(tmp_path) == []


def test_a_train_start_that_passes_creates_its_folder_and_exports(dflash_bin, tiny_target, inputs, tmp_path):
    # The other side of the test above: the folder (and missing parents) appear once every check has passed.
    r = run(dflash_bin, "train", "--target", tiny_target, "--data", inputs / "samples.jsonl", "--out",
            tmp_path / "a" / "run", "--mask-token-id", 5, "--steps", 1, "--threads", 1, "--max-len", 8,
            "--num-anchors", 1, "--block-size", 2, timeout=300)
    assert r.returncode == 0, r.stderr
    names = tree(tmp_path / "a" / "run")
    assert {"train_config.json", "drafter_config.json", "metrics.jsonl"} <= set(names), names
    # export --out with a trailing '/' names the folder itself (its staging folder used to be named ".tmp-PID").
    r = run(dflash_bin, "export", tmp_path / "a" / "run", "--out", f"{tmp_path}/exp/", "--dtype", "fp32")
    assert r.returncode == 0, r.stderr
    assert tree(tmp_path / "exp") == ["config.json", "dflash.py", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "exp"]


@pytest.mark.parametrize("flags,input_name,why", [
    (["--devices", "cpu,cpu,cpu,cpu"], "prompts.jsonl", "4 pipeline stages for 3"),
    ([], "long.jsonl", "longer than the target's context of 32 tokens"),
])
def test_refused_regenerate_leaves_no_output(dflash_bin, tiny_target, inputs, tmp_path, flags, input_name, why):
    r = run(dflash_bin, "data", "regenerate", "--model", tiny_target, "--input", inputs / input_name,
            "--output", tmp_path / "out.jsonl", "--hidden-out", tmp_path / "features", "--max-new", 2, "--eos", "none",
            "--batch", 1, *flags)
    one_line_error(r, why)
    assert tree(tmp_path) == []  # no samples file, no out.jsonl.meta.json, no feature folder


def test_refused_dump_hidden_leaves_no_folder(dflash_bin, tiny_target, inputs, tmp_path):
    r = run(dflash_bin, "data", "dump-hidden", "--model", tiny_target, "--data", inputs / "samples.jsonl",
            "--out", tmp_path / "features", "--devices", "cpu,cpu,cpu,cpu")
    one_line_error(r, "4 pipeline stages for 3")
    assert tree(tmp_path) == []


def test_refused_export_leaves_no_folder(dflash_bin, tmp_path):
    one_line_error(run(dflash_bin, "export", tmp_path / "no-run", "--out", tmp_path / "export"), "no-run")
    assert tree(tmp_path) == []


# ---- class 7: doctor --json's destination, before any check ----

def test_doctor_json_destination_fails_before_any_check(dflash_bin, tmp_path):
    for dest, why in bad_file_destinations(tmp_path):
        r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--json", dest, timeout=60)
        one_line_error(r, "doctor: --json", why)
        assert r.stdout == "", r.stdout  # not one check ran
    assert tree(tmp_path) == []


# ---- doctor --config and train: one validation, the same errors ----

BAD_CONFIGS = [
    {"target_devices": "cpu;;cpu"},
    {"target_devices": "gpu:0"},
    {"target_devices": "cpu,cpu;cpu"},
    {"drafter_devices": "gpu:0"},
    {"drafter_devices": "cpu,,cpu"},
    {"max_len": 1},
    {"target_devices": "cpu,cpu,cpu,cpu"},  # found after reading the target's config (3 layers)
]


@pytest.mark.slow  # a doctor run each (its machine checks: about 10 s on 2 busy cores)
@pytest.mark.parametrize("i", range(len(BAD_CONFIGS)))
def test_doctor_config_and_train_give_the_same_error(dflash_bin, tiny_target, inputs, tmp_path, i):
    bad = BAD_CONFIGS[i]
    cfg = {"target": str(tiny_target), "data": str(inputs / "samples.jsonl"), "out": str(tmp_path / f"run{i}"),
           "mask_token_id": 5, "steps": 1, "threads": 1}
    cfg.update(bad)
    path = tmp_path / f"c{i}.json"
    path.write_text(json.dumps(cfg))
    train_error = one_line_error(run(dflash_bin, "train", "--config", path, timeout=60)).removeprefix(PREFIX)
    report = tmp_path / f"doctor{i}.json"
    r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--config", path, "--json", report, timeout=300)
    assert r.returncode == 1, r.stderr
    (row,) = [x for x in json.loads(report.read_text())["checks"] if x["section"] == "config"]
    assert row["status"] == "fail" and row["detail"] == train_error, (bad, row["detail"], train_error)
    assert not (tmp_path / f"run{i}").exists()


def test_doctor_config_checks_target_devices_against_the_target_config_alone(dflash_bin, tiny_target, inputs, tmp_path):
    """train refuses 4 stages for a 3-layer target after reading the target's config; doctor --config used to pass
    it. A folder with config.json and no weights shows that doctor reads the config only, as train does up to there."""
    target = tmp_path / "config-only"
    target.mkdir()
    (target / "config.json").write_text((tiny_target / "config.json").read_text())
    cfg = {"target": str(target), "data": str(inputs / "samples.jsonl"), "out": str(tmp_path / "run"),
           "mask_token_id": 5, "steps": 1, "threads": 1, "target_devices": "cpu,cpu,cpu,cpu"}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    want = "train config: 'target_devices' 'cpu,cpu,cpu,cpu' has 4 pipeline stages per replica for a target of 3 layers"
    train_error = one_line_error(run(dflash_bin, "train", "--config", path, timeout=60), want).removeprefix(PREFIX)
    report = tmp_path / "doctor.json"
    r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--config", path, "--json", report, timeout=300)
    assert r.returncode == 1, r.stderr
    (row,) = [x for x in json.loads(report.read_text())["checks"] if x["section"] == "config"]
    assert row["status"] == "fail" and row["detail"] == train_error, row
    # the same config with 3 stages passes doctor's config row
    path.write_text(json.dumps(dict(cfg, target_devices="cpu,cpu,cpu")))
    r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--config", path, "--json", report, timeout=300)
    (row,) = [x for x in json.loads(report.read_text())["checks"] if x["section"] == "config"]
    assert row["status"] == "pass", row
    assert not (tmp_path / "run").exists()


# ---- class 2: a target config's claims are bounded; plan --node's search does not grow with the layers ----

def test_plan_node_refuses_2_pow_31_layers_at_once(dflash_bin, tmp_path):
    base = json.loads((pathlib_root() / "configs/targets/qwen3-8b.json").read_text())
    for layers in (2147483647, 65537):
        c = dict(base, num_hidden_layers=layers)
        p = tmp_path / f"t{layers}.json"
        p.write_text(json.dumps(c))
        r = run(dflash_bin, "plan", "--node", "--target-config", p, "--gpus", 256, timeout=20)
        one_line_error(r, str(p), f"field 'num_hidden_layers' is {layers}, above the limit 65536")
    # The largest count allowed plans in about the time of the preset's 36 layers (it used to grow with layers x GPUs).
    c = dict(base, num_hidden_layers=65536)
    p = tmp_path / "t65536.json"
    p.write_text(json.dumps(c))
    r = run(dflash_bin, "plan", "--node", "--target-config", p, "--gpus", 256, "--gpu-memory", "100TB", "--json",
            timeout=30)
    assert r.returncode in (0, 3), r.stderr
    assert json.loads(r.stdout)["target_flops"]["total"] > 0


def pathlib_root():
    import pathlib
    return pathlib.Path(__file__).resolve().parents[2]
