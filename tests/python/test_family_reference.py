"""The DSpark / DFlash2 references (family_reference.py) against their own identities, so a bug in the oracle is
caught before it judges the C++ code: the identity conv, the block rule of the conv, a DFlash2 layer at init equal
to the DFlash layer, a zero successor codebook, DSpark reduced to DFlash, teacher-forced vs sequential heads,
gradients by finite differences, and the rejection rule's output distribution by exact enumeration.
"""
import pytest
import torch

import family_reference as fr

V, D, R, B = 9, 8, 3, 4


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=gen(seed), dtype=torch.float64)


# ------------------------------------------------------------------------------------------------ DFlash2 conv ---

def test_identity_initialised_conv_returns_its_input():
    u = randn(2, 3 * B, D, seed=1)
    conv = fr.identity_conv_params(D, kernel_size=2, group_size=4)
    assert torch.equal(fr.wrapped_sublayer(u, lambda x: x, conv, B), u)
    assert torch.equal(fr.wrapped_sublayer(u, torch.tanh, conv, B), torch.tanh(u))


@pytest.mark.parametrize("kernel_size", [2, 3])
def test_flat_sequence_with_the_block_rule_equals_each_block_alone(kernel_size):
    conv = fr.random_conv_params(D, kernel_size, group_size=2, generator=gen(2))
    u = randn(3 * B, D, seed=3)
    flat = fr.wrapped_sublayer(u, torch.sin, conv, B)
    alone = torch.cat([fr.wrapped_sublayer(u[i * B:(i + 1) * B], torch.sin, conv, B) for i in range(3)])
    torch.testing.assert_close(flat, alone, rtol=0, atol=0)


def test_conv_kernel_is_indexed_by_the_output_position_and_laid_out_side_tap_group():
    # one channel group, K = 2: out[t] = (beta0 + delta[t,0]) v[t] + (beta1 + delta[t,1]) v[t-1]
    v = randn(B, 2, seed=4)
    base = randn(2, 2, seed=5)
    delta = randn(B, 2, 1, seed=6)
    out = fr.grouped_dynamic_conv(v, base, delta, group_size=2, block_size=B)
    for t in range(B):
        expect = (base[0] + delta[t, 0]) * v[t] + ((base[1] + delta[t, 1]) * v[t - 1] if t else 0)
        torch.testing.assert_close(out[t], expect, rtol=0, atol=1e-15)
    # kernel_projection rows: side-major, then tap, then group
    proj = torch.zeros(2 * 2 * 3, 6, dtype=torch.float64)
    proj[1 * 6 + 0 * 3 + 2, 0] = 1.0  # side 1, tap 0, group 2 reads channel 0
    u = torch.zeros(1, 6, dtype=torch.float64)
    u[0, 0] = 5.0
    delta = fr.conv_dynamic_kernels(u, proj, kernel_size=2, group_size=2)
    assert delta.shape == (1, 2, 2, 3) and delta[0, 1, 0, 2] == 5.0 and delta.abs().sum() == 5.0


def test_dflash2_layer_with_identity_convs_is_the_dflash_layer():
    g = gen(7)
    wq, wm = randn(D, D, seed=8, scale=0.3), randn(D, D, seed=9, scale=0.3)
    ctx = randn(D, seed=10)

    def attention(u):  # anything block-local would do; the context enters through the closure only
        return torch.tanh(u @ wq.T + ctx)

    def mlp(u):
        return torch.sin(u @ wm.T)
    x = randn(2 * B, D, seed=11)
    norms = (1 + randn(D, seed=12, scale=0.1), 1 + randn(D, seed=13, scale=0.1))
    ident = fr.identity_conv_params(D, 2, 4)
    dflash = fr.dflash2_layer(x, attention, mlp, *norms, 1e-6, None, None, B)
    dflash2 = fr.dflash2_layer(x, attention, mlp, *norms, 1e-6, ident, ident, B)
    assert torch.equal(dflash, dflash2)
    moved = fr.dflash2_layer(x, attention, mlp, *norms, 1e-6, fr.random_conv_params(D, 2, 4, g), ident, B)
    assert not torch.allclose(moved, dflash)  # the conv is wired in


