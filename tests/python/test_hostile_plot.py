"""`dflash plot` on a damaged metrics.jsonl (issue 49, class 5): a torn last line (a run killed mid-write) is
skipped with a note and the plots are drawn from the rest; anything else (a garbage line, an array line, a bad slot
key, a step or value of the wrong type, binary bytes, NUL bytes, JSON nested too deeply, a folder in place of the
file) is one `dflash: error:` line naming the file, the line number and what was expected, exit 1, no traceback
and no PNG written."""
import json
import os
import subprocess

import pytest

from cli_errors import one_line_error

GOOD = [{"step": 1, "loss": 2.0, "acc": 0.1, "slot_acc": [0.0, 0.2, None, 0.1], "accept_rate@0": 0.5},
        {"event": "attention_backend", "backend": "fused"},
        {"step": 2, "loss": 1.5, "acc": 0.2, "slot_acc": [0.0, 0.3, 0.1, 0.1], "accept_rate@0": 0.6, "tau": None}]
HEAD = "".join(json.dumps(r) + "\n" for r in GOOD).encode()


def plot(dflash_bin, run_dir, *extra):
    return subprocess.run([dflash_bin, "plot", str(run_dir), *map(str, extra)], capture_output=True, text=True,
                          env=dict(os.environ, OMP_WAIT_POLICY="passive"))


def run_with(tmp_path, tail):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_bytes(HEAD + tail)
    return d


@pytest.mark.parametrize("tail,expected", [
    (b"hello world\n", "line 4: expected one JSON object per line (Expecting value at column 1)"),
    (b'{"step": 3, "loss": 1.0}\n{"step": 4, "lo\n{"step": 5}\n', "line 5: expected one JSON object per line"),
    (b"[1, 2, 3]\n", "line 4: expected a JSON object per line, got an array"),
    (b'"a string"\n', "line 4: expected a JSON object per line, got a string"),
    (b'{"step": 3, "accept_rate@x": 0.5}\n', 'line 4: a slot key must be accept_rate@<slot number>, got "accept_rate@x"'),
    (b'{"step": 3, "accept_rate@": 0.5}\n', "line 4: a slot key must be accept_rate@<slot number>"),
    (b'{"step": "3", "loss": 1.0}\n', "line 4: 'step' must be a whole number >= 0, got \"3\""),
    (b'{"step": -1, "loss": 1.0}\n', "line 4: 'step' must be a whole number >= 0, got -1"),
    (b'{"step": 3, "loss": "high"}\n', 'line 4: "loss" must be a number or null, got a string'),
    (b'{"step": 3, "loss": true}\n', 'line 4: "loss" must be a number or null, got a boolean'),
    (b'{"step": 3, "slot_acc": 0.5}\n', "line 4: 'slot_acc' must be an array of numbers, got 0.5"),
    (b'\xff\xfe\x80garbage\n', "line 4: expected UTF-8 JSON text, got binary bytes"),
    (b'{"step": 3,\x00 "loss": 1.0}\n', "line 4: expected JSON text, got a NUL byte"),
    (b"\x00" * 64 + b"\n", "line 4: expected JSON text, got a NUL byte"),
    (b"[" * 100000 + b"\n", "line 4: expected one JSON object per line (nested too deeply)"),
])
def test_a_damaged_line_is_one_error_naming_file_and_line(dflash_bin, tmp_path, tail, expected):
    d = run_with(tmp_path, tail)
    r = plot(dflash_bin, d)
    line = one_line_error(r, f"plot: {d / 'metrics.jsonl'}: {expected}")
    assert "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["metrics.jsonl"], line  # nothing drawn


@pytest.mark.parametrize("torn", [b'{"step": 3, "loss": 1.', b'{"st', b"\xff\xfe", b'{"step": 3, "loss":\x00'])
def test_a_torn_last_line_is_skipped_with_a_note(dflash_bin, tmp_path, torn):
    pytest.importorskip("matplotlib")
    d = run_with(tmp_path, torn)  # no newline at the end: the writer was stopped mid-line
    data = tmp_path / "plotted.json"
    r = plot(dflash_bin, d, "--json", data)
    assert r.returncode == 0, r.stderr
    assert f"plot: note: {d / 'metrics.jsonl'}: line 4 is cut short" in r.stderr, r.stderr
    plotted = json.loads(data.read_text())
    assert plotted["loss.png"]["series"]["loss"] == {"steps": [1, 2], "values": [2.0, 1.5]}
    assert (d / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_complete_last_line_without_newline_is_kept(dflash_bin, tmp_path):
    pytest.importorskip("matplotlib")
    d = run_with(tmp_path, b'{"step": 3, "loss": 1.25}')
    data = tmp_path / "plotted.json"
    r = plot(dflash_bin, d, "--json", data)
    assert r.returncode == 0 and "cut short" not in r.stderr, r.stderr
    assert json.loads(data.read_text())["loss.png"]["series"]["loss"]["steps"] == [1, 2, 3]


def test_a_folder_or_an_empty_file_in_place_of_metrics(dflash_bin, tmp_path):
    d = tmp_path / "run"
    (d / "metrics.jsonl").mkdir(parents=True)
    one_line_error(plot(dflash_bin, d), f"{d / 'metrics.jsonl'}", "is a directory, expected a regular file")
    (d / "metrics.jsonl").rmdir()
    (d / "metrics.jsonl").write_text("\n\n")
    one_line_error(plot(dflash_bin, d), f"plot: {d / 'metrics.jsonl'}: no metrics lines")
