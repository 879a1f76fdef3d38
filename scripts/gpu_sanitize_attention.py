#!/usr/bin/env python3
"""One small forward + backward of the CUDA attention op per head dim, with the fp32-atomic and the
deterministic dQ, for compute-sanitizer (memcheck: out-of-bounds / misaligned accesses; racecheck:
shared-memory races). DFLASH_CUDA_SMEM_LIMIT=101376 in the environment runs the 99 KB tile
configurations. Usage:
  compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_sanitize_attention.py LIB
"""
import sys

import torch

torch.ops.load_library(sys.argv[1] if len(sys.argv) > 1 else "build/libdflash_ops.so")
dev = torch.device("cuda")
g = torch.Generator().manual_seed(0)
# (S, N, B, Hq, Hkv, D, window): partial tiles, blocks straddling row tiles, a window, B > 64 keys.
for S, N, B, Hq, Hkv, D, W in [(70, 3, 10, 6, 2, 64, 0), (40, 2, 16, 4, 1, 128, 9), (20, 2, 80, 1, 1, 256, 0)]:
    T, Tk = N * B, S + N * B
    q = torch.randn(1, T, Hq, D, generator=g).to(dev, torch.bfloat16).requires_grad_(True)
    k = torch.randn(1, Tk, Hkv, D, generator=g).to(dev, torch.bfloat16).requires_grad_(True)
    v = torch.randn(1, Tk, Hkv, D, generator=g).to(dev, torch.bfloat16).requires_grad_(True)
    anchors = torch.randint(0, S + 1, (1, N), generator=g).to(dev)
    keep = torch.ones(1, N, dtype=torch.bool, device=dev)
    dout = torch.randn(1, T, Hq, D, generator=g).to(dev, torch.bfloat16)
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)  # the op reads torch's switch
        out = torch.ops.dflash.anchor_block_attention(q, k, v, anchors, keep, B, W, None)
        (dq,) = torch.autograd.grad(out, q, dout)
        torch.cuda.synchronize()
        print(f"D={D} deterministic={deterministic}: ok, |out| {out.float().abs().max().item():.3f}, "
              f"|dq| {dq.float().abs().max().item():.3f}")
    torch.use_deterministic_algorithms(False)
