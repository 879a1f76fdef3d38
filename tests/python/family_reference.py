"""Plain-PyTorch references of the DSpark and DFlash2 drafter families, written from docs/DSPARK.md, docs/DFLASH2.md.

The test oracle for the C++ implementations of both families (issues 39 and 40): labels and masks for given
anchors, the DSpark Markov and confidence heads with their loss and metrics, the DFlash2 grouped dynamic conv,
candidate selector, selector loss and metrics, and the lossless rejection rule with each family's draft
distribution. Small, slow and explicit on purpose: loops over positions where the formula is a recurrence, no
shared code with src/, and nothing copied from the trainers and engines it was checked against.

Checked once, outside the repository, on random fp64 inputs (max abs differences): DeepSpec @afdfa7c9 (Markov heads
teacher-forced and greedy, 1e-15; a tiny Qwen3DSparkModel's labels and eval mask identical, its draft logits
identical, confidence / loss terms / combined loss / train metrics within 1.3e-7, DeepSpec computing those in fp32);
z-lab dflash/model.py @10129599 (conv prepare/finish per block and flat with the block rule, 3e-15; greedy selector
path identical; sampled q along a path 3e-7, z-lab in fp32; rejection rule's emitted-token distribution exact);
speculators PR #1006 @0a1b3e0a (compute_selector_loss with the 'count' denominator, 4e-16; recall@K, teacher-forced
accuracy, oracle and self-conditioned accepted lengths exact); SpecForge's strict selector terms, 4e-16.

Conventions. Tensors are float64 in the tests, but nothing here forces a dtype. A "block" has B slots; slot 0 holds
the anchor token x[a]. Weight layouts are the checkpoint layouts (torch Linear: [out, in]):
  DSpark  markov_w1 [V, r] (an embedding), markov_w2 [V, r] (Linear r->V), gate_w [r, d+r], gate_b [r],
          joint_w [3r, 2r+d], joint_b [3r], conf_w [1, d(+r)], conf_b [1]
  DFlash2 base_kernel [2, K, d], kernel_projection [2*K*(d/G), d], hidden_projection [r, d],
          predecessor_codebook [V, r], successor_codebook [V, r]
Where the sources disagree, the choice is a named argument and the docs' reading is the default.
"""
import itertools
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

DSPARK_LOSS_WEIGHTS = (0.1, 0.9, 1.0)  # (ce, l1, confidence): DeepSpec config/dspark/*.py
DEEPSPEC_DEN_EPS = 1e-6  # DeepSpec loss.py adds it to every denominator


# ---------------------------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def anchor_candidates(loss_mask):
    """bool [b, T]: a is an anchor candidate when a <= T-2, loss_mask[a] and loss_mask[a+1] (DeepSpec common.py,
    docs/DFLASH.md: the same rule for both families)."""
    lm = loss_mask.bool()
    out = torch.zeros_like(lm)
    out[:, :-1] = lm[:, :-1] & lm[:, 1:]
    return out


def decay_weights(block_size, gamma, first_slot):
    """[B]: exp(-(j - first_slot)/gamma) for j >= first_slot, 0 before it; gamma None or <= 0 means no decay.
    DSpark: first_slot 0 (every slot trained). DFlash and DFlash2: first_slot 1 (slot 0 is the anchor)."""
    j = torch.arange(block_size, dtype=torch.float64)
    w = torch.ones(block_size, dtype=torch.float64)
    if gamma is not None and gamma > 0:
        w = torch.exp(-(j - first_slot).clamp(min=0) / gamma)
    return w * (j >= first_slot)


def weighted_ce(logits, labels, weights, den_eps=0.0):
    """sum(w * CE(logits, label)) / (sum(w) + den_eps) over all leading dimensions."""
    ce = -torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]
    return (weights * ce).sum() / (weights.sum() + den_eps)


def probs_from_logits(logits, temperature):
    """The draft/target distribution at a temperature; temperature 0 is the one-hot argmax (DeepSpec
    sampling.py: logits_to_probs)."""
    if temperature <= 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, -1)


def sample_with_uniform(probs, u):
    """Inverse-CDF sample from probs [..., V] with given uniforms u [...] in [0, 1): deterministic draws."""
    cdf = probs.cumsum(-1)
    idx = (cdf <= u[..., None]).sum(-1)
    # rounding can leave cdf[-1] a hair below 1: never land on a zero-probability tail token
    last = (probs > 0).to(torch.long).cumsum(-1).argmax(-1)
    return torch.minimum(idx, last)