# -------------------------------------------------------------------------------------------- DFlash2 selector ---

def test_zero_successor_codebook_gives_the_unary_scores_and_the_unary_argmax_walk():
    p = fr.random_selector_params(V, D, R, top_k=4, generator=gen(14))
    p.successor_codebook.zero_()
    unary, hidden = randn(B - 1, V, seed=15), randn(B - 1, D, seed=16)
    cands = fr.top_candidates(unary, 4)
    s = fr.selector_scores(unary, hidden, torch.tensor([1, 2, 3]), cands, p)
    assert torch.equal(s, unary.gather(-1, cands))
    walk = fr.selector_walk(unary, hidden, anchor=5, params=p)
    assert torch.equal(walk.path, unary.argmax(-1))


def test_walk_scores_are_the_teacher_forced_scores_of_its_own_path():
    p = fr.random_selector_params(V, D, R, top_k=3, generator=gen(17))
    unary, hidden = randn(B - 1, V, seed=18), randn(B - 1, D, seed=19)
    walk = fr.selector_walk(unary, hidden, anchor=2, params=p)
    preds = torch.cat([torch.tensor([2]), walk.path[:-1]])
    torch.testing.assert_close(fr.selector_scores(unary, hidden, preds, walk.candidates, p), walk.scores)
    assert torch.equal(walk.path, walk.candidates.gather(-1, walk.scores.argmax(-1, keepdim=True))[:, 0])


def test_inject_and_strict_agree_where_the_gold_token_is_a_candidate():
    p = fr.random_selector_params(V, D, R, top_k=3, generator=gen(20))
    unary, hidden = randn(6, V, seed=21), randn(6, D, seed=22)
    preds = torch.randint(0, V, (6,), generator=gen(23))
    top = fr.top_candidates(unary, 3)
    inside = top[:, 1]                   # a candidate: both modes score it the same way
    outside = fr.top_candidates(unary, V)[:, -1]
    w = torch.rand(6, generator=gen(24), dtype=torch.float64)
    for mode in ("inject", "strict"):
        c, idx, m = fr.selector_training_candidates(unary, inside, 3, mode)
        assert torch.equal(c, top) and torch.equal(idx, torch.ones(6, dtype=torch.long)) and bool((m == 1).all())
    torch.testing.assert_close(fr.selector_loss(unary, hidden, preds, inside, w, p, "inject"),
                               fr.selector_loss(unary, hidden, preds, inside, w, p, "strict"))
    c, idx, m = fr.selector_training_candidates(unary, outside, 3, "inject")
    assert torch.equal(c[:, :2], top[:, :2]) and torch.equal(c[:, 2], outside) and bool((idx == 2).all())
    _, _, m = fr.selector_training_candidates(unary, outside, 3, "strict")
    assert bool((m == 0).all())


def test_selector_denominators():
    p = fr.random_selector_params(V, D, R, top_k=3, generator=gen(25))
    unary, hidden = randn(4, V, seed=26), randn(4, D, seed=27)
    preds = torch.tensor([0, 1, 2, 3])
    gold = torch.stack([fr.top_candidates(unary, 3)[0, 0], fr.top_candidates(unary, V)[1, -1],
                        fr.top_candidates(unary, 3)[2, 2], fr.top_candidates(unary, 3)[3, 1]])
    w = torch.tensor([1.0, 0.5, 0.25, 0.0], dtype=torch.float64)
    c, idx, _ = fr.selector_training_candidates(unary, gold, 3, "strict")
    ce = -torch.log_softmax(fr.selector_scores(unary, hidden, preds, c, p), -1).gather(-1, idx[:, None])[:, 0]
    num = w[0] * ce[0] + w[2] * ce[2]  # row 1 missed the top-3, row 3 has weight 0
    for den, value in (("covered", 1.25), ("weight", 1.75), ("count", 3.0)):
        torch.testing.assert_close(fr.selector_loss(unary, hidden, preds, gold, w, p, "strict", denominator=den),
                                   num / value)


