"""Bad arguments to the Python package (issue 36, class 8): every public function of dflash and dflash.integrations
refuses them with a TypeError / ValueError naming the function, the argument, what was expected and what it got,
before torch.ops.dflash sees them. Tensors on another device are simulated with the meta device (no GPU needed);
the ops themselves also name a tensor on another device instead of torch's "no kernel registered".
"""
import math

import pytest
import torch

import dflash
import dflash.integrations as di

S, N, B, H, D = 8, 2, 4, 2, 8


def attention_args():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, N * B, H, D, generator=g)
    k = torch.randn(1, S + N * B, 1, D, generator=g)
    v = torch.randn(1, S + N * B, 1, D, generator=g)
    return dict(q=q, k=k, v=v, anchors=torch.tensor([[3, S]]), keep=torch.tensor([[True, True]]), block_size=B)


def call(fn, **over):
    a = attention_args()
    a.update(over)
    return fn(a.pop("q"), a.pop("k"), a.pop("v"), a.pop("anchors"), a.pop("keep"), a.pop("block_size"), **a)


def meta(t):
    return t.to("meta")


@pytest.mark.parametrize("backend", ["auto", "fused", "reference"])
@pytest.mark.parametrize("name", ["q", "k", "v", "anchors", "keep", "ctx_start"])
def test_a_tensor_on_another_device_is_named(backend, name):
    a = attention_args()
    over = {name: meta(a[name]) if name != "ctx_start" else torch.zeros(1, N, dtype=torch.long, device="meta")}
    want = f"{name} is on meta but q is on cpu" if name != "q" else "k is on cpu but q is on meta"
    with pytest.raises(ValueError, match=f"anchor_block_attention: {want}; every tensor argument must be on one device"):
        call(dflash.anchor_block_attention, backend=backend, **over)


def test_every_tensor_on_meta_is_refused_by_name_of_the_device():
    a = attention_args()
    over = {n: meta(a[n]) for n in ("q", "k", "v", "anchors", "keep")}
    with pytest.raises(ValueError, match=r"the tensors are on the meta device \(no data\), expected a cpu or cuda"):
        call(dflash.anchor_block_attention, **over)
    with pytest.raises(ValueError, match="the meta device"):
        call(dflash.anchor_block_attention, backend="reference", **over)


def test_the_ops_name_a_tensor_on_another_device_too():
    # The C++ ops check devices before dispatching (the dispatcher would pick a Meta kernel that does not exist).
    for op, name in ((torch.ops.dflash.anchor_block_attention, "anchor_block_attention"),
                     (torch.ops.dflash.anchor_block_attention_reference, "anchor_block_attention_reference")):
        a = attention_args()
        with pytest.raises(RuntimeError, match=f"{name}: anchors is on meta but q is on cpu"):
            op(a["q"], a["k"], a["v"], meta(a["anchors"]), a["keep"], B)
        with pytest.raises(RuntimeError, match=f"{name}: v is on meta but q is on cpu"):
            op(a["q"], a["k"], meta(a["v"]), a["anchors"], a["keep"], B)
    h, w = torch.randn(4, 8), torch.randn(16, 8)
    with pytest.raises(ValueError, match="chunked_lm_loss: labels is on meta but hidden is on cpu"):
        torch.ops.dflash.chunked_lm_loss(h, w, torch.zeros(4, dtype=torch.long, device="meta"), torch.ones(4))


