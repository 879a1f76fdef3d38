"""The per-engine export contract (issue 38, docs/SERVING.md): the real `dflash export` of a tiny trained drafter,
read the way each serving engine reads it (engine_readers.py), resolves to what was trained; what an engine would
read differently is refused by `--engine`, and `--engine vllm` writes a draft-vocabulary drafter. The refusals of
each family's C++ rows (src/families/NAME/NAME_engines.cpp, src/drafter/serving_engines.h) are checked against the
readers: an engine is refused exactly when its reader fails on, or silently changes, an export written for another
engine."""
import json
import shutil
import subprocess

import pytest

import engine_readers as er
from test_train import MASK_ID, TARGET_LAYER_IDS, base_args, offline_dir, target_dir, train  # noqa: F401 (fixtures)

ENGINES = ("sglang", "vllm", "llama.cpp", "zlab", "speculators")   # what `--engine all` names
K = 24   # draft vocabulary


def export(dflash_bin, run, out, *flags):
    return subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", "fp32", *flags],
                          capture_output=True, text=True, timeout=120)


def target_config(target_dir):  # noqa: F811
    return json.loads((target_dir[0] / "config.json").read_text())


@pytest.fixture(scope="module")
def full_run(dflash_bin, target_dir, offline_dir, tmp_path_factory):  # noqa: F811
    run = tmp_path_factory.mktemp("full") / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=1))
    return run


@pytest.fixture(scope="module")
def vocab_run(dflash_bin, target_dir, offline_dir, tmp_path_factory):  # noqa: F811
    run = tmp_path_factory.mktemp("vocab") / "run"
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=1, draft_vocab=K))
    # said at start: which engines can serve the result
    assert "draft vocabulary: served by vllm only (dflash export --engine vllm); sglang, llama.cpp, zlab, " \
           "speculators would draft differently" in r.stderr, r.stderr
    return run


def refused_engines(stderr):
    line = [l for l in stderr.splitlines() if "dflash: error:" in l]
    assert len(line) == 1, stderr
    named = line[0].split("trained by ", 1)[1].rsplit("; ", 1)[0]   # "e1 (why); e2 (why)", before the advice
    return {e for e in ENGINES if named.startswith(f"{e} (") or f"; {e} (" in named}, line[0]


def misread_by(folder, target):
    """The engines whose reading of `folder` differs from the folder's own config: a failure or a silent change."""
    return {e for e in ENGINES if not er.read(e, folder, target).loads or er.read(e, folder, target).silent}


@pytest.mark.parametrize("engine", ENGINES + ("specforge",))
def test_a_full_vocabulary_export_reads_as_trained(dflash_bin, full_run, target_dir, tmp_path, engine):  # noqa: F811
    out = tmp_path / "hf"
    flags = [] if engine == "specforge" else ["--engine", engine]
    r = export(dflash_bin, full_run, out, *flags)
    assert r.returncode == 0, r.stderr
    trained = json.loads((full_run / "drafter_config.json").read_text())
    cfg = json.loads((out / "config.json").read_text())
    # block_size at both levels, equal; max_position_embeddings the target's context length
    assert cfg["block_size"] == cfg["dflash_config"]["block_size"] == trained["block_size"] == 4
    assert cfg["max_position_embeddings"] == target_config(target_dir)["max_position_embeddings"] == 256
    read = er.read(engine, out, target_config(target_dir))
    assert read.loads, read.errors
    assert not read.missing and not read.ignored and not read.reported and not read.silent, read
    s = read.settings
    assert s["family"] == "dflash" and s["block_size"] == 4 and s["mask_token_id"] == MASK_ID
    assert s["head"] == "target" and not s["d2t"]
    # the layer-index convention: our ids are layer indices; the engines capture hidden-state index id + 1
    assert s["target_layer_ids"] == TARGET_LAYER_IDS and s["capture_ids"] == [i + 1 for i in TARGET_LAYER_IDS]
    if "max_position_embeddings" in s:
        assert s["max_position_embeddings"] == 256
    if engine in ("vllm", "zlab", "speculators", "specforge"):
        assert s["num_draft_tokens"] == 3   # block_size - 1 drafts per step


