"""Exported drafters load like released DFlash drafters: AutoModel.from_pretrained(dir, trust_remote_code=True)
builds the DFlash drafter from the dflash.py that `dflash export` writes, loads every tensor, and drafts
exactly what dflash's own drafter computes (the C++ drafter through `drafter_cli drafter selftest`, float64)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import test_drafter_reference as tdr
from test_train import base_args, final_weights, offline_dir, target_dir, train  # noqa: F401 (fixtures)

HERE = pathlib.Path(__file__).resolve().parent
REMOTE_CODE = HERE.parents[1] / "src" / "families" / "dflash" / "remote_code" / "dflash.py"


def load_with_transformers(folder, batch, tmp_path):
    out = tmp_path / "hf_out.safetensors"
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "hf_modules"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    r = subprocess.run([sys.executable, str(HERE / "hf_remote_load.py"), str(folder), str(batch), str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), load_file(str(out))


def dflash_selftest(build_dir, folder, batch, tmp_path):
    out = tmp_path / "ours.safetensors"
    subprocess.run([str(build_dir / "drafter_cli"), "drafter", "selftest", "--config", str(folder / "config.json"),
                    "--weights", str(folder / "model.safetensors"), "--batch", str(batch), "--out", str(out),
                    "--dtype", "float64"], check=True, capture_output=True, text=True, timeout=300)
    return load_file(str(out))


def assert_same_drafts(hf, ours, keep, B, rtol=1e-9):
    """rtol 1e-9: float64 on both sides. A scaled RoPE type takes transformers' float32 frequencies in dflash.py
    (its own ROPE_INIT_FUNCTIONS) against our float64 ones: a few float32 ulps, so rtol 1e-5 there."""
    rows = keep.bool().repeat_interleave(B, 1).reshape(-1)
    assert torch.equal(hf["block_ids"].reshape(-1)[rows], ours["block_ids"].reshape(-1)[rows])
    lh, lo = hf["logits"].reshape(rows.numel(), -1)[rows], ours["logits"].reshape(rows.numel(), -1)[rows]
    assert (lh - lo).abs().max().item() <= rtol * lo.abs().max().item()
    b, N = keep.shape
    our_drafts = ours["logits"].view(b, N, B, -1)[:, :, 1:].argmax(-1)
    kept = keep.bool()
    assert torch.equal(hf["drafts"][kept], our_drafts[kept])


def write_batch(path, seed, b, S, n_feat, H, V, anchors, keep):
    g = torch.Generator().manual_seed(seed)
    save_file({"target_features": torch.randn(b, S, n_feat, generator=g, dtype=torch.float64),
               "input_ids": torch.randint(3, V - 1, (b, S), generator=g),
               "loss_mask": torch.ones(b, S, dtype=torch.uint8), "anchors": anchors,
               "keep": keep.to(torch.uint8), "embed": torch.randn(V, H, generator=g, dtype=torch.float64)}, str(path))


def export(dflash_bin, run, out, dtype):
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", dtype], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return load_file(str(out / "model.safetensors"))


@pytest.mark.parametrize("master", ["fp32", "fp64"])
def test_export_writes_the_checkpoint_weights_in_the_dtype_asked_for(dflash_bin, target_dir, offline_dir,  # noqa: F811
                                                                      tmp_path, master):
    """fp64 export is the checkpoint bit for bit (an fp64 run's master weights, or an fp32 run's widened); bf16,
    fp16 and fp32 are the master weights rounded once, never through float32 first."""
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=2, dtype=master))
    weights = final_weights(run, 2)
    assert {t.dtype for t in weights.values()} == {torch.float64 if master == "fp64" else torch.float32}
    for dtype, torch_dtype in [("fp64", torch.float64), ("fp32", torch.float32), ("bf16", torch.bfloat16),
                               ("fp16", torch.float16)]:
        got = export(dflash_bin, run, tmp_path / f"hf_{dtype}", dtype)
        assert got.keys() == weights.keys()
        for name, w in weights.items():
            assert got[name].dtype == torch_dtype and torch.equal(got[name], w.to(torch_dtype)), (dtype, name)
    if master == "fp64":  # the test can fail: float32 rounding would change these weights
        assert any(not torch.equal(w.float().double(), w) for w in weights.values())


def test_exported_drafter_loads_in_transformers_and_drafts_like_dflash(dflash_bin, target_dir, offline_dir,  # noqa: F811
                                                                         tmp_path):
    run, out = tmp_path / "run", tmp_path / "hf"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=2))
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", "fp32"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "dflash.py", "model.safetensors"]
    assert (out / "dflash.py").read_text() == REMOTE_CODE.read_text()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}
    assert cfg["dtype"] == "float32" and "torch_dtype" not in cfg
    assert cfg["max_position_embeddings"] == 256  # the target's (test_train's LlamaConfig)

    H, V = cfg["hidden_size"], cfg["vocab_size"]
    anchors = torch.tensor([[6, 9, 14, 3], [7, 12, 18, 0]])
    keep = torch.tensor([[True, True, True, True], [True, True, True, False]])
    batch = tmp_path / "batch.safetensors"
    write_batch(batch, 3, 2, 24, H * len(cfg["dflash_config"]["target_layer_ids"]), H, V, anchors, keep)
    report, hf = load_with_transformers(out, batch, tmp_path)
    assert report["class"] == "DFlashDraftModel"
    assert report["missing"] == [] and report["unexpected"] == [] and report["mismatched"] == []
    assert report["differ"] == []
    stored = set(load_file(str(out / "model.safetensors")))
    assert set(report["params"]) == stored and {"fc.weight", "hidden_norm.weight", "norm.weight"} <= stored
    ours = dflash_selftest(pathlib.Path(dflash_bin).parent, out, batch, tmp_path)
    assert_same_drafts(hf, ours, keep, cfg["block_size"])


@pytest.mark.parametrize("tie", [False, True])
def test_remote_code_matches_the_drafter_with_sliding_window_layers(dflash_bin, tmp_path, tie):
    """The 3-layer reference case (sliding-window and full layers, GQA) through the modelling file."""
    cfg = tdr.make_config(tie)
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    cfg["dtype"] = "float64"
    cfg["use_sliding_window"] = True  # as `dflash export` writes it: transformers drops sliding_window otherwise
    folder = tmp_path / "drafter"
    folder.mkdir()
    tdr.make_case(folder, cfg)  # config.json, model.safetensors, batch.safetensors
    shutil.copy(REMOTE_CODE, folder / "dflash.py")
    batch = folder / "batch.safetensors"
    report, hf = load_with_transformers(folder, batch, tmp_path)
    assert report["missing"] == [] and report["unexpected"] == [] and report["differ"] == []
    ours = dflash_selftest(pathlib.Path(dflash_bin).parent, folder, batch, tmp_path)
    keep = load_file(str(batch))["keep"].bool()
    assert_same_drafts(hf, ours, keep, cfg["block_size"])


def test_a_sliding_layer_without_its_window_is_a_clear_error(tmp_path):
    """transformers' Qwen3Config drops sliding_window unless use_sliding_window is true: the modelling file
    refuses such a config instead of silently running those layers with full attention."""
    cfg = tdr.make_config(False)
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    folder = tmp_path / "drafter"
    folder.mkdir()
    tdr.make_case(folder, cfg)
    shutil.copy(REMOTE_CODE, folder / "dflash.py")
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "hf_modules"), HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, str(HERE / "hf_remote_load.py"), str(folder), str(folder / "batch.safetensors"),
                        str(tmp_path / "out.safetensors")], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0
    assert 'layer_types[0] is "sliding_attention" but sliding_window is None' in r.stderr


SCALINGS = {
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "mscale": 1.0,
             "mscale_all_dim": 0.5},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},  # positions reach 25 > max_position_embeddings 16: it grows
    "linear": {"rope_type": "linear", "factor": 2.5},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8},
}


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_remote_code_matches_the_drafter_with_rope_scaling(dflash_bin, tmp_path, name):
    """RoPE scaling in a drafter config: our drafter (float64) == transformers loading dflash.py (which takes the
    scaled frequencies from transformers' own ROPE_INIT_FUNCTIONS), and the scaling changes the logits."""
    cfg = tdr.make_config(False)
    cfg.update(auto_map={"AutoModel": "dflash.DFlashDraftModel"}, dtype="float64", use_sliding_window=True,
               max_position_embeddings=16, rope_scaling=dict(SCALINGS[name]))
    folder = tmp_path / "drafter"
    folder.mkdir()
    tdr.make_case(folder, cfg)
    shutil.copy(REMOTE_CODE, folder / "dflash.py")
    batch = folder / "batch.safetensors"
    report, hf = load_with_transformers(folder, batch, tmp_path)
    assert report["missing"] == [] and report["unexpected"] == [] and report["differ"] == []
    build = pathlib.Path(dflash_bin).parent
    ours = dflash_selftest(build, folder, batch, tmp_path)
    keep = load_file(str(batch))["keep"].bool()
    assert_same_drafts(hf, ours, keep, cfg["block_size"], rtol=1e-5)
    cfg.pop("rope_scaling")
    (folder / "config.json").write_text(json.dumps(cfg))
    plain = dflash_selftest(build, folder, batch, tmp_path)["logits"]
    assert (plain - ours["logits"]).abs().max() > 1e-3 * ours["logits"].abs().max()  # not a no-op


def test_a_scaled_target_gives_a_scaled_drafter_exported_unchanged(dflash_bin, offline_dir, tmp_path):  # noqa: F811
    """A target with yarn scaling: the drafter built from it takes the scaling, trains with it, and the export
    writes it back unchanged in both layouts (rope_theta + rope_scaling, rope_parameters); transformers reads it
    as the target's and the exported drafter drafts like ours."""
    from test_train import HIDDEN, LAYERS, VOCAB
    from tiny_models import tiny_llama
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 24}
    target = tmp_path / "target"
    tiny_llama(target, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, max_positions=64, weight_scale=None,
               rope_scaling=dict(scaling), rope_theta=5000.0)  # transformers adds rope_theta to it
    run, out = tmp_path / "run", tmp_path / "hf"
    train(dflash_bin, base_args(target, offline_dir[0], run, steps=2))
    export(dflash_bin, run, out, "fp32")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_scaling"] == scaling and cfg["rope_theta"] == 5000.0
    assert cfg["rope_parameters"] == {**scaling, "rope_theta": 5000.0}
    target_params = json.loads((target / "config.json").read_text())["rope_parameters"]
    from transformers import AutoConfig
    assert AutoConfig.from_pretrained(str(out), trust_remote_code=True).rope_parameters == target_params
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    anchors = torch.tensor([[6, 9, 14, 3], [7, 12, 18, 0]])
    keep = torch.tensor([[True, True, True, True], [True, True, True, False]])
    batch = tmp_path / "batch.safetensors"
    write_batch(batch, 3, 2, 24, H * len(cfg["dflash_config"]["target_layer_ids"]), H, V, anchors, keep)
    _, hf = load_with_transformers(out, batch, tmp_path)
    ours = dflash_selftest(pathlib.Path(dflash_bin).parent, out, batch, tmp_path)
    assert_same_drafts(hf, ours, keep, cfg["block_size"], rtol=1e-5)
