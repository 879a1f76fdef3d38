"""torch.ops.dflash.anchor_block_attention against a dense fp64 reference of the docs/DFLASH.md mask.

Forward and all three gradients, over the anchor patterns that break attention masks: anchor 0
(no context), anchor S (all context), duplicates, unsorted, all-invalid batches, S < B, sliding
window, every head dim, and GQA ratios 1/2/4/8; and packed rows (ctx_start: each block sees only its
own document's context), with the same reference, gradcheck and determinism checks.
"""
import pytest
import torch

from attention_reference import dense_attention

op = torch.ops.dflash.anchor_block_attention


def make_anchors(pattern, batch, N, S, gen):
    if pattern == "random":
        a = torch.randint(0, S + 1, (batch, N), generator=gen)
    elif pattern == "sorted":
        a = torch.sort(torch.randint(0, S + 1, (batch, N), generator=gen), dim=1).values
    elif pattern == "edges":  # anchor 0, anchor S and duplicates of both
        a = torch.randint(0, S + 1, (batch, N), generator=gen)
        a[:, 0] = 0
        a[:, -1] = S
        if N > 2:
            a[:, 1] = 0
            a[:, -2] = S
    elif pattern == "duplicates":
        a = torch.full((batch, N), S // 2, dtype=torch.long)
    else:
        raise ValueError(pattern)
    return a


def make_packed(batch, N, S, gen, min_doc=1):
    """Packed rows: documents of random lengths cover [0, S); each block gets an anchor inside a random
    document and ctx_start = that document's first position. Returns (anchors, ctx_start)."""
    anchors = torch.zeros(batch, N, dtype=torch.long)
    starts = torch.zeros(batch, N, dtype=torch.long)
    for b in range(batch):
        cuts = [0]
        while cuts[-1] < S:
            cuts.append(min(S, cuts[-1] + int(torch.randint(min_doc, max(min_doc + 1, S // 3 + 1), (1,), generator=gen))))
        for n in range(N):
            d = int(torch.randint(0, len(cuts) - 1, (1,), generator=gen))
            lo, hi = cuts[d], cuts[d + 1]
            anchors[b, n] = lo + int(torch.randint(0, hi - lo, (1,), generator=gen))
            starts[b, n] = lo
    return anchors, starts


def make_keep(kind, batch, N, gen):
    if kind == "all":
        return torch.ones(batch, N, dtype=torch.bool)
    keep = torch.rand(batch, N, generator=gen) > 0.3
    if kind == "some_batch_empty":
        keep[0] = False
    return keep


def make_inputs(S, N, B, Hq, Hkv, D, dtype, pattern="random", keep_kind="mixed", batch=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, N * B, Hq, D, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(batch, S + N * B, Hkv, D, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(batch, S + N * B, Hkv, D, generator=gen, dtype=torch.float64).to(dtype)
    dout = torch.randn(batch, N * B, Hq, D, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v, dout, make_anchors(pattern, batch, N, S, gen), make_keep(keep_kind, batch, N, gen)


def run(fn, q, k, v, dout, *rest):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v, *rest)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return [out, dq, dk, dv]


def rel_err(x, ref):
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def abs_err(x, ref):
    return (x.double() - ref).abs().max().item()


# (S, N, B, Hq, Hkv, D, window): head dims 64/128/256, GQA ratios 1, 2, 4, 8, S < B, windows.
CASES = [
    (37, 3, 16, 1, 1, 64, 0),
    (37, 3, 16, 2, 1, 64, 0),
    (50, 4, 16, 8, 2, 128, 0),
    (50, 4, 16, 8, 1, 64, 0),
    (29, 2, 16, 8, 8, 256, 0),
    (5, 3, 16, 4, 2, 64, 0),       # S < B
    (80, 4, 16, 4, 1, 128, 24),    # sliding window
    (80, 3, 8, 8, 2, 64, 5),       # window smaller than the block
    (40, 5, 4, 2, 2, 16, 0),       # small odd head dim
]
PATTERNS = ["random", "sorted", "edges", "duplicates"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "S{}_N{}_B{}_Hq{}_Hkv{}_D{}_W{}".format(*c))
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fp64_matches_dense_reference(case, pattern):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, pattern)
    ours = run(op, q, k, v, dout, anchors, keep, B, W, None)
    ref = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
    for name, a, r in zip(["out", "dq", "dk", "dv"], ours, ref):
        assert rel_err(a, r) <= 1e-10, f"{name}: {rel_err(a, r):.3e}"


@pytest.mark.parametrize("case", CASES[:7], ids=lambda c: "S{}_N{}_B{}_Hq{}_Hkv{}_D{}_W{}".format(*c))
def test_fp32_matches_dense_reference(case):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float32, "edges")
    ours = run(op, q, k, v, dout, anchors, keep, B, W, None)
    ref = run(dense_attention, *(t.double() for t in (q, k, v, dout)), anchors, keep, B, W, None)
    for name, a, r in zip(["out", "dq", "dk", "dv"], ours, ref):
        assert a.dtype == torch.float32
        assert rel_err(a, r) <= 1e-5, f"{name}: {rel_err(a, r):.3e}"


@pytest.mark.parametrize("case", [CASES[2], CASES[4], CASES[6]], ids=["D128", "D256", "window"])
def test_bf16_error_within_twice_pytorch_bf16(case):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.bfloat16, "random")
    ours = run(op, q, k, v, dout, anchors, keep, B, W, None)
    torch_bf16 = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
    ref = run(dense_attention, *(t.double() for t in (q, k, v, dout)), anchors, keep, B, W, None)
    for name, a, t, r in zip(["out", "dq", "dk", "dv"], ours, torch_bf16, ref):
        assert a.dtype == torch.bfloat16
        ours_err, torch_err = abs_err(a, r), abs_err(t, r)
        assert ours_err <= 2 * torch_err + 1e-6, f"{name}: ours {ours_err:.3e} vs torch bf16 {torch_err:.3e}"


PACKED_CASES = [
    (90, 6, 16, 4, 2, 64, 0),
    (120, 8, 8, 8, 1, 32, 0),
    (150, 5, 16, 4, 1, 128, 40),   # sliding window and document start both bound the context
    (60, 7, 4, 2, 2, 16, 9),
]


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: "S{}_N{}_B{}_Hq{}_Hkv{}_D{}_W{}".format(*c))
def test_packed_rows_fp64_match_dense_reference(case):
    S, N, B, Hq, Hkv, D, W = case
    gen = torch.Generator().manual_seed(S + N)
    q, k, v, dout, _, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, seed=S)
    anchors, starts = make_packed(2, N, S, gen)
    ours = run(op, q, k, v, dout, anchors, keep, B, W, None, starts)
    ref = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None, starts)
    for name, a, r in zip(["out", "dq", "dk", "dv"], ours, ref):
        assert rel_err(a, r) <= 1e-10, f"{name}: {rel_err(a, r):.3e}"
    # The reference without ctx_start differs: the test sees the document boundaries.
    unpacked = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
    assert rel_err(ours[0], unpacked[0]) > 1e-3


def test_arbitrary_ctx_start_and_1d_broadcast():
    # ctx_start is any value in [0, S], also past the anchor (that block sees only its own keys).
    S, N, B = 40, 5, 8
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, 4, 2, 16, torch.float64, "edges")
    gen = torch.Generator().manual_seed(3)
    starts = torch.randint(0, S + 1, (2, N), generator=gen)
    starts[:, 1] = S
    ours = run(op, q, k, v, dout, anchors, keep, B, 3, None, starts)
    ref = run(dense_attention, q, k, v, dout, anchors, keep, B, 3, None, starts)
    for a, r in zip(ours, ref):
        assert rel_err(a, r) <= 1e-10
    ours = run(op, q, k, v, dout, anchors[0], keep[0], B, 0, None, starts[0])
    ref = run(dense_attention, q, k, v, dout, anchors[0].expand(2, -1), keep[0].expand(2, -1), B, 0, None,
              starts[0].expand(2, -1))
    for a, r in zip(ours, ref):
        assert rel_err(a, r) <= 1e-10


def test_packed_fp32_and_bf16_against_dense():
    S, N, B, Hq, Hkv, D, W = PACKED_CASES[2]
    gen = torch.Generator().manual_seed(11)
    anchors, starts = make_packed(2, N, S, gen)
    q, k, v, dout, _, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, seed=5)
    ref = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None, starts)
    ours = run(op, *(t.float() for t in (q, k, v, dout)), anchors, keep, B, W, None, starts)
    for a, r in zip(ours, ref):
        assert rel_err(a, r) <= 1e-5
    qb, kb, vb, db = (t.bfloat16() for t in (q, k, v, dout))
    ours = run(op, qb, kb, vb, db, anchors, keep, B, W, None, starts)
    torch_bf16 = run(dense_attention, qb, kb, vb, db, anchors, keep, B, W, None, starts)
    for name, a, t, r in zip(["out", "dq", "dk", "dv"], ours, torch_bf16, ref):
        assert abs_err(a, r) <= 2 * abs_err(t, r) + 1e-6, name