# ---------------------------------------------------------------------------------------------------------------
# Labels and masks for given anchors
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class BlockTargets:
    labels: torch.Tensor          # [b, N, B] the token each slot is trained to predict
    prev: torch.Tensor            # [b, N, B] the teacher-forced previous token of each slot
    teacher_index: torch.Tensor   # [b, N, B] the position whose target last hidden state gives the teacher logits
    mask: torch.Tensor            # [b, N, B] bool: the slot is in the loss (DSpark: the contiguous-prefix eval mask)


def dspark_targets(input_ids, loss_mask, anchors, keep, block_size):
    """DSpark next-token alignment (docs/DSPARK.md, DeepSpec qwen3/modeling.py forward):
    label y_j = x[a+j+1] for all B slots, prev p_0 = x[a] and p_j = x[a+j], teacher logits from the target's last
    hidden state at a+j (= label index - 1); eval_mask_j = prod_{i<=j} [a+i+1 < T] * loss_mask[a+i+1] * keep.
    Indices past the end read x[T-1]; a dropped block reads index 0 (as DeepSpec): both are masked out."""
    b, T = input_ids.shape
    N, B = anchors.shape[1], block_size
    labels = torch.zeros(b, N, B, dtype=torch.long)
    prev = torch.zeros(b, N, B, dtype=torch.long)
    teacher = torch.zeros(b, N, B, dtype=torch.long)
    mask = torch.zeros(b, N, B, dtype=torch.bool)
    for s in range(b):
        for n in range(N):
            a = int(anchors[s, n])
            alive = bool(keep[s, n])
            for j in range(B):
                idx = a + j + 1
                safe = min(idx, T - 1) if keep[s, n] else 0
                labels[s, n, j] = input_ids[s, safe]
                teacher[s, n, j] = max(safe - 1, 0)
                alive = alive and idx < T and bool(loss_mask[s, idx])
                mask[s, n, j] = alive
            prev[s, n, 0] = input_ids[s, a]
            prev[s, n, 1:] = labels[s, n, :-1]
    return BlockTargets(labels, prev, teacher, mask)


def dflash_targets(input_ids, loss_mask, anchors, keep, block_size):
    """DFlash and DFlash2 same-position alignment (docs/DFLASH.md "Training sample construction", docs/DFLASH2.md):
    slot k predicts x[a+k], slot 0 is never in the loss; mask_k = keep * [a+k < T] * loss_mask[a+k] * [k > 0]
    (no prefix product); the selector's teacher-forced predecessor of slot k is x[a+k-1] (p_1 = the anchor)."""
    b, T = input_ids.shape
    N, B = anchors.shape[1], block_size
    labels = torch.zeros(b, N, B, dtype=torch.long)
    prev = torch.zeros(b, N, B, dtype=torch.long)
    teacher = torch.zeros(b, N, B, dtype=torch.long)
    mask = torch.zeros(b, N, B, dtype=torch.bool)
    for s in range(b):
        for n in range(N):
            a = int(anchors[s, n])
            for k in range(B):
                idx = a + k
                safe = min(idx, T - 1)
                labels[s, n, k] = input_ids[s, safe]
                prev[s, n, k] = input_ids[s, min(idx - 1, T - 1)] if k > 0 else input_ids[s, a]
                teacher[s, n, k] = max(safe - 1, 0)
                mask[s, n, k] = bool(keep[s, n]) and k > 0 and idx < T and bool(loss_mask[s, idx])
    return BlockTargets(labels, prev, teacher, mask)


def dspark_loss_weights(mask, gamma=4.0):
    """w_j = eval_mask_j * exp(-j/gamma) (DeepSpec loss.py _build_loss_weight_mask; gamma = loss_decay_gamma)."""
    return mask.to(torch.float64) * decay_weights(mask.shape[-1], gamma, first_slot=0)


def dflash_loss_weights(mask, gamma):
    """w_k = mask_k * exp(-(k-1)/gamma), slot 0 weight 0 (docs/DFLASH.md "Loss"; speculators dflash_loss_decay)."""
    return mask.to(torch.float64) * decay_weights(mask.shape[-1], gamma, first_slot=1)


# ---------------------------------------------------------------------------------------------------------------
# DSpark: Markov heads, confidence head, draft
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class MarkovParams:
    head_type: str                       # "vanilla" | "gated" | "rnn"
    w1: torch.Tensor                     # [V, r] previous-token embedding
    w2: torch.Tensor                     # [V, r] r -> V projection (Linear weight)
    gate_w: Optional[torch.Tensor] = None   # [r, d+r], input [h; W1[p]]
    gate_b: Optional[torch.Tensor] = None   # [r]
    joint_w: Optional[torch.Tensor] = None  # [3r, 2r+d], input [s; W1[p]; h], output (gate, candidate, output)
    joint_b: Optional[torch.Tensor] = None  # [3r]

    @property
    def rank(self):
        return self.w1.shape[1]


