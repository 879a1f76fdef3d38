"""torch.ops.dflash.anchor_block_attention_reference (LibTorch ops only) against the dense fp64 reference of the
docs/DFLASH.md mask, on every edge case the fused op's tests use (test_attention_op.py's cases and anchor patterns:
anchor 0, anchor S, duplicates, unsorted, dropped and all-dropped blocks, S < B, B = 1, windows, GQA groups,
packed rows with ctx_start, batch > 1, per-row and shared [N] anchors), with one block per tile and with the
default budget; gradcheck; the tile budget not changing results; fp32/bf16 accuracy; memory bounded by the
tile budget under autograd (no graph over tiles); the same errors as the fused op; and the Python package's
backend= argument.
"""
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest
import torch

import dflash
from attention_reference import dense_attention
from test_attention_op import (CASES, PACKED_CASES, PATTERNS, abs_err, make_inputs, make_packed, rel_err, run)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "cli_scripts"))
from memory import PeakMemory  # noqa: E402

ref_op = torch.ops.dflash.anchor_block_attention_reference
fused_op = torch.ops.dflash.anchor_block_attention
ONE_BLOCK = 1  # a tile budget of 1 byte: every tile holds exactly one block


def reference(tile_bytes):
    return lambda *args: ref_op(*args, tile_bytes=tile_bytes)


@pytest.mark.parametrize("tile_bytes", [0, ONE_BLOCK], ids=["default_tiles", "one_block_tiles"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "S{}_N{}_B{}_Hq{}_Hkv{}_D{}_W{}".format(*c))
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fp64_matches_dense_reference(case, pattern, tile_bytes):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, pattern)
    ours = run(reference(tile_bytes), q, k, v, dout, anchors, keep, B, W, None)
    want = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
    for name, a, r in zip(["out", "dq", "dk", "dv"], ours, want):
        assert rel_err(a, r) <= 1e-12, f"{name}: {rel_err(a, r):.3e}"


@pytest.mark.parametrize("case", [(12, 5, 1, 2, 1, 16, 0), (12, 5, 1, 2, 2, 16, 3), (0, 3, 4, 4, 2, 8, 0)],
                         ids=["B1", "B1_window", "no_context"])
def test_block_size_one_and_no_context(case):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, "edges")
    for tb in (0, ONE_BLOCK):
        ours = run(reference(tb), q, k, v, dout, anchors, keep, B, W, None)
        want = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
        for a, r in zip(ours, want):
            assert rel_err(a, r) <= 1e-12


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: "S{}_N{}_B{}_Hq{}_Hkv{}_D{}_W{}".format(*c))
def test_packed_rows_fp64_match_dense_reference(case):
    S, N, B, Hq, Hkv, D, W = case
    gen = torch.Generator().manual_seed(S + N)
    q, k, v, dout, _, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, seed=S)
    anchors, starts = make_packed(2, N, S, gen)
    want = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None, starts)
    for tb in (0, ONE_BLOCK):
        ours = run(reference(tb), q, k, v, dout, anchors, keep, B, W, None, starts)
        for name, a, r in zip(["out", "dq", "dk", "dv"], ours, want):
            assert rel_err(a, r) <= 1e-12, f"{name}: {rel_err(a, r):.3e}"


def test_arbitrary_ctx_start_and_shared_1d_anchors():
    S, N, B = 40, 5, 8
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, 4, 2, 16, torch.float64, "edges")
    starts = torch.randint(0, S + 1, (2, N), generator=torch.Generator().manual_seed(3))
    starts[:, 1] = S  # past the anchor: that block sees only its own keys
    ours = run(reference(0), q, k, v, dout, anchors, keep, B, 3, None, starts)
    want = run(dense_attention, q, k, v, dout, anchors, keep, B, 3, None, starts)
    for a, r in zip(ours, want):
        assert rel_err(a, r) <= 1e-12
    ours = run(reference(ONE_BLOCK), q, k, v, dout, anchors[0], keep[0], B, 0, 0.3, starts[0])
    want = run(dense_attention, q, k, v, dout, anchors[0].expand(2, -1), keep[0].expand(2, -1), B, 0, 0.3,
               starts[0].expand(2, -1))
    for a, r in zip(ours, want):
        assert rel_err(a, r) <= 1e-12