def test_stop_gradient_keeps_the_selector_loss_out_of_unary_and_hidden():
    p = fr.random_selector_params(V, D, R, top_k=3, generator=gen(28))
    unary = randn(5, V, seed=29).requires_grad_()
    hidden = randn(5, D, seed=30).requires_grad_()
    gold, preds, w = torch.randint(0, V, (5,), generator=gen(31)), torch.randint(0, V, (5,), generator=gen(32)), \
        torch.ones(5, dtype=torch.float64)
    p.predecessor_codebook.requires_grad_()
    fr.selector_loss(unary, hidden, preds, gold, w, p, "inject", stop_gradient=True).backward()
    assert unary.grad is None and hidden.grad is None and p.predecessor_codebook.grad.abs().sum() > 0


def test_dflash2_metrics_on_constructed_blocks():
    p = fr.random_selector_params(V, D, R, top_k=2, generator=gen(33))
    p.successor_codebook.zero_()                       # the walk is then the unary argmax
    N = 3
    unary, hidden = randn(N, B, V, seed=34), randn(N, B, D, seed=35)
    argmax, second = unary.argmax(-1), fr.top_candidates(unary, 2)[..., 1]
    last = fr.top_candidates(unary, V)[..., -1]
    targets = argmax.clone()
    targets[1, 2] = second[1, 2]                       # block 1: in the top-2 but not the argmax at slot 2
    targets[2, 1] = last[2, 1]                         # block 2: outside the top-2 at slot 1
    mask = torch.ones(N, B, dtype=torch.bool)
    mask[:, 0] = False
    assert fr.self_conditioned_path_accepted_length(unary, hidden, targets[:, 0], targets, mask, p) == \
        pytest.approx((B + 2 + 1) / 3)
    assert fr.unary_topk_oracle_accepted_length(unary, targets, mask, 2) == pytest.approx((B + B + 1) / 3)
    assert fr.unary_recall_at_k(unary, targets, mask, 2) == pytest.approx(8 / 9)
    preds = torch.cat([targets[:, :1], targets[:, :-1]], 1)
    assert fr.teacher_forced_selector_accuracy(unary, hidden, preds, targets, mask, p) == pytest.approx(7 / 9)


# ------------------------------------------------------------------------------------------------------ DSpark ---

def test_dspark_targets_follow_next_token_alignment_and_the_prefix_mask():
    x = torch.arange(100, 112)[None]
    lm = torch.ones(1, 12, dtype=torch.bool)
    lm[0, :2] = False
    lm[0, 7] = False                                   # a hole: the prefix mask stops before it
    t = fr.dspark_targets(x, lm, torch.tensor([[2, 9, 0]]), torch.tensor([[True, True, False]]), B)
    assert t.labels[0, 0].tolist() == [103, 104, 105, 106] and t.prev[0, 0].tolist() == [102, 103, 104, 105]
    assert t.teacher_index[0, 0].tolist() == [2, 3, 4, 5]
    assert t.mask[0, 0].tolist() == [True, True, True, True]
    assert t.labels[0, 1].tolist() == [110, 111, 111, 111] and t.mask[0, 1].tolist() == [True, True, False, False]
    assert not t.mask[0, 2].any()
    t = fr.dspark_targets(x, lm, torch.tensor([[4]]), torch.tensor([[True]]), B)
    assert t.mask[0, 0].tolist() == [True, True, False, False]    # x[7] is not in the loss: nor anything after
    assert fr.anchor_candidates(lm)[0].tolist() == [False, False] + [True] * 4 + [False, False] + [True] * 3 + \
        [False]


