"""`dflash export` of a DFlash2 run in z-lab's contract (issue 40 item 5, docs/DFLASH2.md): config.json with
architectures ["DFlash2DraftModel"], a top-level is_causal false and the conv and selector settings in dflash_config;
the convs and the selector under z-lab's names (bare codebook names), no embedding or LM head. Each engine's reader
(engine_readers.py) reads it as trained, `--engine all` refuses exactly the ones that do not (speculators), and z-lab's
DFlash2DraftModel, run in float64 from the export (engine_readers.zlab_dflash2_block, one block per call as z-lab
drafts), gives the same block hidden states, unary logits and selector walk as our C++ drafter on the same inputs."""
import json
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

import engine_readers as er
from test_export_engines import export, misread_by, refused_engines, target_config
from test_train import (MASK_ID, TARGET_LAYER_IDS, base_args, final_weights, offline_dir,  # noqa: F401 (fixtures)
                        target_dir, train)

SETTINGS = {"conv_kernel_size": 2, "conv_group_size": 8, "selector_rank": 4, "selector_top_k": 8}
STEPS = 3
# llama.cpp serves DFlash2 too, but its loader needs hidden_size >= selector_top_k * (selector_top_k + 1) and one
# causal flag for all layers, which this tiny drafter (hidden 32, top-K 8) and the sliding-layer one do not meet:
# export refuses llama.cpp for both, and test_llama_cpp_engine.py runs llama.cpp's own loader on drafters it serves.
SERVING = ["sglang", "vllm", "zlab"]


@pytest.fixture(scope="module")
def run(dflash_bin, target_dir, offline_dir, tmp_path_factory):  # noqa: F811
    """A few steps at a high rate, so that the convs and the successor codebook (both 0 at init) are not."""
    out = tmp_path_factory.mktemp("dflash2") / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], out, steps=STEPS, lr=3e-2, drafter_family="dflash2",
                                selector_candidates="inject", **SETTINGS))
    return out


