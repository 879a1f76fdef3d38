"""The Python package's API (python/dflash, on the library of this build): both ops against dense fp64
references (forward and gradients), the [batch, heads, seq, dim] layout without copies, block_mask_args
against the reference mask and flex_attention's mask_mod, block_targets against the loop reference, the
chunked loss's peak memory, and errors (ValueError/RuntimeError with the op's messages)."""
import math
import pathlib
import sys

import pytest
import torch

import dflash
import reference_drafter as ref
from attention_reference import anchor_block_mask, dense_attention
from dflash import attention as attention_mod

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "cli_scripts"))
from memory import PeakMemory  # noqa: E402


def inputs(S, N, B, Hq, Hkv, D, dtype=torch.float64, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, N * B, Hq, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(batch, S + N * B, Hkv, D, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(batch, S + N * B, Hkv, D, generator=g, dtype=torch.float64).to(dtype)
    dout = torch.randn(batch, N * B, Hq, D, generator=g, dtype=torch.float64).to(dtype)
    anchors = torch.randint(0, S + 1, (batch, N), generator=g)
    anchors[0, 0], anchors[-1, -1] = 0, S
    keep = torch.rand(batch, N, generator=g) > 0.25
    return q, k, v, dout, anchors, keep


def grads(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    return [out.detach(), *torch.autograd.grad(out, (q, k, v), dout)]


def max_rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("case", [(37, 3, 16, 8, 2, 64, 0), (50, 4, 8, 4, 4, 32, 0), (60, 4, 8, 4, 1, 32, 11)])
def test_attention_matches_dense_fp64_reference(case):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = inputs(S, N, B, Hq, Hkv, D)
    ours = grads(lambda q, k, v: dflash.anchor_block_attention(q, k, v, anchors, keep, B, W), q, k, v, dout)
    want = grads(lambda q, k, v: dense_attention(q, k, v, anchors, keep, B, W), q, k, v, dout)
    for name, a, b in zip(["out", "dq", "dk", "dv"], ours, want):
        assert max_rel(a, b) <= 1e-10, name


def test_bhsd_layout_matches_and_copies_nothing():
    S, N, B, Hq, Hkv, D = 40, 3, 8, 8, 2, 32
    q, k, v, dout, anchors, keep = inputs(S, N, B, Hq, Hkv, D)
    # As SDPA / flex code has them: projections viewed as [b, seq, heads, D], then transposed.
    qh, kh, vh, douth = (t.transpose(1, 2) for t in (q, k, v, dout))
    for t in (qh, kh, vh):
        view = attention_mod._as_bshd(t, "x", "")
        assert view.data_ptr() == t.data_ptr() and view.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    ours = grads(lambda q, k, v: dflash.anchor_block_attention_bhsd(q, k, v, anchors, keep, B), qh, kh, vh, douth)
    want = grads(lambda q, k, v: dense_attention(q, k, v, anchors, keep, B).transpose(1, 2), q, k, v, douth)
    assert ours[0].shape == (2, Hq, N * B, D)
    assert max_rel(ours[0], want[0]) <= 1e-10
    for a, b in zip(ours[1:], want[1:]):  # gradients come back in the caller's [b, heads, seq, D] layout
        assert max_rel(a, b.transpose(1, 2)) <= 1e-10
    # A last dimension that is not contiguous needs one copy, and still gives the same result.
    qs = qh.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert qs.stride(-1) != 1
    again = dflash.anchor_block_attention_bhsd(qs, kh, vh, anchors, keep, B)
    assert torch.equal(again, ours[0])
    with pytest.raises(ValueError, match=r"q must be \[batch, Hq, N\*B, D\], got shape \[24, 32\]"):
        dflash.anchor_block_attention_bhsd(q[0, :, 0], kh, vh, anchors, keep, B)


@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("one_dim", [False, True])
def test_block_mask_args_is_the_spec_mask(window, one_dim):
    S, N, B = 30, 4, 8
    g = torch.Generator().manual_seed(3)
    anchors = torch.randint(0, S + 1, (2, N), generator=g, dtype=torch.int32)  # collators often use int32
    keep = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.uint8)
    if one_dim:
        anchors, keep = anchors[0], keep[0]
    m = dflash.block_mask_args(anchors, keep, B, S, window)
    assert m.anchors.dtype == torch.long and m.keep.dtype == torch.bool and m.num_blocks == N
    a2, k2 = (m.anchors, m.keep) if not one_dim else (m.anchors.expand(2, -1), m.keep.expand(2, -1))
    want = anchor_block_mask(a2, k2, S, N, B, window)
    assert torch.equal(m.dense_mask(2), want)
    assert torch.equal(m.query_positions.expand(2, -1), (a2[:, :, None] + torch.arange(B)).reshape(2, -1))
    assert torch.equal(m.key_positions.expand(2, -1)[:, :S], torch.arange(S).expand(2, -1))


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_mask_mod_gives_the_same_attention_as_the_op():
    """What a flex_attention trainer runs (eager flex, its mask_mod) equals the op on the same args."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    S, N, B, Hq, Hkv, D = 48, 4, 16, 4, 2, 16
    q, k, v, _, anchors, keep = inputs(S, N, B, Hq, Hkv, D, dtype=torch.float32, batch=2)
    keep[:] = True  # flex gives rows that see nothing a NaN-free zero too, but keep the comparison simple
    m = dflash.block_mask_args(anchors, keep, B, S)
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    block_mask = flex.create_block_mask(m.mask_mod, B=2, H=None, Q_LEN=N * B, KV_LEN=S + N * B, device="cpu")
    want = flex.flex_attention(qh, kh, vh, block_mask=block_mask, enable_gqa=True)
    ours = dflash.anchor_block_attention_bhsd(qh, kh, vh, m.anchors, m.keep, m.block_size, m.window)
    assert max_rel(ours, want) <= 1e-5


def test_block_mask_args_errors_say_what_the_op_says():
    q, k, v, _, anchors, keep = inputs(20, 3, 4, 4, 2, 16, dtype=torch.float32, batch=1)
    bad = anchors.clone()
    bad[0, 1] = 21
    with pytest.raises(RuntimeError) as op_err:
        dflash.anchor_block_attention(q, k, v, bad, keep, 4)
    with pytest.raises(ValueError) as py_err:
        dflash.block_mask_args(bad, keep, 4, 20)
    said = "anchors[0, 1] = 21 is outside [0, S] with context length S = 20"
    assert said in str(op_err.value) and said in str(py_err.value)
    with pytest.raises(ValueError, match=r"block_keep_mask must have the shape of anchor_positions \[1, 3\]"):
        dflash.block_mask_args(anchors, keep[:, :2], 4, 20)
    with pytest.raises(ValueError, match="anchor_positions must hold integers"):
        dflash.block_mask_args(anchors.float(), keep, 4, 20)
    with pytest.raises(ValueError, match="window must be >= 0"):
        dflash.block_mask_args(anchors, keep, 4, 20, window=-1)


def test_block_targets_match_the_loop_reference():
    g = torch.Generator().manual_seed(4)
    b, S, N, B, mask_id = 2, 23, 5, 4, 61
    ids = torch.randint(0, 60, (b, S), generator=g)
    loss_mask = torch.ones(b, S, dtype=torch.bool)
    loss_mask[:, :4] = False
    loss_mask[1, 12] = False
    anchors = torch.tensor([[4, 9, 15, 21, 0], [5, 11, 13, 20, 22]])
    keep = torch.tensor([[True, True, True, True, False], [True, True, False, True, True]])
    t = dflash.block_targets(ids, loss_mask, dflash.block_mask_args(anchors, keep, B, S), mask_id)
    block_ids, labels, weights, tpos = ref.block_targets(ids, loss_mask, anchors, keep, B, mask_id,
                                                         ref.default_gamma(B))
    kept_first = keep.repeat_interleave(B, 1) | (torch.arange(N * B) % B != 0)
    assert torch.equal(t.block_ids[kept_first], block_ids[kept_first])
    assert torch.equal(t.labels, labels)
    assert torch.allclose(t.weights.double(), weights, rtol=1e-7, atol=0)
    counted = weights > 0
    assert torch.equal(t.teacher_index.view(b, -1)[counted], (tpos + S * torch.arange(b)[:, None])[counted])


def test_block_targets_without_decay_weigh_every_kept_label_one():
    """gamma=math.inf: no decay (SpecForge's default): weight 1 exactly where the decayed weights are > 0."""
    ids = torch.randint(0, 60, (2, 23), generator=torch.Generator().manual_seed(4))
    loss_mask = torch.ones(2, 23, dtype=torch.bool)
    loss_mask[:, :4] = False
    anchors = torch.tensor([[4, 9, 21, 0], [5, 11, 13, 20]])
    keep = torch.tensor([[True, True, True, False], [True, False, True, True]])
    m = dflash.block_mask_args(anchors, keep, 4, 23)
    decayed = dflash.block_targets(ids, loss_mask, m, 61).weights
    flat = dflash.block_targets(ids, loss_mask, m, 61, gamma=math.inf).weights
    assert torch.equal(flat, (decayed > 0).float()) and (decayed[decayed > 0] < 1).any()


def test_packed_rows_with_document_ids():
    """document_ids -> ctx_start for the op (the reference mask with it), positions that restart per document,
    and labels that stop at the document's end; a block's attention output equals the same document alone."""
    S, N, B, Hq, Hkv, D = 30, 4, 4, 4, 2, 16
    doc = torch.tensor([0] * 12 + [1] * 10 + [2] * 8)                      # documents [0,12) [12,22) [22,30)
    anchors = torch.tensor([[3, 13, 20, 25], [9, 12, 24, 0]])
    keep = torch.tensor([[True, True, True, True], [True, True, True, False]])
    m = dflash.block_mask_args(anchors, keep, B, S, 2, document_ids=doc)
    assert torch.equal(m.ctx_start, torch.tensor([[0, 12, 12, 22], [0, 12, 22, 0]]))
    assert torch.equal(m.dense_mask(2), anchor_block_mask(anchors, keep, S, N, B, 2, m.ctx_start))
    assert torch.equal(m.key_positions[0, :S], torch.cat([torch.arange(12), torch.arange(10), torch.arange(8)]))
    assert torch.equal(m.query_positions[0, 4:8], torch.arange(1, 5))       # anchor 13 = position 1 of doc 1
    q, k, v, dout, _, _ = inputs(S, N, B, Hq, Hkv, D)
    ours = grads(lambda q, k, v: dflash.anchor_block_attention(q, k, v, m.anchors, m.keep, B, 2, None, m.ctx_start),
                 q, k, v, dout)
    want = grads(lambda q, k, v: dense_attention(q, k, v, anchors, keep, B, 2, None, m.ctx_start), q, k, v, dout)
    for a, b in zip(ours, want):
        assert max_rel(a, b) <= 1e-10
    # Block 1 of row 0 (document 1 alone: its context keys 12..21, its own block keys) gives the same output.
    alone = dense_attention(q[:1, 4:8], torch.cat([k[:1, 12:22], k[:1, S + 4:S + 8]], 1),
                            torch.cat([v[:1, 12:22], v[:1, S + 4:S + 8]], 1), torch.tensor([[1]]),
                            torch.tensor([[True]]), B, 2)
    assert max_rel(ours[0][:1, 4:8], alone) <= 1e-12
    # Labels past the anchor's document weigh 0: anchor 20 (doc [12, 22)) keeps slots 1 only.
    ids = torch.arange(S).expand(2, S) + 100
    t = dflash.block_targets(ids, torch.ones(2, S, dtype=torch.bool), m, 7)
    assert (t.weights[0, 8:12] > 0).tolist() == [False, True, False, False]
    assert (t.weights[0, 4:8] > 0).tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match=r"document_ids must be \[S\] or \[batch, S\] with S = 30"):
        dflash.block_mask_args(anchors, keep, B, S, document_ids=doc[:5])


def dense_loss(h, lm_head, labels, w, teacher=None, tidx=None, kl=0.0):
    logp = torch.log_softmax(h @ lm_head.T, -1)
    ce = -logp.gather(1, labels[:, None]).squeeze(1)
    row = ce
    if kl:
        logq = torch.log_softmax(teacher[tidx] @ lm_head.T, -1)
        row = (1 - kl) * ce + kl * (logq.exp() * (logq - logp)).sum(-1)
    return (row * w).sum() / w.sum()


@pytest.mark.parametrize("kl", [0.0, 0.15])
def test_chunked_loss_matches_dense_loss_and_gradient(kl):
    g = torch.Generator().manual_seed(5)
    b, T, H, V, M = 2, 12, 16, 97, 30
    h0 = torch.randn(b, T, H, generator=g, dtype=torch.float64)
    lm_head = torch.randn(V, H, generator=g, dtype=torch.float64)
    labels = torch.randint(0, V, (b, T), generator=g)
    w = torch.rand(b, T, generator=g, dtype=torch.float64)
    w[0, :3] = 0
    labels[0, :3] = -100  # rows with weight 0 are never read
    teacher = torch.randn(M, H, generator=g, dtype=torch.float64)
    tidx = torch.randint(0, M, (b * T,), generator=g)
    hd = h0.clone().requires_grad_()
    want = dense_loss(hd.reshape(-1, H), lm_head, labels.reshape(-1).clamp(min=0), w.reshape(-1), teacher, tidx, kl)
    want.backward()
    for chunk in (1, 5, 1000):
        h = h0.clone().requires_grad_()
        got = dflash.chunked_lm_loss_with_stats(h, lm_head, labels, w, teacher_hidden=teacher if kl else None,
                                                teacher_index=tidx if kl else None, kl_weight=kl, chunk_rows=chunk)
        (got.loss * 2.0).backward()
        assert abs(got.loss.item() - want.item()) <= 1e-12
        assert (h.grad - 2.0 * hd.grad).abs().max().item() <= 1e-12
        assert h.grad[0, :3].abs().max() == 0
        assert got.row_ce.shape == (b * T,) and got.row_correct.dtype == torch.bool


def test_chunked_loss_gradcheck():
    g = torch.Generator().manual_seed(6)
    R, H, V = 9, 5, 13
    lm_head = torch.randn(V, H, generator=g, dtype=torch.float64)
    labels = torch.randint(0, V, (R,), generator=g)
    w = torch.rand(R, generator=g, dtype=torch.float64)
    teacher = torch.randn(R, H, generator=g, dtype=torch.float64)
    x = torch.randn(R, H, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: dflash.chunked_lm_loss(x, lm_head, labels, w, teacher_hidden=teacher,
                                         teacher_index=torch.arange(R), kl_weight=0.3, chunk_rows=4), (x,))


def test_chunked_loss_fp32_fused_path_matches_dense():
    g = torch.Generator().manual_seed(7)
    R, H, V = 300, 32, 1003
    h0 = torch.randn(R, H, generator=g)
    lm_head = torch.randn(V, H, generator=g) / math.sqrt(H)
    labels = torch.randint(0, V, (R,), generator=g)
    w = torch.rand(R, generator=g)
    hd = h0.double().requires_grad_()
    want = dense_loss(hd, lm_head.double(), labels, w.double())
    want.backward()
    h = h0.clone().requires_grad_()
    got = dflash.chunked_lm_loss(h, lm_head, labels, w, chunk_rows=64)
    got.backward()
    assert got.dtype == torch.float32
    assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item())
    assert max_rel(h.grad, hd.grad) <= 1e-5


def test_chunked_loss_peak_memory_is_one_chunk_of_logits():
    """R x V logits would be 4096 x 32000 x 4 B = 524 MB; the loss holds one 512-row chunk (65.5 MB)."""
    g = torch.Generator().manual_seed(8)
    R, H, V, chunk = 4096, 256, 32000, 512
    hidden = torch.randn(R, H, generator=g).requires_grad_()
    lm_head = torch.randn(V, H, generator=g) / math.sqrt(H)
    labels = torch.randint(0, V, (R,), generator=g)
    w = torch.rand(R, generator=g)
    mem = PeakMemory("cpu")
    dflash.chunked_lm_loss(hidden[:chunk], lm_head, labels[:chunk], w[:chunk], chunk_rows=chunk).backward()  # warm-up
    hidden.grad = None
    mem.reset()
    loss = dflash.chunked_lm_loss(hidden, lm_head, labels, w, chunk_rows=chunk)
    loss.backward()
    peak = mem.peak_extra_mb() * 2**20
    chunk_logits = chunk * V * 4
    inputs_bytes = hidden.numel() * 4  # d(hidden) is kept from forward to backward, then the .grad itself
    assert hidden.grad is not None and hidden.grad.abs().max() > 0
    assert peak < chunk_logits + 3 * inputs_bytes, f"peak {peak / 2**20:.1f} MB"
    assert peak < R * V * 4 / 4


def test_chunked_loss_errors_are_value_errors_with_the_op_message():
    h, lm_head, w = torch.randn(5, 4), torch.randn(9, 4), torch.ones(5)
    labels = torch.zeros(5, dtype=torch.long)
    cases = [
        ((h, torch.randn(9, 3), labels, w), {}, "hidden [R, H] and lm_head [V, H] must share H"),
        ((h, lm_head, labels[:4], w), {}, "labels and weights need one entry per hidden row"),
        ((h, lm_head, labels.int(), w), {}, "labels must have dtype Long (int64), got Int"),
        ((h, lm_head, labels, w), {"chunk_rows": 0}, "chunk_rows must be positive"),
        ((h, lm_head, labels, w), {"kl_weight": 2.0}, "kl_weight must be a finite number in [0, 1], got 2"),
        ((h, lm_head, labels, w), {"kl_weight": 0.5}, "kl_weight > 0 needs the target's last hidden states"),
    ]
    for args, kw, said in cases:
        with pytest.raises(ValueError) as py_err:
            dflash.chunked_lm_loss(*args, **kw)
        with pytest.raises(ValueError) as op_err:
            torch.ops.dflash.chunked_lm_loss(*args, None, None, kw.get("chunk_rows", 1024), kw.get("kl_weight", 0.0))
        assert str(py_err.value).startswith("chunked_lm_loss: " + said), str(py_err.value)
        assert str(op_err.value) == str(py_err.value)
    with pytest.raises(ValueError, match="lm_head_weight requires grad"):
        dflash.chunked_lm_loss(h, torch.nn.Linear(4, 9, bias=False).weight, labels, w)


def test_ops_have_no_autograd_cost_under_inference_mode():
    q, k, v, _, anchors, keep = inputs(20, 2, 4, 2, 1, 8, dtype=torch.float32)
    with torch.inference_mode():
        out = dflash.anchor_block_attention(q, k, v, anchors, keep, 4)
        loss = dflash.chunked_lm_loss(out.reshape(-1, 8), torch.randn(11, 8), torch.zeros(out.numel() // 8,
                                      dtype=torch.long), torch.ones(out.numel() // 8))
    assert not out.requires_grad and not loss.requires_grad and torch.isfinite(loss)
