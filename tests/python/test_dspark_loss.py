"""The chunked DSpark objective torch.ops.dflash.dspark_lm_loss (src/ops/dspark_lm_loss_op) against the fp64
reference family_reference.py and against the naive full-logits form: the three terms, the combined loss, the
per-row acceptance a* and every gradient (hidden, Markov features, W2, confidence), for chunk sizes that split
the rows unevenly; gradcheck; markov rank 0 + no confidence head + weights (1, 0, 0) equals the DFlash chunked
loss (dflash::chunked_lm_loss) on the same next-token labels; bad arguments named. Tiny shapes, seconds."""
import pytest
import torch

import family_reference as fr

OP = torch.ops.dflash.dspark_lm_loss


def problem(seed, R=14, H=6, V=13, r=4, M=9, zero_rows=(2, 5, 11), dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (scale * torch.randn(*s, generator=g, dtype=torch.float64)).to(dtype)
    w = torch.rand(R, generator=g, dtype=torch.float64) + 0.1
    w[list(zero_rows)] = 0
    return dict(hidden=rnd(R, H), lm_head=rnd(V, H), labels=torch.randint(0, V, (R,), generator=g), weights=w,
                markov=rnd(R, r), markov_w2=rnd(V, r, scale=0.5), teacher_hidden=rnd(M, H),
                teacher_index=torch.randint(0, M, (R,), generator=g), confidence=rnd(R))


def reference(p, weights=fr.DSPARK_LOSS_WEIGHTS, den_eps=fr.DEEPSPEC_DEN_EPS, markov=True, confidence=True):
    """The naive full-logits objective with autograd (family_reference's loss terms on [R, V] logits)."""
    leaves = {k: p[k].clone().requires_grad_(True) for k in ("hidden", "markov", "markov_w2", "confidence")}
    logits = leaves["hidden"] @ p["lm_head"].T
    if markov:
        logits = logits + leaves["markov"] @ leaves["markov_w2"].T
    teacher = p["teacher_hidden"][p["teacher_index"]] @ p["lm_head"].T
    terms = fr.dspark_loss_terms(logits, teacher, p["labels"], p["weights"],
                                 leaves["confidence"] if confidence else None, den_eps=den_eps)
    loss = fr.dspark_loss(terms, weights)
    loss.backward()
    return loss, terms, leaves, logits


def run_op(p, chunk_rows, weights=fr.DSPARK_LOSS_WEIGHTS, den_eps=fr.DEEPSPEC_DEN_EPS, markov=True, confidence=True):
    leaves = {k: p[k].clone().requires_grad_(True) for k in ("hidden", "markov", "markov_w2", "confidence")}
    out = OP(leaves["hidden"], p["lm_head"], p["labels"], p["weights"],
             leaves["markov"] if markov else None, leaves["markov_w2"] if markov else None,
             p["teacher_hidden"], p["teacher_index"], leaves["confidence"] if confidence else None,
             chunk_rows, *weights, den_eps)
    out[0].backward()
    return out, leaves


@pytest.mark.parametrize("chunk_rows", [1, 4, 1024])
@pytest.mark.parametrize("markov,confidence", [(True, True), (True, False), (False, True)])
def test_equals_the_fp64_reference_terms_and_gradients(chunk_rows, markov, confidence):
    p = problem(3)
    loss, terms, ref, logits = reference(p, markov=markov, confidence=confidence)
    (got_loss, got_terms, accept, correct), leaves = run_op(p, chunk_rows, markov=markov, confidence=confidence)
    torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=1e-13)
    want = torch.stack([terms["ce"], terms["l1"], terms["confidence"]]).detach()
    torch.testing.assert_close(got_terms, want, rtol=1e-12, atol=1e-13)
    live = p["weights"] > 0
    torch.testing.assert_close(accept[live], terms["accept"][live], rtol=1e-12, atol=1e-13)
    assert (accept[~live] == 0).all()
    assert torch.equal(correct[live], logits.detach().argmax(-1).eq(p["labels"])[live])
    for k in ("hidden", "markov", "markov_w2", "confidence"):
        want_g = ref[k].grad if ref[k].grad is not None else torch.zeros_like(ref[k])
        got_g = leaves[k].grad if leaves[k].grad is not None else torch.zeros_like(leaves[k])
        torch.testing.assert_close(got_g, want_g, rtol=1e-11, atol=1e-13, msg=k)