@pytest.fixture(scope="module")
def exported(dflash_bin, run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "hf"
    r = export(dflash_bin, run, out, "--engine", ",".join(SERVING), "--dtype", "fp64")
    assert r.returncode == 0, r.stderr
    return out


def cpp_selector_walk(build, tmp_path, hidden, lm_head, anchor_tokens, w, top_k):
    """Our selector walk (dflash2_probe, the C++ candidate selector) over the drafted slots of `hidden` with the
    selector weights of `w` (a run's or an export's tensors): the probe's outputs (path, scores, ...)."""
    walk_in = {"hidden": hidden[:, 1:].contiguous(), "lm_head": lm_head, "anchors": anchor_tokens,
               "hidden_projection": w["candidate_selector.hidden_projection.weight"].double(),
               "predecessor_codebook": w["candidate_selector.predecessor_codebook"].double(),
               "successor_codebook": w["candidate_selector.successor_codebook"].double()}
    save_file(walk_in, str(tmp_path / "walk_in.safetensors"))
    r = subprocess.run([str(build / "dflash2_probe"), "walk", str(tmp_path / "walk_in.safetensors"),
                        str(tmp_path / "walk_out.safetensors"), f"top_k={top_k}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return load_file(str(tmp_path / "walk_out.safetensors"))

def test_the_export_is_in_zlab_contract(exported, run):
    cfg = json.loads((exported / "config.json").read_text())
    assert cfg["architectures"] == ["DFlash2DraftModel"] and cfg["is_causal"] is False
    assert cfg["auto_map"] == {"AutoModel": "dflash2.DFlash2DraftModel"}   # ours: test_export_remote_families.py
    dc = cfg["dflash_config"]
    assert {k: dc[k] for k in SETTINGS} == SETTINGS
    assert dc["block_size"] == 4 and dc["mask_token_id"] == MASK_ID and dc["target_layer_ids"] == TARGET_LAYER_IDS
    _, tensors = er.read_folder(exported)
    expected = dict(er.backbone_params(cfg, len(TARGET_LAYER_IDS)),
                    **er.dflash2_params(cfg, 2, 8, 4))    # bare codebook names, no embed_tokens or lm_head
    assert {k: v[1] for k, v in tensors.items()} == expected
    assert all(v[0] == "F64" for v in tensors.values())
    # the export is the checkpoint, bit for bit
    w = final_weights(run, STEPS)
    got = load_file(str(exported / "model.safetensors"))
    assert set(got) == set(w)
    for k, t in w.items():
        assert torch.equal(got[k], t.double()), k
    assert w["candidate_selector.successor_codebook"].abs().sum() > 0
    assert w["layers.0.attention_conv.kernel_projection.weight"].abs().sum() > 0


@pytest.mark.parametrize("engine", SERVING)
def test_each_serving_engine_reads_it_as_trained(exported, target_dir, engine):  # noqa: F811
    read = er.read(engine, exported, target_config(target_dir))
    assert read.loads, read.errors
    assert not read.missing and not read.ignored and not read.reported and not read.silent, read
    s = read.settings
    assert s["family"] == "dflash2" and s["block_size"] == 4 and s["target_layer_ids"] == TARGET_LAYER_IDS
    if engine != "llama.cpp":   # the GGUF carries no mask id (the reader says where it reads it)
        assert s["mask_token_id"] == MASK_ID
    for k, v in SETTINGS.items():
        assert s.get(k, v) == v, k


def test_vllm_misreads_a_serving_block_other_than_the_trained_one(exported, target_dir):  # noqa: F811
    """The folder cannot stop it: docs/SERVING.md tells to serve with num_speculative_tokens = block_size - 1."""
    assert not er.read("vllm", exported, target_config(target_dir), num_speculative_tokens=3).silent
    assert er.read("vllm", exported, target_config(target_dir), num_speculative_tokens=5).silent


def test_engine_all_refuses_exactly_the_engines_that_misread_it(dflash_bin, run, exported, target_dir,  # noqa: F811
                                                                tmp_path):
    r = export(dflash_bin, run, tmp_path / "hf", "--engine", "all")
    assert r.returncode == 1
    refused, line = refused_engines(r.stderr)
    assert refused == {"speculators", "llama.cpp"}, line
    assert "speculators (does not serve the dflash2 family)" in line
    assert "llama.cpp (selector_top_k 8 at hidden_size 32" in line  # its loader's lattice check
    assert misread_by(exported, target_config(target_dir)) == refused


# ------------------------------------------------------------------------------ z-lab's forward == ours ----

def test_zlab_block_logits_equal_the_cpp_drafter_in_fp64(dflash_bin, run, exported, tmp_path):
    config, W = er.zlab_dflash2_load(exported)   # raises on a missing or unexpected key
    assert "candidate_selector.successor_codebook.weight" in W
    build = pathlib.Path(dflash_bin).parent
    H, V, B = config["hidden_size"], config["vocab_size"], config["dflash_config"]["block_size"]
    g = torch.Generator().manual_seed(7)
    S, anchors = 22, [3, 8, 14, 17]
    ids = torch.randint(0, V - 1, (1, S), generator=g)
    batch = {"target_features": torch.randn(1, S, len(TARGET_LAYER_IDS) * H, generator=g, dtype=torch.float64),
             "input_ids": ids, "loss_mask": torch.ones(1, S, dtype=torch.uint8),
             "anchors": torch.tensor([anchors]), "keep": torch.ones(1, len(anchors), dtype=torch.uint8),
             "embed": torch.randn(V, H, generator=g, dtype=torch.float64),
             "lm_head": torch.randn(V, H, generator=g, dtype=torch.float64) / H ** 0.5}
    save_file(batch, str(tmp_path / "batch.safetensors"))
    out = tmp_path / "ours.safetensors"
    # our C++ drafter reads the very folder z-lab reads: its config.json and model.safetensors
    r = subprocess.run([str(build / "drafter_cli"), "drafter", "selftest", "--config", str(exported / "config.json"),
                        "--weights", str(exported / "model.safetensors"),
                        "--batch", str(tmp_path / "batch.safetensors"),
                        "--out", str(out), "--dtype", "float64", "--chunk-rows", str(B)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ours = load_file(str(out))
    hidden, logits = ours["hidden"][0].view(len(anchors), B, H), ours["logits"][0].view(len(anchors), B, V)

    # our selector walk (dflash2_probe, the C++ candidate selector) on our hidden states, with the run's own weights
    w = final_weights(run, STEPS)
    walk = cpp_selector_walk(build, tmp_path, hidden, batch["lm_head"], ids[0, anchors].contiguous(), w,
                             SETTINGS["selector_top_k"])

    for n, a in enumerate(anchors):
        h, u = er.zlab_dflash2_block(config, W, batch["embed"], batch["lm_head"], batch["target_features"][0, :a],
                                     int(ids[0, a]), a)
        for name, x, y in (("hidden", hidden[n], h), ("logits", logits[n], u)):
            err = (x - y).abs().max().item()
            assert err <= 1e-10 * y.abs().max().item(), (name, n, err)
        path, scores = er.zlab_dflash2_greedy_walk(config, W, h, u, int(ids[0, a]))
        assert torch.equal(walk["path"][n], path), n
        assert (walk["scores"][n] - scores).abs().max().item() <= 1e-10 * scores.abs().max().item(), n


def test_sliding_layers_are_exported_so_engines_run_them_as_trained(dflash_bin, run, target_dir, offline_dir,  # noqa: F811
                                                                    tmp_path):
    """Training makes a sliding layer causal inside its block and a full layer bidirectional. z-lab, SGLang and vLLM
    take a top-level is_causal for every layer and, without it, do the same as training: so a DFlash2 drafter with
    sliding layers is exported without is_causal (with is_causal false its sliding layers would run bidirectional:
    test_engine_readers.py), and one with full layers only keeps is_causal false (test_the_export_is_in_zlab_contract)."""
    cfg = json.loads((run / "drafter_config.json").read_text())
    cfg.update(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    (tmp_path / "drafter.json").write_text(json.dumps(cfg))
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", steps=1,
                                drafter_config=tmp_path / "drafter.json"))
    out = tmp_path / "hf"
    r = export(dflash_bin, tmp_path / "run", out, "--engine", ",".join(SERVING))
    assert r.returncode == 0, r.stderr
    exported_cfg = json.loads((out / "config.json").read_text())
    assert "is_causal" not in exported_cfg
    assert exported_cfg["layer_types"] == ["sliding_attention", "full_attention"]
    for engine in ("zlab", "sglang", "vllm"):
        read = er.read(engine, out, target_config(target_dir))
        assert read.loads, (engine, read.errors)
        assert read.settings["layer_causal"] == [True, False] and not read.silent, (engine, read.silent)
