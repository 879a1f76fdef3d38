"""The metrics stream's readers under random damage (issue 49: the fuzz targets reach the metrics stream): a valid
metrics.jsonl of every line kind a run writes, mutated a few thousand ways with a fixed seed (bytes flipped, dropped,
duplicated or inserted, lines cut, NUL and non-UTF-8 bytes, deep nesting, huge numbers). `dflash plot`'s reader
(plot_metrics.read_rows) returns rows its plots can draw or raises its one-line MetricsError, nothing else; the
reporter's follower (dflash.report.metrics) never raises and sends only finite floats under names trackers accept."""
import json
import math
import pathlib
import random
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "cli_scripts"))
sys.path.insert(0, str(ROOT / "python"))
import plot_metrics  # noqa: E402
from dflash.report import metrics as stream  # noqa: E402

SAFE_NAME = re.compile(r"^[A-Za-z0-9_\-./ ]+$")


def valid_stream() -> bytes:
    lines = [{"event": "attention_backend", "device": "cpu", "requested": "auto", "backend": "fused"}]
    for step in range(1, 6):
        lines.append({"step": step, "loss": 3.5 - 0.1 * step, "lr": 6e-4, "grad_norm": 1.25, "tokens_per_s": 812.5,
                      "slot_acc": [None, 0.5, 0.25, 0.125], "accept_rate@2": 0.3, "tau": 1.4, "mem_gb": None,
                      "selector_loss": 0.7})
    return b"".join(json.dumps(r).encode() + b"\n" for r in lines)


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8)
        at = rng.randrange(len(b) + 1) if b else 0
        if kind == 0 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif kind == 1 and b:
            del b[at:at + rng.randint(1, 16)]
        elif kind == 2:
            b[at:at] = bytes(rng.choice(b"{}[]\",:0123456789.eE-+ntrufalse\n\0\xff\xc3") for _ in range(rng.randint(1, 8)))
        elif kind == 3 and b:
            end = min(len(b), at + rng.randint(1, 64))
            b[at:at] = b[at:end]
        elif kind == 4:
            b = b[:at]  # a run killed mid-write
        elif kind == 5:
            b[at:at] = b"[" * rng.choice((2, 50, 5000)) + b"\n"
        elif kind == 6:
            b[at:at] = rng.choice((b'{"step": 1e999}\n', b'{"step": 7, "loss": 1e400}\n', b'{"step": -1}\n',
                                   b'{"step": 3, "slot_acc": "x"}\n', b'{"step": 3, "loss": NaN}\n', b'[1, 2]\n',
                                   b'{"step": 3, "slot_acc": [1, {"a": 1}]}\n', b'"text"\n', b'{"step": true}\n'))
        else:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(b)


@pytest.mark.parametrize("seed", range(4))
def test_damaged_streams_are_read_or_refused_in_one_line(tmp_path, seed, capsys):
    rng = random.Random(seed)
    base = valid_stream()
    path = tmp_path / "metrics.jsonl"
    refused = 0
    for case in range(600):
        data = mutate(base, rng)
        path.write_bytes(data)
        try:
            rows = plot_metrics.read_rows(path)
        except plot_metrics.MetricsError as e:
            msg = str(e)
            assert "\n" not in msg and msg.startswith(f"{path}"), (case, msg)
            refused += 1
        else:
            for row in rows:
                plot_metrics.check_row(row, "again")  # only rows the plots can draw
        tail = stream.MetricsTail(path)
        for row in tail.read():
            if stream.is_step_line(row):
                for name, value in stream.step_scalars(row).items():
                    assert isinstance(value, float) and math.isfinite(value), (case, name, value)
                    assert SAFE_NAME.match(name), (case, name)
    assert 0 < refused < 600  # the mutations reach both outcomes
    capsys.readouterr()


def test_the_valid_stream_reads_whole():
    path_rows = [json.loads(line) for line in valid_stream().splitlines()]
    assert sum(stream.is_step_line(r) for r in path_rows) == 5
