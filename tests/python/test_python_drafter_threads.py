"""examples/python_drafter.py: 3 Python threads, one drafter replica each, training at once (fwd + bwd + AdamW
with dflash's attention and chunked loss) give bit-identical losses, gradients and weights to the same steps
run one replica after another, with no error, 20 times in a row."""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import python_drafter as pd  # noqa: E402

REPLICAS, STEPS, ROUNDS = 3, 3, 20


def run(concurrent):
    c = pd.DrafterConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, block_size=8, vocab_size=256, mask_token_id=255, sliding_window=12,
                         kl_weight=0.15, loss_chunk_rows=24)
    data = [[pd.make_batch(c, torch.Generator().manual_seed(100 * r + s), seq=64, num_anchors=6)
             for s in range(STEPS)] for r in range(REPLICAS)]
    trainers = [pd.Trainer(c, seed=r) for r in range(REPLICAS)]
    if concurrent:
        results = pd.train_threads(trainers, data)
    else:
        results = [[] for _ in trainers]
        for t, d, out in zip(trainers, data, results):
            pd.train_replica(t, d, out)
    weights = [{n: p.detach().clone() for n, p in t.model.named_parameters()} for t in trainers]
    return results, weights


def test_three_threads_train_bit_identically_to_one_after_another():
    want, want_w = run(concurrent=False)
    for r in range(REPLICAS):
        losses = [loss for loss, _ in want[r]]
        assert all(torch.isfinite(torch.tensor(losses))) and losses[0] != losses[-1]
        assert all(g.abs().max() > 0 for g in want[r][0][1].values()), "a parameter got no gradient"
    for round_ in range(ROUNDS):
        got, got_w = run(concurrent=True)
        for r in range(REPLICAS):
            for s, ((lw, gw), (lg, gg)) in enumerate(zip(want[r], got[r])):
                assert lg == lw, f"round {round_}, replica {r}, step {s}: loss {lg!r} vs {lw!r}"
                for n in gw:
                    assert torch.equal(gg[n], gw[n]), f"round {round_}, replica {r}, step {s}: grad of {n}"
            for n in want_w[r]:
                assert torch.equal(got_w[r][n], want_w[r][n]), f"round {round_}, replica {r}: weight {n}"