def random_markov_params(head_type, V, d, r, generator, scale=0.5, dtype=torch.float64):
    g = generator

    def rnd(*shape):
        return scale * torch.randn(*shape, generator=g, dtype=dtype)
    p = MarkovParams(head_type, rnd(V, r), rnd(V, r))
    if head_type == "gated":
        p.gate_w, p.gate_b = rnd(r, d + r), rnd(r)
    elif head_type == "rnn":
        p.joint_w, p.joint_b = rnd(3 * r, 2 * r + d), rnd(3 * r)
    return p


def markov_step(params, prev_token, h, state=None):
    """One position of a Markov head (docs/DSPARK.md): returns (bias [..., V], new rnn state or None).
    vanilla: W2 W1[p]; gated: W2 (sigmoid(Wg [h; W1[p]] + bg) * W1[p]); rnn: [g, c, o] = Wj [s; W1[p]; h] + bj,
    s' = sigmoid(g) s + (1 - sigmoid(g)) tanh(c), bias = W2 tanh(o)."""
    e = params.w1[prev_token]
    if params.head_type == "vanilla":
        return e @ params.w2.T, None
    if params.head_type == "gated":
        gate = torch.sigmoid(torch.cat([h, e], -1) @ params.gate_w.T + params.gate_b)
        return (gate * e) @ params.w2.T, None
    if params.head_type == "rnn":
        if state is None:
            state = torch.zeros_like(e)
        z = torch.cat([state, e, h], -1) @ params.joint_w.T + params.joint_b
        g, c, o = z.split(params.rank, -1)
        g = torch.sigmoid(g)
        state = g * state + (1 - g) * torch.tanh(c)
        return torch.tanh(o) @ params.w2.T, state
    raise ValueError(f"markov head_type: expected vanilla, gated or rnn, got {params.head_type!r}")


def dspark_block_logits(base_logits, prev, hidden, params):
    """Teacher-forced training logits l_j = U_j + bias(p_j) for blocks [..., B, V] with prev [..., B] and
    hidden [..., B, d]. The rnn state starts at 0 in every block and runs over slots 0..B-1 in order."""
    if params is None:
        return base_logits
    out, state = [], None
    for j in range(base_logits.shape[-2]):
        bias, state = markov_step(params, prev[..., j], hidden[..., j, :], state)
        out.append(base_logits[..., j, :] + bias)
    return torch.stack(out, -2)


def dspark_confidence(hidden, prev, conf_w, conf_b, params=None, with_markov=True):
    """c_j = w . [h_j; W1[p_j]] + b (or w . h_j + b without Markov input): raw logits [..., B]."""
    x = torch.cat([hidden, params.w1[prev]], -1) if with_markov else hidden
    return (x @ conf_w.T + conf_b)[..., 0]


@dataclass
class DSparkDraft:
    tokens: torch.Tensor       # [B] drafted tokens d_0..d_{B-1}
    logits: torch.Tensor       # [B, V] Markov-corrected logits l_j = U_j + bias(p_j), p_0 = bonus, p_j = d_{j-1}
    probs: torch.Tensor        # [B, V] the draft distribution used by the rejection rule: softmax(l_j / T)
    confidence: Optional[torch.Tensor] = None  # [B] raw confidence logits with prev = [bonus, d_0..d_{B-2}]


def dspark_draft(base_logits, hidden, bonus, params, temperature=0.0, uniforms=None,
                 conf_w=None, conf_b=None, with_markov=True):
    """Sequential DSpark draft of one block (docs/DSPARK.md, DeepSpec draft_ops.py): all B slots are drafts;
    greedy at temperature 0, otherwise sampled with the given uniforms [B]."""
    B = base_logits.shape[0]
    tokens, logits, probs, state = [], [], [], None
    p = torch.as_tensor(bonus)
    for j in range(B):
        bias = 0.0
        if params is not None:
            bias, state = markov_step(params, p, hidden[j], state)
        l_j = base_logits[j] + bias
        q_j = probs_from_logits(l_j, temperature)
        d_j = l_j.argmax() if temperature <= 0 else sample_with_uniform(q_j, uniforms[j])
        tokens.append(d_j)
        logits.append(l_j)
        probs.append(q_j)
        p = d_j
    tokens = torch.stack(tokens)
    out = DSparkDraft(tokens, torch.stack(logits), torch.stack(probs))
    if conf_w is not None:
        prev = torch.cat([torch.as_tensor(bonus).view(1), tokens[:-1]])
        out.confidence = dspark_confidence(hidden, prev, conf_w, conf_b, params, with_markov)
    return out


