"""`dflash data regenerate --hidden-out`: the drafter's features kept from the generating pass equal transformers'
hidden_states[id + 1] of the written sample (rounded to bf16), for every position; two shard processes share one
folder and the trainer reads it as one dataset (same losses as online training on the JSONL); a run that lost
features (a crash before a shard was listed, or a JSONL written without --hidden-out) recomputes exactly the
missing ones on resume; other feature settings on resume and a damaged index are refused."""
import json
import os
import pathlib
import subprocess

import pytest
import torch

from hidden_format import read_folder
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", HF_HUB_OFFLINE="1")
VOCAB, HIDDEN, MASK_ID = 300, 32, 299
TIMEOUT = 180


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_llama")
    return tiny_llama(d, vocab=VOCAB, hidden=HIDDEN, layers=4), d


def _prompts(tmp_path, n):
    g = torch.Generator().manual_seed(1)
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt_ids": torch.randint(3, VOCAB - 1, (3 + i % 5,), generator=g).tolist()}) + "\n"
                         for i in range(n)))
    return p


STOPS = []  # reply tokens frequent enough that, as stop ids, they end replies at different lengths


def _regen(dflash_bin, model_dir, inp, out, *extra, check=True):
    if not STOPS:
        probe = pathlib.Path(str(out) + ".probe")
        subprocess.run([dflash_bin, "data", "regenerate", "--model", str(model_dir), "--input", str(inp), "--output",
                        str(probe), "--threads", "1", "--max-new", "10", "--eos", "none", "--batch", "3"],
                       check=True, capture_output=True, env=ENV, timeout=TIMEOUT)
        count = {}
        for s in _read_jsonl(probe):
            for t in s["input_ids"][s["prompt_tokens"]:]:
                count[t] = count.get(t, 0) + 1
        STOPS.extend(str(t) for t, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[:2])
    r = subprocess.run([dflash_bin, "data", "regenerate", "--model", str(model_dir), "--input", str(inp), "--output",
                        str(out), "--threads", "1", "--max-new", "10", "--eos", ",".join(STOPS), "--batch", "3", *extra],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _read_jsonl(path):
    return [json.loads(l) for l in open(path)]


def _stored(folder):
    """{prompt index: (input_ids, loss_mask, hidden_states)} over every index-*.json, each sample once."""
    return {k: v[:3] for k, v in read_folder(folder).items()}


def _check_features(model, samples, stored, layers):
    assert sorted(stored) == sorted(s["index"] for s in samples)
    for s in samples:
        ids, mask, hs = stored[s["index"]]
        assert ids.tolist() == s["input_ids"] and mask.long().tolist() == s["loss_mask"]
        assert hs.dtype == torch.bfloat16 and hs.shape == (len(s["input_ids"]), len(layers) * HIDDEN)
        with torch.no_grad():
            ref = model(torch.tensor([s["input_ids"]]), output_hidden_states=True).hidden_states
        want = torch.cat([ref[i + 1][0] for i in layers], -1)
        # decode steps and one full forward round differently in fp32; bf16 storage keeps 8 significant bits
        torch.testing.assert_close(hs.float(), want, rtol=2 ** -6, atol=1e-4)


def test_features_of_two_shards_equal_transformers(dflash_bin, tiny, tmp_path):
    model, d = tiny
    inp = _prompts(tmp_path, 7)
    feats = tmp_path / "features"
    samples = []
    for k in range(2):
        out = tmp_path / f"s{k}.jsonl"
        r = _regen(dflash_bin, d, inp, out, "--shards", "2", "--shard", str(k), "--hidden-out", str(feats),
                   "--target-layer-ids", "2,0", "--hidden-samples-per-shard", "2")
        assert "features: " in r.stderr
        samples += _read_jsonl(out)
    assert len({s["response_tokens"] for s in samples}) >= 3  # replies of different lengths, incl. eos stops
    assert sorted(p.name for p in feats.glob("index-*.json")) == ["index-part0of2.json", "index-part1of2.json"]
    _check_features(model, samples, _stored(feats), [2, 0])


def test_trainer_reads_the_parts_as_one_dataset(dflash_bin, tiny, tmp_path):
    _, d = tiny
    inp = _prompts(tmp_path, 6)
    feats = tmp_path / "features"
    for k in range(2):
        _regen(dflash_bin, d, inp, tmp_path / f"s{k}.jsonl", "--shards", "2", "--shard", str(k), "--hidden-out",
               str(feats), "--hidden-samples-per-shard", "2")
    both = tmp_path / "all.jsonl"  # the order the trainer reads the parts in: part 0, then part 1
    both.write_text((tmp_path / "s0.jsonl").read_text() + (tmp_path / "s1.jsonl").read_text())
    losses = {}
    for name, data in [("online", both), ("offline", feats)]:
        args = {"target": d, "data": data, "out": tmp_path / name, "mask_token_id": MASK_ID, "drafter_layers": 1,
                "dtype": "bf16", "num_anchors": 4, "block_size": 4, "batch_size": 1, "log_every": 1,
                "checkpoint_every": 100, "threads": 1, "max_len": 24, "lr": 3e-3, "warmup_ratio": 0.25, "steps": 3,
                "init_std": 0.05}
        argv = [x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        r = subprocess.run([dflash_bin, "train", *argv], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(l) for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [x["loss"] for x in rows if "event" not in x]
    assert "dflash-hidden-v1, 6 samples" in r.stderr
    assert len(losses["online"]) == 3 and losses["online"] == pytest.approx(losses["offline"], rel=1e-3)


def test_resume_recomputes_exactly_the_lost_features(dflash_bin, tiny, tmp_path):
    model, d = tiny
    inp = _prompts(tmp_path, 8)
    out, feats = tmp_path / "s.jsonl", tmp_path / "features"
    flags = ["--hidden-out", str(feats), "--target-layer-ids", "1,2", "--hidden-samples-per-shard", "2"]
    _regen(dflash_bin, d, inp, out, "--limit", "5", *flags)  # shards of 2, 2 and 1 samples
    # A crash after the last shard was written but before the index listed it: the file stays, unlisted.
    index = feats / "index-part0of1.json"
    idx = json.loads(index.read_text())
    lost = idx["shards"].pop()
    assert lost["keys"] == [4]
    index.write_text(json.dumps(idx))
    r = _regen(dflash_bin, d, inp, out, *flags)
    assert "features of samples already written" in r.stderr and "5 already present" in r.stderr
    assert not (feats / lost["file"]).exists() or lost["file"] in index.read_text()
    samples = _read_jsonl(out)
    assert [s["index"] for s in samples] == list(range(8))
    _check_features(model, samples, _stored(feats), [1, 2])

    # A JSONL written without --hidden-out gets every feature on a rerun that asks for them.
    plain = tmp_path / "plain.jsonl"
    _regen(dflash_bin, d, inp, plain, "--limit", "3")
    _regen(dflash_bin, d, inp, plain, "--hidden-out", str(tmp_path / "f2"))
    _check_features(model, _read_jsonl(plain), _stored(tmp_path / "f2"), [2])  # default for 1 drafter layer: L // 2

    # Other layers into the same folder would mix two kinds of features.
    r = _regen(dflash_bin, d, inp, out, "--hidden-out", str(feats), "--target-layer-ids", "0", check=False)
    assert r.returncode != 0 and "target_layer_ids" in r.stderr and "index-part0of1.json" in r.stderr
    # A damaged index is an error naming it, not a crash.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.safetensors").write_bytes(b"")
    (bad / "index-part0of1.json").write_text(json.dumps({"format": "dflash-hidden-v1", "settings": json.loads(
        (tmp_path / "f2" / "index-part0of1.json").read_text())["settings"], "shards": [{"file": "x.safetensors"}]}))
    r = _regen(dflash_bin, d, inp, plain, "--hidden-out", str(bad), check=False)
    assert r.returncode != 0 and "index-part0of1.json" in r.stderr and "keys" in r.stderr
    # Evaluation prompts never become features.
    r = _regen(dflash_bin, d, inp, tmp_path / "e.jsonl", "--split", "eval", "--hidden-out", str(feats), check=False)
    assert r.returncode != 0 and "--hidden-out" in r.stderr


def test_a_copied_folder_resumes_beside_a_copied_jsonl(dflash_bin, tiny, tmp_path):
    """demo.sh --long takes over the demo's answers and features: the folder is pinned to the settings that made
    its answers, not to the JSONL's path, so nothing already there is computed again."""
    import shutil
    model, d = tiny
    inp = _prompts(tmp_path, 6)
    first, feats = tmp_path / "demo" / "s.jsonl", tmp_path / "demo" / "features"
    first.parent.mkdir()
    flags = ["--target-layer-ids", "1,2", "--hidden-samples-per-shard", "2"]
    _regen(dflash_bin, d, inp, first, "--limit", "4", "--hidden-out", str(feats), *flags)
    moved = tmp_path / "long"
    moved.mkdir()
    shutil.copy(first, moved / "s.jsonl")
    shutil.copy(str(first) + ".meta.json", moved / "s.jsonl.meta.json")
    shutil.copytree(feats, moved / "features")
    r = _regen(dflash_bin, d, inp, moved / "s.jsonl", "--hidden-out", str(moved / "features"), *flags)
    assert "features of samples already written" not in r.stderr
    samples = _read_jsonl(moved / "s.jsonl")
    assert [s["index"] for s in samples] == list(range(6))
    _check_features(model, samples, _stored(moved / "features"), [1, 2])
    # Without its JSONL the folder still resumes: answers it already holds are written again, their features kept.
    fresh = tmp_path / "fresh.jsonl"
    r = _regen(dflash_bin, d, inp, fresh, "--hidden-out", str(moved / "features"), *flags)
    assert "features: 6 samples" in r.stderr
    assert _read_jsonl(fresh) == samples
    # Answers made with other settings are refused by the folder, naming what differs.
    r = _regen(dflash_bin, d, inp, tmp_path / "hot.jsonl", "--temperature", "0.5", "--hidden-out",
               str(moved / "features"), *flags, check=False)
    assert r.returncode != 0 and "index-part0of1.json" in r.stderr and "answers" in r.stderr


def test_last_hidden_equals_transformers_final_normed_state(dflash_bin, tiny, tmp_path):
    """--last-hidden (DSpark's L1 teacher, kl_weight's soft labels): every position's final-normed last hidden state,
    as transformers' hidden_states[-1], next to the features; without --hidden-out it is refused."""
    model, d = tiny
    inp = _prompts(tmp_path, 3)
    feats, out = tmp_path / "features", tmp_path / "s.jsonl"
    _regen(dflash_bin, d, inp, out, "--hidden-out", str(feats), "--target-layer-ids", "1", "--last-hidden")
    samples = _read_jsonl(out)
    stored = read_folder(feats)
    assert sorted(stored) == sorted(s["index"] for s in samples)
    for s in samples:
        last = stored[s["index"]][3]
        assert last is not None and last.shape == (len(s["input_ids"]), HIDDEN)
        with torch.no_grad():
            want = model(torch.tensor([s["input_ids"]]), output_hidden_states=True).hidden_states[-1][0]
        torch.testing.assert_close(last.float(), want, rtol=2 ** -6, atol=1e-4)
    # it is stored beside the features: without --hidden-out it is refused
    r = _regen(dflash_bin, d, inp, tmp_path / "t.jsonl", "--last-hidden", check=False)
    assert r.returncode != 0 and "--last-hidden" in r.stderr and "--hidden-out" in r.stderr