def test_packed_gradcheck():
    gen = torch.Generator().manual_seed(7)
    q, k, v, _, _, keep = make_inputs(12, 3, 4, 4, 2, 8, torch.float64, batch=1)
    anchors, starts = make_packed(1, 3, 12, gen)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, anchors, keep, 4, 3, None, starts), (q, k, v))


def test_packed_deterministic_across_thread_counts():
    gen = torch.Generator().manual_seed(2)
    q, k, v, dout, _, keep = make_inputs(400, 24, 16, 4, 2, 64, torch.float32)
    anchors, starts = make_packed(2, 24, 400, gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(op, q, k, v, dout, anchors, keep, 16, 0, None, starts)
        torch.set_num_threads(max(2, before))
        many = run(op, q, k, v, dout, anchors, keep, 16, 0, None, starts)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, many):
        assert torch.equal(a, b)


def test_a_block_never_sees_another_document():
    # Changing every key and value outside block 0's document (and outside its own block) leaves its output.
    S, N, B = 60, 3, 4
    q, k, v, _, _, _ = make_inputs(S, N, B, 2, 1, 16, torch.float64, batch=1)
    anchors, starts = torch.tensor([[30, 10, 45]]), torch.tensor([[25, 0, 25]])
    keep = torch.ones(1, N, dtype=torch.bool)
    out = op(q, k, v, anchors, keep, B, 0, None, starts)
    k2, v2 = k.clone(), v.clone()
    for t in (k2, v2):
        t[:, :25] = torch.randn_like(t[:, :25])
        t[:, S + B:] = torch.randn_like(t[:, S + B:])
    out2 = op(q, k2, v2, anchors, keep, B, 0, None, starts)
    assert torch.equal(out[:, :B], out2[:, :B])
    assert not torch.equal(out[:, B:2 * B], out2[:, B:2 * B])


