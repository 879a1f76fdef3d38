"""DFlash's training step side by side with SpecForge's, on the same drafter and the same offline job (CPU, fp32).

    PYTHONPATH=/path/to/unpacked/specforge-wheel \
    DFLASH_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 \
    .venv/bin/python scripts/bench_specforge_step.py --seq 1024,2048,4096 --anchors 64,256 --rounds 3

SpecForge is not a dependency of dflash: unpack its wheel (`unzip specforge-*.whl -d DIR`) and put DIR on
PYTHONPATH (or pass --specforge DIR). Only the modules of its DFlash training step are imported:
`specforge.modeling.draft.dflash.DFlashDraftModel` (Qwen3 layers behind transformers' attention interface) and
`specforge.algorithms.common.dflash_family_model.OnlineDFlashModel` (noise embedding, mask, chunked checkpointed
cross-entropy). Its anchor sampler is the one thing replaced: both sides get the same anchors, so both compute
the same loss. SpecForge's default attention backend, compiled flex_attention, cannot train on a CPU (torch 2.11:
"FlexAttention does not support backward on CPU"), so its step here runs the backend it offers for that,
`sdpa` (its dense boolean mask from create_dflash_sdpa_mask, transformers' SDPA with GQA); `--sf-attention
flex_attention` shows the error. The job has no padding blocks (every anchor kept): SDPA rows that see nothing
come out NaN on SpecForge's sdpa path, which only its eager path guards.

Ours: examples/python_drafter.py's drafter (same parameter names) with torch.ops.dflash.anchor_block_attention
and dflash.chunked_lm_loss (the kernels `dflash train` runs), SpecForge's loss (no decay: gamma = inf).
The weights are ours, copied into SpecForge's model. A step = forward + loss + backward (no optimizer: the
same AdamW on both sides would only add the same time). One thread each, one process, the two steps
interleaved round by round so machine load hits both alike; the first step of each side is a warm-up (it
compiles flex_attention) and checks that the losses agree to --tol (relative) and reports the gradients'
largest relative difference.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("DFLASH_OPS_LIBRARY", str(ROOT / "build" / "libdflash_ops.so"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dflash  # noqa: E402
import python_drafter as pd  # noqa: E402


def import_specforge(path: str):
    if path:
        sys.path.insert(0, path)
    try:
        from specforge.algorithms.common.dflash_family_model import OnlineDFlashModel
        from specforge.modeling.draft.dflash import DFlashDraftModel
    except ImportError as e:
        raise SystemExit(f"bench_specforge_step: cannot import SpecForge's DFlash step ({e}); unzip the specforge "
                         "wheel and pass its directory with --specforge or PYTHONPATH")
    return OnlineDFlashModel, DFlashDraftModel


def specforge_step_model(OnlineDFlashModel, DFlashDraftModel, c: pd.DrafterConfig, ours: pd.Trainer, anchors, keep,
                         attention: str):
    """SpecForge's training model holding a copy of our weights; its anchor sampler returns ours."""
    from transformers import Qwen3Config
    cfg = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                      num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                      num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
                      rope_theta=c.rope_theta, max_position_embeddings=1 << 16, attention_bias=False,
                      layer_types=["full_attention"] * c.num_hidden_layers, tie_word_embeddings=False)
    if cfg.rope_parameters.get("rope_theta") != c.rope_theta:  # transformers 5 keeps it in rope_parameters
        raise SystemExit(f"bench_specforge_step: Qwen3Config did not take rope_theta {c.rope_theta}")
    cfg.block_size = c.block_size
    cfg.num_target_layers = c.num_target_features + 4
    cfg.dflash_config = {"target_layer_ids": list(range(1, c.num_target_features + 1)),
                         "mask_token_id": c.mask_token_id}
    cfg._attn_implementation = attention
    draft = DFlashDraftModel(cfg).float()
    missing, unexpected = draft.load_state_dict(ours.model.state_dict(), strict=False)
    if missing or unexpected:
        raise SystemExit(f"bench_specforge_step: weight names differ: missing {missing}, unexpected {unexpected}")
    lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
    embed = nn.Embedding(c.vocab_size, c.hidden_size)
    with torch.no_grad():
        lm_head.weight.copy_(ours.lm_head)
        embed.weight.copy_(ours.embed)
    lm_head.requires_grad_(False)
    embed.requires_grad_(False)

    class FixedAnchors(OnlineDFlashModel):
        def _sample_anchor_positions(self, seq_len, loss_mask, device):
            return anchors, keep

    m = FixedAnchors(draft, lm_head, embed, mask_token_id=c.mask_token_id, block_size=c.block_size,
                     attention_backend=attention, num_anchors=anchors.size(1), loss_decay_gamma=None)
    return m.train()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--specforge", default="", help="directory of the unpacked specforge wheel (else PYTHONPATH)")
    p.add_argument("--seq", default="1024,2048,4096", help="context lengths S")
    p.add_argument("--anchors", default="64,256", help="anchor counts N (a quarter are padding blocks)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--sf-attention", default="sdpa", choices=["sdpa", "eager", "flex_attention"],
                   help="SpecForge's attention backend (flex_attention has no CPU backward)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (each: one step of each side)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tol", type=float, default=1e-6, help="largest relative loss difference accepted")
    p.add_argument("--json", default="")
    p.add_argument("--profile", action="store_true",
                   help="also profile one step of each side (torch.profiler, the ops by self CPU time)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    OnlineDFlashModel, DFlashDraftModel = import_specforge(a.specforge)
    import torch._inductor.cpu_vec_isa as vec_isa
    isa = {"dflash": os.environ.get("DFLASH_CPU_ISA", "(auto: the widest the CPU has)"),
           "aten": torch.backends.cpu.get_cpu_capability(), "inductor": str(vec_isa.pick_vec_isa())}
    print(f"torch {torch.__version__}, {a.threads} thread(s), ISA: DFLASH_CPU_ISA={isa['dflash']}, "
          f"aten {isa['aten']}, inductor {isa['inductor']}")
    print(f"drafter: hidden {a.hidden}, heads {a.heads}/{a.kv_heads}, head_dim {a.head_dim}, MLP {a.intermediate}, "
          f"{a.layers} layer(s), vocab {a.vocab}, block {a.block_size}; fp32; step = forward + loss + backward; "
          f"SpecForge attention backend {a.sf_attention}")
    c = pd.DrafterConfig(hidden_size=a.hidden, intermediate_size=a.intermediate, num_attention_heads=a.heads,
                         num_key_value_heads=a.kv_heads, head_dim=a.head_dim, num_hidden_layers=a.layers,
                         num_target_features=3, block_size=a.block_size, vocab_size=a.vocab,
                         mask_token_id=a.vocab - 1)
    print(f"{'S':>6}{'N':>5}{'ours s':>9}{'SF s':>9}{'ratio':>7}{'ratio min-max':>15}{'loss':>12}"
          f"{'loss rel diff':>15}{'grad rel diff':>15}")
    rows, bad = [], []
    for S in (int(s) for s in a.seq.split(",")):
        for N in (int(n) for n in a.anchors.split(",")):
            ours = pd.Trainer(c, seed=0)
            batch = pd.make_batch(c, torch.Generator().manual_seed(1), batch=1, seq=S, num_anchors=N)
            # No padding blocks (see the docstring): N distinct sorted anchors with a supervised first label.
            cand = torch.nonzero(batch.loss_mask[0, :-1] & batch.loss_mask[0, 1:]).flatten()
            pick = torch.randperm(len(cand), generator=torch.Generator().manual_seed(2))[:N]
            batch.anchors = cand[pick].sort().values[None]
            batch.keep = torch.ones_like(batch.anchors, dtype=torch.bool)
            sf = specforge_step_model(OnlineDFlashModel, DFlashDraftModel, c, ours, batch.anchors, batch.keep,
                                      a.sf_attention)
            sf_params = dict(sf.draft_model.named_parameters())

            def ours_step():
                ours.model.zero_grad(set_to_none=True)
                m = dflash.block_mask_args(batch.anchors, batch.keep, c.block_size, S)
                t = dflash.block_targets(batch.input_ids, batch.loss_mask, m, c.mask_token_id, gamma=math.inf)
                hidden = ours.model(F.embedding(t.block_ids, ours.embed), batch.target_features, m)
                loss = dflash.chunked_lm_loss(hidden, ours.lm_head, t.labels, t.weights, chunk_rows=c.loss_chunk_rows)
                loss.backward()
                return loss.item()

            def sf_step():
                sf.zero_grad(set_to_none=True)
                loss = sf(batch.input_ids, batch.target_features, batch.loss_mask.float())[0]
                loss.backward()
                return loss.item()

            l_ours, l_sf = ours_step(), sf_step()  # warm-up: compiles flex_attention on SpecForge's side
            ldiff = abs(l_ours - l_sf) / abs(l_sf)
            gdiff = max(((g.grad - sf_params[n].grad).abs().max()
                         / sf_params[n].grad.abs().max().clamp_min(1e-30)).item()
                        for n, g in ours.model.named_parameters())
            if a.profile:
                for name, fn in (("ours", ours_step), ("SpecForge", sf_step)):
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                        fn()
                    print(f"-- {name}, S {S} N {N}: ops by self CPU time")
                    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12,
                                                    max_name_column_width=48))
            t_ours, t_sf = [], []
            for r in range(a.rounds):  # interleaved, alternating who goes first
                for name in (("ours", "sf") if r % 2 == 0 else ("sf", "ours")):
                    t0 = time.perf_counter()
                    (ours_step if name == "ours" else sf_step)()
                    (t_ours if name == "ours" else t_sf).append(time.perf_counter() - t0)
            ratios = [s / o for o, s in zip(t_ours, t_sf)]
            mo, ms = statistics.median(t_ours), statistics.median(t_sf)
            row = dict(S=S, N=N, ours_s=t_ours, specforge_s=t_sf, ratio=ms / mo, ratio_min=min(ratios),
                       ratio_max=max(ratios), loss=l_ours, loss_specforge=l_sf, loss_rel_diff=ldiff,
                       grad_rel_diff=gdiff)
            rows.append(row)
            if ldiff > a.tol:
                bad.append(f"S {S} N {N}: loss {l_ours} vs SpecForge {l_sf}")
            print(f"{S:>6}{N:>5}{mo:>9.3f}{ms:>9.3f}{ms / mo:>6.2f}x{min(ratios):>8.2f}-{max(ratios):.2f}x"
                  f"{l_ours:>12.6f}{ldiff:>15.1e}{gdiff:>15.1e}", flush=True)
            del ours, sf
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"args": vars(a), "isa": isa, "results": rows}, indent=2) + "\n")
    if bad:
        raise SystemExit("bench_specforge_step: losses differ beyond --tol: " + "; ".join(bad))


if __name__ == "__main__":
    main()
