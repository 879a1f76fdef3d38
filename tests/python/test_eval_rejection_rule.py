"""The lossless rejection rule of src/eval/rejection_rule (used with DSpark's sampled drafts) against
family_reference.py's, in fp64 on fixed random inputs, through build/rejection_probe: the acceptance probability
min(1, p/q) of every draft, the residual norm(max(p - q, 0)), and the block's verdict (drafts accepted, extra token)
for the same uniforms, including blocks where every draft is accepted, where q has zeros, and where p == q."""
import json
import pathlib
import subprocess

import pytest
import torch

import family_reference as fr


@pytest.fixture(scope="module")
def probe(dflash_bin):
    path = pathlib.Path(dflash_bin).parent / "rejection_probe"
    if not path.exists():
        pytest.fail(f"{path} not found: build the rejection_probe target")
    return str(path)


def run_probe(probe, tmp_path, cases):
    """cases: (p, q, tokens, u, extra) tuples, one probe run for all."""
    src = tmp_path / "in.json"
    src.write_text(json.dumps([{"target_probs": p.tolist(), "draft_probs": q.tolist(), "draft_tokens": tokens.tolist(),
                                "uniforms": u.tolist(), "extra_uniform": float(extra)} for p, q, tokens, u, extra in cases]))
    r = subprocess.run([probe, str(src)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def random_case(g, n, V, kind):
    p = torch.softmax(2 * torch.randn(n + 1, V, generator=g, dtype=torch.float64), -1)
    if kind == "equal":
        q = p[:n].clone()
    else:
        q = torch.softmax(2 * torch.randn(n, V, generator=g, dtype=torch.float64), -1)
        if kind == "sparse":  # zeros in q (a truncated draft distribution), renormalised
            q = q * (torch.rand(n, V, generator=g, dtype=torch.float64) < 0.5)
            q[:, 0] += 1e-3
            q = q / q.sum(-1, keepdim=True)
    tokens = torch.stack([fr.sample_with_uniform(q[j], torch.rand((), generator=g, dtype=torch.float64))
                          for j in range(n)])
    u = torch.rand(n, generator=g, dtype=torch.float64)
    if kind == "accept_all":
        u = torch.zeros(n, dtype=torch.float64)
    return p, q, tokens, u, torch.rand((), generator=g, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["dense", "sparse", "equal", "accept_all"])
def test_rejection_rule_equals_the_reference(probe, tmp_path, kind):
    g = torch.Generator().manual_seed(7)
    verdicts = set()
    cases = [random_case(g, 1 + trial % 5, 6 + 3 * trial, kind) for trial in range(12)]
    for trial, (case, out) in enumerate(zip(cases, run_probe(probe, tmp_path, cases))):
        p, q, tokens, u, extra = case
        n = tokens.shape[0]
        accepted, token = fr.speculative_verify(p, q, tokens, u, extra)
        assert (out["accepted"], out["token"]) == (accepted, int(token)), (kind, trial)
        ref_acc = fr.acceptance_probability(p[:n], q, tokens)
        assert torch.allclose(torch.tensor(out["acceptance"], dtype=torch.float64), ref_acc, rtol=0, atol=1e-15)
        ref_res = fr.residual_distribution(p[:n], q)
        assert torch.allclose(torch.tensor(out["residual"], dtype=torch.float64), ref_res, rtol=0, atol=1e-15)
        verdicts.add(accepted == n)
    if kind in ("equal", "accept_all"):
        assert verdicts == {True}  # p == q accepts everything, as do zero uniforms
    else:
        assert False in verdicts  # rejections happened, so the residual draw was compared too
