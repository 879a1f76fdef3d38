#!/usr/bin/env python3
"""Times the fused CUDA anchor-block attention against two baselines on one GPU.

  ours       torch.ops.dflash.anchor_block_attention (libdflash_ops.so built with CUDA)
  flex       torch.compile(flex_attention) with a BlockMask from the DFlash mask_mod (docs/DFLASH.md)
  per_block  the seed's way: per block, gather its context + own K/V, repeat_interleave to Hq,
             batched SDPA over chunks of blocks, all under autograd (skipped, with the predicted
             memory printed, when it would not fit)

For each: forward ms, forward+backward ms, TFLOP/s over visible pairs only (forward 4*D*Hq*pairs,
backward 2.5x that), peak extra memory (torch.cuda.max_memory_allocated), and the largest
difference from ours (a full-size cross-check of the mask). Usage:
  python3 scripts/gpu_bench_attention.py --lib build/libdflash_ops.so [--configs seed,27b] [--json f]
"""
import argparse
import json
import math
import sys
import time
import traceback

import torch
import torch.nn.functional as F

CONFIGS = {
    "seed": dict(S=8000, N=1024, B=16, Hq=32, Hkv=8, D=128, window=0),
    "27b": dict(S=8000, N=1024, B=16, Hq=24, Hkv=4, D=256, window=0),
    "seed-window": dict(S=8000, N=1024, B=16, Hq=32, Hkv=8, D=128, window=2048),
    "small": dict(S=1024, N=64, B=16, Hq=8, Hkv=2, D=128, window=0),
}


def make_inputs(c, seed=0):
    g = torch.Generator().manual_seed(seed)
    T, Tk = c["N"] * c["B"], c["S"] + c["N"] * c["B"]
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(1, T, c["Hq"], c["D"], generator=g).to(dev, dt)
    k = torch.randn(1, Tk, c["Hkv"], c["D"], generator=g).to(dev, dt)
    v = torch.randn(1, Tk, c["Hkv"], c["D"], generator=g).to(dev, dt)
    dout = torch.randn(1, T, c["Hq"], c["D"], generator=g).to(dev, dt)
    anchors = torch.sort(torch.randint(1, c["S"] + 1, (1, c["N"]), generator=g), dim=1).values
    keep = torch.ones(1, c["N"], dtype=torch.bool)
    return q, k, v, dout, anchors, keep


def visible_pairs(c, anchors, keep):
    """Sum over query rows (one head) of the keys each row sees."""
    B, W = c["B"], c["window"]
    a = anchors[0].double()
    j = torch.arange(B, dtype=torch.float64)
    if W > 0:
        lo = (a[:, None] + j[None] - (W - 1)).clamp(min=0)
        ctx = (a[:, None] - lo).clamp(min=0)
        own = (j + 1)[None].expand(len(a), B)
    else:
        ctx = a[:, None].expand(len(a), B)
        own = torch.full((len(a), B), float(B), dtype=torch.float64)
    return float(((ctx + own) * keep[0].double()[:, None]).sum())


def cuda_ms(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


# ---- implementations: each returns f(q, k, v) -> out [1, T, Hq, D] ----------------------------------

def impl_ours(c, anchors, keep):
    a, kp = anchors.cuda(), keep.cuda()
    return lambda q, k, v: torch.ops.dflash.anchor_block_attention(q, k, v, a, kp, c["B"], c["window"], None)


def impl_flex(c, anchors, keep):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    S, B, W = c["S"], c["B"], c["window"]
    T, Tk = c["N"] * B, S + c["N"] * B
    a_row, k_row = anchors[0].cuda(), keep[0].cuda()

    def mask_mod(b, h, q_idx, kv_idx):
        qb, j = q_idx // B, q_idx % B
        a = a_row[qb]
        ctx = (kv_idx < S) & (kv_idx < a)
        own = (kv_idx >= S) & ((kv_idx - S) // B == qb)
        if W > 0:
            ctx = ctx & (kv_idx >= a + j - (W - 1))
            own = own & ((kv_idx - S) % B <= j)
        return (ctx | own) & k_row[qb]

    bm = create_block_mask(mask_mod, None, None, T, Tk, device="cuda")
    flex = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=bm,
                                enable_gqa=True).transpose(1, 2)


def per_block_plan(c, anchors, keep, chunk):
    """Key indices and masks per chunk of blocks (built once, outside the timed region)."""
    S, B, W, N = c["S"], c["B"], c["window"], c["N"]
    a_all = anchors[0]
    plan = []
    for c0 in range(0, N, chunk):
        c1 = min(N, c0 + chunk)
        a = a_all[c0:c1]
        L = int(a.max())
        pos = torch.arange(L + B)
        blk = torch.arange(c0, c1)
        idx = torch.where(pos[None] < L, pos[None].expand(c1 - c0, -1), S + blk[:, None] * B + (pos[None] - L))
        j = torch.arange(B)
        ctx = (pos[None, None, :L] < a[:, None, None]).expand(-1, B, -1)
        if W > 0:
            ctx = ctx & (pos[None, None, :L] >= a[:, None, None] + j[None, :, None] - (W - 1))
            own = (j[None, :] <= j[:, None])[None].expand(c1 - c0, -1, -1)
        else:
            own = torch.ones(c1 - c0, B, B, dtype=torch.bool)
        mask = torch.cat([ctx, own], dim=2)[:, None]                      # [chunk, 1, B, L + B]
        plan.append((c0, c1, idx.cuda(), mask.cuda(), keep[0, c0:c1].cuda()))
    return plan


def per_block_predicted_bytes(c, plan):
    # Saved for backward per chunk: the expanded K and V [chunk, Hq, L, D] in bf16, plus the
    # transient gradients of one chunk's expanded K/V at the end.
    saved = sum(2 * (c1 - c0) * c["Hq"] * idx.shape[1] * c["D"] * 2 for c0, c1, idx, _, _ in plan)
    biggest = max(2 * (c1 - c0) * c["Hq"] * idx.shape[1] * c["D"] * 2 for c0, c1, idx, _, _ in plan)
    return saved + 3 * biggest


def impl_per_block(c, plan):
    B, Hq, G, D = c["B"], c["Hq"], c["Hq"] // c["Hkv"], c["D"]

    def f(q, k, v):
        outs = []
        for c0, c1, idx, mask, kp in plan:
            n = c1 - c0
            kg = k[0][idx].repeat_interleave(G, dim=2).transpose(1, 2)    # [n, Hq, L, D]
            vg = v[0][idx].repeat_interleave(G, dim=2).transpose(1, 2)
            qg = q[0, c0 * B:c1 * B].reshape(n, B, Hq, D).transpose(1, 2)
            o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask)
            o = o * kp[:, None, None, None]
            outs.append(o.transpose(1, 2).reshape(n * B, Hq, D))
        return torch.cat(outs)[None]
    return f


