"""The C++ drafter against reference_drafter.py (plain PyTorch from docs/DFLASH.md, dense mask): same weights and
batch through safetensors -> same logits, loss and every parameter gradient."""
import json
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

import reference_drafter as ref

SELFTEST = pathlib.Path(__file__).resolve().parents[0]


def make_config(tie=False):
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4,
        "num_target_layers": 8, "num_hidden_layers": 3,
        "dflash_config": {"mask_token_id": 61, "target_layer_ids": [1, 4, 6]},
        "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"], "sliding_window": 5,
        "vocab_size": 64, "tie_word_embeddings": tie,
    }


def make_case(tmp_path, cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    H, V, b, S = cfg["hidden_size"], cfg["vocab_size"], 2, 23
    n_feat = len(cfg["dflash_config"]["target_layer_ids"]) * H
    shapes = {
        "fc.weight": (H, n_feat), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    Q, K, I, D = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"], \
        cfg["intermediate_size"], cfg["head_dim"]
    per = {"input_layernorm.weight": (H,), "self_attn.q_proj.weight": (Q, H), "self_attn.k_proj.weight": (K, H),
           "self_attn.v_proj.weight": (K, H), "self_attn.o_proj.weight": (H, Q), "self_attn.q_norm.weight": (D,),
           "self_attn.k_norm.weight": (D,), "post_attention_layernorm.weight": (H,),
           "mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H), "mlp.down_proj.weight": (H, I)}
    for i in range(cfg["num_hidden_layers"]):
        for k, s in per.items():
            shapes[f"layers.{i}.{k}"] = s
    weights = {}
    for name, s in shapes.items():
        if len(s) == 1:
            weights[name] = 1 + 0.2 * torch.randn(s, generator=g, dtype=torch.float64)
        else:
            weights[name] = torch.randn(s, generator=g, dtype=torch.float64) / s[1] ** 0.5
    input_ids = torch.randint(0, 60, (b, S), generator=g)
    loss_mask = torch.ones(b, S, dtype=torch.bool)
    loss_mask[:, :4] = False
    loss_mask[1, 12] = False
    # Blocks: normal ones, one past the end of the sequence, one overlapping a masked label, invalid ones.
    anchors = torch.tensor([[4, 9, 15, 21, 0, 0], [5, 11, 13, 20, 22, 0]])
    keep = torch.tensor([[True, True, True, True, False, False], [True, True, False, True, True, False]])
    batch = {
        "target_features": torch.randn(b, S, n_feat, generator=g, dtype=torch.float64),
        "target_last_hidden": torch.randn(b, S, H, generator=g, dtype=torch.float64),
        "input_ids": input_ids, "loss_mask": loss_mask.to(torch.uint8), "anchors": anchors,
        "keep": keep.to(torch.uint8), "embed": torch.randn(V, H, generator=g, dtype=torch.float64),
    }
    if not cfg["tie_word_embeddings"]:
        batch["lm_head"] = torch.randn(V, H, generator=g, dtype=torch.float64)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp_path / "model.safetensors"))
    save_file({k: v.contiguous() for k, v in batch.items()}, str(tmp_path / "batch.safetensors"))
    return weights, batch


def run_reference(cfg, weights, batch, dtype, kl_weight):
    W = {k: v.to(dtype).clone().requires_grad_(True) for k, v in weights.items()}
    embed = batch["embed"].to(dtype)
    lm_head = batch["lm_head"].to(dtype) if "lm_head" in batch else embed
    B = cfg["block_size"]
    block_ids, labels, w, tpos = ref.block_targets(batch["input_ids"], batch["loss_mask"].bool(), batch["anchors"],
                                                   batch["keep"].bool(), B, cfg["dflash_config"]["mask_token_id"],
                                                   ref.default_gamma(B))
    hidden = ref.drafter_hidden(cfg, W, embed, batch["target_features"].to(dtype), block_ids, batch["anchors"],
                                batch["keep"].bool())
    loss, logits = ref.drafter_loss(hidden, lm_head, labels, w, batch["target_last_hidden"].to(dtype), tpos,
                                    kl_weight)
    loss.backward()
    return {"loss": loss.detach(), "logits": logits.detach(), "labels": labels, "weights": w,
            "block_ids": block_ids, **{"grad." + k: v.grad for k, v in W.items()}}


def run_ours(build_dir, tmp_path, dtype, kl_weight, checkpoint, chunk_rows=7, gamma=0):
    out = tmp_path / f"out_{dtype}_{checkpoint}_{kl_weight}_{gamma}.safetensors"
    subprocess.run([str(build_dir / "drafter_cli"), "drafter", "selftest", "--config", str(tmp_path / "config.json"),
                    "--weights", str(tmp_path / "model.safetensors"), "--batch", str(tmp_path / "batch.safetensors"),
                    "--out", str(out), "--dtype", dtype, "--kl-weight", str(kl_weight), "--activation-checkpoint", checkpoint,
                    "--chunk-rows", str(chunk_rows)] + (["--loss-decay", "none"] if gamma == "inf" else ["--gamma", str(gamma)]), check=True, capture_output=True, text=True)
    return load_file(str(out))


def assert_close(name, ours, theirs, rtol):
    ours, theirs = ours.double(), theirs.double()
    assert ours.shape == theirs.shape, f"{name}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    scale = max(theirs.abs().max().item(), 1e-30)
    err = (ours - theirs).abs().max().item()
    assert err <= rtol * scale, f"{name}: max abs diff {err:.3g} > {rtol} x {scale:.3g}"


@pytest.fixture(scope="module")
def build_dir(dflash_bin):
    return pathlib.Path(dflash_bin).parent


@pytest.mark.parametrize("dtype,rtol,kl_weight,checkpoint,tie", [
    ("float64", 1e-9, 0.0, "none", False),
    ("float64", 1e-9, 0.15, "none", False),
    ("float64", 1e-9, 0.15, "layer", True),
    ("float64", 1e-9, 0.15, "every:2", False),
    ("float32", 1e-4, 0.15, "none", False),
])
def test_drafter_matches_reference(tmp_path, build_dir, dtype, rtol, kl_weight, checkpoint, tie):
    cfg = make_config(tie)
    weights, batch = make_case(tmp_path, cfg)
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    expect = run_reference(cfg, weights, batch, tdtype, kl_weight)
    got = run_ours(build_dir, tmp_path, dtype, kl_weight, checkpoint)
    assert torch.equal(got["block_ids"], expect["block_ids"])
    assert torch.equal(got["labels"], expect["labels"])
    assert_close("weights", got["weights"], expect["weights"], 1e-12)
    assert_close("loss", got["loss"].reshape(()), expect["loss"], rtol)
    assert_close("logits", got["logits"], expect["logits"], rtol)
    names = ref.weight_names(cfg["num_hidden_layers"])
    assert set(k for k in got if k.startswith("grad.")) == {"grad." + n for n in names}
    for n in names:
        g = expect["grad." + n]
        assert g is not None and g.abs().max() > 0, f"reference gradient of {n} is zero: the test would be blind"
        assert_close("grad." + n, got["grad." + n], g, rtol)


def test_bf16_error_is_within_twice_the_reference_bf16_error(tmp_path, build_dir):
    """bf16: our relative L2 error vs the fp64 reference is at most 2x the plain-PyTorch bf16 reference's own
    (bf16 rounding differs in order, so exact agreement is not expected; a real bug is far outside 2x)."""
    cfg = make_config()
    weights, batch = make_case(tmp_path, cfg, seed=1)
    exact = run_reference(cfg, weights, batch, torch.float64, 0.15)
    low = run_reference(cfg, weights, batch, torch.bfloat16, 0.15)
    got = run_ours(build_dir, tmp_path, "bfloat16", 0.15, "layer")
    for name in ["loss", "logits"] + ["grad." + n for n in ref.weight_names(cfg["num_hidden_layers"])]:
        truth = exact[name].double()
        ours_err = (got[name].double().reshape(truth.shape) - truth).norm().item() / truth.norm().item()
        ref_err = (low[name].double() - truth).norm().item() / truth.norm().item()
        assert ours_err <= 2 * ref_err + 1e-3, f"{name}: bf16 relative error {ours_err:.3g} vs reference bf16 {ref_err:.3g}"


def test_no_decay_loss_is_the_plain_mean_ce_over_kept_labels(tmp_path, build_dir):
    """gamma = inf (`loss_decay: none`): every counted label weighs 1, and the loss is the unweighted mean of the
    reference's cross-entropy over exactly the labels the decayed loss counts."""
    cfg = make_config()
    weights, batch = make_case(tmp_path, cfg)
    got = run_ours(build_dir, tmp_path, "float64", 0.0, "none", gamma="inf")
    decayed = run_reference(cfg, weights, batch, torch.float64, 0.0)
    counted = decayed["weights"] > 0
    assert torch.equal(got["weights"], counted.double())
    logp = torch.log_softmax(decayed["logits"], -1)
    ce = -logp.gather(-1, decayed["labels"][..., None]).squeeze(-1)
    assert_close("loss", got["loss"].reshape(()), ce[counted].mean(), 1e-12)
    assert abs(got["loss"].item() - decayed["loss"].item()) > 1e-6  # the decay mattered: the test can fail
