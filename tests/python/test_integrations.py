"""dflash.integrations: the fused attention as a transformers attention function ("anchor_block"), inside the
transformers-style DFlash drafter of examples/transformers_drafter.py.

- fp64: one drafter layer (GQA, full and sliding-window, dropped blocks, anchors at 0 and S) through the registered
  attention equals the same layer on transformers' SDPA with the dense mask of docs/DFLASH.md (attention_reference.py): output and
  the gradients of its input, the context features and every parameter. The mask reaches the function as mask
  arguments, as the `anchor_block_mask=` keyword through the forward, or as the dense mask itself.
- Dense masks are read back exactly, and anything that is not a DFlash mask is refused.
- The name has no "flash" (transformers 5 would take it for a hub kernel); importing dflash needs no transformers.
- The example trains: the same losses with "anchor_block" and with "sdpa".
"""
import copy
import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils.generic import is_flash_attention_requested

import dflash
import dflash.integrations as di
from attention_reference import anchor_block_mask

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import transformers_drafter as td  # noqa: E402

di.register()
S, N, B = 21, 4, 4
ANCHORS = torch.tensor([[0, 7, 13, S], [5, 5, 20, 2]])
KEEP = torch.tensor([[True, True, True, True], [True, False, True, False]])


def tiny_layer(layer_type, attn):
    target = td.tiny_target().config
    config = td.drafter_config(target, block_size=B, window=5)
    config.layer_types = [layer_type, layer_type]
    config._attn_implementation = attn
    torch.manual_seed(3)
    layer = td.DraftLayer(config, 0).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))  # the norms too: their gradients count
    return layer


def run_layer(layer, mask, **kwargs):
    g = torch.Generator().manual_seed(5)
    H = layer.input_layernorm.weight.numel()
    x = torch.randn(2, N * B, H, generator=g, dtype=torch.float64, requires_grad=True)
    ctx = torch.randn(2, S, H, generator=g, dtype=torch.float64, requires_grad=True)
    m = dflash.block_mask_args(ANCHORS, KEEP, B, S)
    rotary = td.Qwen3RotaryEmbedding(layer.self_attn.config)
    cos, sin = (t.double() for t in rotary(x, m.key_positions))
    out = layer(x, ctx, cos, sin, mask, **kwargs)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    params = [p for _, p in sorted(layer.named_parameters())]
    grads = torch.autograd.grad(out, [x, ctx, *params], dout)
    return [out, *grads]


@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
@pytest.mark.parametrize("channel", ["mask_args", "keyword", "dense"])
def test_layer_equals_sdpa_with_the_dense_mask_in_fp64(layer_type, channel):
    sdpa_layer = tiny_layer(layer_type, "sdpa")
    ours_layer = copy.deepcopy(sdpa_layer)  # the same weights, its own config
    ours_layer.self_attn.config._attn_implementation = di.ATTENTION_NAME
    assert sdpa_layer.self_attn.config._attn_implementation == "sdpa"
    window = sdpa_layer.self_attn.sliding_window or 0
    dense = anchor_block_mask(ANCHORS, KEEP, S, N, B, window)[:, None]  # [b, 1, N*B, S+N*B], as SpecForge builds it
    want = run_layer(sdpa_layer, dense)
    m = di.block_mask(ANCHORS, KEEP, B, S)
    if channel == "mask_args":
        got = run_layer(ours_layer, m)
    elif channel == "keyword":
        got = run_layer(ours_layer, None, anchor_block_mask=m)
    else:
        got = run_layer(ours_layer, dense)
    for i, (a, b) in enumerate(zip(got, want)):
        assert b.abs().max() > 0, f"result {i} is zero: the comparison would be blind"
        assert (a - b).abs().max() <= 1e-10 * b.abs().max(), (i, (a - b).abs().max().item())


@pytest.mark.parametrize("window", [0, 3, 9])
def test_dense_masks_are_read_back_exactly(window):
    dense = anchor_block_mask(ANCHORS, KEEP, S, N, B, window)
    m = di.block_mask_from_dense(dense[:, None], B, window)
    assert torch.equal(m.dense_mask(2), dense)
    assert torch.equal(m.keep, KEEP) and torch.equal(m.anchors[KEEP], ANCHORS[KEEP])


