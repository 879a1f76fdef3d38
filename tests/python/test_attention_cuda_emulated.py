"""The CUDA attention kernels' own code, run on the CPU under an emulation of the CUDA execution
model (tests/ops/cuda_emu): coroutine threads, __syncthreads, warp shuffles/votes and mma.sync
rebuilt from the PTX fragment layout, and the CUDA build's own sequence of launches. It checks the
kernels' index math, masking, tiling and synchronisation without a GPU (not timing, not the
hardware's rounding inside mma).

Every tile configuration compiled in runs here: the emulated op chooses the configuration a GPU with
`smem_limit` bytes of shared memory per block gets (101,376 on sm_86/sm_89/sm_120, 232,448 on
sm_90/sm_100), gives the kernel exactly that configuration's dynamic shared memory, and runs the
deterministic dQ kernel and the chunked backward when asked.

Same reference and budget as test_attention_cuda.py: a dense fp64 computation of the DFlash mask (docs/DFLASH.md)
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
emu = torch.ops.dflash_emu

SMALL, SM80, LARGE = 101376, 166912, 232448  # shared memory per block: sm_86/89/120, sm_80, sm_90/100

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

# Per head dim, cases for every configuration (both shared-memory sizes, atomic and deterministic dQ):
# packed rows with a sliding window, and GQA with several key tiles (16-key tiles at D = 256 too).
CONFIG_CASES = {
    64: [(2, 150, 6, 8, 4, 2, 64, 24, "packed"), (1, 140, 4, 16, 4, 1, 64, 0, "edges")],
    128: [(2, 150, 6, 8, 4, 2, 128, 24, "packed"), (1, 140, 4, 16, 4, 1, 128, 0, "edges")],
    256: [(1, 120, 5, 8, 4, 2, 256, 20, "packed"), (1, 70, 3, 16, 2, 1, 256, 0, "edges")],
}


def _inputs(dtype, case):
    batch, S, N, B, Hq, Hkv, D, window, kind = case
    gen = torch.Generator().manual_seed(1000 + S * 7 + N * 3 + B + D + window)
    T, Tk = N * B, S + N * B
    q = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    k = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    v = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    dout = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    anchors, keep = make_anchors(gen, batch, N, S, kind)
    starts = make_ctx_start(gen, anchors, S, kind)
    return q, k, v, dout, anchors, keep, starts


def _emulated(q, k, v, dout, anchors, keep, starts, B, window, smem_limit=LARGE, deterministic=False,
              workspace_bytes=1 << 30):
    scale = q.shape[-1] ** -0.5
    out, lse = emu.anchor_block_attention_fwd(q, k, v, anchors, keep, B, window, scale, starts, smem_limit)
    grads = emu.anchor_block_attention_bwd(dout, q, k, v, out, lse, anchors, keep, B, window, scale, starts,
                                           smem_limit, deterministic, workspace_bytes)
    return out, lse, grads


def _run(dtype, case, **emu_args):
    batch, S, N, B, Hq, Hkv, D, window, kind = case
    q, k, v, dout, anchors, keep, starts = _inputs(dtype, case)
    T = N * B
    scale = D ** -0.5
    mask = anchor_block_mask(anchors, keep, S, N, B, window, starts)
    ref = run_dense(q.double(), k.double(), v.double(), mask, scale, dout.double())
    lowp = [t.double() for t in run_dense(q, k, v, mask, scale, dout)]

    out, lse, (dq, dk, dv) = _emulated(q, k, v, dout, anchors, keep, starts, B, window, **emu_args)
    ours = [t.double() for t in (out, dq, dk, dv)]
    eps = torch.finfo(dtype).eps
    for name, r, t, o in zip(["out", "dq", "dk", "dv"], ref, lowp, ours):
        assert torch.isfinite(o).all(), f"{name}: non-finite values (uninitialised shared memory or a bad read?)"
        err_lowp, err_ours = (t - r).abs().max().item(), (o - r).abs().max().item()
        floor = 0.5 * eps * r.abs().max().item() + 1e-6
        assert err_ours <= 2 * err_lowp + floor, (
            f"{name}: max error {err_ours:.3e} vs PyTorch {dtype} dense {err_lowp:.3e} (floor {floor:.1e}), "
            f"case {case} {emu_args}")

    row_keep = keep[:, torch.arange(T) // B]
    assert (ours[0][~row_keep] == 0).all() and (ours[1][~row_keep] == 0).all()
    lse_t = lse.transpose(1, 2).double()
    assert torch.isneginf(lse_t[~row_keep]).all()
    if row_keep.any():
        ref_lse = masked_lse(q.double(), k.double(), mask, scale).transpose(1, 2)
        assert (lse_t[row_keep] - ref_lse[row_keep]).abs().max().item() < 1e-4 * max(1.0, ref_lse[row_keep].abs().max().item())
    unseen = ~mask.any(1)
    assert (ours[2][unseen] == 0).all() and (ours[3][unseen] == 0).all()
    return out, dq, dk, dv


def _ids(cases):
    return [f"S{c[1]}_N{c[2]}_B{c[3]}_H{c[4]}x{c[5]}_D{c[6]}_W{c[7]}_{c[8]}" for c in cases]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_emulated_bf16_matches_dense_fp64(case):
    _run(torch.bfloat16, case)


@pytest.mark.parametrize("case", [CASES[0], CASES[5]], ids=["small", "straddle"])
def test_emulated_fp16_matches_dense_fp64(case):
    _run(torch.float16, case)


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic_dq"])
@pytest.mark.parametrize("smem_limit", [SMALL, LARGE], ids=["99KB", "227KB"])
@pytest.mark.parametrize("case", [c for cs in CONFIG_CASES.values() for c in cs],
                         ids=_ids([c for cs in CONFIG_CASES.values() for c in cs]))
def test_every_tile_configuration_matches_dense_fp64(case, smem_limit, deterministic):
    _run(torch.bfloat16, case, smem_limit=smem_limit, deterministic=deterministic)


def test_the_cases_above_cover_every_configuration():
    """Every configuration compiled in is the choice at 99 KB or 227 KB for its head dim (the C++ test
    CudaTiles.EveryConfigurationIsChosenAtOneOfTheTestedLimits checks the table side of this)."""
    chosen = {(kind, d, limit): tuple(emu.tile_choice(kind, d, limit)[:2])
              for kind in ("forward", "backward", "dq") for d in CONFIG_CASES for limit in (SMALL, LARGE)}
    assert chosen[("forward", 256, SMALL)] == (32, 1) and chosen[("forward", 256, LARGE)] == (32, 2)
    assert chosen[("backward", 128, SMALL)] == (64, 1) and chosen[("backward", 128, LARGE)] == (128, 1)
    assert chosen[("backward", 256, SMALL)] == (16, 1) and chosen[("backward", 256, LARGE)] == (64, 1)
    assert chosen[("dq", 128, SMALL)] == (32, 2) and chosen[("dq", 256, SMALL)] == (16, 1)
    for (kind, d, limit), (keys, stages) in chosen.items():
        dynamic, static = emu.tile_choice(kind, d, limit)[2:]
        assert dynamic + static <= limit, (kind, d, limit)


def test_fp16_small_shared_memory_deterministic():
    _run(torch.float16, CONFIG_CASES[256][0], smem_limit=SMALL, deterministic=True)


@pytest.mark.parametrize("smem_limit", [SMALL, LARGE], ids=["99KB", "227KB"])
def test_deterministic_dq_is_bitwise_repeatable_and_close_to_atomic(smem_limit):
    case = (1, 100, 4, 8, 4, 2, 128, 24, "packed")
    x = _inputs(torch.bfloat16, case)
    B, window = case[3], case[7]
    runs = [_emulated(*x, B, window, smem_limit=smem_limit, deterministic=True)[2] for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    atomic = _emulated(*x, B, window, smem_limit=smem_limit)[2]
    assert torch.equal(runs[0][1], atomic[1]) and torch.equal(runs[0][2], atomic[2])  # dK, dV: the same kernel
    assert (runs[0][0].double() - atomic[0].double()).abs().max() <= 0.02 * atomic[0].double().abs().max()


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic_dq"])
def test_backward_in_workspace_chunks_equals_one_chunk(deterministic):
    """A workspace bound below one (batch, KV head) pair runs one KV head per chunk, three pairs run 3 of the 4
    heads, one batch's worth runs one batch at a time: the same gradients, bit for bit."""
    case = (2, 40, 2, 8, 4, 4, 64, 0, "packed")
    x = _inputs(torch.bfloat16, case)
    B, window, Hkv = case[3], case[7], case[5]
    whole = _emulated(*x, B, window, deterministic=deterministic)[2]
    pair = 4 * (case[4] // Hkv) * case[2] * B * (1 if deterministic else 1 + case[6])  # bytes per (batch, head)
    for bound in (1, 3 * pair, Hkv * pair):
        chunked = _emulated(*x, B, window, deterministic=deterministic, workspace_bytes=bound)[2]
        assert all(torch.equal(a, b) for a, b in zip(whole, chunked)), bound


def test_size_one_dimensions_with_any_stride_run_without_a_copy():
    """q/k/v whose size-1 dimensions (batch, heads) have strides that are no multiple of 8 are aligned rows
    for the op's check and for the launcher alike (the launcher used to call them misaligned)."""
    case = (1, 40, 3, 8, 1, 1, 64, 0, "edges")
    q, k, v, dout, anchors, keep, starts = _inputs(torch.bfloat16, case)

    def odd_strides(t):
        out = torch.empty_strided(t.shape, (12345, t.shape[-1], 7, 1), dtype=t.dtype)
        out.copy_(t)
        return out

    want = _emulated(q, k, v, dout, anchors, keep, starts, 8, 0)
    got = _emulated(odd_strides(q), odd_strides(k), odd_strides(v), odd_strides(dout), anchors, keep, starts, 8, 0)
    assert torch.equal(want[0], got[0]) and all(torch.equal(a, b) for a, b in zip(want[2], got[2]))


def test_misaligned_rows_are_copied_first():
    case = (2, 40, 3, 8, 4, 2, 64, 0, "edges")
    q, k, v, dout, anchors, keep, starts = _inputs(torch.bfloat16, case)
    kbig = torch.zeros(*k.shape[:-1], k.shape[-1] + 1, dtype=k.dtype)
    kbig[..., 1:] = k
    want = _emulated(q, k, v, dout, anchors, keep, starts, 8, 0)
    got = _emulated(q, kbig[..., 1:], v, dout, anchors, keep, starts, 8, 0)  # 2 bytes off, odd token stride
    assert torch.equal(want[0], got[0]) and all(torch.equal(a, b) for a, b in zip(want[2], got[2]))


def test_plan_kernel_reports_anchors_outside_the_context():
    case = (2, 16, 3, 8, 2, 1, 64, 0, "edges")
    q, k, v, dout, anchors, keep, _ = _inputs(torch.bfloat16, case)
    scale = 0.125
    bad = anchors.clone()
    bad[1, 2], bad[1, 0] = 17, -1
    with pytest.raises(RuntimeError, match=r"anchors\[1, 0\] and 1 more entry lie outside \[0, S\] with context "
                                           r"length S = 16"):
        emu.anchor_block_attention_fwd(q, k, v, bad, keep, 8, 0, scale)
    with pytest.raises(RuntimeError, match=r"ctx_start\[2\] lies outside \[0, S\] with context length S = 16"):
        emu.anchor_block_attention_fwd(q, k, v, anchors, keep, 8, 0, scale, torch.tensor([0, 0, 99]))


def test_no_configuration_fits_names_the_bytes():
    case = (1, 20, 2, 8, 2, 1, 256, 0, "edges")
    q, k, v, dout, anchors, keep, starts = _inputs(torch.bfloat16, case)
    with pytest.raises(RuntimeError, match=r"no forward kernel configuration for head_dim 256 fits the shared memory "
                                           r"of the emulated GPU: it allows 60000 bytes per block, the smallest "
                                           r"configuration \(32 keys per tile\) needs 69136 \(dynamic 67584 \+ static 1552\)"):
        _emulated(q, k, v, dout, anchors, keep, starts, 8, 0, smem_limit=60000)