def test_vllm_reads_the_aux_layers_as_ids_plus_one(dflash_bin, full_run, target_dir, tmp_path):  # noqa: F811
    out = tmp_path / "hf"
    assert export(dflash_bin, full_run, out).returncode == 0
    cfg = json.loads((out / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in cfg    # vLLM derives them: dflash_config.target_layer_ids + 1
    assert er._vllm_aux_layers(cfg) == [i + 1 for i in TARGET_LAYER_IDS]


def test_a_draft_vocabulary_run_is_refused_unless_for_vllm(dflash_bin, vocab_run, target_dir, tmp_path):  # noqa: F811
    target = target_config(target_dir)
    r = export(dflash_bin, vocab_run, tmp_path / "all")
    assert r.returncode != 0 and not (tmp_path / "all").exists()
    refused, line = refused_engines(r.stderr)
    assert refused == {"sglang", "llama.cpp", "zlab", "speculators"} and "--engine vllm" in line, line
    for engine in ("sglang", "llama.cpp", "zlab", "speculators"):
        r = export(dflash_bin, vocab_run, tmp_path / engine, "--engine", engine)
        assert r.returncode != 0 and refused_engines(r.stderr)[0] == {engine}, r.stderr
    r = export(dflash_bin, vocab_run, tmp_path / "list", "--engine", "vllm,zlab")
    assert r.returncode != 0 and refused_engines(r.stderr)[0] == {"zlab"}, r.stderr

    out = tmp_path / "vllm"
    r = export(dflash_bin, vocab_run, out, "--engine", "vllm")
    assert r.returncode == 0, r.stderr
    v = er.vllm(out, target)
    assert v.loads and not v.missing and not v.silent, v
    assert v.settings["head"] == "draft" and v.settings["d2t"] and v.settings["draft_vocab_size"] == K
    assert v.mapped["d2t"] == "draft_id_to_target_id" and v.mapped["lm_head.weight"] == "lm_head.weight"
    # the C++ table refuses exactly the engines that misread this folder
    assert misread_by(out, target) == {"sglang", "llama.cpp", "zlab", "speculators"}


def test_a_last_layer_feature_is_refused_by_the_engines_that_capture_before_the_norm(dflash_bin, full_run,
                                                                                     target_dir, tmp_path):  # noqa: F811
    """A run from before the train-time refusal: its config names the target's last layer."""
    target = target_config(target_dir)
    last = target["num_hidden_layers"] - 1
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    cfg = json.loads((run / "drafter_config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [last]
    (run / "drafter_config.json").write_text(json.dumps(cfg))
    r = export(dflash_bin, run, tmp_path / "all")
    assert r.returncode != 0
    refused, line = refused_engines(r.stderr)
    assert refused == {"sglang", "vllm", "llama.cpp", "speculators"} and "final norm" in line, line
    out = tmp_path / "zlab"
    r = export(dflash_bin, run, out, "--engine", "zlab")   # z-lab takes HF hidden_states[L]: the final-normed state
    assert r.returncode == 0, r.stderr
    assert misread_by(out, target) == refused


def test_max_position_embeddings_unknown_is_refused_unless_given(dflash_bin, full_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    cfg = json.loads((run / "drafter_config.json").read_text())
    del cfg["max_position_embeddings"]
    (run / "drafter_config.json").write_text(json.dumps(cfg))
    r = export(dflash_bin, run, tmp_path / "no")
    assert r.returncode != 0 and "max_position_embeddings" in r.stderr and "--max-position-embeddings" in r.stderr
    assert not (tmp_path / "no").exists()
    r = export(dflash_bin, run, tmp_path / "yes", "--max-position-embeddings", "4096")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "yes" / "config.json").read_text())["max_position_embeddings"] == 4096
    r = export(dflash_bin, full_run, tmp_path / "clash", "--max-position-embeddings", "4096")
    assert r.returncode != 0 and "differs" in r.stderr and "256" in r.stderr, r.stderr


def test_an_unknown_engine_is_a_clear_error(dflash_bin, full_run, tmp_path):
    r = export(dflash_bin, full_run, tmp_path / "x", "--engine", "tgi")
    assert r.returncode != 0 and "--engine" in r.stderr and "llama.cpp" in r.stderr and "'tgi'" in r.stderr


def test_the_targets_last_layer_is_refused_in_train_data_and_plan(dflash_bin, target_dir, offline_dir,  # noqa: F811
                                                                 tmp_path):
    last = target_config(target_dir)["num_hidden_layers"] - 1
    why = "is the target's last layer"
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", steps=1,
                                    target_layer_ids=str(last)), check=False)
    assert r.returncode != 0 and why in r.stderr and "final norm" in r.stderr, r.stderr
    r = subprocess.run([dflash_bin, "data", "dump-hidden", "--target", str(target_dir[0]), "--data",
                        str(offline_dir[0]), "--out", str(tmp_path / "feats"), "--target-layer-ids", f"0,{last}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and why in r.stderr and "--target-layer-ids" in r.stderr, r.stderr
    drafter = tmp_path / "drafter.json"
    cfg = {"architectures": ["DFlashDraftModel"], "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 1, "num_target_layers": last + 1, "vocab_size": 256,
           "block_size": 4, "dflash_config": {"mask_token_id": 255, "target_layer_ids": [last]}}
    drafter.write_text(json.dumps(cfg))
    r = subprocess.run([dflash_bin, "plan", "--config", str(drafter)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and why in r.stderr and str(drafter) in r.stderr, r.stderr


def test_block_size_in_both_places_must_agree(dflash_bin, tmp_path):
    cfg = {"architectures": ["DFlashDraftModel"], "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 1, "num_target_layers": 3, "vocab_size": 256,
           "block_size": 4, "dflash_config": {"mask_token_id": 255, "target_layer_ids": [1], "block_size": 8}}
    p = tmp_path / "drafter.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([dflash_bin, "plan", "--config", str(p)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "dflash_config.block_size" in r.stderr and "4" in r.stderr, r.stderr
    cfg["dflash_config"]["block_size"] = 4
    p.write_text(json.dumps(cfg))
    r = subprocess.run([dflash_bin, "plan", "--config", str(p)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
