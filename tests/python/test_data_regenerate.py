"""`dflash data regenerate` on tiny random HF Llama models: replies equal HF greedy decoding, loss_mask covers
the reply only, resuming after an interruption (torn last line) neither loses nor duplicates samples, sampling
is reproducible per seed, evaluation sets are refused as training data, and continuous batching (--batch) writes
the same file as one prompt at a time, also when resumed after a kill."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest
import torch

from hf_greedy import hf_greedy
from tiny_models import tiny_llama

GGUF = pathlib.Path(__file__).resolve().parents[2] / "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def _tiny(vocab, seed=0):
    return tiny_llama(vocab=vocab, seed=seed)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    m = _tiny(300)
    d = tmp_path_factory.mktemp("tiny_llama")
    m.save_pretrained(str(d))
    return m, d


def _regen(dflash_bin, model_dir, inp, out, *extra, check=True):
    cmd = [dflash_bin, "data", "regenerate", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
           "--threads", "1", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _prompts(tmp_path, n=5):
    g = torch.Generator().manual_seed(1)
    p = tmp_path / "prompts.jsonl"
    with open(p, "w") as f:
        for i in range(n):
            ids = torch.randint(3, 300, (3 + i,), generator=g).tolist()
            f.write(json.dumps({"prompt_ids": ids}) + "\n")
    return p, [json.loads(l)["prompt_ids"] for l in open(p)]


def _read(out):
    return [json.loads(l) for l in open(out)]


def test_greedy_replies_match_hf_and_mask_covers_reply(dflash_bin, tiny_dir, tmp_path):
    model, d = tiny_dir
    inp, prompts = _prompts(tmp_path)
    out = tmp_path / "s.jsonl"
    _regen(dflash_bin, d, inp, out, "--max-new", "12")
    samples = _read(out)
    assert [s["index"] for s in samples] == list(range(len(prompts)))
    for s, p in zip(samples, prompts):
        reply = hf_greedy(model, p, 12)
        assert s["input_ids"] == p + reply
        assert s["loss_mask"] == [0] * len(p) + [1] * len(reply)
        assert s["prompt_tokens"] == len(p) and s["response_tokens"] == len(reply)
        assert s["split"] == "train"
        assert s["finish"] == ("eos" if reply[-1] == 2 else "length")


def test_resume_after_torn_line_keeps_every_sample_once(dflash_bin, tiny_dir, tmp_path):
    _, d = tiny_dir
    inp, prompts = _prompts(tmp_path, 6)
    full = tmp_path / "full.jsonl"
    _regen(dflash_bin, d, inp, full, "--max-new", "8")
    part = tmp_path / "part.jsonl"
    _regen(dflash_bin, d, inp, part, "--max-new", "8", "--limit", "3")
    with open(part, "a") as f:  # a crash in the middle of writing sample 3
        f.write('{"index": 3, "input_ids": [1, 2')
    r = _regen(dflash_bin, d, inp, part, "--max-new", "8")
    assert "torn" in r.stderr
    assert "3 already present" in r.stderr
    assert open(part).read() == open(full).read()
    # Rerunning a finished file adds nothing.
    _regen(dflash_bin, d, inp, part, "--max-new", "8")
    assert open(part).read() == open(full).read()
    # A resume with other settings is refused instead of mixing two kinds of samples.
    r = _regen(dflash_bin, d, inp, part, "--max-new", "9", check=False)
    assert r.returncode != 0 and "max_new" in r.stderr


def test_sampling_is_seeded_per_prompt(dflash_bin, tiny_dir, tmp_path):
    _, d = tiny_dir
    inp, _ = _prompts(tmp_path, 3)
    outs = []
    for name, seed in [("a", "5"), ("b", "5"), ("c", "6")]:
        out = tmp_path / f"{name}.jsonl"
        _regen(dflash_bin, d, inp, out, "--max-new", "16", "--temperature", "1.5", "--seed", seed)
        outs.append([s["input_ids"] for s in _read(out)])
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def test_evaluation_sets_are_refused_for_training(dflash_bin, tiny_dir, tmp_path, shared_dir):
    _, d = tiny_dir
    for name in ["gsm8k_test.jsonl", "humaneval.jsonl.gz", "mt_bench_questions.jsonl"]:
        src = shared_dir / "data" / name
        if not src.exists():
            pytest.skip(f"{src} missing")
        r = _regen(dflash_bin, d, src, tmp_path / "x.jsonl", "--limit", "1", check=False)
        assert r.returncode != 0 and "never becomes training data" in r.stderr, r.stderr
    # Training prompts that copy an evaluation prompt are dropped.
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k_test.jsonl").write_text(json.dumps({"question": "held out?"}) + "\n")
    (data / "train.jsonl").write_text(json.dumps({"question": "held out?"}) + "\n")
    if not GGUF.exists():
        pytest.skip("SmolLM2 GGUF (tokenizer) missing: run scripts/setup.sh")
    r = _regen(dflash_bin, d, data / "train.jsonl", tmp_path / "y.jsonl", "--tokenizer", str(GGUF))
    assert "1 dropped" in r.stderr
    assert (tmp_path / "y.jsonl").read_text() == ""


@pytest.mark.skipif(not GGUF.exists(), reason="SmolLM2 GGUF (tokenizer) missing: run scripts/setup.sh")
def test_text_prompts_use_the_chat_template(dflash_bin, tmp_path, shared_dir):
    m = _tiny(49152)
    d = tmp_path / "m"
    m.save_pretrained(str(d))
    out = tmp_path / "s.jsonl"
    src = shared_dir / "data" / "gsm8k_train.jsonl"
    _regen(dflash_bin, d, src, out, "--tokenizer", str(GGUF), "--limit", "2", "--max-new", "4")
    samples = _read(out)
    questions = [json.loads(l)["question"] for l in open(src)][:2]
    for s, q in zip(samples, questions):
        n = s["prompt_tokens"]
        prompt = s["input_ids"][:n]
        # ChatML with SmolLM2's default system prompt, ending in the generation prompt.
        assert prompt[:3] == [1, 9690, 198]  # <|im_start|>system\n
        assert prompt[-4:] == [1, 520, 9531, 198]  # <|im_start|>assistant\n
        assert any(prompt[i:i + 3] == [1, 4093, 198] for i in range(n))  # <|im_start|>user\n
        assert s["input_ids"][n:] == hf_greedy(m, prompt, 4)
        assert sum(s["loss_mask"]) == s["response_tokens"] and s["loss_mask"][:n] == [0] * n


def test_shards_partition_the_prompts(dflash_bin, tiny_dir, tmp_path):
    _, d = tiny_dir
    inp, _ = _prompts(tmp_path, 5)
    full = tmp_path / "full.jsonl"
    _regen(dflash_bin, d, inp, full, "--max-new", "6")
    shards = []
    for k in range(2):
        out = tmp_path / f"s{k}.jsonl"
        _regen(dflash_bin, d, inp, out, "--max-new", "6", "--shards", "2", "--shard", str(k))
        shards += _read(out)
    assert [s["index"] % 2 for s in _read(tmp_path / "s1.jsonl")] == [1, 1]
    assert sorted(shards, key=lambda s: s["index"]) == _read(full)


def _common_eos(samples, n=2):
    """The n most frequent reply tokens: as stop ids they make replies end at different lengths."""
    count = {}
    for s in samples:
        for t in s["input_ids"][s["prompt_tokens"]:]:
            count[t] = count.get(t, 0) + 1
    return ",".join(str(t) for t, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[:n])


def test_batched_runs_write_the_same_file_as_batch_1(dflash_bin, tiny_dir, tmp_path):
    _, d = tiny_dir
    inp, _ = _prompts(tmp_path, 9)
    probe = tmp_path / "probe.jsonl"
    _regen(dflash_bin, d, inp, probe, "--max-new", "14", "--eos", "none", "--batch", "1")
    eos = _common_eos(_read(probe))
    for mode in [[], ["--temperature", "1.2", "--seed", "3"]]:
        files = {}
        for b in ["1", "4"]:
            out = tmp_path / f"b{b}_{len(mode)}.jsonl"
            r = _regen(dflash_bin, d, inp, out, "--max-new", "14", "--eos", eos, "--batch", b, *mode)
            assert f"batch {b}," in r.stderr
            files[b] = open(out).read()
        assert files["1"] == files["4"]
        samples = [json.loads(l) for l in files["1"].splitlines()]
        assert [s["index"] for s in samples] == list(range(9))
        if not mode:  # replies finished at different steps
            assert len({s["response_tokens"] for s in samples}) >= 3
            assert {s["finish"] for s in samples} == {"eos", "length"}


def test_resume_after_interrupted_batched_run(dflash_bin, tiny_dir, tmp_path):
    _, d = tiny_dir
    inp, _ = _prompts(tmp_path, 10)
    full = tmp_path / "full.jsonl"
    _regen(dflash_bin, d, inp, full, "--max-new", "10", "--batch", "1")
    # A smaller first run, resumed with another batch size.
    part = tmp_path / "part.jsonl"
    _regen(dflash_bin, d, inp, part, "--max-new", "10", "--batch", "3", "--limit", "4")
    assert [s["index"] for s in _read(part)] == [0, 1, 2, 3]
    r = _regen(dflash_bin, d, inp, part, "--max-new", "10", "--batch", "4")
    assert "4 already present" in r.stderr
    assert open(part).read() == open(full).read()
    # Killed mid-run (SIGKILL once some samples are on disk), then resumed.
    many = tmp_path / "many.jsonl"
    with open(many, "w") as f:
        for i in range(300):
            f.write(json.dumps({"prompt_ids": [3 + i % 290, 7, 11 + i % 13]}) + "\n")
    ref = tmp_path / "ref.jsonl"
    _regen(dflash_bin, d, many, ref, "--max-new", "24", "--batch", "4")
    killed = tmp_path / "killed.jsonl"
    cmd = [dflash_bin, "data", "regenerate", "--model", str(d), "--input", str(many), "--output", str(killed),
           "--threads", "1", "--max-new", "24", "--batch", "4"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    while p.poll() is None and (not killed.exists() or open(killed).read().count("\n") < 5):
        time.sleep(0.01)
    p.kill()
    assert p.wait() == -signal.SIGKILL, "the run ended before it could be killed: the resume below would test nothing"
    n_before = open(killed).read().count("\n")
    assert 5 <= n_before < 300
    r = _regen(dflash_bin, d, many, killed, "--max-new", "24", "--batch", "4")
    assert f"{n_before} already present" in r.stderr
    assert open(killed).read() == open(ref).read()
