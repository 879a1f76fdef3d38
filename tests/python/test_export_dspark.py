"""`dflash export` of a DSpark run in DeepSpec's native contract (issue 39 item 7, docs/DSPARK.md): config.json with
architectures ["Qwen3DSparkModel"] and the flat keys, the heads under DeepSpec's names, read by each engine's
reader (engine_readers.py) exactly as trained; the engines that would read a variant differently (a gated or rnn
Markov head, rank 0, no confidence head; z-lab and speculators, which do not serve DSpark) are the ones `--engine`
refuses, checked against the readers."""
import json

import pytest

import engine_readers as er
from test_export_engines import ENGINES, export, misread_by, refused_engines, target_config
from test_train import MASK_ID, TARGET_LAYER_IDS, base_args, target_dir, train  # noqa: F401 (fixtures)
from test_train_dspark import shards  # noqa: F401 (fixture)

VARIANTS = {
    "vanilla": {"markov_rank": 8},
    "gated": {"markov_rank": 8, "markov_head_type": "gated"},
    "rnn_no_confidence": {"markov_rank": 8, "markov_head_type": "rnn", "enable_confidence_head": "false",
                          "confidence_loss_weight": 0},
    "rank0_no_markov_input": {"markov_rank": 0, "confidence_head_with_markov": "false"},
}


@pytest.fixture(scope="module")
def runs(dflash_bin, target_dir, shards, tmp_path_factory):  # noqa: F811
    out = {}
    for name, kw in VARIANTS.items():
        run = tmp_path_factory.mktemp(name) / "run"
        train(dflash_bin, base_args(target_dir[0], shards / "with_last.safetensors", run, steps=1,
                                    drafter_family="dspark", **kw))
        out[name] = run
    return out


@pytest.mark.parametrize("engine", ["sglang", "vllm", "llama.cpp"])
def test_a_vanilla_export_reads_as_trained(dflash_bin, runs, target_dir, tmp_path, engine):  # noqa: F811
    out = tmp_path / "hf"
    r = export(dflash_bin, runs["vanilla"], out, "--engine", engine)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"]   # the engines load it by this, not by auto_map
    assert cfg["auto_map"] == {"AutoModel": "dspark.Qwen3DSparkModel"}   # our remote code (test_export_remote_families)
    for k, v in {"markov_rank": 8, "markov_head_type": "vanilla", "enable_confidence_head": True,
                 "confidence_head_with_markov": True, "block_size": 4, "mask_token_id": MASK_ID,
                 "target_layer_ids": TARGET_LAYER_IDS, "num_target_layers": 3}.items():
        assert cfg[k] == v, k
    read = er.read(engine, out, target_config(target_dir))
    assert read.loads, read.errors
    assert not read.missing and not read.ignored and not read.reported and not read.silent, read
    s = read.settings
    assert s["family"] == "dspark" and s["block_size"] == 4 and s["mask_token_id"] == MASK_ID
    assert s["markov_rank"] == 8 and s["markov_head_type"] == "vanilla"
    assert s["target_layer_ids"] == TARGET_LAYER_IDS
    for name in ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight", "confidence_head.proj.weight",
                 "confidence_head.proj.bias"):
        assert name in read.mapped, name


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_engine_refusals_are_what_the_readers_misread(dflash_bin, runs, target_dir, tmp_path, variant):  # noqa: F811
    """--engine all refuses exactly the engines whose reader fails on, or silently changes, the export."""
    out = tmp_path / "hf"
    r = export(dflash_bin, runs[variant], out, "--engine", "all")
    assert r.returncode == 1
    refused, line = refused_engines(r.stderr)
    # the export itself, written for the engines that read it as trained, tells which those are
    serving = [e for e in ENGINES if e not in refused]
    if serving:
        r = export(dflash_bin, runs[variant], out, "--engine", ",".join(serving))
        assert r.returncode == 0, r.stderr
        assert misread_by(out, target_config(target_dir)) == set(refused), (variant, line)
    else:
        assert "no engine reads it as trained" in line
    assert {"zlab", "speculators"} <= refused   # they do not serve DSpark


@pytest.mark.parametrize("variant, engine", [("vanilla", "sglang"), ("gated", "sglang")])
def test_deepspec_loads_the_export_with_the_trained_num_anchors(dflash_bin, runs, tmp_path, variant, engine):
    """DeepSpec's own Qwen3DSparkModel asserts config.num_anchors (its training forward samples that many anchors):
    the export writes the run's (base_args: 6). DeepSpec then misses only the frozen embedding and LM head that it
    copies from the target. The same folder without the key is refused, as DeepSpec refused every export before."""
    out = tmp_path / "hf"
    r = export(dflash_bin, runs[variant], out, "--engine", engine)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_anchors"] == json.loads((runs[variant] / "train_config.json").read_text())["num_anchors"] == 6
    read = er.read("deepspec", out)
    assert read.loads, read.errors
    assert read.settings["num_anchors"] == 6 and read.settings["markov_rank"] == 8
    assert read.settings["markov_head_type"] == VARIANTS[variant].get("markov_head_type", "vanilla")
    assert read.missing == ["embed_tokens.weight", "lm_head.weight"] and not read.reported and not read.silent
    del cfg["num_anchors"]
    (out / "config.json").write_text(json.dumps(cfg))
    read = er.read("deepspec", out)
    assert not read.loads and read.errors == ["config.num_anchors must be provided (an assertion in "
                                              "Qwen3DSparkModel.__init__)"]
