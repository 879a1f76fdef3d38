"""Device lists through every command that takes them (issue 36, class 3): each bad list is refused the same way by
train (target_devices and drafter_devices, as flags and in a config), the data commands, eval, bench, target and
doctor: one line naming the option, the list and the entry at fault, before any work. One grammar does it
(src/util/device_list.h); its unit tests are tests/util/test_device_list.cpp and the fuzz target fuzz_device_list.
"""
import json
import os
import subprocess

import pytest
import torch

from cli_errors import one_line_error

# A CUDA index this machine does not have (there are at most 128 indices and no machine here has 100 GPUs).
MISSING = "cuda:99"

# (case id, list, what the message must say for a layout option, for a one-device-per-worker list, for one device)
BAD = [
    ("empty_stage", "cuda:0,,cuda:1", "an empty stage in 'cuda:0,,cuda:1' (stage 1 of replica 0)",
     "an empty entry in 'cuda:0,,cuda:1' (entry 1)", "expected one device"),
    ("empty_replica", "cpu;;cpu", "an empty replica in 'cpu;;cpu' (replica 1)", "a ';' in 'cpu;;cpu'",
     "expected one device"),
    ("trailing_comma", "cpu,", "an empty stage in 'cpu,' (stage 1 of replica 0)", "an empty entry in 'cpu,' (entry 1)",
     "expected one device"),
    ("trailing_semicolon", "cpu;", "an empty replica in 'cpu;' (replica 1)", "a ';' in 'cpu;'", "expected one device"),
    ("control", "cpu\x01", "a control character (byte 1) at position 3 of 'cpu\\x01', in entry 'cpu\\x01'",
     "a control character (byte 1)", "a control character (byte 1)"),
    ("tab", "cuda:0\t,cpu", "a control character (byte 9) at position 6", "a control character (byte 9)",
     "a control character (byte 9)"),
    ("unknown_type", "cpu,gpu:0", "got 'gpu:0' in 'cpu,gpu:0'", "got 'gpu:0' in 'cpu,gpu:0'", "expected one device"),
    ("unknown_alone", "gpu:0", "expected a device like cpu, cuda or cuda:1, got 'gpu:0'",
     "expected a device like cpu, cuda or cuda:1, got 'gpu:0'", "expected a device like cpu, cuda or cuda:1, got 'gpu:0'"),
    ("mixed_shapes", "cpu,cpu;cpu", "replica 0 has 2, replica 1 has 1 in 'cpu,cpu;cpu'", "a ';' in 'cpu,cpu;cpu'",
     "expected one device"),
    ("wraps", "cpu,cuda:256", "'cuda:256' in 'cpu,cuda:256': a CUDA device index is at most 127",
     "'cuda:256' in 'cpu,cuda:256': a CUDA device index is at most 127", "expected one device"),
    ("wraps_alone", "cuda:999", "'cuda:999': a CUDA device index is at most 127",
     "'cuda:999': a CUDA device index is at most 127", "'cuda:999': a CUDA device index is at most 127"),
    ("not_visible", f"cpu,{MISSING}", f"'cpu,{MISSING}': '{MISSING}'", f"'cpu,{MISSING}': '{MISSING}'",
     "expected one device"),
    ("not_visible_alone", MISSING, f"'{MISSING}'", f"'{MISSING}'", f"'{MISSING}'"),
    ("blank", " ", "needs at least one device", "needs at least one device", "needs a device"),
]