def test_dropped_blocks_output_zero_and_get_zero_gradients():
    S, N, B = 30, 4, 8
    q, k, v, dout, _, _ = make_inputs(S, N, B, 4, 2, 32, torch.float64, batch=1)
    keep = torch.tensor([[True, False, True, False]])
    anchors = torch.tensor([[5, 25, 12, 29]])  # the dropped blocks' anchors reach further than the kept ones
    out, dq, dk, dv = run(reference(ONE_BLOCK), q, k, v, dout, anchors, keep, B, 0, None)
    for blk in (1, 3):
        rows, own = slice(blk * B, (blk + 1) * B), slice(S + blk * B, S + (blk + 1) * B)
        assert out[0, rows].abs().max() == 0 and dq[0, rows].abs().max() == 0
        assert dk[0, own].abs().max() == 0 and dv[0, own].abs().max() == 0
    assert dk[0, 12:S].abs().max() == 0 and dv[0, 12:S].abs().max() == 0  # seen by no kept block
    assert dk[0, :12].abs().max() > 0
    all_dropped = run(reference(0), q, k, v, dout, anchors, torch.zeros_like(keep), B, 0, None)
    for t in all_dropped:
        assert t.abs().max() == 0


def test_gradcheck():
    q, k, v, _, anchors, keep = make_inputs(7, 2, 4, 4, 2, 8, torch.float64, "edges", batch=1)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    for window in (0, 3):
        assert torch.autograd.gradcheck(lambda q, k, v: ref_op(q, k, v, anchors, keep, 4, window, None, None,
                                                               ONE_BLOCK), (q, k, v))
    q2, k2, v2, _, _, keep2 = make_inputs(10, 3, 2, 2, 1, 4, torch.float64, batch=2)
    anchors2, starts = make_packed(2, 3, 10, torch.Generator().manual_seed(7))
    q2, k2, v2 = (t.requires_grad_() for t in (q2, k2, v2))
    assert torch.autograd.gradcheck(lambda q, k, v: ref_op(q, k, v, anchors2, keep2, 2, 2, None, starts), (q2, k2, v2))


def test_tile_budget_does_not_change_results():
    q, k, v, dout, anchors, keep = make_inputs(150, 12, 16, 4, 2, 32, torch.float64, "random")
    results = [run(reference(tb), q, k, v, dout, anchors, keep, 16, w, None)
               for w in (0, 40) for tb in (ONE_BLOCK, 1_200_000, 1 << 30)]  # 1, ~3, all blocks a tile
    for group in (results[:3], results[3:]):
        for other in group[1:]:
            for a, b in zip(group[0], other):
                assert rel_err(a, b) <= 1e-13


def test_matches_the_fused_op_in_fp32():
    q, k, v, dout, anchors, keep = make_inputs(200, 10, 16, 8, 2, 64, torch.float32, "edges")
    ours = run(reference(0), q, k, v, dout, anchors, keep, 16, 0, None)
    fused = run(fused_op, q, k, v, dout, anchors, keep, 16, 0, None)
    for a, b in zip(ours, fused):
        assert a.dtype == torch.float32 and rel_err(a, b.double()) <= 1e-5


@pytest.mark.parametrize("case", [CASES[2], CASES[4], CASES[6]], ids=["D128", "D256", "window"])
def test_fp32_and_bf16_against_dense_fp64(case):
    S, N, B, Hq, Hkv, D, W = case
    q, k, v, dout, anchors, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float64, "edges")
    want = run(dense_attention, q, k, v, dout, anchors, keep, B, W, None)
    ours = run(reference(0), *(t.float() for t in (q, k, v, dout)), anchors, keep, B, W, None)
    for name, a, r in zip(["out", "dq", "dk", "dv"], ours, want):
        assert a.dtype == torch.float32 and rel_err(a, r) <= 1e-5, name
    qb, kb, vb, db = (t.bfloat16() for t in (q, k, v, dout))
    want = run(dense_attention, *(t.double() for t in (qb, kb, vb, db)), anchors, keep, B, W, None)
    torch_bf16 = run(dense_attention, qb, kb, vb, db, anchors, keep, B, W, None)
    ours = run(reference(0), qb, kb, vb, db, anchors, keep, B, W, None)
    for name, a, t, r in zip(["out", "dq", "dk", "dv"], ours, torch_bf16, want):
        assert a.dtype == torch.bfloat16
        # Computed in fp32 and rounded once: no worse than PyTorch's own bf16 computation.
        assert abs_err(a, r) <= abs_err(t, r) + 1e-6, f"{name}: {abs_err(a, r):.3e} vs {abs_err(t, r):.3e}"


