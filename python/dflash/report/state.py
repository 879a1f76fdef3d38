"""RUN_DIR/report/state.json: per tracker, its run id and the last step it was sent, so that a resumed run (or a
second `dflash report`) continues the same tracker run and sends no step twice; under "plots", the checkpoint step
whose plots were sent last. Replaced whole on each save."""
from __future__ import annotations

import json
import os
import pathlib


class ReportState:
    def __init__(self, path: pathlib.Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self.data = {}

    def of(self, tracker: str) -> dict:
        """The tracker's entry: {"run_id", "last_step", "config_logged"} as far as known (mutable)."""
        return self.data.setdefault(tracker, {"last_step": 0})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.tmp.{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)