def confident_prefix_length(confidence, threshold):
    """The eval script's truncation: drafts before the first j with sigmoid(c_j) < threshold; 0 = off."""
    if threshold <= 0:
        return confidence.shape[-1]
    below = (torch.sigmoid(confidence) < threshold).nonzero()
    return int(below[0]) if below.numel() else confidence.shape[-1]


# ---------------------------------------------------------------------------------------------------------------
# DSpark: loss and train metrics
# ---------------------------------------------------------------------------------------------------------------

def dspark_acceptance(draft_logits, teacher_logits):
    """a* = clamp(1 - 1/2 ||q - pi||_1, 0, 1) with q the Markov-corrected draft and pi the teacher distribution."""
    l1 = (torch.softmax(draft_logits, -1) - torch.softmax(teacher_logits, -1)).abs().sum(-1)
    return (1 - 0.5 * l1).clamp(0, 1)


def dspark_loss_terms(draft_logits, teacher_logits, labels, weights, confidence=None, den_eps=DEEPSPEC_DEN_EPS,
                      confidence_target=None):
    """The three DeepSpec loss terms (docs/DSPARK.md, DeepSpec loss.py), each sum(w * term) / (sum(w) + eps):
    ce: CE of the Markov-corrected logits against the GOLD label; l1: full ||q - pi||_1 (= 2 TV);
    confidence: BCE-with-logits of c against stop-grad a*. Returns a dict with the per-slot a* too.
    confidence_target replaces a* by a constant: the same gradient, and what finite differences can check (they
    would otherwise move the stop-gradient target along with the logits)."""
    q = torch.softmax(draft_logits, -1)
    pi = torch.softmax(teacher_logits, -1)
    l1 = (q - pi).abs().sum(-1)
    accept = (1 - 0.5 * l1).clamp(0, 1)
    ce = -torch.log_softmax(draft_logits, -1).gather(-1, labels[..., None])[..., 0]
    den = weights.sum() + den_eps
    out = {"ce": (weights * ce).sum() / den, "l1": (weights * l1).sum() / den,
           "confidence": draft_logits.new_zeros(()), "accept": accept.detach()}
    if confidence is not None:
        target = accept.detach() if confidence_target is None else confidence_target
        bce = F.binary_cross_entropy_with_logits(confidence, target, reduction="none")
        out["confidence"] = (weights * bce).sum() / den
    return out


def dspark_loss(terms, loss_weights=DSPARK_LOSS_WEIGHTS):
    """L = 0.1 L_ce + 0.9 L_l1 + 1.0 L_conf by default (single process: DeepSpec's world_size factor is 1)."""
    a_ce, a_l1, a_conf = loss_weights
    return a_ce * terms["ce"] + a_l1 * terms["l1"] + a_conf * terms["confidence"]


def dspark_train_metrics(accept, mask, keep, weights, confidence=None):
    """DeepSpec's train metrics (docs/DSPARK.md; loss.py _collect_local_terms), single process:
    accept_rate@j = sum a*_j mask_j / sum mask_j; tau_probabilistic = mean over blocks with keep and any mask of
    1 + sum_j prod_{i<=j} a*_i mask_i. With a confidence head, weighted by w = mask * decay like the loss:
    abs_error = sum w |s - a*| / sum w, bias = sum w (s - a*) / sum w with s = sigmoid(c), and cumprod_bias =
    sum w (prod_{i<=j} s_i mask_i - prod_{i<=j} a*_i mask_i) / sum w."""
    m = mask.to(accept.dtype)
    am = accept * m
    out = {}
    count = m.sum(dim=tuple(range(m.dim() - 1)))
    pos_sum = am.sum(dim=tuple(range(m.dim() - 1)))
    for j in range(mask.shape[-1]):
        out[f"accept_rate@{j}"] = float(pos_sum[j] / count[j]) if count[j] > 0 else float("nan")
    valid = keep.bool() & mask.any(-1)
    tau = 1 + am.cumprod(-1).sum(-1)
    out["tau_probabilistic"] = float(tau[valid].mean()) if valid.any() else float("nan")
    if confidence is not None:
        s = torch.sigmoid(confidence)
        den = weights.sum()
        out["confidence_abs_error"] = float((weights * (s - accept).abs()).sum() / den)
        out["confidence_bias"] = float((weights * (s - accept)).sum() / den)
        cum = (s * m).cumprod(-1) - am.cumprod(-1)
        out["confidence_cumprod_bias"] = float((weights * cum).sum() / den)
    return out


