"""CUDA anchor-block attention vs a dense fp64 reference of docs/DFLASH.md "The attention mask".

Forward output, LSE and all three gradients (through autograd) are compared with a dense fp64
computation on the CPU from the same bf16/fp16-rounded inputs. The error budget is relative to
PyTorch's own dense computation in the same low precision: ours may be at most 2x its error plus a
small floor. Skips when no GPU is present (set DFLASH_REQUIRE_CUDA=1 to fail instead, as
scripts/gpu_check.sh does). scripts/gpu_check.sh runs this file twice: as the device is, and with
DFLASH_CUDA_SMEM_LIMIT=101376 so that an H100 runs the tile configurations of 99 KB cards.
"""
import os

import pytest
import torch

from attention_reference import anchor_block_mask, masked_attention, masked_lse

REQUIRE = os.environ.get("DFLASH_REQUIRE_CUDA") == "1"
HAVE_GPU = torch.cuda.is_available()
if not HAVE_GPU and REQUIRE:
    raise RuntimeError("DFLASH_REQUIRE_CUDA=1 but torch.cuda.is_available() is False")
pytestmark = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device: the CUDA attention kernels cannot run here")


def _has_cuda_kernel():
    return torch._C._dispatch_has_kernel_for_dispatch_key("dflash::anchor_block_attention_fwd", "CUDA")


@pytest.fixture(scope="module", autouse=True)
def cuda_kernel_registered():
    if not _has_cuda_kernel():
        msg = "libdflash_ops.so was built without the CUDA kernels (DFLASH_CUDA=OFF or no nvcc)"
        if REQUIRE:
            pytest.fail(msg)
        pytest.skip(msg)


# ---- dense reference (attention_reference.py) ----------------------------------------------------------

def run_dense(q, k, v, mask, scale, dout):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = masked_attention(q, k, v, mask.to(q.device), scale)
    out.backward(dout.to(q.device, q.dtype))
    return [out.detach(), q.grad, k.grad, v.grad]