def run(dflash_bin, *args, timeout=120):
    return subprocess.run([dflash_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM
    d = tmp_path_factory.mktemp("devices")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2)
    LlamaForCausalLM(cfg).float().save_pretrained(str(d / "target"))
    (d / "samples.jsonl").write_text(json.dumps({"input_ids": [3, 4, 5, 6], "loss_mask": [0, 1, 1, 1]}) + "\n")
    (d / "prompts.jsonl").write_text(json.dumps({"prompt_ids": [3, 4, 5]}) + "\n")
    save_file({"input_ids": torch.tensor([[1, 2, 3]])}, str(d / "ids.safetensors"))
    return d


# Each command with the option that takes the list: (id, kind of list, where it is named, argv given the list).
def commands(f):
    t = f / "target"
    train = ["train", "--target", t, "--data", f / "samples.jsonl", "--out", f / "run", "--mask-token-id", 5,
             "--steps", 1, "--threads", 1]
    return [
        ("train_target_devices", "layout", "train config: 'target_devices'", lambda x: [*train, "--target-devices", x]),
        ("train_drafter_devices", "list", "train config: 'drafter_devices'", lambda x: [*train, "--drafter-devices", x]),
        ("data_regenerate", "layout", "data regenerate: --devices",
         lambda x: ["data", "regenerate", "--model", t, "--input", f / "prompts.jsonl", "--output", f / "regen.jsonl",
                    "--devices", x]),
        ("data_dump_hidden", "layout", "data dump-hidden: --devices",
         lambda x: ["data", "dump-hidden", "--model", t, "--data", f / "samples.jsonl", "--out", f / "hidden",
                    "--devices", x]),
        ("eval_devices", "layout", "eval: --devices",
         lambda x: ["eval", "--target", t, "--data", f"p={f / 'prompts.jsonl'}", "--proposer", "oracle",
                    "--devices", x]),
        ("eval_drafter_device", "one", "eval: --drafter-device",  # checked before the drafter folder is read
         lambda x: ["eval", "--target", t, "--data", f"p={f / 'prompts.jsonl'}", "--drafter", str(f / "no-drafter"),
                    "--drafter-device", x]),
        ("bench_decode", "layout", "bench decode: --devices", lambda x: ["bench", "decode", "--model", t, "--devices", x]),
        ("bench_attention", "one", "bench attention: --device", lambda x: ["bench", "attention", "--device", x]),
        ("target_run", "layout", "target run: --devices",
         lambda x: ["target", "run", "--model", t, "--input", f / "ids.safetensors", "--output", f / "o.safetensors",
                    "--devices", x]),
        ("target_generate", "layout", "target generate: --devices",
         lambda x: ["target", "generate", "--model", t, "--prompt-ids", "3,4", "--devices", x]),
    ]


COMMAND_IDS = ["train_target_devices", "train_drafter_devices", "data_regenerate", "data_dump_hidden", "eval_devices",
               "eval_drafter_device", "bench_decode", "bench_attention", "target_run", "target_generate"]


# One list of each kind of mistake runs through every command by default; the whole table is the slow set.
QUICK = ("empty_stage", "control", "wraps", "not_visible")


def refuse_all(dflash_bin, files, command, cases):
    (_, kind, where, argv), = [c for c in commands(files) if c[0] == command]
    for case, value, layout_msg, list_msg, one_msg in (b for b in BAD if b[0] in cases):
        want = {"layout": layout_msg, "list": list_msg, "one": one_msg}[kind]
        if case.startswith("not_visible") and "cpu," in value and kind == "one":
            continue  # a list given to a one-device option: refused for being a list (covered above)
        r = run(dflash_bin, *argv(value))
        line = one_line_error(r)
        assert line.startswith(f"dflash: error: {where}"), (case, line)
        assert want in line, (case, want, line)
        if case.startswith("not_visible"):
            assert "asks for a CUDA device" in line or "CUDA device(s)" in line, (case, line)
    assert not (files / "run").exists() and not (files / "regen.jsonl").exists() and not (files / "hidden").exists()
    assert not (files / "o.safetensors").exists()


@pytest.mark.parametrize("command", COMMAND_IDS)
def test_every_command_refuses_each_kind_of_bad_device_list(dflash_bin, files, command):
    refuse_all(dflash_bin, files, command, QUICK)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMAND_IDS)
def test_every_command_refuses_every_bad_device_list(dflash_bin, files, command):
    refuse_all(dflash_bin, files, command, [b[0] for b in BAD if b[0] not in QUICK])


def test_train_config_file_lists_and_json_arrays(dflash_bin, files, tmp_path):
    base = {"target": str(files / "target"), "data": str(files / "samples.jsonl"), "out": str(tmp_path / "run"),
            "mask_token_id": 5, "steps": 1}
    cases = [
        ({"target_devices": "cpu;;cpu"}, "c.json: 'target_devices': an empty replica in 'cpu;;cpu'"),
        ({"drafter_devices": ["cpu", "", "cpu"]}, "c.json: 'drafter_devices': an empty entry in 'cpu,,cpu'"),
        ({"drafter_devices": ["", "cpu"]}, "an empty entry in ',cpu' (entry 0)"),  # used to be dropped silently
        ({"target_devices": "gpu:0"}, "c.json: 'target_devices': expected a device like cpu, cuda or cuda:1, got"),
        ({"drafter_devices": "cuda:1", "target_devices": "cuda:0,cuda:1"},
         "train config: cuda:1 is in 'target_devices' ('cuda:0,cuda:1') and in 'drafter_devices' ('cuda:1')"),
    ]
    for extra, want in cases:
        c = tmp_path / "c.json"
        c.write_text(json.dumps({**base, **extra}))
        line = one_line_error(run(dflash_bin, "train", "--config", c))
        assert want in line, (extra, line)
        assert not (tmp_path / "run").exists()


def doctor_refuses(dflash_bin, cases):
    # A flag error (exit 2), the line first, before any check; doctor checks a device the machine lacks as a failed row.
    for case, value, layout_msg, _, _ in BAD:
        if case in cases and not case.startswith("not_visible"):
            line = one_line_error(run(dflash_bin, "doctor", "--quick", "--devices", value), code=2)
            assert line.startswith("dflash: error: doctor: --devices") and layout_msg in line, (case, line)


def test_doctor_devices(dflash_bin):
    doctor_refuses(dflash_bin, QUICK)


@pytest.mark.slow
def test_doctor_devices_every_bad_list(dflash_bin):
    doctor_refuses(dflash_bin, [b[0] for b in BAD if b[0] not in QUICK])


@pytest.mark.slow
def test_doctor_config_lists(dflash_bin, files, tmp_path):
    # The config's lists go through train's own validation; a bad one is the failed config row.
    c = tmp_path / "c.json"
    c.write_text(json.dumps({"target": str(files / "target"), "target_devices": "cpu;;cpu"}))
    r = run(dflash_bin, "doctor", "--quick", "--devices", "cpu", "--config", c, timeout=600)
    assert r.returncode == 1, r.stderr
    assert "c.json: 'target_devices': an empty replica in 'cpu;;cpu'" in r.stdout, r.stdout