def test_peak_memory_is_bounded_by_the_tile_budget():
    """Scores of all 64 blocks against S = 4096 keys would be 64 x 16 x 8 x 4096 x 4 B = 134 MB per copy; under
    autograd the reference keeps none of them (only q, k, v, out and the LSE) and holds one tile at a time."""
    S, N, B, Hq, Hkv, D = 4096, 64, 16, 8, 2, 32
    q, k, v, dout, _, keep = make_inputs(S, N, B, Hq, Hkv, D, torch.float32, batch=1)
    anchors = torch.full((1, N), S)
    keep = torch.ones_like(keep)
    budget = 8 << 20
    run(reference(budget), q[:, :B], k[:, :S + B], v[:, :S + B], dout[:, :B], anchors[:, :1], keep[:, :1], B, 0, None)
    mem = PeakMemory("cpu")
    mem.reset()
    out, dq, dk, dv = run(reference(budget), q, k, v, dout, anchors, keep, B, 0, None)
    peak = mem.peak_extra_mb() * 2**20
    scores = N * B * Hq * S * 4
    tensors = 4 * q.numel() * 4 + 4 * k.numel() * 4  # out, dq, copies of q/dout; dk, dv and their accumulators
    assert out.abs().max() > 0 and dk.abs().max() > 0
    assert peak < budget + tensors + (16 << 20), f"peak {peak / 2**20:.1f} MB"
    assert peak < scores / 2


def test_errors_are_the_fused_ops():
    q, k, v, _, anchors, keep = make_inputs(20, 3, 4, 4, 2, 16, torch.float32, "random", batch=1)
    bad = anchors.clone()
    bad[0, 1] = 21
    cases = [
        ((q[0], k, v, anchors, keep, 4), r"q must be \[batch, N\*B, Hq, D\]"),
        ((q, k, v[:, 1:], anchors, keep, 4), r"v must have the shape of k"),
        ((q, torch.zeros(1, 32, 3, 16), torch.zeros(1, 32, 3, 16), anchors, keep, 4),
         r"q heads \(4\) must be a multiple of kv heads \(3\)"),
        ((q, k, v, bad, keep, 4), r"anchors\[0, 1\] = 21 is outside \[0, S\] with context length S = 20"),
        ((q, k, v, anchors, keep, 5), r"not a multiple of block_size 5"),
        ((q, k, v, anchors.int(), keep, 4), r"anchors must have dtype Long"),
        ((q, k, v, anchors, keep[:, :2], 4), r"keep must have shape \[3\] or \[1, 3\]"),
    ]
    for args, match in cases:
        with pytest.raises(RuntimeError, match=match):
            ref_op(*args)
        with pytest.raises(RuntimeError, match=match):
            fused_op(*args)
    with pytest.raises(RuntimeError, match=r"ctx_start\[0, 2\] = 21 is outside \[0, S\]"):
        ref_op(q, k, v, anchors, keep, 4, 0, None, torch.tensor([[0, 0, 21]]))


def test_runs_dtypes_the_fused_cpu_op_does_not():
    q, k, v, dout, anchors, keep = make_inputs(30, 3, 8, 4, 2, 16, torch.float64, "edges")
    want = run(dense_attention, *(t.half().double() for t in (q, k, v, dout)), anchors, keep, 8, 0, None)
    ours = run(reference(0), *(t.half() for t in (q, k, v, dout)), anchors, keep, 8, 0, None)
    for a, r in zip(ours, want):
        assert a.dtype == torch.float16 and rel_err(a, r) <= 2e-3


def test_package_backends_agree_and_bad_backend_is_a_value_error():
    q, k, v, dout, anchors, keep = make_inputs(40, 4, 8, 4, 2, 16, torch.float64, "edges")
    results = {}
    for backend in dflash.attention.BACKENDS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # fp64 on the CPU passes the check: no fallback warning
            results[backend] = run(lambda *a: dflash.anchor_block_attention(*a, backend=backend), q, k, v, dout,
                                   anchors, keep, 8, 0, None)
    for backend in ("fused", "reference"):
        for a, b in zip(results["auto"], results[backend]):
            assert rel_err(a, b) <= 1e-12
    qh, kh, vh, dh = (t.transpose(1, 2) for t in (q, k, v, dout))
    bhsd = run(lambda *a: dflash.anchor_block_attention_bhsd(*a, backend="reference"), qh, kh, vh, dh, anchors, keep,
               8, 0, None)
    assert rel_err(bhsd[0], results["auto"][0].transpose(1, 2)) <= 1e-12
    with pytest.raises(ValueError, match="backend must be auto, fused or reference, got 'flash'"):
        dflash.anchor_block_attention(q, k, v, anchors, keep, 8, backend="flash")


