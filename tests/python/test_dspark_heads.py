"""The C++ DSpark heads (src/families/dspark/dspark_heads) against the fp64 reference family_reference.py, through
build/dspark_probe: teacher-forced block logits of the three Markov variants and the confidence head (with and
without the Markov input), their gradients with respect to the hidden states and every head tensor, the
one-step inference form with the rnn state carried along, and the checkpoint names. Tiny shapes, seconds."""
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

import family_reference as fr

NAMES = {"w1": "markov_head.markov_w1.weight", "w2": "markov_head.markov_w2.weight",
         "gate_w": "markov_head.gate_proj.weight", "gate_b": "markov_head.gate_proj.bias",
         "joint_w": "markov_head.joint_proj.weight", "joint_b": "markov_head.joint_proj.bias",
         "conf_w": "confidence_head.proj.weight", "conf_b": "confidence_head.proj.bias"}


@pytest.fixture(scope="module")
def probe(dflash_bin):
    path = pathlib.Path(dflash_bin).parent / "dspark_probe"
    if not path.exists():
        pytest.fail(f"{path} not found: build the dspark_probe target")
    return str(path)


def run_probe(probe, tmp_path, op, tensors, **params):
    src, dst = tmp_path / f"{op}_in.safetensors", tmp_path / f"{op}_out.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(src))
    res = subprocess.run([probe, op, str(src), str(dst)] + [f"{k}={v}" for k, v in params.items()],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return load_file(str(dst))


def close(a, b, tol=1e-12):
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol * max(1.0, b.abs().max().item() if b.numel() else 1.0), err


def head_tensors(params, conf_w, conf_b):
    """The heads' tensors under DeepSpec's names (those the settings have)."""
    out = {}
    if params is not None:
        for k in ("w1", "w2", "gate_w", "gate_b", "joint_w", "joint_b"):
            if getattr(params, k) is not None:
                out[NAMES[k]] = getattr(params, k)
    if conf_w is not None:
        out[NAMES["conf_w"]], out[NAMES["conf_b"]] = conf_w, conf_b
    return out


CASES = [(t, r, conf, wm) for t in ("vanilla", "gated", "rnn") for r, conf, wm in ((4, True, True), (3, True, False), (5, False, True))]
CASES += [("vanilla", 0, True, True), ("vanilla", 0, True, False)]


@pytest.mark.parametrize("head_type,r,conf,with_markov", CASES)
def test_teacher_forced_heads_and_gradients_equal_the_reference(probe, tmp_path, head_type, r, conf, with_markov):
    g = torch.Generator().manual_seed(7 + r + len(head_type))
    n, B, d, V = 3, 4, 6, 11
    params = fr.random_markov_params(head_type, V, d, r, g) if r > 0 else None
    hidden = torch.randn(n, B, d, generator=g, dtype=torch.float64)
    prev = torch.randint(0, V, (n, B), generator=g)
    lm_head = torch.randn(V, d, generator=g, dtype=torch.float64)
    conf_w = torch.randn(1, d + (r if with_markov else 0), generator=g, dtype=torch.float64) if conf else None
    conf_b = torch.randn(1, generator=g, dtype=torch.float64) if conf else None
    gl = torch.randn(n, B, V, generator=g, dtype=torch.float64)
    gc = torch.randn(n, B, generator=g, dtype=torch.float64)
    heads = head_tensors(params, conf_w, conf_b)
    out = run_probe(probe, tmp_path, "heads", {"hidden": hidden, "prev": prev, "lm_head": lm_head, "gl": gl, "gc": gc,
                                               **heads},
                    rank=r, type=head_type, confidence=int(conf), with_markov=int(with_markov))

    leaves = {k: v.clone().requires_grad_(True) for k, v in heads.items()}
    h = hidden.clone().requires_grad_(True)
    p = None
    if params is not None:
        p = fr.MarkovParams(head_type, leaves[NAMES["w1"]], leaves[NAMES["w2"]],
                            leaves.get(NAMES["gate_w"]), leaves.get(NAMES["gate_b"]),
                            leaves.get(NAMES["joint_w"]), leaves.get(NAMES["joint_b"]))
    logits = fr.dspark_block_logits(h @ lm_head.T, prev, h, p)
    total = (logits * gl).sum()
    if conf:
        c = fr.dspark_confidence(h, prev, leaves[NAMES["conf_w"]], leaves[NAMES["conf_b"]], p, with_markov and r > 0)
        close(out["confidence"], c.detach())
        total = total + (c * gc).sum()
    else:
        assert "confidence" not in out
    total.backward()
    close(out["logits"], logits.detach())
    close(out["grad.hidden"], h.grad)
    assert sorted(k[5:] for k in out if k.startswith("grad.") and k != "grad.hidden") == sorted(heads)
    for name, leaf in leaves.items():
        close(out["grad." + name], leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))