# ---------------------------------------------------------------------------------------------------------------
# DFlash2: grouped dynamic causal convolution
# ---------------------------------------------------------------------------------------------------------------

def conv_dynamic_kernels(u, kernel_projection, kernel_size, group_size):
    """delta [..., L, 2, K, d/G] = reshape(W_kp u): the projection's output is laid out (side, tap, group);
    side 0 is the pre-sublayer conv, side 1 the post-sublayer one, and BOTH come from the pre-sublayer input u."""
    groups = u.shape[-1] // group_size
    return (u @ kernel_projection.T).reshape(*u.shape[:-1], 2, kernel_size, groups)


def grouped_dynamic_conv(v, base, delta, group_size, block_size):
    """Conv(v; beta, delta)[t, c] = sum_{o<K} (beta[o, c] + delta[t, o, c // G]) * v[t-o, c], with v[t-o] = 0 when
    (t mod B) < o (docs/DFLASH2.md): the kernel is indexed by the OUTPUT position t and taps never cross a block
    boundary. v [..., L, d] with L a multiple of B, base [K, d], delta [..., L, K, d/G]."""
    out = torch.zeros_like(v)
    for t in range(v.shape[-2]):
        for o in range(base.shape[0]):
            if t % block_size < o:
                continue  # the tap would read the previous block (or the context): zero
            coef = base[o] + delta[..., t, o, :].repeat_interleave(group_size, -1)
            out[..., t, :] = out[..., t, :] + coef * v[..., t - o, :]
    return out


@dataclass
class ConvParams:
    base_kernel: torch.Tensor         # [2, K, d]
    kernel_projection: torch.Tensor   # [2*K*(d/G), d]
    group_size: int

    @property
    def kernel_size(self):
        return self.base_kernel.shape[1]