def test_what_is_not_a_dflash_mask_is_refused():
    dense = anchor_block_mask(ANCHORS, KEEP, S, N, B)
    flipped = dense.clone()
    flipped[0, 5, 3] = ~flipped[0, 5, 3]
    with pytest.raises(ValueError, match="not the DFlash mask of any anchors"):
        di.block_mask_from_dense(flipped, B)
    # SpecForge's sliding mask also bounds the window inside the block; with a window narrower than the block that
    # is another mask than the op's (causal in the block only): refused, not silently changed.
    narrow = anchor_block_mask(ANCHORS, KEEP, S, N, B, 2)
    slot = torch.arange(N * B) % B
    key_slot = (torch.arange(S + N * B) - S) % B
    narrow[:, :, S:] &= key_slot[None, None, S:] >= slot[None, :, None] - 1
    with pytest.raises(ValueError, match="not the DFlash mask"):
        di.block_mask_from_dense(narrow, B, 2)
    with pytest.raises(ValueError, match="boolean mask"):
        di.block_mask_from_dense(torch.zeros(2, N * B, S + N * B), B)
    q = torch.zeros(2, 4, N * B, 16, dtype=torch.float64)
    kv = torch.zeros(2, 2, S + N * B, 16, dtype=torch.float64)
    m = di.block_mask(ANCHORS, KEEP, B, S)
    with pytest.raises(ValueError, match="no dropout"):
        di.anchor_block_attention_forward(None, q, kv, kv, m, dropout=0.1)
    with pytest.raises(ValueError, match="needs the DFlash mask"):
        di.anchor_block_attention_forward(None, q, kv, kv, None)
    with pytest.raises(ValueError, match="window 3 but the layer's sliding_window is 5"):
        di.anchor_block_attention_forward(None, q, kv, kv, dataclasses.replace(m, window=3), sliding_window=5)


def test_the_registered_name_is_one_transformers_accepts():
    assert di.register() == "anchor_block" and ALL_ATTENTION_FUNCTIONS["anchor_block"] is di.anchor_block_attention_forward
    assert not is_flash_attention_requested(requested_attention_implementation="anchor_block")
    assert is_flash_attention_requested(requested_attention_implementation="dflash")  # why not "dflash"
    with pytest.raises(ValueError, match="contains 'flash'"):
        di.register("dflash")
    drafter = td.DFlashDrafter(td.drafter_config(td.tiny_target().config))
    drafter.set_attn_implementation("anchor_block")
    assert drafter.config._attn_implementation == "anchor_block"
    AttentionInterface.register("dflash", di.anchor_block_attention_forward)  # what the shim users tried
    try:
        with pytest.raises(Exception):
            drafter.set_attn_implementation("dflash")
    finally:
        del AttentionInterface._global_mapping["dflash"]


def test_importing_dflash_needs_no_transformers():
    code = "import sys, dflash, dflash.integrations; assert 'transformers' not in sys.modules, 'imported'"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"),
               DFLASH_OPS_LIBRARY=str(pathlib.Path(os.environ.get("DFLASH_BUILD_DIR", ROOT / "build")) / "libdflash_ops.so"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_example_trains_the_same_with_anchor_block_and_sdpa():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"),
               DFLASH_OPS_LIBRARY=str(pathlib.Path(os.environ.get("DFLASH_BUILD_DIR", ROOT / "build")) / "libdflash_ops.so"))
    losses = {}
    for attn in ("anchor_block", "sdpa"):
        r = subprocess.run([sys.executable, str(ROOT / "examples" / "transformers_drafter.py"), "--steps", "3",
                            "--attn", attn], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        losses[attn] = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(losses["anchor_block"]) == 3 and losses["anchor_block"][-1] < losses["anchor_block"][0]
    assert losses["anchor_block"] == pytest.approx(losses["sdpa"], rel=1e-4)