def test_invalid_blocks_give_zero_output_and_gradients():
    S, N, B, Hq, Hkv, D = 30, 4, 8, 4, 2, 32
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, "random", batch=1)
    keep = torch.tensor([[True, False, True, False]])
    anchors = torch.tensor([[5, 25, 12, 29]])  # the dropped blocks' anchors reach further than the kept ones
    out, dq, dk, dv = run(op, q, k, v, dout, anchors, keep, B, 0, None)
    for blk in (0, 2):
        assert out[0, blk * B:(blk + 1) * B].abs().max() > 0
    for blk in (1, 3):
        assert out[0, blk * B:(blk + 1) * B].abs().max() == 0
        assert dq[0, blk * B:(blk + 1) * B].abs().max() == 0
        assert dk[0, S + blk * B:S + (blk + 1) * B].abs().max() == 0
        assert dv[0, S + blk * B:S + (blk + 1) * B].abs().max() == 0
    # Context keys at or after every kept anchor (12) are seen by nobody, the ones before are.
    assert dk[0, 12:S].abs().max() == 0 and dv[0, 12:S].abs().max() == 0
    assert dk[0, :12].abs().max() > 0 and dv[0, :12].abs().max() > 0


def test_all_invalid_gives_zeros():
    q, k, v, dout, anchors, keep = make_inputs(20, 3, 4, 2, 1, 16, torch.float32, "random")
    keep = torch.zeros_like(keep)
    out, dq, dk, dv = run(op, q, k, v, dout, anchors, keep, 4, 0, None)
    for t in (out, dq, dk, dv):
        assert t.abs().max() == 0