def identity_conv_params(d, kernel_size, group_size, dtype=torch.float64):
    """The trainers' init (docs/DFLASH2.md): base[:, 0] = 1, other taps 0, kernel_projection 0 -> exact identity."""
    base = torch.zeros(2, kernel_size, d, dtype=dtype)
    base[:, 0] = 1
    return ConvParams(base, torch.zeros(2 * kernel_size * (d // group_size), d, dtype=dtype), group_size)


def random_conv_params(d, kernel_size, group_size, generator, scale=0.3, dtype=torch.float64):
    base = scale * torch.randn(2, kernel_size, d, generator=generator, dtype=dtype)
    proj = scale * torch.randn(2 * kernel_size * (d // group_size), d, generator=generator, dtype=dtype)
    return ConvParams(base, proj, group_size)


def wrapped_sublayer(u, sublayer, conv, block_size):
    """Conv(sublayer(Conv(u; base[0], delta[0])); base[1], delta[1]) with delta from the pre-sublayer input u."""
    delta = conv_dynamic_kernels(u, conv.kernel_projection, conv.kernel_size, conv.group_size)
    pre = grouped_dynamic_conv(u, conv.base_kernel[0], delta[..., 0, :, :], conv.group_size, block_size)
    return grouped_dynamic_conv(sublayer(pre), conv.base_kernel[1], delta[..., 1, :, :], conv.group_size,
                                block_size)


def dflash2_layer(x, attention: Callable, mlp: Callable, input_norm, post_norm, eps, attention_conv, mlp_conv,
                  block_size):
    """One DFlash2 decoder layer on the block tokens x [..., L, d] (docs/DFLASH2.md): pre-norm, each sublayer
    wrapped by its conv, residuals outside the convs. attention(u) sees the block's normed input (ctx K/V are the
    callable's business: the conv never touches the context); attention_conv/mlp_conv None = plain DFlash."""
    def wrap(u, f, conv):
        return f(u) if conv is None else wrapped_sublayer(u, f, conv, block_size)
    x = x + wrap(rms_norm(x, input_norm, eps), attention, attention_conv)
    return x + wrap(rms_norm(x, post_norm, eps), mlp, mlp_conv)


# ---------------------------------------------------------------------------------------------------------------
# DFlash2: candidate selector
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class SelectorParams:
    hidden_projection: torch.Tensor      # [r, d]
    predecessor_codebook: torch.Tensor   # [V, r]
    successor_codebook: torch.Tensor     # [V, r]
    top_k: int


def random_selector_params(V, d, r, top_k, generator, scale=0.5, dtype=torch.float64):
    def rnd(*shape):
        return scale * torch.randn(*shape, generator=generator, dtype=dtype)
    return SelectorParams(rnd(r, d), rnd(V, r), rnd(V, r), top_k)


def unary_logits(lm_logits, output_multiplier=1.0, final_logit_softcapping=None):
    """U = softcap(output_multiplier * lm_head(h)) (dflash_config keys; a cap of None or <= 0 is off)."""
    u = lm_logits * output_multiplier
    if final_logit_softcapping is not None and final_logit_softcapping > 0:
        u = torch.tanh(u / final_logit_softcapping) * final_logit_softcapping
    return u


def top_candidates(unary, k):
    """C = topK(U) sorted by descending logit, ties to the lower id (a stable order for tests)."""
    order = torch.sort(-unary, dim=-1, stable=True).indices
    return order[..., :k]


def selector_scores(unary, hidden, predecessor, candidates, params):
    """S(p, c) = U[c] + <A[p] * (W_h h), Bc[c]> for candidates [..., K]; unary [..., V], hidden [..., d],
    predecessor [...] (docs/DFLASH2.md)."""
    gate = params.predecessor_codebook[predecessor] * (hidden @ params.hidden_projection.T)   # [..., r]
    pair = (params.successor_codebook[candidates] * gate[..., None, :]).sum(-1)               # [..., K]
    return unary.gather(-1, candidates) + pair


@dataclass
class SelectorWalk:
    path: torch.Tensor         # [L] chosen tokens
    candidates: torch.Tensor   # [L, K] candidate ids, by descending unary logit
    q: torch.Tensor            # [L, K] the proposal over the candidates (one-hot when greedy)
    scores: torch.Tensor       # [L, K] S_k(p_k, .) along the walked path


def selector_walk(unary, hidden, anchor, params, temperature=0.0, uniforms=None):
    """The walk over slots 1..B-1 (rows of unary [L, V] and hidden [L, d]): p_1 = anchor; greedy picks
    argmax_c S_k(p_k, c), sampling draws from q_k = softmax(S_k(p_k, .)/T) over the K candidates with the given
    uniforms [L]; then p_{k+1} = the pick."""
    cands = top_candidates(unary, params.top_k)
    p = torch.as_tensor(anchor)
    path, qs, ss = [], [], []
    for k in range(unary.shape[0]):
        s = selector_scores(unary[k], hidden[k], p, cands[k], params)
        q = probs_from_logits(s, temperature)
        i = s.argmax() if temperature <= 0 else sample_with_uniform(q, uniforms[k])
        p = cands[k, i]
        path.append(p)
        qs.append(q)
        ss.append(s)
    return SelectorWalk(torch.stack(path), cands, torch.stack(qs), torch.stack(ss))


def sparse_to_dense(q, candidates, vocab_size):
    """Scatter a candidate distribution [..., K] onto the vocabulary [..., V] (the draft q of the rejection rule)."""
    return torch.zeros(*q.shape[:-1], vocab_size, dtype=q.dtype).scatter_add(-1, candidates, q)


def selector_training_candidates(unary, targets, top_k, mode):
    """The loss's candidate set (docs/DFLASH2.md). 'inject' (speculators #1006 selector_training_candidates):
    sorted topK, a gold token outside it replaces rank K, every row counts (m = 1). 'strict' (SpecForge
    _selector_chunk_terms): the serving topK unchanged, m = [y in topK]. Returns (candidates, label index, m)."""
    cands = top_candidates(unary, top_k).clone()
    hit = cands.eq(targets[..., None])
    inside = hit.any(-1)
    if mode == "inject":
        cands[..., -1] = torch.where(inside, cands[..., -1], targets)
        index = torch.where(inside, hit.to(torch.long).argmax(-1), torch.full_like(targets, top_k - 1))
        return cands, index, torch.ones_like(inside, dtype=unary.dtype)
    if mode == "strict":
        return cands, hit.to(torch.long).argmax(-1), inside.to(unary.dtype)
    raise ValueError(f"selector_candidates: expected inject or strict, got {mode!r}")


def selector_loss(unary, hidden, predecessors, targets, weights, params, mode="inject", stop_gradient=False,
                  denominator="covered"):
    """L_sel = sum w m CE_K(S(p, C'), idx(y)) / den (docs/DFLASH2.md) over rows [n] (or any leading shape):
    unary [..., V], hidden [..., d], predecessors / targets [...], weights [...] = the unary objective's
    decay * mask. targets: the gold tokens (SpecForge, TorchSpec) or the verifier's argmax (speculators). stop_gradient detaches U and h for this term only (SpecForge #793). The sources normalise
    differently: 'covered' = sum w m (coverage), 'weight' = sum w (SpecForge: the unary loss's shared
    denominator), 'count' = number of rows with w > 0 (speculators loss_function: the mask count)."""
    if stop_gradient:
        unary, hidden = unary.detach(), hidden.detach()
    cands, index, m = selector_training_candidates(unary.detach(), targets, params.top_k, mode)
    s = selector_scores(unary, hidden, predecessors, cands, params)
    ce = -torch.log_softmax(s, -1).gather(-1, index[..., None])[..., 0]
    num = (weights * m * ce).sum()
    den = {"covered": (weights * m).sum(), "weight": weights.sum(),
           "count": (weights > 0).to(weights.dtype).sum()}[denominator]
    # nothing counted (strict with no gold in its top-K: recall@K = 0, the usual first step from scratch): 0, grad 0
    return num / den if den > 0 else num * 0


def dflash2_loss(unary, hidden, labels, predecessors, weights, params, alpha=1.0, **selector_kwargs):
    """L = L_unary + alpha L_sel with L_unary the DFlash weighted CE on gold (SpecForge's default; speculators
    defaults to KL against the verifier instead). L_sel over the unary loss's sum w by default (SpecForge's
    forward: the selector numerator joins the unary numerator over one denominator), so L is one sum over rows
    divided by sum w."""
    selector_kwargs.setdefault("denominator", "weight")
    return weighted_ce(unary, labels, weights) + alpha * selector_loss(unary, hidden, predecessors, labels,
                                                                       weights, params, **selector_kwargs)


# ---------------------------------------------------------------------------------------------------------------
# DFlash2: metrics (blocks [N, B, ...], slot 0 = anchor)
# ---------------------------------------------------------------------------------------------------------------

def unary_recall_at_k(unary, targets, mask, k):
    """sum [y in topK(U)] mask / sum mask."""
    hit = top_candidates(unary, k).eq(targets[..., None]).any(-1)
    m = mask.to(unary.dtype)
    return float((hit * m).sum() / m.sum())


def _block_lengths(alive_per_slot, mask):
    """1 + length of the surviving prefix of slots 1..B-1, averaged over blocks with any masked-in slot."""
    alive = (alive_per_slot & mask)[..., 1:].to(torch.float64).cumprod(-1)
    lengths = 1 + alive.sum(-1)
    valid = mask[..., 1:].any(-1)
    return float(lengths[valid].mean()) if valid.any() else float("nan")


def unary_topk_oracle_accepted_length(unary, targets, mask, k):
    """1 + sum_k prod_{j<=k} [y_j in topK_j and valid_j] (an oracle that always picks the right candidate)."""
    hit = top_candidates(unary, k).eq(targets[..., None]).any(-1)
    return _block_lengths(hit, mask.bool())


def unary_path_accepted_length(unary, targets, mask):
    """DFlash's greedy path: 1 + sum_k prod_{j<=k} [argmax U_j == y_j and valid_j] (ties to the lower id)."""
    return _block_lengths(unary.argmax(-1).eq(targets), mask.bool())


def teacher_forced_selector_accuracy(unary, hidden, predecessors, targets, mask, params):
    """[argmax over the strict topK of S(gold predecessor, .) == y], averaged over masked-in slots."""
    cands = top_candidates(unary, params.top_k)
    pick = cands.gather(-1, selector_scores(unary, hidden, predecessors, cands, params).argmax(-1, keepdim=True))
    m = mask.to(unary.dtype)
    return float((pick[..., 0].eq(targets) * m).sum() / m.sum())


def self_conditioned_path_accepted_length(unary, hidden, anchors, targets, mask, params):
    """The greedy walk fed with its own picks (not the unary argmax, TorchSpec #177): per block, 1 + the length of
    the prefix of slots 1..B-1 where the walk's pick equals the target; unary [N, B, V], hidden [N, B, d],
    anchors [N] (= slot 0 tokens), targets / mask [N, B]."""
    N, B = targets.shape
    correct = torch.zeros(N, B, dtype=torch.bool)
    for n in range(N):
        walk = selector_walk(unary[n, 1:], hidden[n, 1:], anchors[n], params)
        correct[n, 1:] = walk.path.eq(targets[n, 1:])
    return _block_lengths(correct, mask.bool())


# ---------------------------------------------------------------------------------------------------------------
# Lossless speculative sampling
# ---------------------------------------------------------------------------------------------------------------

def acceptance_probability(p, q, token):
    """min(1, p(x)/q(x)) for the drafted token x (p, q [..., V])."""
    px, qx = p.gather(-1, token[..., None])[..., 0], q.gather(-1, token[..., None])[..., 0]
    return torch.where(qx > 0, (px / qx).clamp(max=1), torch.ones_like(px))


def residual_distribution(p, q):
    """max(0, p - q) renormalised; p itself when the residual is empty (then p == q and it is never used)."""
    r = (p - q).clamp(min=0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(p.dtype).tiny), p)


def speculative_verify(target_probs, draft_probs, draft_tokens, uniforms, bonus_uniform):
    """One block of the rejection rule with given uniforms: target_probs [n+1, V] (the target at each draft
    position and after the last), draft_probs [n, V] (dense: DSpark's softmax(l_j/T), or DFlash2's sparse q
    scattered onto the candidates), draft_tokens [n]. Draft j is accepted when u_j < min(1, p/q); the first
    rejection emits a sample of the residual, full acceptance emits a sample of target_probs[n]. Returns
    (number accepted, the extra token)."""
    n = draft_tokens.shape[0]
    for j in range(n):
        if not bool(uniforms[j] < acceptance_probability(target_probs[j], draft_probs[j], draft_tokens[j])):
            return j, sample_with_uniform(residual_distribution(target_probs[j], draft_probs[j]), bonus_uniform)
    return n, sample_with_uniform(target_probs[n], bonus_uniform)


def speculative_output_distribution(target_next: Callable, draft_block: Callable, prefix, n_tokens, block_len):
    """The exact distribution [V]*n_tokens of the next n_tokens emitted by speculative decoding, by enumeration.
    target_next(prefix) -> p [V]; draft_block(prefix, drafted so far) -> q [V] of the next draft (the family's
    draft distribution, conditioned on the drafted prefix: DSpark's Markov chain, DFlash2's path). A block
    drafts block_len tokens, the target verifies them with the rejection rule and emits the accepted drafts plus
    one token; decoding restarts from the committed prefix. Lossless means the result equals the target's own
    joint distribution (target_joint_distribution)."""
    V = target_next(tuple(prefix)).shape[-1]
    out = torch.zeros([V] * n_tokens, dtype=torch.float64)

    def emit(ctx, emitted, weight):
        # weight: the probability of having committed ctx and emitted these tokens so far
        if len(emitted) >= n_tokens:
            out[tuple(emitted[:n_tokens])] += weight
        else:
            step(ctx, (), emitted, weight)

    def step(committed, drafts, emitted, weight):
        # draft j = len(drafts) of the block that starts after `committed`, then the target's verdict on it.
        # Drafting the rest of the block lazily is the same distribution: tokens after a rejection are dropped.
        ctx = committed + drafts
        p = target_next(ctx)
        if len(drafts) == block_len:   # every draft accepted: the target's own next token
            for y in range(V):
                if p[y] > 0:
                    emit(ctx + (y,), emitted + [y], weight * float(p[y]))
            return
        q = draft_block(committed, drafts)
        r = residual_distribution(p, q)
        for x in range(V):
            if q[x] <= 0:
                continue
            acc = float(acceptance_probability(p, q, torch.tensor(x)))
            if acc > 0:
                step(committed, drafts + (x,), emitted + [x], weight * float(q[x]) * acc)
            if acc < 1:
                for y in range(V):
                    if r[y] > 0:
                        emit(ctx + (y,), emitted + [y], weight * float(q[x]) * (1 - acc) * float(r[y]))

    emit(tuple(prefix), [], 1.0)
    return out


def target_joint_distribution(target_next: Callable, prefix, n_tokens):
    """The target's own joint distribution [V]*n_tokens of its next n_tokens."""
    V = target_next(tuple(prefix)).shape[-1]
    out = torch.zeros([V] * n_tokens, dtype=torch.float64)
    for seq in itertools.product(range(V), repeat=n_tokens):
        prob, ctx = 1.0, tuple(prefix)
        for y in seq:
            prob *= float(target_next(ctx)[y])
            ctx = ctx + (y,)
        out[seq] = prob
    return out


def greedy_accepted_length(drafts, target_argmax):
    """T = 0: the longest prefix with draft == target argmax; tau counts it plus the target's own token."""
    eq = (drafts == target_argmax[: drafts.shape[0]]).to(torch.long)
    return int(eq.cumprod(0).sum())

