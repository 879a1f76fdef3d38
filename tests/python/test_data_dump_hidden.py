"""`dflash data dump-hidden` (offline training data) on tiny random HF Llama / Qwen3 targets: stored hidden states
equal transformers' hidden_states[id + 1] rounded to bf16, in --target-layer-ids order; training on the dump gives
the same losses as online training on the same samples; the reader skips NaN / wrong-dtype / wrong-shape samples
with a count and names a truncated shard; a resumed dump neither loses nor duplicates samples; held-out (eval)
samples are refused by dump-hidden and by the trainer; a dump made for other target layers is refused."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

from hidden_format import indices, read_folder
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", HF_HUB_OFFLINE="1")
VOCAB, HIDDEN, MASK_ID = 256, 32, 255
TIMEOUT = 180


def _llama():
    return tiny_llama(vocab=VOCAB, hidden=HIDDEN, layers=4, max_positions=256, weight_scale=None)


def _qwen3():
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                        tie_word_embeddings=False, max_position_embeddings=256, eos_token_id=2))


def _save(maker, d):
    torch.manual_seed(0)
    m = maker().float().eval()
    with torch.no_grad():  # larger-than-init weights: differences are not hidden by tiny activations
        for name, p in m.named_parameters():
            if "norm" not in name:
                p.normal_(0, 1.0 / p.shape[-1] ** 0.5)
    m.save_pretrained(str(d))
    return m


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    return _save(_llama, d), d


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3")
    return _save(_qwen3, d), d


def _samples(n, seed=1, **extra):
    """Records as `dflash data regenerate` writes them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        S = 12 + 5 * i
        ids = torch.randint(3, VOCAB - 1, (S,), generator=g).tolist()
        mask = [0] * 5 + [1] * (S - 5)
        rec = {"index": i, "source": "prompts.jsonl", "split": "train", "input_ids": ids, "loss_mask": mask,
               "prompt_tokens": 5, "response_tokens": S - 5, "finish": "length"}
        rec.update(extra)
        out.append(rec)
    return out


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _dump(dflash_bin, target, data, out, *extra, check=True):
    r = subprocess.run([dflash_bin, "data", "dump-hidden", "--target", str(target), "--data", str(data), "--out",
                        str(out), "--threads", "1", *extra], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _stored(out):
    """The dump's index (index-dump.json) and (input_ids, loss_mask, hidden_states, last_hidden or None) per sample,
    in line order."""
    assert list(indices(out)) == ["dump"]
    return indices(out)["dump"], [v for _, v in sorted(read_folder(out).items())]


@pytest.mark.parametrize("which", ["llama", "qwen3"])
def test_hidden_states_equal_transformers(dflash_bin, llama, qwen3, tmp_path, which):
    model, tdir = {"llama": llama, "qwen3": qwen3}[which]
    recs = _samples(3)
    data = _write(tmp_path / "samples.jsonl", recs)
    layers = [2, 1]  # not sorted: the concatenation follows this order
    out = tmp_path / "dump"
    _dump(dflash_bin, tdir, data, out, "--target-layer-ids", "2,1", "--max-len", "20", "--last-hidden")
    idx, stored = _stored(out)
    assert idx["settings"]["target_layer_ids"] == layers and idx["samples"] == 3
    meta = safe_open(str(out / idx["shards"][0]["file"]), "pt").metadata()
    assert meta["format"] == "dflash-hidden-v1" and meta["target_layer_ids"] == "2,1" and meta["split"] == "train"
    assert meta["target_num_layers"] == "4" and meta["hidden_size"] == str(HIDDEN)
    for rec, (ids, mask, hs, last) in zip(recs, stored):
        S = min(20, len(rec["input_ids"]))
        assert ids.tolist() == rec["input_ids"][:S] and mask.tolist() == rec["loss_mask"][:S]
        assert hs.dtype == torch.bfloat16 and hs.shape == (S, len(layers) * HIDDEN)
        with torch.no_grad():
            ref = model(torch.tensor([rec["input_ids"][:S]]), output_hidden_states=True).hidden_states
        want = torch.cat([ref[i + 1][0] for i in layers], -1)
        # bf16 keeps 8 significant bits: our fp32 value and HF's may round to neighbouring bf16 numbers.
        torch.testing.assert_close(hs.float(), want, rtol=2 ** -7, atol=1e-5)
        torch.testing.assert_close(last.float(), ref[-1][0], rtol=2 ** -7, atol=1e-5)
    # Features really are rounded values of the reference (not a copy of some other layer).
    assert not torch.allclose(stored[0][2][:, :HIDDEN].float(), stored[0][2][:, HIDDEN:].float(), atol=1e-2)


def _train_args(target, data, out, **kw):
    a = {"target": target, "data": data, "out": out, "mask_token_id": MASK_ID, "drafter_layers": 1, "dtype": "bf16",
         "num_anchors": 4, "block_size": 4, "batch_size": 1, "log_every": 1, "checkpoint_every": 100, "threads": 1,
         "max_len": 24, "lr": 3e-3, "warmup_ratio": 0.25, "steps": 3, "init_std": 0.05}
    a.update(kw)
    argv = []
    for k, v in a.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


def _train(dflash_bin, argv, check=True):
    r = subprocess.run([dflash_bin, "train", *argv], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _losses(run):
    rows = [json.loads(l) for l in (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in rows if "event" not in x]


@pytest.fixture(scope="module")
def dumped(dflash_bin, llama, tmp_path_factory):
    """4 samples of the Llama target, default layers for a 1-layer drafter, 2 samples per shard."""
    d = tmp_path_factory.mktemp("dumped")
    data = _write(d / "samples.jsonl", _samples(4, seed=3))
    _dump(dflash_bin, llama[1], data, d / "dump", "--max-len", "24", "--samples-per-shard", "2", "--last-hidden")
    return data, d / "dump"


@pytest.mark.parametrize("kl", [0.0, 0.15])
def test_offline_training_equals_online(dflash_bin, llama, dumped, tmp_path, kl):
    # The trainer computes in bf16, so the online features (fp32 target) are rounded to bf16 exactly as the
    # dump stored them: the same samples in the same order must give the same losses.
    data, dump = dumped
    on, off = tmp_path / "online", tmp_path / "offline"
    _train(dflash_bin, _train_args(llama[1], data, on, kl_weight=kl))
    r = _train(dflash_bin, _train_args(llama[1], dump, off, kl_weight=kl))
    assert "dflash-hidden-v1, 4 samples" in r.stderr
    a, b = _losses(on), _losses(off)
    assert len(a) == 3 and a == pytest.approx(b, rel=1e-6, abs=1e-6)


def test_trainer_refuses_dump_for_other_layers(dflash_bin, llama, dumped, tmp_path):
    data, _ = dumped
    other = tmp_path / "other"
    _dump(dflash_bin, llama[1], data, other, "--target-layer-ids", "0,1", "--max-len", "24")
    r = _train(dflash_bin, _train_args(llama[1], other, tmp_path / "run"), check=False)
    assert r.returncode != 0
    assert "target layers [0,1]" in r.stderr and "asks for [2]" in r.stderr and "--target-layer-ids 2" in r.stderr
    # Asking for those layers works.
    _train(dflash_bin, _train_args(llama[1], other, tmp_path / "ok", target_layer_ids="0,1", steps=1))


def _rewrite(path, edit):
    """Re-saves a shard after edit(tensors) with the same metadata."""
    meta = safe_open(str(path), "pt").metadata()
    t = load_file(str(path))
    edit(t)
    save_file(t, str(path), metadata=meta)


@pytest.mark.parametrize("damage,needle", [
    ("nan", "dump-00000.safetensors sample 1: hidden_states holds NaN or Inf; skipped"),
    ("dtype", "dump-00001.safetensors sample 0: hidden_states has dtype I32, expected BF16/F16/F32/F64; skipped"),
    ("shape", "dump-00000.safetensors sample 0: loss_mask has shape [3], expected [12]; skipped"),
])
def test_corrupt_samples_are_skipped_and_counted(dflash_bin, llama, dumped, tmp_path, damage, needle):
    bad = tmp_path / "bad"
    shutil.copytree(dumped[1], bad)
    if damage == "nan":
        def edit(t):
            t["1.hidden_states"][3, 5] = float("nan")
        _rewrite(bad / "dump-00000.safetensors", edit)
    elif damage == "dtype":
        def edit(t):
            t["0.hidden_states"] = t["0.hidden_states"].to(torch.int32)
        _rewrite(bad / "dump-00001.safetensors", edit)
    else:
        def edit(t):
            t["0.loss_mask"] = t["0.loss_mask"][:3].clone()
        _rewrite(bad / "dump-00000.safetensors", edit)
    # Steps cover every sample twice, so a NaN sample is met for sure.
    r = _train(dflash_bin, _train_args(llama[1], bad, tmp_path / "run", steps=8))
    assert needle in r.stderr, r.stderr
    assert "1 invalid samples skipped" in r.stderr, r.stderr
    if damage != "nan":  # header problems are found on open
        assert "skipped 1 of 4 samples with wrong shapes or dtypes" in r.stderr and "3 samples, 1 skipped" in r.stderr
    assert all(l == l for l in _losses(tmp_path / "run"))  # no NaN reached the loss


def test_truncated_shard_is_a_clear_error(dflash_bin, llama, dumped, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(dumped[1], bad)
    f = bad / "dump-00001.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    r = _train(dflash_bin, _train_args(llama[1], bad, tmp_path / "run"), check=False)
    assert r.returncode != 0
    assert "dump-00001.safetensors: unreadable dflash-hidden-v1 shard" in r.stderr, r.stderr
    # dump-hidden notices the damage and writes that shard again.
    r = _dump(dflash_bin, llama[1], dumped[0], bad, "--max-len", "24", "--samples-per-shard", "2", "--last-hidden")
    assert "dump-00001.safetensors: missing or truncated; its samples are computed again" in r.stderr
    _, a = _stored(bad)
    _, b = _stored(dumped[1])
    assert len(a) == 4 and all(torch.equal(x[2], y[2]) for x, y in zip(a, b))


def test_resume_continues_without_duplicates(dflash_bin, llama, tmp_path):
    recs = _samples(7, seed=4)
    data = _write(tmp_path / "samples.jsonl", recs)
    out, ref = tmp_path / "dump", tmp_path / "ref"
    common = ["--max-len", "24", "--samples-per-shard", "2"]
    _dump(dflash_bin, llama[1], data, ref, *common)
    _dump(dflash_bin, llama[1], data, out, *common, "--limit", "3")
    idx, first = _stored(out)
    assert [s["samples"] for s in idx["shards"]] == [2, 1] and len(first) == 3
    # A crash after a shard's rename but before the index update: the shard is on disk, the index lacks it.
    lost = idx["shards"].pop()
    (out / "index-dump.json").write_text(json.dumps(idx))
    assert (out / lost["file"]).exists()
    stray = out / "dump-00002.safetensors.tmp.999"
    stray.write_text("partial")
    r = _dump(dflash_bin, llama[1], data, out, *common)
    assert "resuming with 2 samples already in 1 complete shards" in r.stderr and not stray.exists()
    idx, got = _stored(out)
    _, want = _stored(ref)
    assert idx["samples"] == 7 and sum(s["samples"] for s in idx["shards"]) == 7
    assert [x[0].tolist() for x in got] == [r["input_ids"][:24] for r in recs]
    assert all(torch.equal(x[2], y[2]) for x, y in zip(got, want))
    # Nothing left to do: a rerun writes nothing new.
    r = _dump(dflash_bin, llama[1], data, out, *common)
    assert "dumped 0 new samples" in r.stderr and _stored(out)[0]["samples"] == 7
    # Other settings than the dump's are refused.
    r = _dump(dflash_bin, llama[1], data, out, "--max-len", "30", "--samples-per-shard", "2", check=False)
    assert r.returncode != 0 and "max_len" in r.stderr


def test_a_dump_of_an_older_version_is_read_and_resumed(dflash_bin, llama, tmp_path):
    recs = _samples(5, seed=6)
    data = _write(tmp_path / "samples.jsonl", recs)
    out, common = tmp_path / "dump", ["--max-len", "24", "--samples-per-shard", "2"]
    _dump(dflash_bin, llama[1], data, out, *common, "--limit", "4")
    idx, _ = _stored(out)
    # The layout older versions wrote: one index.json, shards named shard-NNNNN keyed by first_record / records.
    legacy = {"format": "dflash-hidden-v1", "settings": idx["settings"], "shards": [], "samples": 4}
    for n, s in enumerate(idx["shards"]):
        name = f"shard-{n:05d}.safetensors"
        (out / s["file"]).rename(out / name)
        legacy["shards"].append({"file": name, "samples": s["samples"], "records": len(s["keys"]),
                                 "first_record": s["keys"][0], "tokens": s["tokens"], "bytes": s["bytes"]})
    (out / "index-dump.json").unlink()
    (out / "index.json").write_text(json.dumps(legacy))
    r = _train(dflash_bin, _train_args(llama[1], out, tmp_path / "run", steps=1))
    assert "dflash-hidden-v1, 4 samples" in r.stderr
    # A rerun adopts the old index and computes only the missing sample.
    r = _dump(dflash_bin, llama[1], data, out, *common)
    assert "resuming with 4 samples already in 2 complete shards" in r.stderr and "dumped 1 new samples" in r.stderr
    assert not (out / "index.json").exists()
    _, got = _stored(out)
    assert [x[0].tolist() for x in got] == [r["input_ids"][:24] for r in recs]


@pytest.mark.parametrize("extra,needle", [({"split": "eval"}, "its split is \"eval\""),
                                          ({"source": "humaneval.jsonl"}, "the evaluation set 'humaneval'")])
def test_held_out_samples_are_refused(dflash_bin, llama, tmp_path, extra, needle):
    recs = _samples(3)
    recs[1].update(extra)
    data = _write(tmp_path / "samples.jsonl", recs)
    r = _dump(dflash_bin, llama[1], data, tmp_path / "dump", check=False)
    assert r.returncode != 0 and "samples.jsonl:2: held-out sample" in r.stderr and needle in r.stderr, r.stderr
    r = _train(dflash_bin, _train_args(llama[1], data, tmp_path / "run"), check=False)
    assert r.returncode != 0 and "samples.jsonl:2: held-out sample" in r.stderr and needle in r.stderr, r.stderr
    # An evaluation set's file is refused by its name too.
    ev = _write(tmp_path / "gsm8k_test.jsonl", _samples(2))
    r = _dump(dflash_bin, llama[1], ev, tmp_path / "dump2", check=False)
    assert r.returncode != 0 and "evaluation set 'gsm8k_test'" in r.stderr


def test_reader_refuses_an_eval_split_shard(dflash_bin, llama, dumped, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(dumped[1], bad)
    f = bad / "dump-00000.safetensors"
    meta = safe_open(str(f), "pt").metadata()
    save_file(load_file(str(f)), str(f), metadata=dict(meta, split="eval"))
    r = _train(dflash_bin, _train_args(llama[1], bad, tmp_path / "run"), check=False)
    assert r.returncode != 0 and "split is 'eval'" in r.stderr, r.stderr


def test_all_samples_nan_stops_training(dflash_bin, llama, dumped, tmp_path):
    # Found while loading (in the producer thread): the error must end the run, not hang it.
    bad = tmp_path / "bad"
    shutil.copytree(dumped[1], bad)
    for f in ("dump-00000.safetensors", "dump-00001.safetensors"):
        def edit(t):
            for k in t:
                if k.endswith(".hidden_states"):
                    t[k][0, 0] = float("inf")
        _rewrite(bad / f, edit)
    r = _train(dflash_bin, _train_args(llama[1], bad, tmp_path / "run"), check=False)
    assert r.returncode != 0 and "every sample holds NaN or Inf" in r.stderr, r.stderr