@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_one_step_form_carries_the_state_like_the_reference(probe, tmp_path, head_type):
    g = torch.Generator().manual_seed(3)
    n, B, d, V, r = 2, 5, 6, 9, 4
    params = fr.random_markov_params(head_type, V, d, r, g)
    hidden = torch.randn(n, B, d, generator=g, dtype=torch.float64)
    prev = torch.randint(0, V, (n, B), generator=g)
    out = run_probe(probe, tmp_path, "step", {"hidden": hidden, "prev": prev, **head_tensors(params, None, None)},
                    rank=r, type=head_type, confidence=0)
    zero = torch.zeros(n, B, V, dtype=torch.float64)
    close(out["bias"], fr.dspark_block_logits(zero, prev, hidden, params))
    # and greedy drafting with these steps is DeepSpec's sequential draft (the reference's dspark_draft)
    for i in range(n):
        draft = fr.dspark_draft(zero[i], hidden[i], prev[i, 0], params)
        walked = fr.dspark_block_logits(zero[i], torch.cat([prev[i, :1], draft.tokens[:-1]]), hidden[i], params)
        close(draft.logits, walked)


def test_a_missing_head_tensor_is_named(probe, tmp_path):
    g = torch.Generator().manual_seed(1)
    params = fr.random_markov_params("gated", 9, 6, 4, g)
    tensors = head_tensors(params, None, None)
    del tensors[NAMES["gate_b"]]
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    save_file({"hidden": torch.zeros(1, 2, 6, dtype=torch.float64), "prev": torch.zeros(1, 2, dtype=torch.long),
               **tensors}, str(src))
    res = subprocess.run([probe, "step", str(src), str(dst), "rank=4", "type=gated", "confidence=0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "markov_head.gate_proj.bias" in res.stderr


# ---------------------------------------------------------------------------------------- the whole objective ----

@pytest.mark.parametrize("head_type,r,conf,with_markov,chunk_rows",
                         [("vanilla", 3, True, True, 5), ("gated", 2, True, False, 1024), ("rnn", 3, False, True, 3),
                          ("vanilla", 0, True, True, 7)])
def test_objective_labels_masks_loss_gradients_and_metrics_equal_the_reference(probe, tmp_path, head_type, r, conf,
                                                                               with_markov, chunk_rows):
    """build_dspark_block_batch + the heads + the chunked objective + the metric sums, against family_reference's
    dspark_targets / dspark_loss_weights / dspark_block_logits / dspark_loss_terms / dspark_train_metrics."""
    g = torch.Generator().manual_seed(21 + r)
    b, S, N, B, d, V, gamma = 2, 13, 4, 4, 6, 11, 4.0
    input_ids = torch.randint(0, V - 1, (b, S), generator=g)
    loss_mask = torch.ones(b, S, dtype=torch.bool)
    loss_mask[:, :3] = False          # a prompt
    loss_mask[0, 8] = False           # a hole: blocks across it stop there (the contiguous prefix)
    loss_mask[1, S - 2:] = False
    cand = fr.anchor_candidates(loss_mask)
    anchors = torch.zeros(b, N, dtype=torch.long)
    keep = torch.zeros(b, N, dtype=torch.bool)
    for s in range(b):
        valid = cand[s].nonzero().view(-1)
        pick = valid[torch.randperm(len(valid), generator=g)[:N - s]].sort().values   # row 1 has a padding block
        anchors[s, :len(pick)], keep[s, :len(pick)] = pick, True
    anchors[0, -1] = S - 2            # a block that runs off the end
    hidden = torch.randn(b, N * B, d, generator=g, dtype=torch.float64)
    last_hidden = torch.randn(b, S, d, generator=g, dtype=torch.float64)
    lm_head = torch.randn(V, d, generator=g, dtype=torch.float64)
    params = fr.random_markov_params(head_type, V, d, r, g) if r > 0 else None
    conf_w = torch.randn(1, d + (r if with_markov else 0), generator=g, dtype=torch.float64) if conf else None
    conf_b = torch.randn(1, generator=g, dtype=torch.float64) if conf else None
    heads = head_tensors(params, conf_w, conf_b)
    out = run_probe(probe, tmp_path, "objective",
                    {"input_ids": input_ids, "loss_mask": loss_mask.to(torch.uint8), "anchors": anchors,
                     "keep": keep.to(torch.uint8), "hidden": hidden, "last_hidden": last_hidden, "lm_head": lm_head,
                     **heads},
                    rank=r, type=head_type, confidence=int(conf), with_markov=int(with_markov), block_size=B,
                    gamma=gamma, mask_token_id=V - 1, chunk_rows=chunk_rows)

    t = fr.dspark_targets(input_ids, loss_mask, anchors, keep, B)
    w = fr.dspark_loss_weights(t.mask, gamma)
    assert t.mask.any() and not t.mask.all()
    torch.testing.assert_close(out["weights"].view(b, N, B), w, rtol=1e-15, atol=0)
    m = t.mask
    assert torch.equal(out["labels"].view(b, N, B)[m], t.labels[m])
    assert torch.equal(out["prev"].view(b, N, B)[m], t.prev[m])
    flat_teacher = t.teacher_index + torch.arange(b).view(b, 1, 1) * S
    assert torch.equal(out["teacher_index"].view(b, N, B)[m], flat_teacher[m])
    assert torch.equal(out["block_ids"].view(b, N, B)[..., 0], input_ids.gather(1, anchors))
    assert (out["block_ids"].view(b, N, B)[..., 1:] == V - 1).all()

    leaves = {k: v.clone().requires_grad_(True) for k, v in heads.items()}
    h = hidden.clone().requires_grad_(True)
    p = None
    if params is not None:
        p = fr.MarkovParams(head_type, leaves[NAMES["w1"]], leaves[NAMES["w2"]], leaves.get(NAMES["gate_w"]),
                            leaves.get(NAMES["gate_b"]), leaves.get(NAMES["joint_w"]), leaves.get(NAMES["joint_b"]))
    h4 = h.view(b, N, B, d)
    logits = fr.dspark_block_logits(h4 @ lm_head.T, t.prev, h4, p)
    teacher = torch.stack([last_hidden[s][t.teacher_index[s]] for s in range(b)]) @ lm_head.T
    c = (fr.dspark_confidence(h4, t.prev, leaves[NAMES["conf_w"]], leaves[NAMES["conf_b"]], p, with_markov and r > 0)
         if conf else None)
    terms = fr.dspark_loss_terms(logits, teacher, t.labels, w, c)
    loss = fr.dspark_loss(terms)
    loss.backward()
    close(out["loss"][0], loss.detach())
    close(out["grad.hidden"], h.grad, tol=1e-11)
    for name, leaf in leaves.items():
        close(out["grad." + name], leaf.grad if leaf.grad is not None else torch.zeros_like(leaf), tol=1e-11)
    metrics = fr.dspark_train_metrics(terms["accept"], m, keep, w, c.detach() if conf else None)
    # the logged terms are num / den without DeepSpec's epsilon (its metrics divide the all-reduced sums)
    with torch.no_grad():
        logged = fr.dspark_loss_terms(logits, teacher, t.labels, w, c, den_eps=0.0)
    metrics.update(ce_loss=float(logged["ce"]), l1_loss=float(logged["l1"]), confidence_loss=float(logged["confidence"]))
    got = {k[len("metric."):]: float(v[0]) for k, v in out.items() if k.startswith("metric.")}
    assert set(got) == set(metrics), (sorted(got), sorted(metrics))
    for k, v in metrics.items():
        assert abs(got[k] - v) <= 1e-12 * max(1.0, abs(v)) or (v != v and got[k] != got[k]), (k, got[k], v)
