"""Hostile inputs through the command line (issue 19): each class of input that used to be accepted silently,
to crash, to hang or to leave partial output now ends in a clean error: a non-zero exit, one line
`dflash: error: ...` naming the file / field / value, no C++ stack trace, nothing partial left behind.
The readers' own unit tests (tests/io, tests/train, tests/data) and the fuzz targets (tests/fuzz) go deeper.
"""
import gzip
import json
import os
import pathlib
import struct
import subprocess

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from cli_errors import one_line_error

gguf = pytest.importorskip("gguf")

VOCAB, HIDDEN = 64, 16


def run(dflash_bin, *args, timeout=60):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    d = tmp_path_factory.mktemp("target")
    LlamaForCausalLM(cfg).float().save_pretrained(str(d))
    return d


def copy_target(src, dst, edit_config=None, edit_weights=None):
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file
    w = load_file(str(src / "model.safetensors"))
    if edit_weights:
        edit_weights(w)
    save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


# ---- safetensors: the tensors must cover the data section exactly, as the reference reader demands ----

def raw_st(header_bytes, data):
    return struct.pack("<Q", len(header_bytes)) + header_bytes + data


def st_bytes(header, data):
    return raw_st(json.dumps(header).encode(), data)


LAYOUTS = {
    "stray_bytes_before_data": (st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
                                ["tensor 'w'", "gap of 4 unused bytes at data offset 0"]),
    "trailing_bytes": (st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(11)),
                       ["3 trailing bytes after tensor 'w' [0, 8]"]),
    "gap": (st_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12)),
            ["tensor 'b'", "gap of 4 unused bytes at data offset 4 after tensor 'a'"]),
    "overlap": (st_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
                ["tensor 'b'", "overlaps tensor 'a' [0, 8]"]),
    "duplicate_name": (raw_st(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                              b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
                       ["key 'a' appears twice"]),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_safetensors_layout_is_checked_like_the_reference(dflash_bin, tmp_path, case):
    data, parts = LAYOUTS[case]
    p = tmp_path / f"{case}.safetensors"
    p.write_bytes(data)
    one_line_error(run(dflash_bin, "safetensors", "info", "--file", p), p, *parts)
    # The reference reader (pip safetensors) refuses the same files.
    from safetensors import safe_open
    if case != "duplicate_name":  # serde keeps the last duplicate key; we refuse it
        with pytest.raises(Exception):
            with safe_open(str(p), "pt") as f:
                [f.get_tensor(k) for k in f.keys()]


def test_safetensors_header_length_one_byte_short(dflash_bin, tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.arange(4, dtype=torch.float32)}, str(good))
    b = bytearray(good.read_bytes())
    n = struct.unpack("<Q", b[:8])[0]
    assert b[8 + n - 1:8 + n] in (b" ", b"}")
    b[:8] = struct.pack("<Q", n - 1)  # the data section now starts a byte early: every tensor would shift
    bad = tmp_path / "short.safetensors"
    bad.write_bytes(bytes(b))
    line = one_line_error(run(dflash_bin, "safetensors", "info", "--file", bad), bad)
    assert "trailing bytes" in line or "not valid JSON" in line, line


# ---- non-regular files: a FIFO must not block, a folder must not give a garbage header length ----

@pytest.mark.parametrize("cmd", [["safetensors", "info", "--file"], ["gguf", "info"]])
def test_fifo_and_directory_inputs(dflash_bin, tmp_path, cmd):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    one_line_error(run(dflash_bin, *cmd, fifo, timeout=20), fifo, "is a FIFO (named pipe), expected a regular file")
    one_line_error(run(dflash_bin, *cmd, tmp_path, timeout=20), tmp_path, "is a directory, expected a regular file")


def test_fifo_as_train_config(dflash_bin, tmp_path):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    one_line_error(run(dflash_bin, "train", "--config", fifo, timeout=20), fifo, "FIFO")


# ---- integers that overflow when narrowed; values shown as written ----

