"""The C++ DFlash2 building blocks (src/drafter/dynamic_block_conv, candidate_selector) against the fp64 reference
family_reference.py, through build/dflash2_probe: the conv on a flat sequence of blocks == the reference on each
block alone (values and every gradient), the selector's greedy and sampled walk, and the selector loss in both
candidate modes, with and without stop-gradient (value, metrics and every gradient). Tiny shapes, seconds."""
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

import family_reference as fr


@pytest.fixture(scope="module")
def probe(dflash_bin):
    path = pathlib.Path(dflash_bin).parent / "dflash2_probe"
    if not path.exists():
        pytest.fail(f"{path} not found: build the dflash2_probe target")
    return str(path)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def run_probe(probe, tmp_path, op, tensors, **params):
    src, dst = tmp_path / f"{op}_in.safetensors", tmp_path / f"{op}_out.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(src))
    args = [probe, op, str(src), str(dst)] + [f"{k}={v}" for k, v in params.items()]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return load_file(str(dst))


def close(a, b, tol=1e-12):
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol * max(1.0, b.abs().max().item() if b.numel() else 1.0), err


# ---------------------------------------------------------------------------------------------------- conv ----

@pytest.mark.parametrize("d,G,K,B", [(32, 8, 2, 4), (16, 4, 3, 2), (12, 12, 1, 3)])
def test_conv_on_a_flat_sequence_is_each_block_alone(probe, tmp_path, d, G, K, B):
    g = gen(d + K)
    conv = fr.random_conv_params(d, K, G, g)
    n_blocks, b = 3, 2
    u = torch.randn(b, n_blocks * B, d, generator=g, dtype=torch.float64)
    sub_w = 0.4 * torch.randn(d, d, generator=g, dtype=torch.float64)
    gy = torch.randn(b, n_blocks * B, d, generator=g, dtype=torch.float64)
    out = run_probe(probe, tmp_path, "conv", {"u": u, "base_kernel": conv.base_kernel,
                                              "kernel_projection": conv.kernel_projection, "sub_w": sub_w, "gy": gy},
                    group_size=G, block_size=B)

    leaves = [t.clone().requires_grad_(True) for t in (u, conv.base_kernel, conv.kernel_projection)]
    ref_conv = fr.ConvParams(leaves[1], leaves[2], G)

    def sublayer(h):
        return torch.tanh(h @ sub_w.T)
    # the reference on each block alone (z-lab: one block per call), then concatenated
    per_block = torch.cat([fr.wrapped_sublayer(leaves[0][:, i * B:(i + 1) * B], sublayer, ref_conv, B)
                           for i in range(n_blocks)], 1)
    (per_block * gy).sum().backward()
    close(out["y"], per_block.detach())
    for name, leaf in zip(["grad.u", "grad.base_kernel", "grad.kernel_projection"], leaves):
        close(out[name], leaf.grad)
    # and the reference's flat form with the block rule agrees too
    close(out["y"], fr.wrapped_sublayer(u, sublayer, fr.ConvParams(conv.base_kernel, conv.kernel_projection, G), B))


