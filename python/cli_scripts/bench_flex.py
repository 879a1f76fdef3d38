"""Compiled flex_attention on the DFlash mask, for `dflash bench attention` (impl "flex").

Prints one JSON line: fwd_ms, fwdbwd_ms (null where this torch has no flex backward on the device),
peak_extra_mb, max_abs_err (vs the fused op in fp64 on the same inputs), compile_s, note.
"""
import argparse
import json
import os
import pathlib
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from memory import PeakMemory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    for name in ["S", "N", "B", "Hq", "Hkv", "D", "window"]:
        p.add_argument(f"--{name}", type=int, required=name != "window", default=0)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    S, N, B, W = a.S, a.N, a.B, a.window
    torch.manual_seed(1234)
    q = torch.randn(1, a.Hq, N * B, a.D, device=dev, dtype=dtype)
    k = torch.randn(1, a.Hkv, S + N * B, a.D, device=dev, dtype=dtype)
    v = torch.randn(1, a.Hkv, S + N * B, a.D, device=dev, dtype=dtype)
    dout = torch.randn(1, a.Hq, N * B, a.D, device=dev, dtype=dtype)
    anchors = torch.sort(torch.randint(1, S + 1, (N,), device=dev)).values
    keep = torch.ones(N, dtype=torch.bool, device=dev)
    keep[N - N // 16:] = False

    def mask_mod(b, h, qi, kv):
        qb, j = qi // B, qi % B
        ctx = (kv < S) & (kv < anchors[qb])
        blk = (kv >= S) & ((kv - S) // B == qb)
        if W > 0:
            ctx = ctx & (kv >= anchors[qb] + j - (W - 1))
            blk = blk & ((kv - S) % B <= j)
        return (ctx | blk) & keep[qb]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    backward = dev.type != "cpu"  # torch 2.11: "FlexAttention does not support backward on CPU"
    note = "" if backward else "forward only: this torch has no flex_attention backward on CPU"
    compiled = torch.compile(flex_attention)

    # The BlockMask is built once, outside the timing: only the attention itself is compared. (Trainers
    # that rebuild it every step pay block_mask_ms on top.)
    t0 = time.perf_counter()
    bm = create_block_mask(mask_mod, None, None, N * B, S + N * B, device=dev)
    sync()
    block_mask_ms = (time.perf_counter() - t0) * 1e3

    def run(grad):
        qq, kk, vv = (t.detach().requires_grad_(grad) for t in (q, k, v))
        out = compiled(qq, kk, vv, block_mask=bm, enable_gqa=True)
        if grad:
            torch.autograd.grad(out, (qq, kk, vv), dout)
        return out

    t0 = time.perf_counter()
    run(backward)
    sync()
    compile_s = time.perf_counter() - t0
    mem = PeakMemory(dev)
    mem.reset()
    out = run(backward)
    sync()
    peak = mem.peak_extra_mb()
    fwd, total = [], []
    for _ in range(a.reps):
        qq, kk, vv = (t.detach().requires_grad_(backward) for t in (q, k, v))
        sync()
        t0 = time.perf_counter()
        o = compiled(qq, kk, vv, block_mask=bm, enable_gqa=True)
        sync()
        fwd.append((time.perf_counter() - t0) * 1e3)
        if backward:
            torch.autograd.grad(o, (qq, kk, vv), dout)
            sync()
        total.append((time.perf_counter() - t0) * 1e3)

    err = None
    if (S + N * B) * N * B * a.Hq * a.D < 2e11:
        lib = pathlib.Path(os.environ.get("DFLASH_BUILD_DIR", ROOT / "build")) / "libdflash_ops.so"
        torch.ops.load_library(str(lib))
        ref = torch.ops.dflash.anchor_block_attention(
            *(t.transpose(1, 2).double().cpu() for t in (q, k, v)), anchors.cpu(), keep.cpu(), B, W, None)
        err = (out.detach().transpose(1, 2).double().cpu() - ref).abs().max().item()
    print(json.dumps({"fwd_ms": sorted(fwd)[len(fwd) // 2], "fwdbwd_ms": sorted(total)[len(total) // 2] if backward else None,
                      "peak_extra_mb": peak, "max_abs_err": err, "compile_s": compile_s, "block_mask_ms": block_mask_ms,
                      "note": note + ("; " if note else "") + f"compile {compile_s:.0f} s, BlockMask build {block_mask_ms:.0f} ms"}))


if __name__ == "__main__":
    main()
