"""One plain-PyTorch DFlash drafter training step three ways, side by side in one run: time and peak memory.

    python examples/bench_python_step.py            # the seed-scaled CPU config (S=2048, N=256, B=16, ...)

- dflash: examples/python_drafter.py with dflash.anchor_block_attention + dflash.chunked_lm_loss;
- per_block_sdpa: the same model with the seed's thread-safe attention (per block: gather the context and
  the block's keys, repeat_interleave K/V to every query head, batched SDPA with a boolean mask, 32 blocks
  per chunk) and the plain loss (all logits at once, F.cross_entropy);
- dense_sdpa: the same model with SDPA over the dense [T, S+T] boolean mask (enable_gqa) and the plain loss.
A step is forward + backward + AdamW on the same weights and batch. Peak = resident-set high-water mark above
the state before the step (python/dflash_py/memory.py, as `dflash bench` measures). The three losses and
gradients are compared, so the timed steps are known to compute the same thing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python" / "dflash_py"))
import dflash  # noqa: E402
import python_drafter as pd  # noqa: E402
from memory import PeakMemory  # noqa: E402


def per_block_sdpa(q, k, v, m: dflash.BlockMaskArgs, chunk_blocks: int = 32):
    """The seed's attention: per block, the whole context + the block's own keys, GQA heads expanded."""
    b, T, Hq, D = q.shape
    Hkv, B, S = k.size(2), m.block_size, m.context_len
    N, G, L = T // B, Hq // Hkv, m.context_len + m.block_size
    anchors = m.anchors.expand(b, -1)
    keep = m.keep.expand(b, -1)
    slot = torch.arange(B)
    outs = []
    for n0 in range(0, N, chunk_blocks):
        nb = min(chunk_blocks, N - n0)
        own = S + (torch.arange(n0, n0 + nb)[:, None] * B + slot)                         # [nb, B]
        pos = torch.cat([torch.arange(S).expand(nb, S), own], 1).flatten()               # [nb * L]

        def gather(x):
            return (x[:, pos].view(b, nb, L, Hkv, D).repeat_interleave(G, 3).permute(0, 1, 3, 2, 4)
                    .reshape(b * nb, Hq, L, D))

        qc = q[:, n0 * B:(n0 + nb) * B].view(b, nb, B, Hq, D).permute(0, 1, 3, 2, 4).reshape(b * nb, Hq, B, D)
        a = anchors[:, n0:n0 + nb, None, None]                                             # [b, nb, 1, 1]
        ctx = torch.arange(S) < a                                                          # [b, nb, 1, S]
        blk = torch.ones(B, B, dtype=torch.bool)
        if m.window > 0:
            ctx = ctx & (torch.arange(S) >= a + slot[:, None] - (m.window - 1))
            blk = torch.tril(blk)
        mask = torch.cat([ctx.expand(b, nb, B, S), blk.expand(b, nb, B, B)], -1).reshape(b * nb, 1, B, L)
        o = F.scaled_dot_product_attention(qc, gather(k), gather(v), attn_mask=mask)
        o = o * keep[:, n0:n0 + nb].reshape(b * nb, 1, 1, 1).to(o.dtype)  # padding blocks output zero
        outs.append(o.view(b, nb, Hq, B, D).permute(0, 1, 3, 2, 4).reshape(b, nb * B, Hq, D))
    return torch.cat(outs, 1)


def dense_sdpa(q, k, v, m: dflash.BlockMaskArgs):
    """SDPA over the whole [T, S+T] mask. Padding blocks see their own keys (SDPA gives NaN for rows that
    see nothing) and are zeroed afterwards."""
    b, T = q.shape[:2]
    mask = dataclasses.replace(m, keep=torch.ones_like(m.keep)).dense_mask(b)[:, None]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                       enable_gqa=True).transpose(1, 2)
    return o * m.keep.expand(b, -1).repeat_interleave(m.block_size, 1)[:, :, None, None].to(o.dtype)


IMPLS = {"dflash": (pd.dflash_attention, "dflash"), "per_block_sdpa": (per_block_sdpa, "dense"),
         "dense_sdpa": (dense_sdpa, "dense")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=2048, help="S, context length")
    p.add_argument("--anchors", type=int, default=256, help="N blocks")
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--loss-chunk", type=int, default=1024)
    p.add_argument("--reps", type=int, default=2, help="timed steps per implementation, after one warm-up")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--json", default="", help="also write the results here")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = pd.DrafterConfig(hidden_size=a.hidden, intermediate_size=a.intermediate, num_attention_heads=a.heads,
                         num_key_value_heads=a.kv_heads, head_dim=a.head_dim, num_hidden_layers=a.layers,
                         num_target_features=3, block_size=a.block, vocab_size=a.vocab, mask_token_id=a.vocab - 1,
                         loss_chunk_rows=a.loss_chunk)
    batch = pd.make_batch(c, torch.Generator().manual_seed(0), batch=1, seq=a.seq, num_anchors=a.anchors)
    impls = a.impls.split(",")
    mem = PeakMemory("cpu")
    trainers, first = {}, {}
    times, cpu, peaks = {n: [] for n in impls}, {n: [] for n in impls}, {n: 0.0 for n in impls}
    for name in impls:
        attn, loss = IMPLS[name]
        trainers[name] = pd.Trainer(c, seed=0, attention=attn, loss=loss)  # identical weights for all three
        first[name] = trainers[name].step(batch)  # warm-up: also creates AdamW's state
    for _ in range(a.reps):
        for name in impls:
            mem.reset()
            t0, c0 = time.perf_counter(), time.process_time()
            trainers[name].step(batch)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)  # all threads' CPU time: less exposed to other jobs
            peaks[name] = max(peaks[name], mem.peak_extra_mb())
    ref = first[impls[0]]
    print(f"drafter step, fp32, {a.threads} threads: S={a.seq} N={a.anchors} B={a.block} Hq={a.heads} "
          f"Hkv={a.kv_heads} D={a.head_dim}, hidden {a.hidden}, MLP {a.intermediate}, {a.layers} layer(s), "
          f"vocab {a.vocab}, loss chunk {a.loss_chunk}; median of {a.reps} steps after a warm-up")
    print(f"{'impl':<16}{'s/step':>10}{'CPU s/step':>12}{'peak MB':>12}{'time vs 1st':>13}{'mem vs 1st':>12}"
          f"{'first loss':>14}{'grad diff':>11}")
    rows = []
    for name in impls:
        s, cs = statistics.median(times[name]), statistics.median(cpu[name])
        loss, grads = first[name]
        gdiff = max(((grads[k] - ref[1][k]).abs().max() / ref[1][k].abs().max().clamp_min(1e-30)).item()
                    for k in grads)
        row = {"impl": name, "seconds": s, "cpu_seconds": cs, "peak_extra_mb": peaks[name], "loss": loss,
               "max_rel_grad_diff": gdiff}
        rows.append(row)
        print(f"{name:<16}{s:>10.3f}{cs:>12.3f}{peaks[name]:>12.1f}{s / statistics.median(times[impls[0]]):>12.2f}x"
              f"{peaks[name] / max(peaks[impls[0]], 1e-9):>11.1f}x{loss:>14.6f}{gdiff:>11.1e}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"args": vars(a), "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
