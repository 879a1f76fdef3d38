"""metrics.jsonl as the trackers see it: the step lines' scalars under one name per metric, read as the file grows."""
from __future__ import annotations

import json
import math
import pathlib
import re

PREFIX = "train/"
# MLflow takes letters, digits and _ - . / and space in a metric name; the same names go to every tracker.
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-./ ]")


def scalar_name(key: str, index: int | None = None) -> str:
    """train/<key> (train/slot_acc/<i> for the i-th item of a list); '@' and other characters MLflow refuses
    become '_' (accept_rate@2 -> train/accept_rate_2)."""
    name = PREFIX + _UNSAFE.sub("_", key)
    return name if index is None else f"{name}/{index}"


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def step_scalars(row: dict) -> dict[str, float]:
    """Every finite number of a step line (lists item by item); `step` is the x axis, null (nothing counted) and
    text are left out."""
    out = {}
    for key, value in row.items():
        if key == "step":
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if (x := _number(item)) is not None:
                    out[scalar_name(key, i)] = x
        elif (x := _number(value)) is not None:
            out[scalar_name(key)] = x
    return out


def is_step_line(row) -> bool:
    """A step's metrics (event lines such as the attention backend chosen carry "event")."""
    return isinstance(row, dict) and isinstance(row.get("step"), int) and "event" not in row


class MetricsTail:
    """The complete lines appended to metrics.jsonl since the last read (a line still being written waits for its
    newline; a line that is not JSON is skipped)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.offset = 0
        self.skipped = 0

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, 2) < self.offset:  # rewritten from the start (a resume drops later lines)
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        rows = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes
                self.skipped += 1
        return rows


def eval_scalars(results: dict) -> dict[str, float]:
    """`dflash eval`'s results (its --json) as eval/<dataset>/<metric>: every number of each dataset (lists item by
    item, cycle_ms by phase)."""
    out = {}
    for ds in results.get("datasets", []):
        prefix = "eval/" + _UNSAFE.sub("_", str(ds.get("name", "data")))
        for key, value in ds.items():
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
            if items is None:
                if (x := _number(value)) is not None:
                    out[f"{prefix}/{key}"] = x
                continue
            for sub, item in items:
                if (x := _number(item)) is not None:
                    out[f"{prefix}/{key}/{sub}"] = x
    return out
