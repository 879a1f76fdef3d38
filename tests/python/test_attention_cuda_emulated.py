"""The CUDA attention kernels' own code, run on the CPU under an emulation of the CUDA execution
model (tests/ops/cuda_emu): coroutine threads, __syncthreads, warp shuffles/votes and mma.sync
rebuilt from the PTX fragment layout. It checks the kernels' index math, masking, tiling and
synchronisation without a GPU (not timing, not the hardware's rounding inside mma).

Same reference and budget as test_attention_cuda.py: a dense fp64 computation of the SPEC mask
from the same rounded inputs; our error <= 2x that of PyTorch's own low-precision dense computation
(on the CPU here) + a small floor. Sizes are small: the emulation runs ~1e5 warp collectives/s.
"""
import pytest
import torch

from conftest import BUILD
from attention_reference import anchor_block_mask, masked_lse
from test_attention_cuda import make_anchors, make_ctx_start, run_dense

LIB = BUILD / "libdflash_cuda_emu.so"
if not LIB.exists():
    pytest.skip(f"{LIB} not built", allow_module_level=True)
torch.ops.load_library(str(LIB))

# (batch, S, N, B, Hq, Hkv, D, window, anchor kind)
CASES = [
    (2, 40, 3, 8, 4, 2, 64, 0, "edges"),
    (1, 5, 3, 16, 2, 1, 64, 0, "edges"),          # S < B
    (2, 70, 4, 16, 2, 2, 64, 9, "all_dropped"),    # window; batch 1 drops every block
    (1, 20, 2, 4, 8, 1, 128, 0, "edges"),          # 8 q-heads per KV head
    (1, 33, 2, 16, 2, 1, 256, 5, "edges"),         # D = 256 (32-key forward tiles)
    (1, 150, 5, 10, 6, 2, 64, 0, "edges"),         # 3 q-heads x 10 slots: blocks straddle row tiles
    (1, 0, 2, 16, 1, 1, 64, 0, "edges"),           # no context
    (1, 12, 5, 1, 1, 1, 64, 0, "edges"),           # B = 1
    (1, 130, 3, 80, 1, 1, 64, 0, "edges"),         # B > 64: own keys in two tiles
    (1, 200, 4, 16, 4, 4, 64, 0, "edges"),         # several context tiles, full (unmasked) tiles
    (1, 100, 5, 16, 8, 1, 64, 0, "edges"),         # 128 rows per block: many row tiles per key tile
    (2, 260, 10, 8, 4, 2, 64, 0, "packed"),        # packed rows: each block sees only its own document
    (1, 200, 6, 16, 2, 1, 128, 40, "packed"),      # ... and its sliding window; skipped row tiles
]


def _run(dtype, case):
    batch, S, N, B, Hq, Hkv, D, window, kind = case
    gen = torch.Generator().manual_seed(1000 + S * 7 + N * 3 + B + D + window)
    T, Tk = N * B, S + N * B
    q = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    k = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    v = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    dout = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    anchors, keep = make_anchors(gen, batch, N, S, kind)
    starts = make_ctx_start(gen, anchors, S, kind)
    scale = D ** -0.5
    mask = anchor_block_mask(anchors, keep, S, N, B, window, starts)
    ref = run_dense(q.double(), k.double(), v.double(), mask, scale, dout.double())
    lowp = [t.double() for t in run_dense(q, k, v, mask, scale, dout)]

    out, lse = torch.ops.dflash_emu.anchor_block_attention_fwd(q, k, v, anchors, keep, B, window, scale, starts)
    dq, dk, dv = torch.ops.dflash_emu.anchor_block_attention_bwd(dout, q, k, v, out, lse, anchors, keep, B, window,
                                                                 scale, starts)
    ours = [t.double() for t in (out, dq, dk, dv)]
    eps = torch.finfo(dtype).eps
    for name, r, t, o in zip(["out", "dq", "dk", "dv"], ref, lowp, ours):
        assert torch.isfinite(o).all(), f"{name}: non-finite values (uninitialised shared memory or a bad read?)"
        err_lowp, err_ours = (t - r).abs().max().item(), (o - r).abs().max().item()
        floor = 0.5 * eps * r.abs().max().item() + 1e-6
        assert err_ours <= 2 * err_lowp + floor, (
            f"{name}: max error {err_ours:.3e} vs PyTorch {dtype} dense {err_lowp:.3e} (floor {floor:.1e}), case {case}")

    row_keep = keep[:, torch.arange(T) // B]
    assert (ours[0][~row_keep] == 0).all() and (ours[1][~row_keep] == 0).all()
    lse_t = lse.transpose(1, 2).double()
    assert torch.isneginf(lse_t[~row_keep]).all()
    if row_keep.any():
        ref_lse = masked_lse(q.double(), k.double(), mask, scale).transpose(1, 2)
        assert (lse_t[row_keep] - ref_lse[row_keep]).abs().max().item() < 1e-4 * max(1.0, ref_lse[row_keep].abs().max().item())
    unseen = ~mask.any(1)
    assert (ours[2][unseen] == 0).all() and (ours[3][unseen] == 0).all()


@pytest.mark.parametrize("case", CASES, ids=[f"S{c[1]}_N{c[2]}_B{c[3]}_H{c[4]}x{c[5]}_D{c[6]}_W{c[7]}" for c in CASES])
def test_emulated_bf16_matches_dense_fp64(case):
    _run(torch.bfloat16, case)


@pytest.mark.parametrize("case", [CASES[0], CASES[5]], ids=["small", "straddle"])
def test_emulated_fp16_matches_dense_fp64(case):
    _run(torch.float16, case)