@pytest.mark.parametrize("over,error,match", [
    (dict(block_size=0), ValueError, "block_size must be >= 1, got 0"),
    (dict(block_size=-4), ValueError, "block_size must be >= 1, got -4"),
    (dict(block_size=4.0), TypeError, "block_size must be an int, got float 4.0"),
    (dict(block_size=True), TypeError, "block_size must be an int, got bool"),
    (dict(window=-1), ValueError, "window must be >= 0, got -1"),
    (dict(window="3"), TypeError, "window must be an int, got str"),
    (dict(q=[1.0]), TypeError, "q must be a torch.Tensor, got list"),
    (dict(anchors=torch.tensor([[3, S]], dtype=torch.int32)), TypeError, "anchors must have dtype torch.int64, got torch.int32"),
    (dict(keep=torch.tensor([[1.0, 1.0]])), TypeError, "keep must have dtype torch.bool, got torch.float32"),
    (dict(ctx_start=torch.zeros(1, N)), TypeError, "ctx_start must have dtype torch.int64, got torch.float32"),
    (dict(q=torch.zeros(1, N * B, H, D, dtype=torch.int32)), TypeError, "q must have a floating dtype, got torch.int32"),
    (dict(k=torch.zeros(1, S + N * B, 1, D, dtype=torch.float64)), TypeError, "q, k, v must share a dtype"),
    (dict(q=torch.zeros(N * B, H, D)), ValueError, r"q must be \[batch, N\*B, Hq, D\], got shape \[8, 2, 8\]"),
    (dict(v=torch.zeros(1, S + N * B, 2, D)), ValueError, r"v must be the shape of k \[1, 16, 1, 8\], got shape"),
    (dict(block_size=3), ValueError, "q has 8 tokens, not a multiple of block_size 3"),
    (dict(keep=torch.tensor([[True, True, True]])), ValueError, r"keep must be \[2\] or \[1, 2\]"),
    (dict(backend="flash"), ValueError, "backend must be auto, fused or reference, got 'flash'"),
])
def test_attention_arguments_are_checked_by_name(over, error, match):
    with pytest.raises(error, match="anchor_block_attention: " + match):
        call(dflash.anchor_block_attention, **over)


def test_bhsd_layout_names_its_arguments():
    a = attention_args()
    q, k, v = (a[n].transpose(1, 2) for n in ("q", "k", "v"))
    with pytest.raises(TypeError, match="anchor_block_attention_bhsd: k must be a torch.Tensor, got NoneType"):
        dflash.anchor_block_attention_bhsd(q, None, v, a["anchors"], a["keep"], B)
    with pytest.raises(ValueError, match="anchor_block_attention: anchors is on meta"):
        dflash.anchor_block_attention_bhsd(q, k, v, meta(a["anchors"]), a["keep"], B)
    # The good call still runs and equals the [b, s, h, d] layout.
    want = dflash.anchor_block_attention(a["q"], a["k"], a["v"], a["anchors"], a["keep"], B, backend="reference")
    got = dflash.anchor_block_attention_bhsd(q, k, v, a["anchors"], a["keep"], B, backend="reference")
    assert want.abs().max() > 0 and torch.equal(got.transpose(1, 2), want)


def loss_args():
    g = torch.Generator().manual_seed(1)
    return dict(hidden=torch.randn(2, 3, 8, generator=g), lm_head_weight=torch.randn(16, 8, generator=g),
                labels=torch.randint(0, 16, (2, 3), generator=g), weights=torch.ones(2, 3))