def test_package_auto_falls_back_where_the_fused_op_cannot_run():
    """fp16 has no fused CPU kernel: auto warns once and uses the reference, fused refuses with the reason."""
    q, k, v, dout, anchors, keep = make_inputs(30, 3, 8, 4, 2, 16, torch.float64, "edges")
    qh, kh, vh = (t.half() for t in (q, k, v))
    with pytest.warns(RuntimeWarning, match=r"attention: cpu: the fused op failed its self-check \(cpu fp16.*"
                                            r"dtype must be float32, bfloat16 or float64.*falling back to the reference"):
        out = dflash.anchor_block_attention(qh, kh, vh, anchors, keep, 8, window=2)
    assert rel_err(out, ref_op(qh, kh, vh, anchors, keep, 8, 2)) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decided once per shape kind: no second warning
        dflash.anchor_block_attention(qh, kh, vh, anchors, keep, 8, window=2)
    with pytest.raises(RuntimeError, match=r"backend fused: .*cpu fp16.*use backend auto .* or reference"):
        dflash.anchor_block_attention(qh, kh, vh, anchors, keep, 8, window=2, backend="fused")
    assert math.isfinite(out.double().sum().item())


FAULT_SCRIPT = """
import json, warnings, torch, dflash
g = torch.Generator().manual_seed(0)
q = torch.randn(1, 32, 4, 16, generator=g).requires_grad_()
k = torch.randn(1, 96, 2, 16, generator=g).requires_grad_()
v = torch.randn(1, 96, 2, 16, generator=g).requires_grad_()
anchors, keep = torch.tensor([0, 64]), torch.tensor([True, True])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = dflash.anchor_block_attention(q, k, v, anchors, keep, 16)
ref = torch.ops.dflash.anchor_block_attention_reference(q, k, v, anchors, keep, 16)
raw = torch.ops.dflash.anchor_block_attention(q.detach(), k.detach(), v.detach(), anchors, keep, 16) \\
    if "throw" not in str(caught and caught[0].message) else None
try:
    dflash.anchor_block_attention(q, k, v, anchors, keep, 16, backend="fused")
    fused = "ran"
except RuntimeError as e:
    fused = str(e)
print(json.dumps({"warnings": [str(w.message) for w in caught], "is_reference": torch.equal(out, ref),
                  "raw_over_ref": None if raw is None else (raw / ref.detach()).nanmean().item(), "fused": fused}))
"""


@pytest.mark.parametrize("fault", ["", "attention_wrong", "attention_throw"])
def test_fault_injection_makes_auto_fall_back_and_fused_refuse(fault):
    """DFLASH_FAULT_INJECT (test only): a fused op returning wrong numbers or throwing is caught by the self-check."""
    root = pathlib.Path(__file__).resolve().parents[2]
    from conftest import BUILD
    env = dict(os.environ, DFLASH_FAULT_INJECT=fault, DFLASH_OPS_LIBRARY=str(BUILD / "libdflash_ops.so"),
               PYTHONPATH=str(root / "python"))
    r = subprocess.run([sys.executable, "-c", FAULT_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if not fault:
        assert got["warnings"] == [] and got["fused"] == "ran" and not got["is_reference"]
        assert abs(got["raw_over_ref"] - 1) < 1e-4
        return
    assert got["is_reference"], got
    assert len(got["warnings"]) == 1, got
    line = got["warnings"][0]
    assert line.startswith("attention: cpu: the fused op failed its self-check (cpu fp32, S 256, Hq 4, Hkv 2, D 16, "
                           "B 16, window 0, forward+backward: "), line
    assert line.endswith("falling back to the reference attention on cpu"), line
    assert "backend fused: attention: cpu: the fused op failed its self-check" in got["fused"], got["fused"]
    if fault == "attention_wrong":
        assert re.search(r"out max error \S+ > tolerance \S+", line), line
        assert abs(got["raw_over_ref"] - 1.125) < 1e-4  # the injection itself
    else:
        assert "threw: anchor_block_attention: injected failure (DFLASH_FAULT_INJECT=attention_throw, test only)" in line
