"""One plain-PyTorch DFlash drafter training step several ways, side by side in one run: time and peak memory.

    python examples/bench_python_step.py            # the seed-scaled CPU config (S=2048, N=256, B=16, ...)
    python examples/bench_python_step.py --preset seed --device cuda --dtype bf16 --impls dflash,flex,per_block_sdpa
                                                    # the seed's step itself (27B-width 5-layer drafter) on a GPU

- dflash: examples/python_drafter.py with dflash.anchor_block_attention + dflash.chunked_lm_loss;
- per_block_sdpa: the same model with the seed's thread-safe attention (per block: gather the context and
  the block's keys, repeat_interleave K/V to every query head, batched SDPA with a boolean mask, 32 blocks
  per chunk) and the plain loss (all logits at once, F.cross_entropy);
- dense_sdpa: the same model with SDPA over the dense [T, S+T] boolean mask (enable_gqa) and the plain loss;
- flex (CUDA only): compiled flex_attention with a BlockMask built from dflash.block_mask_args(...).mask_mod, and
  the plain loss: what SpecForge does.
An implementation that runs out of memory is recorded as such (with the peak it reached), not fatal.
A step is forward + backward + AdamW on the same weights and batch. Peak = resident-set high-water mark above
the state before the step on the CPU, the caching allocator's peak on CUDA (python/cli_scripts/memory.py, as
`dflash bench` measures). The three losses and
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
sys.path.insert(0, str(HERE.parent / "python" / "cli_scripts"))
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
    dev = q.device
    slot = torch.arange(B, device=dev)
    outs = []
    for n0 in range(0, N, chunk_blocks):
        nb = min(chunk_blocks, N - n0)
        own = S + (torch.arange(n0, n0 + nb, device=dev)[:, None] * B + slot)             # [nb, B]
        pos = torch.cat([torch.arange(S, device=dev).expand(nb, S), own], 1).flatten()   # [nb * L]

        def gather(x):
            return (x[:, pos].view(b, nb, L, Hkv, D).repeat_interleave(G, 3).permute(0, 1, 3, 2, 4)
                    .reshape(b * nb, Hq, L, D))

        qc = q[:, n0 * B:(n0 + nb) * B].view(b, nb, B, Hq, D).permute(0, 1, 3, 2, 4).reshape(b * nb, Hq, B, D)
        a = anchors[:, n0:n0 + nb, None, None]                                             # [b, nb, 1, 1]
        ctx = torch.arange(S, device=dev) < a                                              # [b, nb, 1, S]
        blk = torch.ones(B, B, dtype=torch.bool, device=dev)
        if m.window > 0:
            ctx = ctx & (torch.arange(S, device=dev) >= a + slot[:, None] - (m.window - 1))
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


_compiled_flex = None


def flex(q, k, v, m: dflash.BlockMaskArgs):
    """Compiled flex_attention with the BlockMask of the same rule (GPU: its Triton kernels, forward and backward).
    Rows that see nothing (padding blocks) come out as zero, as from the op."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    b, T = q.shape[:2]
    bm = create_block_mask(m.mask_mod, B=b, H=None, Q_LEN=T, KV_LEN=k.size(1), device=q.device)
    o = _compiled_flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=bm, enable_gqa=True)
    return o.transpose(1, 2)


IMPLS = {"dflash": (pd.dflash_attention, "dflash"), "per_block_sdpa": (per_block_sdpa, "dense"),
         "dense_sdpa": (dense_sdpa, "dense"), "flex": (flex, "dense")}

