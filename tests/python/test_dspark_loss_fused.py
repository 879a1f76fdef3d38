"""The fused CPU kernel of DSpark's objective (src/kernels/dspark_objective_rows.h, taken by
torch.ops.dflash.dspark_lm_loss on the CPU for float32 / bf16 unless fused=False) against the generic ATen passes
(fused=False) and the fp64 reference family_reference.py: the loss, the three terms, a*, the argmax flags and every
gradient (hidden, Markov features, W2, confidence), with masked rows, uneven chunks, a teacher equal to the drafter
(q == pi: L1 exactly 0, a* 1, sign 0), tied argmaxes, rows whose L1 reaches 2 (the clamp of a*), and bf16 within
its tolerance. Tiny shapes, seconds."""
import pytest
import torch

import family_reference as fr

OP = torch.ops.dflash.dspark_lm_loss
LEAVES = ("hidden", "markov", "markov_w2", "confidence")


def problem(seed, R=14, H=8, V=37, r=4, M=9, zero_rows=(2, 5, 11)):
    g = torch.Generator().manual_seed(seed)

    def rnd(*s, scale=1.0):
        return scale * torch.randn(*s, generator=g, dtype=torch.float64)
    w = torch.rand(R, generator=g, dtype=torch.float64) + 0.1
    w[list(zero_rows)] = 0
    return dict(hidden=rnd(R, H), lm_head=rnd(V, H), labels=torch.randint(0, V, (R,), generator=g), weights=w,
                markov=rnd(R, r), markov_w2=rnd(V, r, scale=0.5), teacher_hidden=rnd(M, H),
                teacher_index=torch.randint(0, M, (R,), generator=g), confidence=rnd(R))


def cast(p, dtype):
    return {k: (v.to(dtype) if v.is_floating_point() and k != "weights" else v) for k, v in p.items()}


def run(p, chunk_rows, fused, markov=True, confidence=True):
    leaves = {k: p[k].clone().requires_grad_(True) for k in LEAVES}
    out = OP(leaves["hidden"], p["lm_head"], p["labels"], p["weights"], leaves["markov"] if markov else None,
             leaves["markov_w2"] if markov else None, p["teacher_hidden"], p["teacher_index"],
             leaves["confidence"] if confidence else None, chunk_rows, *fr.DSPARK_LOSS_WEIGHTS, fr.DEEPSPEC_DEN_EPS,
             fused)
    out[0].backward()
    grads = {k: (leaves[k].grad if leaves[k].grad is not None else torch.zeros_like(leaves[k])) for k in LEAVES}
    return out, grads


def reference(p, markov=True, confidence=True):
    """fp64 autograd through family_reference's terms on full [R, V] logits."""
    p = cast(p, torch.float64)
    leaves = {k: p[k].clone().requires_grad_(True) for k in LEAVES}
    logits = leaves["hidden"] @ p["lm_head"].T
    if markov:
        logits = logits + leaves["markov"] @ leaves["markov_w2"].T
    teacher = p["teacher_hidden"][p["teacher_index"]] @ p["lm_head"].T
    terms = fr.dspark_loss_terms(logits, teacher, p["labels"], p["weights"],
                                 leaves["confidence"] if confidence else None)
    loss = fr.dspark_loss(terms)
    loss.backward()
    grads = {k: (leaves[k].grad if leaves[k].grad is not None else torch.zeros_like(leaves[k])) for k in LEAVES}
    return loss.detach(), torch.stack([terms["ce"], terms["l1"], terms["confidence"]]).detach(), terms["accept"], \
        logits.detach(), grads


def assert_same(a, b, rtol, atol, live):
    (la, ta, acc_a, cor_a), ga = a
    (lb, tb, acc_b, cor_b), gb = b
    torch.testing.assert_close(la.double(), lb.double(), rtol=rtol, atol=atol)
    torch.testing.assert_close(ta.double(), tb.double(), rtol=rtol, atol=atol)
    torch.testing.assert_close(acc_a.double(), acc_b.double(), rtol=rtol, atol=atol)
    assert torch.equal(cor_a[live], cor_b[live])
    for k in LEAVES:
        torch.testing.assert_close(ga[k].double(), gb[k].double(), rtol=rtol, atol=atol, msg=k)


def assert_matches_reference(got, ref, rtol, atol, live):
    (loss, terms, accept, _), grads = got
    rloss, rterms, raccept, _, rgrads = ref
    torch.testing.assert_close(loss.double(), rloss, rtol=rtol, atol=atol)
    torch.testing.assert_close(terms.double(), rterms, rtol=rtol, atol=atol)
    torch.testing.assert_close(accept[live].double(), raccept[live], rtol=rtol, atol=atol)
    assert (accept[~live] == 0).all()
    for k in LEAVES:
        torch.testing.assert_close(grads[k].double(), rgrads[k], rtol=rtol * 10, atol=atol, msg=k)