def test_conv_refuses_a_length_that_is_not_whole_blocks(probe, tmp_path):
    conv = fr.identity_conv_params(8, 2, 4)
    z = torch.zeros(1, 6, 8, dtype=torch.float64)
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    save_file({"u": z, "base_kernel": conv.base_kernel, "kernel_projection": conv.kernel_projection,
               "sub_w": torch.zeros(8, 8, dtype=torch.float64), "gy": z.clone()}, str(src))
    res = subprocess.run([probe, "conv", str(src), str(dst), "group_size=4", "block_size=4"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1
    assert "multiple of the block size 4" in res.stderr


# ------------------------------------------------------------------------------------------------ selector ----

V, D, R = 64, 12, 5


def selector_case(seed, n, L=None, scale=0.5):
    g = gen(seed)
    params = fr.random_selector_params(V, D, R, top_k=6, generator=g, scale=scale)
    shape = (n, L, D) if L else (n, D)
    hidden = torch.randn(*shape, generator=g, dtype=torch.float64)
    head = torch.randn(V, D, generator=g, dtype=torch.float64)
    return g, params, hidden, head


def selector_tensors(params):
    return {"hidden_projection": params.hidden_projection, "predecessor_codebook": params.predecessor_codebook,
            "successor_codebook": params.successor_codebook}


@pytest.mark.parametrize("temperature,multiplier,softcap", [(0.0, 1.0, 0.0), (0.0, 0.7, 3.0), (0.8, 1.0, 0.0),
                                                            (1.3, 0.5, 2.5)])
def test_walk_matches_the_reference(probe, tmp_path, temperature, multiplier, softcap):
    n, L = 5, 7  # 5 blocks of B = 8: slots 1..7
    g, params, hidden, head = selector_case(int(temperature * 10) + 1, n, L)
    anchors = torch.randint(0, V, (n,), generator=g)
    uniforms = torch.rand(n, L, generator=g, dtype=torch.float64)
    tensors = {"hidden": hidden, "lm_head": head, "anchors": anchors, **selector_tensors(params)}
    if temperature > 0:
        tensors["uniforms"] = uniforms
    out = run_probe(probe, tmp_path, "walk", tensors, top_k=params.top_k, temperature=temperature, vocab_chunk=10,
                    output_multiplier=multiplier, softcap=softcap)
    unary = fr.unary_logits(hidden @ head.T, multiplier, softcap)
    for b in range(n):
        ref = fr.selector_walk(unary[b], hidden[b], anchors[b], params, temperature, uniforms[b])
        assert torch.equal(out["candidates"][b], ref.candidates)
        assert torch.equal(out["path"][b], ref.path)
        close(out["scores"][b], ref.scores)
        close(out["q"][b], ref.q)
    # the selector changes the path somewhere in this case (otherwise the test would not see it)
    assert not torch.equal(out["path"], out["candidates"][..., 0]) or temperature > 0


@pytest.mark.parametrize("mode", ["inject", "strict"])
@pytest.mark.parametrize("stop_gradient", [False, True])
def test_loss_matches_the_reference(probe, tmp_path, mode, stop_gradient):
    n = 40
    g, params, hidden, head = selector_case(7, n)
    # predecessors / targets: half the targets from the row's own top 3 (inside the top-K), half at random
    unary0 = hidden @ head.T
    near = fr.top_candidates(unary0, 3)[torch.arange(n), torch.randint(0, 3, (n,), generator=g)]
    targets = torch.where(torch.rand(n, generator=g) < 0.5, near, torch.randint(0, V, (n,), generator=g))
    preds = torch.randint(0, V, (n,), generator=g)
    weights = torch.rand(n, generator=g, dtype=torch.float64)
    weights[::8] = 0.0  # slot-0 rows
    multiplier, softcap = 1.1, 6.0
    out = run_probe(probe, tmp_path, "loss", {"hidden": hidden, "lm_head": head, "predecessors": preds,
                                              "targets": targets, "weights": weights, **selector_tensors(params)},
                    top_k=params.top_k, mode=mode, stop_gradient=int(stop_gradient), vocab_chunk=9,
                    output_multiplier=multiplier, softcap=softcap)

    h = hidden.clone().requires_grad_(True)
    p = fr.SelectorParams(*(t.clone().requires_grad_(True) for t in
                            (params.hidden_projection, params.predecessor_codebook, params.successor_codebook)),
                          params.top_k)
    unary = fr.unary_logits(h @ head.T, multiplier, softcap)
    loss = fr.selector_loss(unary, h, preds, targets, weights, p, mode=mode, stop_gradient=stop_gradient,
                            denominator="weight")  # SpecForge's: the trained term
    loss.backward()
    close(out["loss"][0], loss.detach())
    for name, ref in [("grad.hidden", h.grad), ("grad.hidden_projection", p.hidden_projection.grad),
                      ("grad.predecessor_codebook", p.predecessor_codebook.grad),
                      ("grad.successor_codebook", p.successor_codebook.grad)]:
        close(out[name], ref if ref is not None else torch.zeros_like(out[name]))
    if stop_gradient:
        assert out["grad.hidden"].abs().max() == 0
    # the coverage denominator (sum w m, SpecForge's logged `selector_loss` ratio) from the same terms
    with torch.no_grad():
        ref_covered = fr.selector_loss(unary, h, preds, targets, weights, p, mode=mode, denominator="covered")
    close(out["ce_sum"][0] / out["covered_weight"][0], ref_covered)
    # metrics over the rows in the loss
    mask = weights > 0
    u = unary.detach()
    assert out["rows"][0] == mask.sum()
    close(out["recall_hits"][0] / out["rows"][0], torch.tensor(fr.unary_recall_at_k(u, targets, mask, p.top_k),
                                                                dtype=torch.float64))
    close(out["selector_hits"][0] / out["rows"][0],
          torch.tensor(fr.teacher_forced_selector_accuracy(u, hidden, preds, targets, mask, p), dtype=torch.float64))
    # this case exercises both kinds of rows
    assert 0 < out["recall_hits"][0] < out["rows"][0]


LOSS_GRADS = ["grad.hidden", "grad.hidden_projection", "grad.predecessor_codebook", "grad.successor_codebook"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("covered", [False, True])
def test_strict_rows_without_their_gold_add_nothing_under_the_trainers_scale(probe, tmp_path, dtype, covered):
    """Strict candidates where no row's gold is in its top-K (recall@K = 0: the usual first step from scratch) give
    loss 0 and every gradient exactly 0, finite when backpropagated times the trainer's scale (the micro-batch's
    weight, here 300) in fp32 and bf16. (The divisor used to be clamped to FLT_MIN: 300 / FLT_MIN overflows fp32 and
    the rows' weight 0 times that inf made every gradient NaN.) With half the rows covered, the loss and gradients
    are the fp64 reference's (the covered rows' CE over every row's weight), and the uncovered rows' hidden states
    get exactly 0."""
    n, scale = 16, 300.0
    g, params, hidden64, head64 = selector_case(21, n)
    hidden, head = hidden64.to(dtype), head64.to(dtype)
    weights_of = (params.hidden_projection, params.predecessor_codebook, params.successor_codebook)
    sel = fr.SelectorParams(*(t.to(dtype) for t in weights_of), params.top_k)
    unary0 = hidden.double() @ head.double().T
    worst, best = unary0.argmin(-1), unary0.argmax(-1)  # never / always in the top-K, whatever the rounding
    uncovered = torch.arange(n) % 2 == 1 if covered else torch.ones(n, dtype=torch.bool)
    targets = torch.where(uncovered, worst, best)
    preds = torch.randint(0, V, (n,), generator=g)
    weights = torch.rand(n, generator=g, dtype=torch.float32) + 0.5
    out = run_probe(probe, tmp_path, "loss", {"hidden": hidden, "lm_head": head, "predecessors": preds,
                                              "targets": targets, "weights": weights, **selector_tensors(sel)},
                    top_k=sel.top_k, mode="strict", vocab_chunk=9, loss_scale=scale)
    for name, t in out.items():
        assert torch.isfinite(t.double()).all(), name
    assert out["rows"][0] == n and out["recall_hits"][0] == n - uncovered.sum()
    assert out["grad.hidden"][uncovered].abs().max() == 0
    if not covered:
        assert out["covered_weight"][0] == 0 and out["ce_sum"][0] == 0 and out["loss"][0] == 0
        for name in LOSS_GRADS:
            assert out[name].abs().max() == 0, name
        return
    # the fp64 reference on the same (rounded) inputs
    h = hidden.double().requires_grad_(True)
    p = fr.SelectorParams(*(t.double().requires_grad_(True) for t in
                            (sel.hidden_projection, sel.predecessor_codebook, sel.successor_codebook)), sel.top_k)
    loss = fr.selector_loss(h @ head.double().T, h, preds, targets, weights.double(), p, mode="strict",
                            denominator="weight")
    (loss * scale).backward()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    close(out["loss"][0].double(), loss.detach(), tol)
    for name, ref in zip(LOSS_GRADS, [h.grad, p.hidden_projection.grad, p.predecessor_codebook.grad,
                                      p.successor_codebook.grad]):
        close(out[name].double(), ref, tol)


def test_block_metrics_match_the_reference(probe, tmp_path):
    """The self-conditioned path's accepted length (the walk fed with its own picks) and the unary top-K oracle's,
    on blocks whose targets follow the unary argmax for a while, so both lengths vary."""
    N, B = 12, 6
    g, params, hidden, head = selector_case(21, N, B)
    unary = fr.unary_logits(hidden @ head.T, 0.9, 5.0)
    targets = unary.argmax(-1)
    # break each block's run of matches at a random slot with a random token
    cut = torch.randint(1, B, (N,), generator=g)
    targets[torch.arange(N), cut] = torch.randint(0, V, (N,), generator=g)
    anchors = torch.randint(0, V, (N,), generator=g)
    targets[:, 0] = anchors
    mask = torch.ones(N, B, dtype=torch.bool)
    mask[:, 0] = False
    mask[3, 2] = False       # a masked slot ends the accepted prefix
    mask[5, 1:] = False      # a block with nothing to score is not counted
    out = run_probe(probe, tmp_path, "metrics", {"hidden": hidden, "lm_head": head, "anchors": anchors,
                                                 "targets": targets, "mask": mask.to(torch.uint8),
                                                 **selector_tensors(params)},
                    top_k=params.top_k, vocab_chunk=11, output_multiplier=0.9, softcap=5.0)
    assert out["blocks"][0] == N - 1
    close(out["path_length_sum"][0] / out["blocks"][0], torch.tensor(
        fr.self_conditioned_path_accepted_length(unary, hidden, anchors, targets, mask, params), dtype=torch.float64))
    close(out["oracle_length_sum"][0] / out["blocks"][0], torch.tensor(
        fr.unary_topk_oracle_accepted_length(unary, targets, mask, params.top_k), dtype=torch.float64))
    close(out["unary_length_sum"][0] / out["blocks"][0], torch.tensor(
        fr.unary_path_accepted_length(unary, targets, mask), dtype=torch.float64))
    assert out["oracle_length_sum"][0] > out["path_length_sum"][0] > out["blocks"][0]
    assert out["oracle_length_sum"][0] >= out["unary_length_sum"][0] >= out["blocks"][0]