def test_custom_loss_weights_and_no_eps():
    p = problem(5)
    weights = (0.3, 1.7, 0.25)
    loss, terms, ref, _ = reference(p, weights=weights, den_eps=0.0)
    (got_loss, _, _, _), leaves = run_op(p, 5, weights=weights, den_eps=0.0)
    torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(leaves["hidden"].grad, ref["hidden"].grad, rtol=1e-11, atol=1e-13)


def test_gradcheck_without_the_stop_gradient_term():
    # Finite differences see the confidence target move with the logits (the stop-gradient), so the confidence
    # head's gradient is checked against autograd above; everything else against finite differences here.
    p = problem(7, R=6, H=3, V=5, r=2, M=4, zero_rows=(1,))

    def f(h, u, w2):
        return OP(h, p["lm_head"], p["labels"], p["weights"], u, w2, p["teacher_hidden"], p["teacher_index"], None,
                  2, 0.1, 0.9, 0.0, 1e-6)[0]
    inputs = tuple(p[k].clone().requires_grad_(True) for k in ("hidden", "markov", "markov_w2"))
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-8)


def test_confidence_gradient_is_sigmoid_minus_accept():
    p = problem(9)
    (loss, terms, accept, _), leaves = run_op(p, 3)
    den = p["weights"].sum() + fr.DEEPSPEC_DEN_EPS
    want = (torch.sigmoid(p["confidence"]) - accept) * p["weights"] / den
    torch.testing.assert_close(leaves["confidence"].grad, want, rtol=1e-12, atol=1e-14)


def test_rank0_no_confidence_ce_only_equals_dflash_chunked_loss():
    p = problem(11)
    h1 = p["hidden"].clone().requires_grad_(True)
    got = OP(h1, p["lm_head"], p["labels"], p["weights"], None, None, None, None, None, 4, 1.0, 0.0, 0.0, 0.0)
    got[0].backward()
    h2 = p["hidden"].clone().requires_grad_(True)
    want = torch.ops.dflash.chunked_lm_loss(h2, p["lm_head"], p["labels"], p["weights"], None, None, 4, 0.0, True)
    want[0].backward()
    torch.testing.assert_close(got[0], want[0], rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-12, atol=1e-14)
    assert torch.equal(got[3], want[2])


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_lower_precision_follows_fp64(dtype, tol):
    p64 = problem(13)
    p = {k: (v.to(dtype) if v.is_floating_point() and k != "weights" else v) for k, v in p64.items()}
    (loss, _, _, _), leaves = run_op(p, 4)
    (loss64, _, _, _), leaves64 = run_op(p64, 4)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - loss64.item()) <= tol * max(1.0, abs(loss64.item()))
    torch.testing.assert_close(leaves["hidden"].grad.double(), leaves64["hidden"].grad, rtol=tol * 10, atol=tol)


def test_no_grad_gives_the_same_values():
    p = problem(15)
    with torch.no_grad():
        a = OP(p["hidden"], p["lm_head"], p["labels"], p["weights"], p["markov"], p["markov_w2"], p["teacher_hidden"],
               p["teacher_index"], p["confidence"], 4, 0.1, 0.9, 1.0, 1e-6)
    (b, terms, accept, _), _ = run_op(p, 4)
    torch.testing.assert_close(a[0], b.detach())
    torch.testing.assert_close(a[1], terms)
    torch.testing.assert_close(a[2], accept)


@pytest.mark.parametrize("change,said", [
    (lambda p: p.update(teacher_hidden=None, teacher_index=None), "need the target's last hidden states"),
    (lambda p: p.update(markov_w2=None), "markov [R, r] and markov_w2 [V, r] go together"),
    (lambda p: p.update(markov_w2=p["markov_w2"][:, :2]), "markov must be [R, r]"),
    (lambda p: p.update(labels=p["labels"] + 100), "labels must lie in [0, 13)"),
    (lambda p: p.update(teacher_index=p["teacher_index"] + 100), "teacher_index must lie in [0, 9)"),
    (lambda p: p.update(confidence=p["confidence"][:3]), "confidence needs one logit per hidden row"),
])
def test_bad_arguments_are_named(change, said):
    p = problem(17)
    change(p)
    with pytest.raises(ValueError) as err:
        OP(p["hidden"], p["lm_head"], p["labels"], p["weights"], p["markov"], p["markov_w2"], p["teacher_hidden"],
           p["teacher_index"], p["confidence"], 4, 0.1, 0.9, 1.0, 1e-6)
    assert said in str(err.value), str(err.value)
