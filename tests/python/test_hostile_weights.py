"""Hostile target weights (issue 49, class 4) on tiny random MoE models: NaN/Inf weights, as stored, after
dequantisation (MXFP4, GGUF) or after the conversion to the model's dtype, are refused naming the tensor (an MXFP4
scale byte of 255 used to load and generate token 0 forever with exit 0), and a checkpoint that holds the same
expert weights in two encodings is refused instead of one being dropped without a word."""
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import test_target_gguf_moe as gguf_moe
from target_run import ENV, TIMEOUT
from test_target_gpt_oss import gpt_oss, mxfp4_folder
from test_target_moe import qwen3_moe

PREFIX = "dflash: error: "


def refused(dflash_bin, model, *parts, extra=()):
    """`target generate` exits 1 with one error line (after any notes) naming every part, and generates nothing."""
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(model), "--prompt-ids", "1,2", "--max-new",
                        "4", *extra], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "", r.stdout
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(PREFIX) and all(not l.startswith(PREFIX) for l in lines[:-1]), r.stderr
    assert "frame #" not in r.stderr and "Exception raised from" not in r.stderr, r.stderr
    for p in parts:
        assert p in lines[-1], (p, lines[-1])
    return lines[-1]


@pytest.fixture(scope="module")
def mx(tmp_path_factory):
    """A gpt-oss folder with MXFP4 experts, and its tensors as written."""
    d = tmp_path_factory.mktemp("mx")
    return d, mxfp4_folder(gpt_oss(seed=1), d)


def variant(folder, d, edit):
    """A copy of a model folder (path, its tensors as written) whose tensors `edit` changed."""
    src, sd = folder
    d.mkdir()
    (d / "config.json").write_text((src / "config.json").read_text())
    sd = {k: v.clone() for k, v in sd.items()}
    edit(sd)
    save_file(sd, str(d / "model.safetensors"))
    return d


def test_mxfp4_scale_byte_255_is_refused(dflash_bin, mx, tmp_path):
    """255 is E8M0's NaN (transformers reads it as 2^128): the byte and where it sits are named."""
    def edit(sd):
        sd["model.layers.1.mlp.experts.down_proj_scales"][2, 3, 0] = 255
    refused(dflash_bin, variant(mx, tmp_path / "nan", edit),
            "MXFP4 tensor 'model.layers.1.mlp.experts.down_proj_scales' holds the byte 255 at [2, 3, 0] (NaN in E8M0")


def test_mxfp4_values_that_overflow_float32_are_refused(dflash_bin, mx, tmp_path):
    """A scale byte of 254 times the code 6 is 6 x 2^127: inf in float32, refused after dequantisation."""
    def edit(sd):
        sd["model.layers.0.mlp.experts.gate_up_proj_scales"][1, 5, 1] = 254
        sd["model.layers.0.mlp.experts.gate_up_proj_blocks"][1, 5, 1, 0] = 0x77  # codes 7, 7: +6, +6
    refused(dflash_bin, variant(mx, tmp_path / "inf", edit), "tensor 'model.layers.0.mlp.experts.gate_up_proj' holds",
            "NaN/Inf values", "(the first at [1, 5, 32])", "after dequantising its MXFP4")


def test_mxfp4_and_plain_experts_together_are_refused(dflash_bin, mx, tmp_path):
    def edit(sd):
        sd["model.layers.2.mlp.experts.down_proj"] = torch.zeros(5, 32, 64)
    refused(dflash_bin, variant(mx, tmp_path / "both", edit),
            "'model.layers.2.mlp.experts.down_proj' is stored twice: as a plain tensor and as MXFP4 "
            "'model.layers.2.mlp.experts.down_proj_blocks' (two encodings of the same weights")


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3_moe")
    qwen3_moe().save_pretrained(str(d))
    return d, load_file(str(d / "model.safetensors"))


def test_nan_in_stored_weights_is_refused(dflash_bin, moe, tmp_path):
    name = "model.layers.1.self_attn.k_proj.weight"

    def edit(sd):
        sd[name][3, 4] = float("nan")
        sd[name][5, 0] = float("inf")
    refused(dflash_bin, variant(moe, tmp_path / "nan", edit),
            f"tensor '{name}' holds 2 NaN/Inf values of ", "(the first at [3, 4])")


def test_a_weight_beyond_fp16_is_refused_in_fp16(dflash_bin, moe, tmp_path):
    """1e5 is a float32 weight, but inf in fp16: named as the conversion's doing."""
    name = "model.layers.0.mlp.gate.weight"

    def edit(sd):
        sd[name][0, 0] = 1e5
    d = variant(moe, tmp_path / "big", edit)
    refused(dflash_bin, d, f"tensor '{name}' holds 1 NaN/Inf value of", "after conversion to Half (values beyond",
            extra=["--dtype", "fp16"])


def test_fused_and_per_expert_tensors_together_are_refused(dflash_bin, moe, tmp_path):
    def edit(sd):
        fused = [k for k in sd if k.endswith("mlp.experts.gate_up_proj")]
        if fused:  # the fused layout as saved: add one expert's tensor of the published layout
            sd["model.layers.0.mlp.experts.3.up_proj.weight"] = torch.zeros(16, 32)
        else:  # the published layout as saved: add the fused tensor
            sd["model.layers.0.mlp.experts.gate_up_proj"] = torch.zeros(6, 32, 32)
    err = refused(dflash_bin, variant(moe, tmp_path / "both", edit), "the experts are stored twice: fused ",
                  "(two encodings of the same weights; keep one)")
    assert "model.layers.0.mlp.experts." in err


def test_gguf_nan_after_dequantisation_is_named_as_the_file_names_it(dflash_bin, tmp_path):
    model = gguf_moe.tiny_qwen3_moe()
    down = np.zeros((6, 64, 32), np.float32)
    down[4, 10, 3] = np.nan
    p = tmp_path / "nan.gguf"
    gguf_moe.write_qwen3moe_gguf(model, p, replace={"blk.1.ffn_down_exps.weight": down})
    refused(dflash_bin, p, "tensor 'blk.1.ffn_down_exps.weight' holds 1 NaN/Inf value of 12288 (the first at [4, 10, 3])",
            "in GGUF '", "after dequantising F32")


def test_gguf_per_expert_tensors_beside_stacked_ones_are_refused(dflash_bin, tmp_path, monkeypatch):
    model = gguf_moe.tiny_qwen3_moe()
    tensors = gguf_moe.converter_tensors
    monkeypatch.setattr(gguf_moe, "converter_tensors",
                        lambda m: tensors(m) + [("blk.2.ffn_gate.0.weight", np.zeros((32, 64), np.float32))])
    p = tmp_path / "both.gguf"
    gguf_moe.write_qwen3moe_gguf(model, p, skip={"none"})  # a skip set: no reference copy-back of the extra tensor
    refused(dflash_bin, p, "tensor 'blk.2.ffn_gate.0.weight' sits beside the stacked experts 'blk.2.ffn_gate_exps.weight' "
            "of routed layer 2 (two encodings of the same weights; keep one)")
