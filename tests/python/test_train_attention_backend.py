"""`attention_backend: auto | fused | reference` in `dflash train` on the tiny random Llama target of
test_train.py: auto keeps the fused op when it passes its self-check (one line, a metrics.jsonl event); with the
test-only fault injection (DFLASH_FAULT_INJECT: the fused op returns wrong numbers, or throws) auto prints one
fallback line naming the device and the figures, records it in metrics.jsonl, and finishes with the losses of a
run with attention_backend reference; fused refuses; reference runs without a check; the check covers packed
rows and every distinct window, once per device. The loss's fused CPU cross-entropy kernel is checked the same
way and falls back to the generic path."""
import json

import pytest

from test_train import base_args, events, metrics, offline_dir, target_dir, train  # noqa: F401

FALLBACK = "falling back to the reference attention on cpu"


def run_with(dflash_bin, target_dir, offline_dir, out, backend, fault="", check=True, pack=False, **kw):
    argv = base_args(target_dir[0], offline_dir[0], out, attention_backend=backend, **kw) + (["--pack"] if pack else [])
    return train(dflash_bin, argv, env={"DFLASH_FAULT_INJECT": fault}, check=check)


def attention_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("attention: ")]


@pytest.fixture(scope="module")
def reference_losses(dflash_bin, target_dir, offline_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "run"
    r = run_with(dflash_bin, target_dir, offline_dir, out, "reference")
    assert attention_lines(r.stderr) == ["attention: cpu: reference (attention_backend reference, no self-check)"]
    ev = events(out, "attention_backend")
    assert len(ev) == 1 and ev[0]["backend"] == "reference" and ev[0]["checks"] == [] and ev[0]["step"] == 0
    return [x["loss"] for x in metrics(out)]


def test_auto_keeps_the_fused_op_when_it_passes(dflash_bin, target_dir, offline_dir, tmp_path, reference_losses):
    auto, fused = tmp_path / "auto", tmp_path / "fused"
    r = run_with(dflash_bin, target_dir, offline_dir, auto, "auto")
    lines = attention_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("attention: cpu: fused (self-check against the reference passed: "), lines
    assert FALLBACK not in r.stderr
    ev = events(auto, "attention_backend")
    assert len(ev) == 1 and ev[0]["requested"] == "auto" and ev[0]["backend"] == "fused" and not ev[0]["fell_back"]
    check = ev[0]["checks"][0]
    assert check["passed"] and check["shape"].startswith("cpu fp32, S 64, Hq ")  # the run's max_len and dtype
    assert [t["name"] for t in check["tensors"]] == ["out", "dq", "dk", "dv"]
    assert all(t["error"] <= t["tolerance"] for t in check["tensors"])
    run_with(dflash_bin, target_dir, offline_dir, fused, "fused")
    a, f = [x["loss"] for x in metrics(auto)], [x["loss"] for x in metrics(fused)]
    assert a == f  # auto kept the very same kernels
    # Two implementations of one attention: equal to fp32 rounding (bitwise on some CPUs' kernels, which is fine).
    assert a == pytest.approx(reference_losses, rel=1e-5)


@pytest.mark.parametrize("fault,figure", [("attention_wrong", r"out max error"), ("attention_throw", "threw: ")])
def test_auto_falls_back_on_a_broken_fused_op(dflash_bin, target_dir, offline_dir, tmp_path, reference_losses,
                                               fault, figure):
    out = tmp_path / "run"
    r = run_with(dflash_bin, target_dir, offline_dir, out, "auto", fault=fault)
    fallback = [l for l in r.stderr.splitlines() if FALLBACK in l]
    assert len(fallback) == 1, r.stderr
    assert fallback[0].startswith("attention: cpu: the fused op failed its self-check (cpu fp32, S 64, "), fallback
    assert figure in fallback[0], fallback
    ev = events(out, "attention_backend")
    assert len(ev) == 1 and ev[0]["backend"] == "reference" and ev[0]["fell_back"] and ev[0]["line"] == fallback[0]
    assert not ev[0]["checks"][0]["passed"]
    if fault == "attention_throw":
        assert "injected failure" in ev[0]["checks"][0]["exception"]
    else:
        out_check = ev[0]["checks"][0]["tensors"][0]
        assert out_check["name"] == "out" and out_check["error"] > out_check["tolerance"]
    # The run finished on the reference: the losses of a run that asked for it.
    assert [x["loss"] for x in metrics(out)] == reference_losses


def test_fused_refuses_a_broken_fused_op(dflash_bin, target_dir, offline_dir, tmp_path):
    r = run_with(dflash_bin, target_dir, offline_dir, tmp_path / "run", "fused", fault="attention_wrong", check=False)
    assert r.returncode == 1, r.stderr
    assert ("attention_backend fused: the fused attention failed its self-check against the reference on cpu (cpu fp32, "
            "S 64") in r.stderr, r.stderr
    assert "use attention_backend auto (falls back to the reference) or reference" in r.stderr
    assert not (tmp_path / "run").exists()  # refused before the run folder is written (issue 36)


def test_check_covers_packed_rows_windows_once_per_device(dflash_bin, target_dir, offline_dir, tmp_path):
    first = tmp_path / "first"
    run_with(dflash_bin, target_dir, offline_dir, first, "reference", steps=1)
    cfg = json.loads((first / "drafter_config.json").read_text())
    cfg.update(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    (tmp_path / "drafter.json").write_text(json.dumps(cfg))
    out = tmp_path / "run"
    r = run_with(dflash_bin, target_dir, offline_dir, out, "auto", pack=True, drafter_devices="cpu,cpu",
                 batch_size=2, drafter_config=tmp_path / "drafter.json")
    assert len(attention_lines(r.stderr)) == 1, r.stderr  # two workers, one device
    ev = events(out, "attention_backend")
    assert len(ev) == 1 and ev[0]["device"] == "cpu" and ev[0]["backend"] == "fused"
    shapes = [c["shape"] for c in ev[0]["checks"]]
    assert [", window 0, packed, " in s for s in shapes] == [True, False], shapes
    assert [", window 8, packed, " in s for s in shapes] == [False, True], shapes


def test_loss_kernel_is_checked_and_falls_back_to_the_generic_path(dflash_bin, target_dir, offline_dir, tmp_path):
    """The loss's fused CPU cross-entropy kernel gets the same treatment: checked before step 1 against the generic
    path; wrong numbers (test-only fault) make every worker use the generic path, with one line and an event."""
    good, broken = tmp_path / "good", tmp_path / "broken"
    r = run_with(dflash_bin, target_dir, offline_dir, good, "auto")
    assert "loss: cpu:" not in r.stderr
    ev = events(good, "loss_kernel")
    assert len(ev) == 1 and ev[0]["passed"] and ev[0]["kernel"] == "fused"
    assert ev[0]["shape"] == "cpu fp32, H 32, V 256, 32 rows"
    r = run_with(dflash_bin, target_dir, offline_dir, broken, "auto", fault="cross_entropy_wrong")
    lines = [l for l in r.stderr.splitlines() if l.startswith("loss: cpu:")]
    assert lines == [l for l in r.stderr.splitlines() if "falling back to the generic cross-entropy" in l]
    assert len(lines) == 1 and "the fused cross-entropy kernel failed its self-check (cpu fp32, H 32, V 256, 32 rows: " \
                               "loss max error" in lines[0], r.stderr
    ev = events(broken, "loss_kernel")
    assert len(ev) == 1 and not ev[0]["passed"] and ev[0]["kernel"] == "generic"
    assert events(broken, "attention_backend")[0]["backend"] == "fused"  # the attention is not affected
    # The generic path computes the same loss (to fp32 rounding); the broken kernel would scale it by 9/8.
    assert [x["loss"] for x in metrics(broken)] == pytest.approx([x["loss"] for x in metrics(good)], rel=1e-5)
