"""A plain-PyTorch DFlash drafter training step (dense mask of docs/DFLASH.md, eager autograd), for
`dflash bench step`: the same drafter shape, sequence, anchors and soft-label weight as our step.

Prints one JSON line: mean_seconds (forward + backward + zero_grad), peak_extra_mb, loss.
The model is reference_drafter.py beside this script, the oracle our drafter is tested against.
"""
import argparse
import json
import os
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import reference_drafter as ref  # noqa: E402
from memory import PeakMemory  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    for name in ["hidden", "intermediate", "heads", "kv_heads", "head_dim", "layers", "vocab", "block", "seq",
                 "anchors", "features", "iters", "threads", "window"]:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=0)
    p.add_argument("--layer-types", default="")
    p.add_argument("--kl-weight", type=float, default=0.15)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float64"], default="float32")
    a = p.parse_args()
    torch.set_num_threads(a.threads or os.cpu_count())
    dtype = getattr(torch, a.dtype)
    cfg = {"block_size": a.block, "num_hidden_layers": a.layers, "hidden_size": a.hidden,
           "intermediate_size": a.intermediate, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
           "head_dim": a.head_dim, "rms_norm_eps": 1e-6, "rope_theta": 1e7, "sliding_window": a.window,
           "layer_types": a.layer_types.split(",")}
    g = torch.Generator().manual_seed(0)
    H, Q, K, I, D = a.hidden, a.heads * a.head_dim, a.kv_heads * a.head_dim, a.intermediate, a.head_dim
    per = {"input_layernorm.weight": (H,), "self_attn.q_proj.weight": (Q, H), "self_attn.k_proj.weight": (K, H),
           "self_attn.v_proj.weight": (K, H), "self_attn.o_proj.weight": (H, Q), "self_attn.q_norm.weight": (D,),
           "self_attn.k_norm.weight": (D,), "post_attention_layernorm.weight": (H,),
           "mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H), "mlp.down_proj.weight": (H, I)}

    mem = PeakMemory("cpu")
    mem.reset()
    shapes = {"fc.weight": (H, a.features), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(a.layers):
        shapes.update({f"layers.{i}.{k}": s for k, s in per.items()})
    W = {n: (torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) / s[1] ** 0.5).to(dtype).requires_grad_()
         for n, s in shapes.items()}
    embed = (torch.randn(a.vocab, H, generator=g) * 0.02).to(dtype)
    feats = torch.randn(1, a.seq, a.features, generator=g).to(dtype)
    last = torch.randn(1, a.seq, H, generator=g).to(dtype)
    ids = torch.randint(0, a.vocab - 1, (1, a.seq), generator=g)
    loss_mask = torch.ones(1, a.seq, dtype=torch.bool)
    loss_mask[:, : a.seq // 8] = False
    valid = torch.nonzero(loss_mask[0, :-1] & loss_mask[0, 1:]).flatten()
    anchors = torch.sort(valid[torch.randperm(len(valid), generator=g)[: a.anchors]]).values[None]
    keep = torch.ones_like(anchors, dtype=torch.bool)
    block_ids, labels, w, tpos = ref.block_targets(ids, loss_mask, anchors, keep, a.block, a.vocab - 1,
                                                   ref.default_gamma(a.block))
    times, loss = [], None
    for _ in range(a.iters):
        t0 = time.perf_counter()
        hidden = ref.drafter_hidden(cfg, W, embed, feats, block_ids, anchors, keep)
        loss, _ = ref.drafter_loss(hidden, embed, labels, w, last, tpos, a.kl_weight)
        loss.backward()
        for t in W.values():
            t.grad = None
        times.append(time.perf_counter() - t0)
    print(json.dumps({"mean_seconds": sum(times) / len(times), "peak_extra_mb": mem.peak_extra_mb(),
                      "loss": float(loss.detach())}))


if __name__ == "__main__":
    main()