# ---- driver ----------------------------------------------------------------------------------------

def run_impl(name, make, c, inputs, fwd_flops, reps, ref):
    q, k, v, dout, _, _ = inputs
    row = {"impl": name}
    try:
        t0 = time.time()
        f = make()
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))

        def fwd():
            with torch.no_grad():
                return f(q, k, v)

        def fwdbwd():
            for t in (qg, kg, vg):
                t.grad = None
            out = f(qg, kg, vg)
            out.backward(dout)
            return out

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fwdbwd()  # also the warm-up / compile
        torch.cuda.synchronize()
        row["peak_extra_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        row["setup_s"] = time.time() - t0
        if ref is None:
            ref = [out.detach(), qg.grad.detach(), kg.grad.detach(), vg.grad.detach()]
        else:
            got = [out.detach(), qg.grad, kg.grad, vg.grad]
            row["max_diff_vs_ours"] = {n: float((a.float() - b.float()).abs().max())
                                       for n, a, b in zip(["out", "dq", "dk", "dv"], got, ref)}
        del out
        row["fwd_ms"] = cuda_ms(fwd, reps, 1)
        row["fwdbwd_ms"] = cuda_ms(fwdbwd, reps, 0)
        row["fwd_tflops"] = fwd_flops / row["fwd_ms"] / 1e9
        row["fwdbwd_tflops"] = 3.5 * fwd_flops / row["fwdbwd_ms"] / 1e9
    except Exception as e:  # report and carry on with the next implementation
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]
        traceback.print_exc(limit=3)
    finally:
        torch.cuda.empty_cache()
    return row, ref


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/libdflash_ops.so")
    ap.add_argument("--configs", default="seed,27b")
    ap.add_argument("--impls", default="ours,flex,per_block")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunk-blocks", type=int, default=32)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time", file=sys.stderr)
        return 2
    torch.ops.load_library(args.lib)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    results, failed = [], False
    for cname in args.configs.split(","):
        c = CONFIGS[cname]
        inputs = make_inputs(c)
        pairs = visible_pairs(c, inputs[4], inputs[5])
        fwd_flops = 4.0 * c["D"] * c["Hq"] * pairs
        print(f"\n== {cname}: {c}  visible pairs/head {pairs:.3e}, forward {fwd_flops / 1e12:.2f} TFLOP")
        ref = None
        for name in args.impls.split(","):
            if name == "ours":
                make = lambda: impl_ours(c, inputs[4], inputs[5])
            elif name == "flex":
                make = lambda: impl_flex(c, inputs[4], inputs[5])
            else:
                plan = per_block_plan(c, inputs[4], inputs[5], args.chunk_blocks)
                need = per_block_predicted_bytes(c, plan)
                free = torch.cuda.mem_get_info()[0]
                if need > 0.85 * free:
                    row = {"impl": name, "skipped": f"predicted {need / 2**30:.1f} GiB > 85% of free {free / 2**30:.1f} GiB"}
                    print(f"  {name:10s} skipped: {row['skipped']}")
                    results.append({"config": cname, **c, **row})
                    del plan
                    continue
                make = lambda: impl_per_block(c, plan)
            row, new_ref = run_impl(name, make, c, inputs, fwd_flops, args.reps, ref)
            if name == "ours":
                ref = new_ref
                failed |= "error" in row
            results.append({"config": cname, **c, **row})
            if "error" in row:
                print(f"  {name:10s} ERROR {row['error']}")
            else:
                diff = row.get("max_diff_vs_ours")
                print(f"  {name:10s} fwd {row['fwd_ms']:8.2f} ms ({row['fwd_tflops']:6.1f} TFLOP/s)  "
                      f"fwd+bwd {row['fwdbwd_ms']:8.2f} ms ({row['fwdbwd_tflops']:6.1f} TFLOP/s)  "
                      f"peak +{row['peak_extra_mb']:9.1f} MiB  setup {row['setup_s']:.1f} s"
                      + (f"  max|diff vs ours| {diff}" if diff else ""))
        del inputs, ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, fh,
                      indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