@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_sequential_draft_equals_teacher_forcing_on_its_own_tokens(head):
    params = fr.random_markov_params(head, V, D, R, gen(40))
    base, hidden = randn(B, V, seed=41), randn(B, D, seed=42)
    conf_w, conf_b = randn(1, D + R, seed=43), randn(1, seed=44)
    for temperature, u in ((0.0, None), (0.8, torch.rand(B, generator=gen(45), dtype=torch.float64))):
        d = fr.dspark_draft(base, hidden, 3, params, temperature, u, conf_w, conf_b)
        prev = torch.cat([torch.tensor([3]), d.tokens[:-1]])
        torch.testing.assert_close(fr.dspark_block_logits(base, prev, hidden, params), d.logits, rtol=0, atol=0)
        torch.testing.assert_close(fr.dspark_confidence(hidden, prev, conf_w, conf_b, params), d.confidence)
        expect = torch.softmax(d.logits / temperature, -1) if temperature else \
            torch.nn.functional.one_hot(d.logits.argmax(-1), V).double()
        torch.testing.assert_close(d.probs, expect)


def test_markov_heads_match_their_formulas_at_one_position():
    h, p = randn(D, seed=46), torch.tensor(4)
    van = fr.random_markov_params("vanilla", V, D, R, gen(47))
    torch.testing.assert_close(fr.markov_step(van, p, h)[0], van.w2 @ van.w1[4])
    gated = fr.random_markov_params("gated", V, D, R, gen(48))
    g = torch.sigmoid(gated.gate_w @ torch.cat([h, gated.w1[4]]) + gated.gate_b)
    torch.testing.assert_close(fr.markov_step(gated, p, h)[0], gated.w2 @ (g * gated.w1[4]))
    rnn = fr.random_markov_params("rnn", V, D, R, gen(49))
    s = randn(R, seed=50)
    z = rnn.joint_w @ torch.cat([s, rnn.w1[4], h]) + rnn.joint_b
    bias, state = fr.markov_step(rnn, p, h, s)
    gate = torch.sigmoid(z[:R])
    torch.testing.assert_close(state, gate * s + (1 - gate) * torch.tanh(z[R:2 * R]))
    torch.testing.assert_close(bias, rnn.w2 @ torch.tanh(z[2 * R:]))


def test_dspark_without_heads_and_weights_1_0_0_is_dflash_ce_with_next_token_labels():
    # DSpark slot j predicts x[a+j+1] with weight exp(-j/gamma): DFlash with a block one longer, whose slot k = j+1
    # predicts x[a+k] with exp(-(k-1)/gamma). With a loss mask that has no hole, the prefix mask changes nothing.
    T, N = 14, 3
    x = torch.randint(0, V, (2, T), generator=gen(51))
    lm = torch.ones(2, T, dtype=torch.bool)
    lm[:, :3] = False
    anchors, keep = torch.tensor([[3, 7, 11], [4, 12, 0]]), torch.tensor([[True, True, True], [True, True, False]])
    ds = fr.dspark_targets(x, lm, anchors, keep, B)
    df = fr.dflash_targets(x, lm, anchors, keep, B + 1)
    assert torch.equal(ds.mask, df.mask[..., 1:]) and torch.equal(ds.labels[ds.mask], df.labels[..., 1:][ds.mask])
    logits = randn(2, N, B + 1, V, seed=52)
    w_ds = fr.dspark_loss_weights(ds.mask, gamma=4.0)
    w_df = fr.dflash_loss_weights(df.mask, gamma=4.0)
    terms = fr.dspark_loss_terms(logits[..., 1:, :], randn(2, N, B, V, seed=53), ds.labels, w_ds, den_eps=0.0)
    torch.testing.assert_close(fr.dspark_loss(terms, (1.0, 0.0, 0.0)),
                               fr.weighted_ce(logits, df.labels, w_df))