@pytest.mark.parametrize("over,error,match", [
    (dict(labels=torch.zeros(2, 3, dtype=torch.int32)), ValueError, r"labels must have dtype Long \(int64\), got Int"),
    (dict(weights=torch.ones(2, 3, dtype=torch.long)), ValueError, "weights must be floating-point, got Long"),
    (dict(lm_head_weight=torch.randn(16, 8, dtype=torch.float64)), ValueError,
     "hidden must be floating-point and lm_head of its dtype, got Float and Double"),
    (dict(hidden=torch.zeros(2, 3, 8, dtype=torch.long), lm_head_weight=torch.zeros(16, 8, dtype=torch.long)),
     ValueError, "hidden must be floating-point and lm_head of its dtype, got Long and Long"),
    (dict(lm_head_weight=torch.randn(16, 7)), ValueError, r"hidden \[R, H\] and lm_head \[V, H\] must share H"),
    (dict(weights=torch.ones(5)), ValueError, "labels and weights need one entry per hidden row"),
    (dict(labels=torch.zeros(2, 3, dtype=torch.long, device="meta")), ValueError,
     "labels is on meta but hidden is on cpu; every tensor argument must be on one device"),
    (dict(hidden=torch.randn(2, 3, 8, device="meta")), ValueError, "lm_head is on cpu but hidden is on meta"),
    (dict(chunk_rows=0), ValueError, "chunk_rows must be positive"),
    (dict(chunk_rows=2.5), TypeError, "chunk_rows must be an int, got float"),
    (dict(kl_weight=float("nan")), ValueError, r"kl_weight must be a finite number in \[0, 1\], got nan"),  # used to pass
    (dict(kl_weight="0.5"), TypeError, "kl_weight must be a float, got str"),
    (dict(hidden=None), TypeError, "hidden must be a torch.Tensor, got NoneType"),
])
def test_loss_arguments_are_checked_by_name(over, error, match):
    a = loss_args()
    a.update(over)
    with pytest.raises(error, match="chunked_lm_loss: " + match):
        dflash.chunked_lm_loss(a.pop("hidden"), a.pop("lm_head_weight"), a.pop("labels"), a.pop("weights"), **a)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(block_size=0), ValueError, "block_size must be >= 1, got 0"),
    (dict(block_size=2.0), TypeError, "block_size must be an int, got float"),
    (dict(seq_len=-1), ValueError, "seq_len must be >= 0, got -1"),
    (dict(seq_len=8.5), TypeError, "seq_len must be an int, got float"),
    (dict(block_keep_mask=torch.tensor([[0.5, 1.0]])), TypeError,
     "block_keep_mask must be bool or integer 0/1, got torch.float32"),
    (dict(block_keep_mask=torch.tensor([[2, 1]])), ValueError, r"block_keep_mask must hold only 0 and 1, got \[2\]"),
])
def test_block_mask_arguments(kwargs, error, match):
    a = dict(anchor_positions=torch.tensor([[3, S]]), block_keep_mask=None, block_size=B, seq_len=S)
    a.update(kwargs)
    with pytest.raises(error, match="block_mask_args: " + match):
        di.block_mask(**a)  # the integration's entry point
    with pytest.raises(error, match="block_mask_args: " + match):
        dflash.block_mask_args(**a)


def test_block_mask_from_dense_sizes():
    m = dflash.block_mask_args(torch.tensor([[3, S]]), None, B, S)
    dense = m.dense_mask(1)
    assert torch.equal(di.block_mask_from_dense(dense, B).dense_mask(1), dense)
    for bs, error, match in ((0, ValueError, "block_size must be >= 1, got 0"),  # used to be ZeroDivisionError
                             (-4, ValueError, "block_size must be >= 1, got -4"),  # used to be a reshape error
                             (4.0, TypeError, "block_size must be an int, got float")):
        with pytest.raises(error, match="block_mask_from_dense: " + match):
            di.block_mask_from_dense(dense, bs)
    with pytest.raises(ValueError, match="block_mask_from_dense: window must be >= 0, got -2"):
        di.block_mask_from_dense(dense, B, -2)
    with pytest.raises(TypeError, match="block_mask_from_dense: mask must be a torch.Tensor, got list"):
        di.block_mask_from_dense([[True]], B)


class _Config:
    def __init__(self, block_size):
        self.block_size = block_size


class _Module(torch.nn.Module):
    def __init__(self, block_size=B):
        super().__init__()
        self.config = _Config(block_size)


def forward_args(batch=1):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(batch, H, N * B, D, generator=g, dtype=torch.float64)
    k = torch.randn(batch, 1, S + N * B, D, generator=g, dtype=torch.float64)
    v = torch.randn(batch, 1, S + N * B, D, generator=g, dtype=torch.float64)
    return q, k, v


