"""`dflash plot` on tiny trained runs of the two families (the tiny random Llama target of test_train.py): the
family's PNGs are written, are valid non-empty images with something drawn, and every series they draw (`--json`)
is exactly what metrics.jsonl logged for that key; a DFlash run gets none of the family plots."""
import json
import math
import subprocess

import pytest

from test_train import base_args, make_token_samples, metrics, offline_dir, target_dir, train  # noqa: F401

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DSPARK_PNGS = {"dspark_accept_rate.png", "dspark_tau.png", "dspark_losses.png", "dspark_confidence.png"}
DFLASH2_PNGS = {"dflash2_recall.png", "dflash2_selector_acc.png", "dflash2_selector_loss.png",
                "dflash2_accepted_length.png"}


def plot(dflash_bin, run, tmp_path):
    data = tmp_path / "plotted.json"
    r = subprocess.run([dflash_bin, "plot", str(run), "--json", str(data)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(data.read_text()), r.stdout


def check_png(path):
    mpimg = pytest.importorskip("matplotlib.image")
    raw = path.read_bytes()
    assert raw[:8] == PNG_MAGIC and raw[12:16] == b"IHDR" and len(raw) > 1000, path
    width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    pixels = mpimg.imread(path)
    assert pixels.shape[:2] == (height, width) and width > 100 and height > 100
    assert pixels.reshape(-1, pixels.shape[-1]).std(0).max() > 0.01  # not a blank canvas


def check_series_are_the_logged_metrics(plotted, run, names):
    logged = metrics(run)
    for name in names:
        assert plotted[name]["series"], name
        for key, s in plotted[name]["series"].items():
            want = [(m["step"], m[key]) for m in logged if m.get(key) is not None]
            assert want, (name, key)
            assert list(zip(s["steps"], s["values"])) == want, (name, key)
            assert all(math.isfinite(v) for v in s["values"])


def test_plot_draws_the_dspark_metrics(dflash_bin, target_dir, tmp_path):
    pytest.importorskip("matplotlib")
    samples = make_token_samples(n=4, seed=5)
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                          "loss_mask": s["loss_mask"].long().tolist()}) + "\n" for s in samples))
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], tokens, run, steps=3, drafter_family="dspark", markov_rank=8))
    plotted, stdout = plot(dflash_bin, run, tmp_path)
    assert DSPARK_PNGS <= set(plotted) and not DFLASH2_PNGS & set(plotted)
    for name in DSPARK_PNGS:
        check_png(run / name)
        assert str(run / name) in stdout
    check_series_are_the_logged_metrics(plotted, run, DSPARK_PNGS | {"loss.png"})
    assert set(plotted["dspark_accept_rate.png"]["series"]) == {f"accept_rate@{j}" for j in range(4)}
    assert set(plotted["dspark_losses.png"]["series"]) == {"ce_loss", "l1_loss", "confidence_loss"}
    assert set(plotted["dspark_confidence.png"]["series"]) == {"confidence_abs_error", "confidence_bias",
                                                               "confidence_cumprod_bias"}


def test_plot_draws_the_dflash2_metrics(dflash_bin, target_dir, offline_dir, tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=3, drafter_family="dflash2",
                                conv_group_size=8, selector_rank=4, selector_top_k=8,
                                selector_candidates="inject", lr=1e-2))
    plotted, _ = plot(dflash_bin, run, tmp_path)
    assert DFLASH2_PNGS <= set(plotted) and not DSPARK_PNGS & set(plotted)
    for name in DFLASH2_PNGS:
        check_png(run / name)
    check_series_are_the_logged_metrics(plotted, run, DFLASH2_PNGS)
    lengths = set(plotted["dflash2_accepted_length.png"]["series"])
    assert lengths == {"self_conditioned_path_accepted_length", "unary_path_accepted_length",
                       "unary_top_k_oracle_accepted_length"}
    for m in metrics(run):  # block 4: 1 + at most 3 slots; neither path beats the top-K oracle
        assert 1 <= m["unary_path_accepted_length"] <= m["unary_top_k_oracle_accepted_length"] <= 4
        assert 1 <= m["self_conditioned_path_accepted_length"] <= m["unary_top_k_oracle_accepted_length"]
    # step 1 runs the initialised selector (successor codebook 0: scores == unary logits), so its walk is the
    # unary argmax path exactly
    first = metrics(run)[0]
    assert first["self_conditioned_path_accepted_length"] == first["unary_path_accepted_length"]


def test_a_dflash_run_gets_no_family_plots(dflash_bin, target_dir, offline_dir, tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=2))
    plotted, _ = plot(dflash_bin, run, tmp_path)
    assert set(plotted) == {"loss.png", "accuracy.png"}
    assert not any((run / n).exists() for n in DSPARK_PNGS | DFLASH2_PNGS)
    check_series_are_the_logged_metrics(plotted, run, {"loss.png"})
    acc = plotted["accuracy.png"]["series"]
    assert acc["slot 1"]["values"] == [m["slot_acc"][1] for m in metrics(run)]