# Shapes: the seed-scaled CPU config (default) and the seed's own step (docs/DFLASH.md: a 5-layer drafter at Qwen3.6-27B
# width, sequence 8000, 1024 anchors x 16, soft labels 0.15).
PRESETS = {
    "seed-scaled": dict(seq=2048, anchors=256, block=16, heads=8, kv_heads=2, head_dim=128, hidden=1024,
                        intermediate=2816, layers=1, vocab=32000),
    "seed": dict(seq=8000, anchors=1024, block=16, heads=24, kv_heads=4, head_dim=256, hidden=5120,
                 intermediate=17408, layers=5, vocab=248320, kl_weight=0.15, features=5),
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="seed-scaled",
                   help="shape; the flags below override single fields")
    # The step's shape is spelt as `dflash train` spells it (src/drafter/run_shape.h).
    p.add_argument("--max-len", dest="seq", type=int, help="S, context length")
    p.add_argument("--num-anchors", dest="anchors", type=int, help="N blocks")
    p.add_argument("--block-size", dest="block", type=int, help="B")
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--features", type=int, help="target layers concatenated into the context features")
    p.add_argument("--kl-weight", type=float, help="soft-label weight")
    p.add_argument("--loss-chunk-rows", type=int, default=1024)
    p.add_argument("--reps", type=int, default=2, help="timed steps per implementation, after one warm-up")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--impls", default="dflash,per_block_sdpa,dense_sdpa")
    p.add_argument("--json", default="", help="also write the results here")
    for old, new in (("--seq", "--max-len"), ("--anchors", "--num-anchors"), ("--block", "--block-size"),
                     ("--loss-chunk", "--loss-chunk-rows")):
        if any(x == old or x.startswith(old + "=") for x in sys.argv[1:]):
            p.error(f"{old} is now {new}")
    a = p.parse_args()
    shape = dict(PRESETS[a.preset])
    shape.setdefault("kl_weight", 0.0)
    shape.setdefault("features", 3)
    for k in list(shape):
        if getattr(a, k, None) is not None:
            shape[k] = getattr(a, k)
    torch.set_num_threads(a.threads)
    dev, dtype = torch.device(a.device), {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    impls = a.impls.split(",")
    if "flex" in impls and dev.type != "cuda":
        raise SystemExit("flex: compiled flex_attention has no CPU backward; run it with --device cuda")
    c = pd.DrafterConfig(hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                         num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                         head_dim=shape["head_dim"], num_hidden_layers=shape["layers"],
                         num_target_features=shape["features"], block_size=shape["block"], vocab_size=shape["vocab"],
                         mask_token_id=shape["vocab"] - 1, loss_chunk_rows=a.loss_chunk_rows,
                         kl_weight=shape["kl_weight"])
    batch = pd.make_batch(c, torch.Generator().manual_seed(0), batch=1, seq=shape["seq"], num_anchors=shape["anchors"],
                          dtype=dtype, device=dev)
    mem = PeakMemory(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    first, failed = {}, {}
    times, cpu, peaks = {n: [] for n in impls}, {n: [] for n in impls}, {n: 0.0 for n in impls}
    for name in impls:  # one implementation at a time, so each peak is its own
        attn, loss = IMPLS[name]
        trainer = None
        try:
            mem.reset()
            trainer = pd.Trainer(c, seed=0, dtype=dtype, attention=attn, loss=loss, device=dev)  # identical weights
            first[name] = trainer.step(batch)  # warm-up: also creates AdamW's state (and compiles flex)
            first[name] = (first[name][0], {k: g.float().cpu() for k, g in first[name][1].items()})
            for _ in range(a.reps):
                mem.reset()
                sync()
                t0, c0 = time.perf_counter(), time.process_time()
                trainer.step(batch)
                sync()
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)  # all threads' CPU time: less exposed to other jobs
                peaks[name] = max(peaks[name], mem.peak_extra_mb())
        except torch.OutOfMemoryError as e:
            failed[name] = {"error": "out of memory", "peak_extra_mb": mem.peak_extra_mb(),
                            "message": str(e).splitlines()[0][:300]}
        finally:
            del trainer
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    ok = [n for n in impls if n not in failed]
    ref = first[ok[0]] if ok else None
    print(f"drafter step, {a.dtype}, {a.device}, {a.threads} threads: S={shape['seq']} N={shape['anchors']} "
          f"B={shape['block']} Hq={shape['heads']} Hkv={shape['kv_heads']} D={shape['head_dim']}, hidden "
          f"{shape['hidden']}, MLP {shape['intermediate']}, {shape['layers']} layer(s), vocab {shape['vocab']}, "
          f"kl_weight {shape['kl_weight']}, loss chunk {a.loss_chunk_rows}; median of {a.reps} steps after a warm-up")
    print(f"{'impl':<16}{'s/step':>10}{'CPU s/step':>12}{'peak MB':>12}{'time vs 1st':>13}{'mem vs 1st':>12}"
          f"{'first loss':>14}{'grad diff':>11}")
    rows = []
    for name in impls:
        if name in failed:
            rows.append({"impl": name, **failed[name]})
            print(f"{name:<16}  OUT OF MEMORY after reaching {failed[name]['peak_extra_mb']:.0f} MB: "
                  f"{failed[name]['message']}")
            continue
        s, cs = statistics.median(times[name]), statistics.median(cpu[name])
        loss, grads = first[name]
        gdiff = max(((grads[k] - ref[1][k]).abs().max() / ref[1][k].abs().max().clamp_min(1e-30)).item()
                    for k in grads)
        row = {"impl": name, "seconds": s, "cpu_seconds": cs, "peak_extra_mb": peaks[name], "loss": loss,
               "max_rel_grad_diff": gdiff}
        rows.append(row)
        print(f"{name:<16}{s:>10.3f}{cs:>12.3f}{peaks[name]:>12.1f}{s / statistics.median(times[ok[0]]):>12.2f}x"
              f"{peaks[name] / max(peaks[ok[0]], 1e-9):>11.1f}x{loss:>14.6f}{gdiff:>11.1e}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"args": vars(a), "shape": shape, "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