def test_dspark_loss_terms_and_metrics_on_a_hand_made_case():
    q_logits = torch.log(torch.tensor([[[0.5, 0.5, 0.0 + 1e-300], [0.2, 0.3, 0.5]]], dtype=torch.float64))
    pi_logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]]], dtype=torch.float64))
    labels = torch.tensor([[0, 2]])                          # one block of B = 2
    mask = torch.tensor([[True, True]])
    w = fr.dspark_loss_weights(mask, gamma=2.0)             # [1, e^-1/2]
    c = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    t = fr.dspark_loss_terms(q_logits, pi_logits, labels, w, c, den_eps=0.0)
    a = torch.tensor([0.75, 1.0], dtype=torch.float64)      # 1 - ||q - pi||_1 / 2
    torch.testing.assert_close(t["accept"][0], a)
    den = 1 + torch.exp(torch.tensor(-0.5, dtype=torch.float64))
    torch.testing.assert_close(t["l1"], (0.5 + 0) / den)
    log2 = torch.log(torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(t["ce"], log2 * (1 + w[0, 1]) / den)
    m = fr.dspark_train_metrics(t["accept"], mask, torch.tensor([True]), w, c)
    assert m["accept_rate@0"] == pytest.approx(0.75) and m["tau_probabilistic"] == pytest.approx(1 + 0.75 + 0.75)
    s = torch.sigmoid(c[0])
    assert m["confidence_bias"] == pytest.approx(float(((s - a) * w[0]).sum() / den))
    assert m["confidence_cumprod_bias"] == pytest.approx(float(((s.cumprod(0) - a.cumprod(0)) * w[0]).sum() / den))


# -------------------------------------------------------------------------------------------------- gradients ---

@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_dspark_loss_gradients_by_finite_differences(head):
    params = fr.random_markov_params(head, 5, 3, 2, gen(60))
    N, Bs = 2, 3
    prev = torch.randint(0, 5, (N, Bs), generator=gen(61))
    labels = torch.randint(0, 5, (N, Bs), generator=gen(62))
    teacher = randn(N, Bs, 5, seed=63)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    w = fr.dspark_loss_weights(mask, 2.0)
    leaves = [randn(N, Bs, 5, seed=64), randn(N, Bs, 3, seed=65), randn(1, 5, seed=66), randn(1, seed=67),
              params.w1, params.w2] + ([params.gate_w, params.gate_b] if head == "gated" else []) + \
        ([params.joint_w, params.joint_b] if head == "rnn" else [])
    leaves = [t.detach().clone().requires_grad_() for t in leaves]

    def loss(base, hidden, cw, cb, w1, w2, *extra, target=None):
        p = fr.MarkovParams(head, w1, w2)
        if head == "gated":
            p.gate_w, p.gate_b = extra
        if head == "rnn":
            p.joint_w, p.joint_b = extra
        logits = fr.dspark_block_logits(base, prev, hidden, p)
        conf = fr.dspark_confidence(hidden, prev, cw, cb, p)
        return fr.dspark_loss(fr.dspark_loss_terms(logits, teacher, labels, w, conf, confidence_target=target))

    # the confidence target a* is stop-gradient: finite differences hold it at its value here
    accept = fr.dspark_loss_terms(fr.dspark_block_logits(leaves[0], prev, leaves[1], params), teacher, labels,
                                  w)["accept"]
    assert torch.autograd.gradcheck(lambda *xs: loss(*xs, target=accept), leaves, fast_mode=True)
    stopped = torch.autograd.grad(loss(*leaves), leaves)
    held = torch.autograd.grad(loss(*leaves, target=accept), leaves)
    for a, b in zip(stopped, held):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["inject", "strict"])
def test_selector_loss_gradients_by_finite_differences(mode):
    p = fr.random_selector_params(6, 3, 2, top_k=3, generator=gen(70))
    unary, hidden = randn(5, 6, seed=71), randn(5, 3, seed=72)
    gold = torch.stack([fr.top_candidates(unary, 6)[i, i % 5] for i in range(5)])  # some inside, some outside
    preds = torch.randint(0, 6, (5,), generator=gen(73))
    w = torch.rand(5, generator=gen(74), dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (unary, hidden, p.hidden_projection, p.predecessor_codebook,
                                                   p.successor_codebook)]

    def loss(u, h, wh, a, bc):
        q = fr.SelectorParams(wh, a, bc, 3)
        return fr.dflash2_loss(u, h, gold, preds, w, q, alpha=0.7, mode=mode)
    assert torch.autograd.gradcheck(loss, leaves, fast_mode=True)