def test_the_attention_function_checks_the_mask_against_query_and_key():
    q, k, v = forward_args()
    m = dflash.block_mask_args(torch.tensor([[3, S]]), None, B, S)
    out, _ = di.anchor_block_attention_forward(_Module(), q, k, v, m)  # the good call
    assert out.shape == (1, N * B, H, D) and out.abs().max() > 0
    dense = m.dense_mask(1)[:, None]
    got, _ = di.anchor_block_attention_forward(_Module(), q, k, v, dense)
    assert torch.equal(got, out)
    cases = [
        # A dense mask of another sequence length: used to be read as another S and attend to the wrong keys.
        ((_Module(), q, k, v, dense[..., 2:]), ValueError,
         r"a dense attention_mask must be \[1, 8, 16\] or \[1, 1, 8, 16\] .*got shape \[1, 1, 8, 14\]"),
        ((_Module(), q, k, v, dflash.block_mask_args(torch.tensor([[3, 6]]), None, B, 6)), ValueError,
         r"attention_mask is for 2 blocks of 4 after S = 6 context keys .* but query has 8 rows and key has 16 keys"),
        ((_Module(), q, k, v, dflash.block_mask_args(torch.tensor([[3, 3, 3, 3]]), None, 2, 8)), ValueError,
         "attention_mask has block_size 2 but the module's config says 4"),
        ((_Module(0), q, k, v, dense), ValueError, "the module's config.block_size must be >= 1, got 0"),
        ((_Module(-4), q, k, v, dense), ValueError, "the module's config.block_size must be >= 1, got -4"),
        ((_Module(), q, k, v, dense.float()), ValueError, "expected a boolean mask"),
        ((_Module(), q[0], k, v, m), ValueError, r"query must be \[batch, heads, seq, head_dim\], got shape"),
        ((_Module(), q, "k", v, m), TypeError, "key must be a torch.Tensor, got str"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            di.anchor_block_attention_forward(*args)
    with pytest.raises(ValueError, match="sliding_window must be >= 0, got -1"):
        di.anchor_block_attention_forward(_Module(), q, k, v, m, sliding_window=-1)
    with pytest.raises(ValueError, match="anchor_block_mask has anchors for batch 1 but query has batch 2"):
        di.anchor_block_attention_forward(_Module(), *forward_args(2), None, anchor_block_mask=m)
    with pytest.raises(ValueError, match="anchor_block_attention: anchors is on meta but q is on cpu"):
        di.anchor_block_attention_forward(_Module(), q, k, v, dataclass_replace_anchors(m, meta(m.anchors)))


def dataclass_replace_anchors(m, anchors):
    import dataclasses
    return dataclasses.replace(m, anchors=anchors)


def test_register_and_helpers():
    with pytest.raises(TypeError, match="register: name must be a non-empty str, got int 3"):
        di.register(3)
    with pytest.raises(TypeError, match="register: name must be a non-empty str"):
        di.register("")
    with pytest.raises(ValueError, match="default_gamma: block_size must be >= 1, got 0"):
        dflash.default_gamma(0)
    assert dflash.default_gamma(16) == 7.0


def test_block_targets_arguments():
    m = dflash.block_mask_args(torch.tensor([[3, S]]), None, B, S)
    ids, mask = torch.arange(S).unsqueeze(0), torch.ones(1, S, dtype=torch.long)
    t = dflash.block_targets(ids, mask, m, 5)
    assert t.labels.shape == (1, N * B)
    cases = [
        ((ids.float(), mask, m, 5), TypeError, "input_ids must have an integer dtype, got torch.float32"),
        ((ids, mask * 2, m, 5), ValueError, "loss_mask must hold only 0 and 1"),
        ((ids, mask, "m", 5), TypeError, "args must be the BlockMaskArgs of dflash.block_mask_args"),
        ((ids, mask, m, -1), ValueError, "mask_token_id must be >= 0, got -1"),
        ((ids, mask, m, 5.0), TypeError, "mask_token_id must be an int, got float"),
        ((ids.to("meta"), mask, m, 5), ValueError, "loss_mask is on cpu but input_ids is on meta"),
        ((torch.cat([ids, ids]), torch.cat([mask, mask]), m, 5), ValueError,
         "input_ids has batch 2 but the mask args' anchors have 1 rows"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match="block_targets: " + match):
            dflash.block_targets(*args)
    with pytest.raises(TypeError, match="block_targets: gamma must be a float or None, got str"):
        dflash.block_targets(ids, mask, m, 5, gamma="7")
    assert dflash.block_targets(ids, mask, m, 5, gamma=math.inf).weights.max() == 1
