"""Sampled decoding checked against the target alone: a chi-square test of N sampled three-token continuations of
one prompt against their exact joint probability under a transformers model (fp64 softmax over all V^3 paths)."""
import math

import torch


def chi2_crit(df, z=3.29):  # Wilson-Hilferty, upper tail p ~ 5e-4
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def exact_joint(model, prompt, vocab, temperature=1.0):
    """[V, V, V]: the probability that sampling at temperature continues prompt with (a, b, c)."""
    def probs(prefixes):
        return torch.softmax(model(torch.tensor(prefixes)).logits[:, -1].double() / temperature, -1)
    with torch.no_grad():
        p1 = probs([prompt])[0]
        p2 = probs([prompt + [a] for a in range(vocab)])
        p3 = probs([prompt + [a, b] for a in range(vocab) for b in range(vocab)]).view(vocab, vocab, vocab)
    return p1[:, None, None] * p2[:, :, None] * p3


def assert_matches_joint(model, prompt, seqs, vocab, temperature=1.0, min_df=10):
    """seqs: the sampled (a, b, c) tuples. Cells expected fewer than 5 times are pooled into one; min_df guards
    against a test that has too few cells left to tell distributions apart."""
    n = len(seqs)
    counts = torch.zeros(vocab, vocab, vocab, dtype=torch.float64)
    for a, b, c in seqs:
        counts[a, b, c] += 1
    exp, obs = (exact_joint(model, prompt, vocab, temperature) * n).flatten(), counts.flatten()
    order = torch.argsort(exp, descending=True)
    exp, obs = exp[order], obs[order]
    big = exp >= 5
    e = torch.cat([exp[big], exp[~big].sum().view(1)])
    o = torch.cat([obs[big], obs[~big].sum().view(1)])
    chi2 = float(((o - e) ** 2 / e).sum())
    df = int(big.sum())
    assert df >= min_df, df
    assert chi2 < chi2_crit(df), (chi2, df)