def test_conv_gradients_by_finite_differences():
    conv = fr.random_conv_params(4, 2, 2, gen(75))
    leaves = [randn(2 * 3, 4, seed=76).requires_grad_(), conv.base_kernel.clone().requires_grad_(),
              conv.kernel_projection.clone().requires_grad_()]

    def f(u, base, proj):
        return fr.wrapped_sublayer(u, torch.tanh, fr.ConvParams(base, proj, 2), 3)
    assert torch.autograd.gradcheck(f, leaves, fast_mode=True)


# ----------------------------------------------------------------------------------------- lossless sampling ---

def _table(seed, shape):
    """A deterministic random tensor per context (contexts are tuples of token ids)."""
    return _memo(lambda ctx: randn(*shape, seed=hash((seed,) + ctx) % (2 ** 31)))


def _memo(f):
    cache = {}

    def get(*key):
        if key not in cache:
            cache[key] = f(*key)
        return cache[key]
    return get


Vs = 4


def _target(temperature):
    logits = _table(80, (Vs,))
    return _memo(lambda ctx: fr.probs_from_logits(2.0 * logits(ctx), temperature))


@pytest.mark.parametrize("temperature", [1.0, 0.6, 0.0])
def test_dspark_rejection_rule_reproduces_the_target_distribution(temperature):
    params = fr.random_markov_params("rnn", Vs, 3, 2, gen(81), scale=1.0)
    base, hidden = _table(82, (2, Vs)), _table(83, (2, 3))

    def draft(prefix, drafted):
        # the block's U and h depend on the committed prefix only; the Markov chain on the drafted tokens
        prev = torch.tensor((prefix[-1],) + drafted)      # p_0 = the committed token, then the drafts
        logits = fr.dspark_block_logits(base(prefix)[: len(drafted) + 1], prev, hidden(prefix)[: len(drafted) + 1],
                                        params)
        return fr.probs_from_logits(logits[-1], temperature)
    target = _target(temperature)
    got = fr.speculative_output_distribution(target, _memo(draft), (1,), n_tokens=3, block_len=2)
    torch.testing.assert_close(got, fr.target_joint_distribution(target, (1,), 3), rtol=0, atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_dflash2_sparse_rejection_rule_reproduces_the_target_distribution(temperature):
    params = fr.random_selector_params(Vs, 3, 2, top_k=2, generator=gen(84), scale=1.0)
    unary, hidden = _table(85, (2, Vs)), _table(86, (2, 3))

    def draft(prefix, drafted):
        j = len(drafted)
        u, h = unary(prefix)[j], hidden(prefix)[j]
        cands = fr.top_candidates(u, params.top_k)
        pred = torch.tensor(drafted[-1] if drafted else prefix[-1])
        q = fr.probs_from_logits(fr.selector_scores(u, h, pred, cands, params), temperature)
        return fr.sparse_to_dense(q, cands, Vs)            # zero outside the K candidates
    target = _target(temperature)
    got = fr.speculative_output_distribution(target, _memo(draft), (2,), n_tokens=3, block_len=2)
    torch.testing.assert_close(got, fr.target_joint_distribution(target, (2,), 3), rtol=0, atol=1e-12)


def test_speculative_verify_with_given_uniforms():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7], [0.0, 0.0, 1.0]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]], dtype=torch.float64)
    drafts = torch.tensor([0, 1])
    # draft 0: accept prob 0.5; draft 1: accept prob 0.4, residual (0.1, 0, 0.2)/0.3
    assert fr.speculative_verify(p, q, drafts, torch.tensor([0.4, 0.3]), torch.tensor(0.5)) == (2, 2)
    n, tok = fr.speculative_verify(p, q, drafts, torch.tensor([0.4, 0.5]), torch.tensor(0.2))
    assert (n, int(tok)) == (1, 0)
    n, tok = fr.speculative_verify(p, q, drafts, torch.tensor([0.6, 0.0]), torch.tensor(0.0))
    assert (n, int(tok)) == (0, 1)                         # residual of row 0 is all on token 1
    assert fr.greedy_accepted_length(torch.tensor([3, 1, 4]), torch.tensor([3, 1, 5, 9])) == 2