@pytest.mark.parametrize("chunk_rows", [1, 5, 1024])
@pytest.mark.parametrize("markov,confidence", [(True, True), (True, False), (False, True), (False, False)])
def test_fp32_fused_equals_generic_equals_fp64_reference(chunk_rows, markov, confidence):
    p64 = problem(21)
    p = cast(p64, torch.float32)
    live = p["weights"] > 0
    fused = run(p, chunk_rows, True, markov, confidence)
    generic = run(p, chunk_rows, False, markov, confidence)
    assert_same(fused, generic, 2e-5, 1e-6, live)
    ref = reference(p, markov, confidence)  # the fp32 inputs, in fp64
    assert_matches_reference(fused, ref, 2e-5, 1e-6, live)
    assert torch.equal(fused[0][3][live], ref[3].argmax(-1).eq(p["labels"])[live])
    # fp64 inputs take the generic passes whatever the switch says: the reference to fp64 precision
    assert_matches_reference(run(p64, chunk_rows, True, markov, confidence), reference(p64, markov, confidence),
                             1e-12, 1e-13, live)


def test_teacher_equal_to_the_drafter_and_tied_argmaxes():
    p = cast(problem(23, R=10, V=29, zero_rows=(2, 5)), torch.float32)
    # q == pi exactly: the teacher row is the drafter's own hidden row (no Markov bias), so L1 = 0, a* = 1, and
    # sign(q - pi) = 0 everywhere: the L1 adds nothing to the gradient (as |x|'s subgradient 0 at 0 in autograd).
    p["teacher_hidden"] = p["hidden"].clone()
    p["teacher_index"] = torch.arange(10)
    # two equal LM-head rows tie every row's logits at 3 and 7; labels at 7 on rows where they are the argmax
    p["lm_head"][7] = p["lm_head"][3]
    p["hidden"][0] = p["lm_head"][3] * 4
    p["teacher_hidden"][0] = p["hidden"][0]
    p["labels"][0] = 7
    live = p["weights"] > 0
    fused, generic = run(p, 3, True, markov=False), run(p, 3, False, markov=False)
    assert_same(fused, generic, 2e-5, 1e-6, live)
    (_, terms, accept, correct), grads = fused
    assert terms[1].item() == 0.0
    assert torch.equal(accept[live], torch.ones_like(accept[live]))
    assert not correct[0]  # the first argmax (3) is not the label (7)
    ref = reference(p, markov=False)
    assert_matches_reference(fused, ref, 2e-5, 1e-6, live)


def test_l1_near_two_clamps_the_confidence_target():
    p = cast(problem(25), torch.float32)
    # sharp, disjoint distributions: the drafter's mass on one token, the teacher's on another -> L1 ~ 2, a* = 0
    p["lm_head"] = p["lm_head"] * 40
    p["markov_w2"] = p["markov_w2"] * 0
    live = p["weights"] > 0
    fused, generic = run(p, 4, True), run(p, 4, False)
    (_, _, accept, _), _ = fused
    ref = reference(p)
    disjoint = live & (ref[2] == 0)
    assert disjoint.sum() >= 3, "the problem must have rows whose L1 reaches 2"
    assert (accept[disjoint] == 0).all()
    # logits of a few hundred: the generic exp(l - lse) carries lse's float32 rounding (~1e-5 of the gradient)
    assert_same(fused, generic, 1e-4, 1e-4, live)
    assert_matches_reference(fused, ref, 2e-5, 1e-5, live)


@pytest.mark.parametrize("chunk_rows", [3, 1024])
def test_bf16_fused_follows_generic_and_fp64(chunk_rows):
    p64 = problem(27)
    p = cast(p64, torch.bfloat16)
    live = p["weights"] > 0
    fused, generic = run(p, chunk_rows, True), run(p, chunk_rows, False)
    assert fused[0][0].dtype == torch.float32
    assert_same(fused, generic, 3e-2, 3e-3, live)
    ref = reference(p64)
    (loss, terms, _, _), grads = fused
    assert abs(loss.item() - ref[0].item()) <= 3e-2 * max(1.0, abs(ref[0].item()))
    torch.testing.assert_close(grads["hidden"].double(), ref[4]["hidden"], rtol=0.3, atol=3e-2)
    torch.testing.assert_close(grads["confidence"].double(), ref[4]["confidence"], rtol=0.1, atol=3e-3)


def test_no_grad_fused_gives_the_training_values():
    p = cast(problem(29), torch.float32)
    with torch.no_grad():
        a = OP(*(p[k] for k in ("hidden", "lm_head", "labels", "weights", "markov", "markov_w2", "teacher_hidden",
                                "teacher_index", "confidence")), 4, 0.1, 0.9, 1.0, 1e-6, True)
    (b, terms, accept, correct), _ = run(p, 4, True)
    torch.testing.assert_close(a[0], b.detach())
    torch.testing.assert_close(a[1], terms)
    torch.testing.assert_close(a[2], accept)
    assert torch.equal(a[3], correct)
