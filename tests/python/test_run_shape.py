"""One run shape across commands (src/drafter/run_shape.h): every command that takes a setting of the training step's
shape (`train`, `plan`, `bench step`, `bench flops`, `bench producer`) declares it with train's flag, value name and
help, and with train's default; the old spellings (`--seq-len`, `--anchors`, `--loss-chunk`, `--checkpoint`) stop with
a usage error (exit 2) naming the new flag, never a silent alias."""
import re
import subprocess

import pytest

from cli_errors import one_line_error

SHAPE_FLAGS = ["max-len", "num-anchors", "block-size", "loss-chunk-rows", "kl-weight", "dtype", "activation-checkpoint"]
COMMANDS = [["plan"], ["bench", "step"], ["bench", "flops"], ["bench", "producer"]]
OLD = {"seq-len": "max-len", "anchors": "num-anchors", "loss-chunk": "loss-chunk-rows",
       "checkpoint": "activation-checkpoint"}


def help_rows(dflash_bin, cmd):
    """{flag: (value name, help, default)} of a command's --help; train shows its default as ' [x]'."""
    out = subprocess.run([dflash_bin, *cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        m = re.match(r"  --([a-z0-9-]+) (\S+)\s+(.*)$", line)
        if not m:
            continue
        flag, value, text = m.groups()
        d = re.search(r" \(default: ([^)]*)\)$", text) or re.search(r" \[([^\]]*)\]$", text)
        rows[flag] = (value, text[:d.start()] if d else text, d.group(1) if d else "")
    return rows


def test_every_command_declares_the_shared_settings_as_train_does(dflash_bin):
    train = help_rows(dflash_bin, ["train"])
    for flag in SHAPE_FLAGS:
        assert flag in train, flag
    assert train["kl-weight"][2] == "0.0" and train["max-len"][2] == "4096"
    seen = 0
    for cmd in COMMANDS:
        rows = help_rows(dflash_bin, cmd)
        for flag in SHAPE_FLAGS:
            if flag in rows:
                assert rows[flag] == train[flag], (cmd, flag, rows[flag], train[flag])
                seen += 1
        for old in OLD:
            assert old not in rows, (cmd, old)
    assert seen == 7 + 5 + 2 + 1  # plan: all seven; bench step: five; bench flops: two; bench producer: max-len


@pytest.mark.parametrize("cmd,old", [(["plan", "--preset", "qwen3-8b"], "seq-len"), (["plan", "--preset", "qwen3-8b"],
                                     "checkpoint"), (["plan", "--node", "--preset", "qwen3-8b"], "anchors"),
                                     (["bench", "step"], "loss-chunk"), (["bench", "step"], "anchors"),
                                     (["bench", "flops"], "seq-len"), (["bench", "producer"], "seq-len")])
def test_an_old_spelling_is_a_usage_error_naming_the_new_flag(dflash_bin, cmd, old):
    r = subprocess.run([dflash_bin, *cmd, "--" + old, "8"], capture_output=True, text=True, timeout=60)
    one_line_error(r, f"--{old} is now --{OLD[old]}", code=2)


@pytest.mark.parametrize("cmd", [["bench", "flops"], ["bench", "producer"]])
def test_the_targets_dtype_is_spelt_as_train_spells_it(dflash_bin, cmd):
    """--dtype is the drafter's on train; these commands' dtype is the target's: --target-dtype, as train's
    target_dtype, and --dtype stops naming it (it used to mean the target's dtype here)."""
    rows = help_rows(dflash_bin, cmd)
    assert "target-dtype" in rows and "dtype" not in rows, rows
    assert "target-dtype" in help_rows(dflash_bin, ["train"])
    r = subprocess.run([dflash_bin, *cmd, "--dtype", "bf16"], capture_output=True, text=True, timeout=60)
    one_line_error(r, "--dtype is now --target-dtype", code=2)


def test_the_plans_json_names_the_shape_as_train_does(dflash_bin):
    """plan --json writes the step's shape under train's keys (bench step's settings too: test_gpu_scripts)."""
    import json
    r = subprocess.run([dflash_bin, "plan", "--preset", "qwen3-8b", "--max-len", "2048", "--num-anchors", "64",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 3), r.stderr
    settings = json.loads(r.stdout)["settings"]
    assert settings["max_len"] == 2048 and settings["num_anchors"] == 64
    assert "seq_len" not in settings and "anchors" not in settings