def make_ctx_start(gen, anchors, S, kind):
    """None, or for kind "packed" the blocks' document starts [batch, N]: documents of random lengths cover
    [0, S), every anchor is moved into a random one (in place) and its block sees only that document."""
    if kind != "packed" or S == 0:
        return None
    batch, N = anchors.shape
    starts = torch.zeros_like(anchors)
    for b in range(batch):
        cuts = [0]
        while cuts[-1] < S:
            cuts.append(min(S, cuts[-1] + int(torch.randint(1, max(2, S // 3), (1,), generator=gen))))
        for n in range(N):
            d = int(torch.randint(0, len(cuts) - 1, (1,), generator=gen))
            anchors[b, n] = cuts[d] + int(torch.randint(0, cuts[d + 1] - cuts[d], (1,), generator=gen))
            starts[b, n] = cuts[d]
    return starts


def make_anchors(gen, batch, N, S, kind):
    a = torch.randint(0, S + 1, (batch, N), generator=gen)
    if kind == "edges" and N >= 2:
        a[:, 0], a[:, 1] = 0, S
        if N >= 4:
            a[:, 3] = a[:, 2]  # a duplicate (the rest is random, hence unsorted)
    keep = torch.rand((batch, N), generator=gen) > 0.25
    keep[:, 0] = True
    if kind == "all_dropped":
        keep[-1] = False
    return a, keep


# (batch, S, N, B, Hq, Hkv, D, window, anchor kind)
CASES = [
    (2, 100, 6, 8, 4, 2, 64, 0, "edges"),
    (1, 5, 3, 16, 2, 1, 128, 0, "edges"),        # S < B
    (2, 130, 5, 16, 8, 8, 64, 7, "edges"),       # sliding window
    (1, 70, 4, 4, 8, 1, 256, 0, "edges"),        # 8 q-heads per KV head
    (2, 64, 4, 16, 4, 4, 128, 20, "all_dropped"),
    (1, 300, 9, 16, 4, 1, 256, 33, "edges"),
    (1, 0, 3, 16, 2, 2, 64, 0, "edges"),         # no context at all
    (1, 40, 10, 1, 1, 1, 64, 0, "edges"),        # B = 1
    (1, 700, 24, 16, 4, 1, 128, 0, "edges"),     # many key tiles and row tiles
    (2, 200, 7, 10, 6, 2, 64, 50, "edges"),      # 3 q-heads x 10 slots: blocks straddle row tiles
    (1, 150, 6, 16, 2, 2, 256, 0, "all_dropped"),
    (2, 500, 20, 16, 4, 2, 128, 0, "packed"),     # packed rows: each block sees only its document
    (1, 400, 12, 16, 4, 1, 256, 64, "packed"),    # ... and its sliding window
]


def _check(dtype, case, layout="contiguous", dev=torch.device("cuda")):
    batch, S, N, B, Hq, Hkv, D, window, kind = case
    gen = torch.Generator().manual_seed(hash((S, N, B, Hq, Hkv, D, window)) % (2 ** 31))
    T, Tk = N * B, S + N * B
    q = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    k = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    v = torch.randn(batch, Tk, Hkv, D, generator=gen).to(dtype)
    dout = torch.randn(batch, T, Hq, D, generator=gen).to(dtype)
    anchors, keep = make_anchors(gen, batch, N, S, kind)
    starts = make_ctx_start(gen, anchors, S, kind)
    cs = None if starts is None else starts.to(dev)
    scale = D ** -0.5
    mask = anchor_block_mask(anchors, keep, S, N, B, window, starts)

    ref = run_dense(q.double(), k.double(), v.double(), mask, scale, dout.double())
    torch_lp = [t.double().cpu() for t in run_dense(q.to(dev), k.to(dev), v.to(dev), mask, scale, dout.to(dev))]

    if layout == "strided":  # q as a [b, Hq, T, D] buffer viewed as [b, T, Hq, D]; k at a 2-byte offset
        qc = q.transpose(1, 2).contiguous().to(dev).transpose(1, 2)
        kbig = torch.zeros(batch, Tk, Hkv, D + 1, dtype=dtype, device=dev)
        kbig[..., 1:] = k.to(dev)
        kc = kbig[..., 1:]
    else:
        qc, kc = q.to(dev), k.to(dev)
    qc, kc = qc.detach().requires_grad_(True), kc.detach().requires_grad_(True)
    vc = v.to(dev).requires_grad_(True)
    out = torch.ops.dflash.anchor_block_attention(qc, kc, vc, anchors.to(dev), keep.to(dev), B, window, None, cs)
    out.backward(dout.to(dev))
    ours = [out.detach().double().cpu(), qc.grad.double().cpu(), kc.grad.double().cpu(), vc.grad.double().cpu()]

    eps = torch.finfo(dtype).eps
    for name, r, t, o in zip(["out", "dq", "dk", "dv"], ref, torch_lp, ours):
        assert torch.isfinite(o).all(), f"{name}: non-finite values"
        err_torch = (t - r).abs().max().item()
        err_ours = (o - r).abs().max().item()
        floor = 0.5 * eps * r.abs().max().item() + 1e-6
        assert err_ours <= 2 * err_torch + floor, (
            f"{name}: max error {err_ours:.3e} vs PyTorch {dtype} dense {err_torch:.3e} (floor {floor:.1e}), case {case}")

    # Dropped blocks: exactly zero output and dq, LSE -inf; kept rows: LSE matches.
    _, lse = torch.ops.dflash.anchor_block_attention_fwd(qc.detach(), kc.detach(), vc.detach(), anchors.to(dev),
                                                         keep.to(dev), B, window, scale, cs)
    lse = lse.double().cpu()
    row_keep = keep[:, torch.arange(T) // B]                     # [b, T]
    dropped = ~row_keep
    assert (ours[0][dropped] == 0).all() and (ours[1][dropped] == 0).all()
    assert torch.isneginf(lse.transpose(1, 2)[dropped]).all()
    ref_lse = masked_lse(q.double(), k.double(), mask, scale).transpose(1, 2)   # [b, T, Hq]
    if row_keep.any():
        kept_err = (lse.transpose(1, 2)[row_keep] - ref_lse[row_keep]).abs().max().item()
        assert kept_err < 1e-3 * max(1.0, ref_lse[row_keep].abs().max().item()), f"lse error {kept_err}"
    # Keys nobody sees keep a zero gradient.
    unseen = ~mask.any(1)                                        # [b, Tk]
    assert (ours[2][unseen] == 0).all() and (ours[3][unseen] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[f"S{c[1]}_N{c[2]}_B{c[3]}_H{c[4]}x{c[5]}_D{c[6]}_W{c[7]}_{c[8]}"
                                             for c in CASES])
def test_matches_dense_fp64(dtype, case):
    _check(dtype, case)


@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=["bf16"])
def test_strided_and_misaligned_inputs(dtype):
    _check(dtype, (2, 90, 5, 16, 4, 2, 128, 0, "edges"), layout="strided")


def test_one_dim_anchors_broadcast_over_batch():
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(3)
    batch, S, N, B, Hq, Hkv, D = 2, 50, 4, 8, 4, 2, 64
    q = torch.randn(batch, N * B, Hq, D, generator=gen).to(torch.bfloat16)
    k = torch.randn(batch, S + N * B, Hkv, D, generator=gen).to(torch.bfloat16)
    v = torch.randn(batch, S + N * B, Hkv, D, generator=gen).to(torch.bfloat16)
    anchors = torch.tensor([30, 0, 50, 12])
    keep = torch.tensor([True, True, False, True])
    got = torch.ops.dflash.anchor_block_attention(q.to(dev), k.to(dev), v.to(dev), anchors.to(dev), keep.to(dev),
                                                  B, 0, None).double().cpu()
    want = torch.ops.dflash.anchor_block_attention(q.to(dev), k.to(dev), v.to(dev),
                                                   anchors.expand(batch, N).contiguous().to(dev),
                                                   keep.expand(batch, N).contiguous().to(dev), B, 0, None)
    assert torch.equal(got, want.double().cpu())


def _det_grads(q, k, v, dout, anchors, keep, B, window, cs):
    """Our gradients with torch.use_deterministic_algorithms(True) around the op only (torch's own CUDA matmuls
    would then want CUBLAS_WORKSPACE_CONFIG)."""
    x = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    torch.use_deterministic_algorithms(True)
    try:
        out = torch.ops.dflash.anchor_block_attention(*x, anchors, keep, B, window, None, cs)
        out.backward(dout)
    finally:
        torch.use_deterministic_algorithms(False)
    return [t.grad for t in x]


@pytest.mark.parametrize("case", [CASES[3], CASES[11], CASES[12]], ids=["gqa8_D256", "packed_D128", "packed_window_D256"])
def test_deterministic_backward_is_bitwise_repeatable_and_accurate(case):
    dev = torch.device("cuda")
    batch, S, N, B, Hq, Hkv, D, window, kind = case
    gen = torch.Generator().manual_seed(7)
    T, Tk = N * B, S + N * B
    q, dout = (torch.randn(batch, T, Hq, D, generator=gen).bfloat16() for _ in range(2))
    k, v = (torch.randn(batch, Tk, Hkv, D, generator=gen).bfloat16() for _ in range(2))
    anchors, keep = make_anchors(gen, batch, N, S, kind)
    starts = make_ctx_start(gen, anchors, S, kind)
    mask = anchor_block_mask(anchors, keep, S, N, B, window, starts)
    ref = run_dense(q.double(), k.double(), v.double(), mask, D ** -0.5, dout.double())[1:]
    cs = None if starts is None else starts.to(dev)
    args = [t.to(dev) for t in (q, k, v, dout, anchors, keep)] + [B, window, cs]
    first, second = _det_grads(*args), _det_grads(*args)
    assert all(torch.equal(a, b) for a, b in zip(first, second)), "deterministic gradients differ run to run"
    for name, r, o in zip(["dq", "dk", "dv"], ref, first):
        err = (o.double().cpu() - r).abs().max().item()
        assert err <= 4 * torch.finfo(torch.bfloat16).eps * r.abs().max().item() + 1e-3, (name, err)


def test_bad_anchors_are_reported_by_the_next_call():
    """The range check runs in the plan kernel (no host sync): the call after the GPU ran it raises."""
    dev = torch.device("cuda")
    qb = torch.randn(1, 16, 2, 64, device=dev, dtype=torch.bfloat16)
    kb = torch.randn(1, 32, 2, 64, device=dev, dtype=torch.bfloat16)
    anchors, keep = torch.tensor([3], device=dev), torch.tensor([True], device=dev)
    good = lambda: torch.ops.dflash.anchor_block_attention(qb, kb, kb, anchors, keep, 16, 0, None)  # noqa: E731
    for bad_anchors, bad_start, what in [(torch.tensor([17], device=dev), None, r"anchors\[0\] lies outside"),
                                         (anchors, torch.tensor([17], device=dev), r"ctx_start\[0\] lies outside"),
                                         (torch.tensor([[-1]], device=dev), None, r"anchors\[0, 0\] lies outside")]:
        torch.ops.dflash.anchor_block_attention(qb, kb, kb, bad_anchors, keep, 16, 0, None, bad_start)  # clamped
        torch.cuda.synchronize()
        with pytest.raises(RuntimeError, match=r"in an earlier call on cuda:\d+ \(.*\), " + what +
                           r" \[0, S\] with context length S = 16"):
            good()
        good()  # reported once


def test_clear_errors():
    dev = torch.device("cuda")
    q = torch.randn(1, 16, 2, 64, device=dev)
    k = torch.randn(1, 32, 2, 64, device=dev)
    anchors = torch.tensor([3], device=dev)
    keep = torch.tensor([True], device=dev)
    with pytest.raises(RuntimeError, match="bfloat16 or float16"):
        torch.ops.dflash.anchor_block_attention(q, k, k, anchors, keep, 16, 0, None)
    q96 = torch.randn(1, 16, 2, 96, device=dev, dtype=torch.bfloat16)
    k96 = torch.randn(1, 32, 2, 96, device=dev, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head_dim"):
        torch.ops.dflash.anchor_block_attention(q96, k96, k96, anchors, keep, 16, 0, None)
    qb, kb = q.bfloat16(), k.bfloat16()
    with pytest.raises(RuntimeError, match="device|on"):
        torch.ops.dflash.anchor_block_attention(qb, kb, kb, anchors.cpu(), keep, 16, 0, None)
