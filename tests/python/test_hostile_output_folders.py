"""Hostile output folders (issue 49, class 1), through the command line: one rule (src/util/output_folder.h) for
every command that writes an output folder. `export --out` replaces an earlier export, never writes into a folder
holding a model (a target's config.json + model.safetensors, a lone .gguf), a run or a dataset (even with --force),
and writes into any other non-empty folder only with --force, then replacing only its own files; train, dump-hidden,
regenerate --hidden-out and plot refuse a folder holding what they do not keep there. Every refusal is one line
naming the folder, what it holds and the entry that shows it, and leaves the folder byte for byte as it was."""
import json
import os
import shutil
import subprocess

import pytest

from cli_errors import one_line_error
from test_hostile_outputs import tiny_target  # noqa: F401 (fixture: a 3-layer Llama folder)


def run(dflash_bin, *args):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1"))


def snapshot(d):
    """{relative path: bytes (None for a folder)} of everything under d."""
    return {str(p.relative_to(d)): (None if p.is_dir() else p.read_bytes()) for p in sorted(d.rglob("*"))}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    p = d / "samples.jsonl"
    p.write_text("".join(json.dumps({"input_ids": [3 + i, 4, 5, 6, 7, 8], "loss_mask": [0, 0, 1, 1, 1, 1]}) + "\n"
                         for i in range(4)))
    return p


@pytest.fixture(scope="module")
def trained_run(dflash_bin, tiny_target, samples, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    r = run(dflash_bin, "train", "--target", tiny_target, "--data", samples, "--out", out, "--mask-token-id", 5,
            "--steps", 1, "--threads", 1, "--max-len", 8, "--num-anchors", 1, "--block-size", 2)
    assert r.returncode == 0, r.stderr
    return out


def model_folder(tiny_target, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(tiny_target, d)
    return d


def folders(tiny_target, trained_run, tmp_path):
    """(folder, what it holds, the entry named as evidence) for every kind an export must never write into."""
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "target.Q4_0.gguf").write_bytes(b"GGUF" + bytes(60))
    jsonl = tmp_path / "data"
    jsonl.mkdir()
    (jsonl / "train.jsonl").write_text('{"input_ids": [1, 2]}\n')
    shards = tmp_path / "features"
    shards.mkdir()
    (shards / "index.json").write_text('{"format": "dflash-hidden-v1", "shards": []}\n')
    (shards / "shard-00000.safetensors").write_bytes(bytes(16))
    return [(model_folder(tiny_target, tmp_path), "a model", "config.json"), (gguf, "a model", "target.Q4_0.gguf"),
            (trained_run, "a training run", "checkpoints/"), (jsonl, "a dataset", "train.jsonl"),
            (shards, "a dataset", "index.json")]


def test_export_never_writes_into_a_model_run_or_dataset(dflash_bin, tiny_target, trained_run, tmp_path):
    for folder, holds, evidence in folders(tiny_target, trained_run, tmp_path):
        before = snapshot(folder)
        for force in ([], ["--force"]):
            r = run(dflash_bin, "export", trained_run, "--out", folder, "--dtype", "fp32", *force)
            one_line_error(r, f"export: --out: '{folder}' holds {holds} ({evidence})", "even with --force")
            assert snapshot(folder) == before, (folder, force)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no staging folder left


def test_export_into_a_folder_it_did_not_make_needs_force_and_keeps_the_rest(dflash_bin, trained_run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    (out / "dspark.py").write_text("# mine, not an export's\n")  # a file a DFlash export does not write
    before = snapshot(out)
    r = run(dflash_bin, "export", trained_run, "--out", out, "--dtype", "fp32")
    one_line_error(r, f"export: --out: '{out}' is a folder export did not make (it holds dspark.py)", "--force")
    assert snapshot(out) == before
    r = run(dflash_bin, "export", trained_run, "--out", out, "--dtype", "fp32", "--force")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "dflash.py", "dspark.py", "model.safetensors",
                                                     "notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert (out / "dspark.py").read_text() == "# mine, not an export's\n"  # not another family's file to remove
    assert json.loads((out / "config.json").read_text())["architectures"] == ["DFlashDraftModel"]


def test_export_replaces_its_own_earlier_export(dflash_bin, trained_run, tmp_path):
    out = tmp_path / "exp"
    for dtype in ("fp32", "bf16"):
        r = run(dflash_bin, "export", trained_run, "--out", out, "--dtype", dtype)
        assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "dflash.py", "model.safetensors"]
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(dflash_bin, "export", trained_run, "--out", empty, "--dtype", "fp32").returncode == 0


def test_every_folder_writer_refuses_what_it_does_not_keep(dflash_bin, tiny_target, samples, trained_run, tmp_path):
    model = model_folder(tiny_target, tmp_path)
    exp = tmp_path / "exp"
    assert run(dflash_bin, "export", trained_run, "--out", exp, "--dtype", "fp32").returncode == 0
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_ids": [3, 4, 5]}) + "\n")
    cases = [
        (["train", "--target", tiny_target, "--data", samples, "--mask-token-id", 5, "--steps", 1, "--threads", 1,
          "--max-len", 8, "--num-anchors", 1, "--block-size", 2, "--out"], "train config: 'out'",
         [(model, "a model"), (exp, "an exported drafter")]),
        (["data", "dump-hidden", "--model", tiny_target, "--data", samples, "--out"], "data dump-hidden: --out",
         [(model, "a model"), (trained_run, "a training run"), (exp, "an exported drafter")]),
        (["data", "regenerate", "--model", tiny_target, "--input", prompts, "--output", tmp_path / "o.jsonl",
          "--max-new", 2, "--eos", "none", "--hidden-out"], "data regenerate: --hidden-out",
         [(model, "a model"), (trained_run, "a training run")]),
        (["plot", trained_run, "--out"], "plot: --out", [(model, "a model"), (exp, "an exported drafter")]),
    ]
    for argv, what, refused in cases:
        for folder, holds in refused:
            before = snapshot(folder)
            one_line_error(run(dflash_bin, *argv, folder), f"{what}: '{folder}' holds {holds} (")
            assert snapshot(folder) == before, (what, folder)
    assert not (tmp_path / "o.jsonl").exists()