def test_broadcast_1d_anchors_and_explicit_scale():
    q, k, v, dout, anchors, keep = make_inputs(30, 3, 8, 4, 2, 32, torch.float64, "random", batch=2)
    a1, k1 = anchors[0], keep[0]
    ours = run(op, q, k, v, dout, a1, k1, 8, 0, 0.3)
    ref = run(dense_attention, q, k, v, dout, a1.expand(2, -1), k1.expand(2, -1), 8, 0, 0.3)
    for a, r in zip(ours, ref):
        assert rel_err(a, r) <= 1e-10


def test_gradcheck():
    q, k, v, _, anchors, keep = make_inputs(7, 2, 4, 4, 2, 8, torch.float64, "edges", batch=1)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, anchors, keep, 4, 0, None), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, anchors, keep, 4, 3, None), (q, k, v))


def test_noncontiguous_inputs_with_unit_head_stride():
    # [batch, H, T, D] storage viewed as [batch, T, H, D]: strided but head_dim contiguous.
    q, k, v, dout, anchors, keep = make_inputs(25, 3, 8, 4, 2, 32, torch.float64, "random")
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous()
    ours = run(op, qt, kt, vt, dout, anchors, keep, 8, 0, None)
    ref = run(dense_attention, q, k, v, dout, anchors, keep, 8, 0, None)
    for a, r in zip(ours, ref):
        assert rel_err(a, r) <= 1e-10


def test_deterministic_across_thread_counts():
    q, k, v, dout, anchors, keep = make_inputs(300, 16, 16, 4, 2, 64, torch.float32, "random")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(op, q, k, v, dout, anchors, keep, 16, 0, None)
        torch.set_num_threads(max(2, before))
        many = run(op, q, k, v, dout, anchors, keep, 16, 0, None)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, many):
        assert torch.equal(a, b)


def _expect_error(match, *args):
    with pytest.raises(RuntimeError, match=match):
        op(*args)


def test_clear_errors():
    q, k, v, _, anchors, keep = make_inputs(20, 3, 4, 4, 2, 16, torch.float32, "random", batch=1)
    _expect_error(r"q must be \[batch, N\*B, Hq, D\]", q[0], k, v, anchors, keep, 4, 0, None)
    _expect_error(r"v must have the shape of k", q, k, v[:, 1:], anchors, keep, 4, 0, None)
    _expect_error(r"q heads \(4\) must be a multiple of kv heads \(3\)",
                  q, torch.zeros(1, 32, 3, 16), torch.zeros(1, 32, 3, 16), anchors, keep, 4, 0, None)
    bad = anchors.clone()
    bad[0, 1] = 21
    _expect_error(r"anchors\[0, 1\] = 21 is outside \[0, S\] with context length S = 20", q, k, v, bad, keep, 4, 0, None)
    bad[0, 1] = -1
    _expect_error(r"anchors\[0, 1\] = -1", q, k, v, bad, keep, 4, 0, None)
    _expect_error(r"dtype must be float32, bfloat16 or float64, got Half",
                  q.half(), k.half(), v.half(), anchors, keep, 4, 0, None)
    _expect_error(r"share a dtype", q, k.double(), v, anchors, keep, 4, 0, None)
    _expect_error(r"not a multiple of block_size 5", q, k, v, anchors, keep, 5, 0, None)
    _expect_error(r"anchors must have dtype Long", q, k, v, anchors.int(), keep, 4, 0, None)
    _expect_error(r"keep must have shape \[3\] or \[1, 3\]", q, k, v, anchors, keep[:, :2], 4, 0, None)
    _expect_error(r"ctx_start must have dtype Long", q, k, v, anchors, keep, 4, 0, None, anchors.int())
    _expect_error(r"ctx_start\[0, 2\] = 21 is outside \[0, S\]", q, k, v, anchors, keep, 4, 0, None,
                  torch.tensor([[0, 0, 21]]))
    k_strided = k.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert k_strided.stride(3) != 1
    _expect_error(r"contiguous in head_dim", q, k_strided, v, anchors, keep, 4, 0, None)
    _expect_error(r"window must be >= 0", q, k, v, anchors, keep, 4, -1, None)
    big = torch.zeros(1, 12, 4, 600)
    _expect_error(r"head_dim must be in \[1, 512\]", big, torch.zeros(1, 32, 2, 600),
                  torch.zeros(1, 32, 2, 600), anchors, keep, 4, 0, None)