def gguf_with_block_count(path, n):
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_uint64("llama.block_count", n)
    w.add_uint32("llama.embedding_length", 16)
    w.add_uint32("llama.feed_forward_length", 32)
    w.add_uint32("llama.attention.head_count", 2)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tensor("token_embd.weight", torch.zeros(VOCAB, 16).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_layer_count_of_2_pow_32_plus_1(dflash_bin, tiny_target, tmp_path):
    ids = tmp_path / "ids.safetensors"
    save_file({"input_ids": torch.tensor([[1, 2, 3]])}, str(ids))
    g = tmp_path / "big.gguf"
    gguf_with_block_count(g, 2**32 + 1)  # used to run as a 1-layer model (a cast to int)
    one_line_error(run(dflash_bin, "target", "run", "--model", g, "--input", ids, "--output", tmp_path / "o.safetensors"),
                g, "'llama.block_count' is 4294967297, outside [1, 2147483647]")
    hf = copy_target(tiny_target, tmp_path / "hf", lambda c: c.update(num_hidden_layers=2**32 + 1))
    one_line_error(run(dflash_bin, "target", "run", "--model", hf, "--input", ids, "--output", tmp_path / "o.safetensors"),
                "'num_hidden_layers' is 4294967297, outside [0, 2147483647]")
    assert not (tmp_path / "o.safetensors").exists()


def test_steps_of_2_pow_64_minus_1_is_shown_as_written(dflash_bin, tmp_path):
    c = tmp_path / "c.json"
    c.write_text('{"steps": 18446744073709551615}')
    one_line_error(run(dflash_bin, "train", "--config", c), c, "18446744073709551615")


# ---- a corrupt .jsonl.gz is an error, not an empty file ----

def test_corrupt_jsonl_gz(dflash_bin, tiny_target, tmp_path):
    good = gzip.compress(b"".join(json.dumps({"input_ids": [3, 4, 5, 6], "loss_mask": [0, 1, 1, 1]}).encode() + b"\n"
                                  for _ in range(50)))
    cases = {
        "truncated.jsonl.gz": (good[: len(good) // 2], "corrupt or truncated gzip data"),
        "header_only.jsonl.gz": (good[:10], "corrupt or truncated gzip data"),
        "flipped.jsonl.gz": (good[:20] + bytes([good[20] ^ 0xFF]) + good[21:], "corrupt or truncated gzip data"),
        "plain.jsonl.gz": (b'{"input_ids": [1, 2], "loss_mask": [1, 1]}\n', "not gzip-compressed"),
    }
    for name, (data, why) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        r = run(dflash_bin, "train", "--target", tiny_target, "--data", p, "--out", tmp_path / f"run-{name}",
                "--mask-token-id", 5, "--steps", 1, "--threads", 1)
        one_line_error(r, p, why)


# ---- settings files: a duplicate key, a second YAML document ----

def test_duplicate_json_key_and_second_yaml_document(dflash_bin, tmp_path):
    j = tmp_path / "c.json"
    j.write_text('{"lr": 1e-3, "lr": 2e-3}')
    one_line_error(run(dflash_bin, "train", "--config", j), j, "key 'lr' appears twice")
    y = tmp_path / "c.yaml"
    y.write_text("lr: 1e-3\n---\nsteps: 3\n")
    one_line_error(run(dflash_bin, "train", "--config", y), f"{y}:2", "a second YAML document")


# ---- out-of-range settings are refused up front, naming the limit ----

@pytest.mark.parametrize("flag,value,want", [
    ("--threads", 1000000, "'threads' must be in [0, 1024]"),  # used to hang in the thread pool
    ("--batch-size", 10**9, "'batch_size' must be in [1, 65536]"),
    ("--num-anchors", 5000, "'num_anchors' must be in [1, 4096]"),
    ("--drafter-layers", 2**32 + 1, "'drafter_layers' must be in [1, 256], got 4294967297"),
    ("--activation-checkpoint", "every:0", "'activation_checkpoint' must be none, layer or every:K with K >= 1"),
    ("--target-layer-ids", "1,1", "'target_layer_ids' must be a list without repeats"),
    ("--lr", "nan", "'lr' must be a finite number in [1e-12, 10], got nan"),
])
def test_out_of_range_train_settings(dflash_bin, tiny_target, tmp_path, flag, value, want):
    r = run(dflash_bin, "train", "--target", tiny_target, "--data", tmp_path / "none.jsonl", "--out", tmp_path / "run",
            "--mask-token-id", 5, flag, value, timeout=30)
    one_line_error(r, want)
    assert not (tmp_path / "run").exists()  # refused before anything was created


# ---- accepted without a word where a check belongs ----

def test_non_finite_and_overflowing_numbers_in_config_json(dflash_bin, tiny_target, tmp_path):
    ids = tmp_path / "ids.safetensors"
    save_file({"input_ids": torch.tensor([[1, 2, 3]])}, str(ids))
    hf = tmp_path / "hf"
    copy_target(tiny_target, hf)
    text = (hf / "config.json").read_text()
    for field in ("rope_theta", "rms_norm_eps"):
        cfg = json.loads(text)
        cfg[field] = 1.0
        (hf / "config.json").write_text(json.dumps(cfg).replace(f'"{field}": 1.0', f'"{field}": 1e999'))
        one_line_error(run(dflash_bin, "target", "run", "--model", hf, "--input", ids, "--output", tmp_path / "o"),
                    "config.json", "not valid JSON", "1e999")
    g = tmp_path / "inf.gguf"
    w = gguf.GGUFWriter(str(g), arch="llama")
    for k, v in [("block_count", 1), ("embedding_length", 16), ("feed_forward_length", 32), ("attention.head_count", 2)]:
        w.add_uint32(f"llama.{k}", v)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("llama.rope.freq_base", float("inf"))
    w.add_tensor("token_embd.weight", torch.zeros(VOCAB, 16).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    one_line_error(run(dflash_bin, "target", "run", "--model", g, "--input", ids, "--output", tmp_path / "o"),
                g, "field 'rope_theta': expected a finite number in (1, 1000000000000], got inf")


def test_integer_and_bool_weights_are_refused(dflash_bin, tiny_target, tmp_path):
    ids = tmp_path / "ids.safetensors"
    save_file({"input_ids": torch.tensor([[1, 2, 3]])}, str(ids))
    name = "model.layers.0.self_attn.q_proj.weight"
    for dtype in (torch.int32, torch.bool):
        hf = copy_target(tiny_target, tmp_path / f"hf-{dtype}",
                         edit_weights=lambda w: w.update({name: w[name].to(dtype)}))
        one_line_error(run(dflash_bin, "target", "run", "--model", hf, "--input", ids, "--output", tmp_path / "o"),
                    name, "expected floating-point weights")


def test_token_ids_given_as_floats(dflash_bin, tiny_target, tmp_path):
    data = tmp_path / "samples.jsonl"
    data.write_text(json.dumps({"input_ids": [3, 4, 5], "loss_mask": [0, 1, 1]}) + "\n" +
                    '{"input_ids": [3, 4.0, 5], "loss_mask": [0, 1, 1]}\n')
    r = run(dflash_bin, "train", "--target", tiny_target, "--data", data, "--out", tmp_path / "run",
            "--mask-token-id", 5, "--steps", 1, "--threads", 1)
    one_line_error(r, f"{data}:2", "input_ids[1] is 4.0", "expected a token id")
    tok = tmp_path / "ids.jsonl"
    tok.write_text('{"ids": [1, 2.5]}\n')
    tj = tmp_path / "tokenizer.json"
    vocab = {chr(ord("a") + i): i for i in range(26)}
    tj.write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []}, "decoder": {"type": "ByteLevel"},
                              "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}}))
    out = tmp_path / "out.jsonl"
    one_line_error(run(dflash_bin, "tokenize", "--model", tj, "--input", tok, "--output", out, "--decode-ids"),
                f"{tok}:1", "ids[1] is 2.5")
    assert not out.exists() and not list(tmp_path.glob("out.jsonl.tmp*"))


def test_prompt_longer_than_the_context(dflash_bin, tiny_target, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_ids": list(range(3, 43))}) + "\n")  # 40 tokens, context 32
    r = run(dflash_bin, "data", "regenerate", "--model", tiny_target, "--input", prompts, "--output",
            tmp_path / "regen.jsonl", "--max-new", 4, "--eos", "none", "--batch", 1, timeout=120)
    one_line_error(r, "prompt 0", "is 40 tokens, longer than the target's context of 32 tokens")


def test_repeated_target_layer_ids_in_a_drafter_config(dflash_bin, tmp_path):
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 16, "intermediate_size": 32,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "num_hidden_layers": 2,
           "num_target_layers": 4, "vocab_size": VOCAB, "block_size": 4,
           "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 1]}}
    p = tmp_path / "drafter.json"
    p.write_text(json.dumps(cfg))
    r = run(dflash_bin, "plan", "--config", p)
    one_line_error(r, p, "target_layer_ids[1]", "also at index 0")


# ---- outputs: nothing partial; stale temporaries of a killed save are cleared on resume (test_train.py) ----

def test_failed_tokenize_leaves_no_output(dflash_bin, tmp_path):
    tj = tmp_path / "tokenizer.json"
    vocab = {chr(ord("a") + i): i for i in range(26)}
    tj.write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []}, "decoder": {"type": "ByteLevel"},
                              "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}}))
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "abc"}\n{"text": "cab"}\n{"txt": "no text field"}\n')
    out = tmp_path / "out.jsonl"
    one_line_error(run(dflash_bin, "tokenize", "--model", tj, "--input", inp, "--output", out), f"{inp}:3")
    assert not out.exists(), "a failed tokenize must not leave a partial output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "tokenizer.json"]
    inp.write_text('{"text": "abc"}\n')
    r = run(dflash_bin, "tokenize", "--model", tj, "--input", inp, "--output", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["ids"] == [0, 1, 2]


def test_libtorch_errors_come_without_a_stack_trace(dflash_bin, tiny_target, tmp_path):
    ids = tmp_path / "ids.safetensors"
    save_file({"input_ids": torch.tensor([[1, 2, VOCAB + 5]])}, str(ids))  # outside the embedding: LibTorch refuses
    r = run(dflash_bin, "target", "run", "--model", tiny_target, "--input", ids, "--output", tmp_path / "o.safetensors")
    one_line_error(r)
    assert not (tmp_path / "o.safetensors").exists()


def test_output_paths_are_checked_before_work_and_devices_stay_devices(dflash_bin, tmp_path):
    # A folder, a trailing '/' or an empty path is refused before any check runs; /dev/null is written as a stream
    # and stays a character device (it used to be replaced by a regular file when run as root).
    for dest in (tmp_path, f"{tmp_path}/", "", tmp_path / "missing" / "d.json"):
        one_line_error(run(dflash_bin, "doctor", "--quick", "--json", dest), "doctor: --json")
    import stat
    r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--json", "/dev/null", timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("devices", ["cuda:256", "cuda:999"])
def test_device_indices_that_would_wrap_are_refused(dflash_bin, devices):
    r = run(dflash_bin, "doctor", "--quick", "--devices", devices)
    assert r.returncode == 2 and "a CUDA device index is at most 127" in r.stderr and devices in r.stderr, r.stderr
