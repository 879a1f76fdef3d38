"""TensorBoard: event files written by torch's SummaryWriter (the `tensorboard` package's format, no TensorFlow)."""
from __future__ import annotations

import json


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, settings, entry: dict):
        self.dir = settings.folder(settings.tensorboard_dir, "tensorboard")
        self.entry = entry
        self.writer = None

    def open(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.entry["run_id"] = str(self.dir)

    def log_config(self, config: dict) -> None:
        self.writer.add_text("settings", "```\n" + json.dumps(config, indent=1, sort_keys=True) + "\n```", 0)

    def log_scalars(self, step: int, scalars: dict) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # visible in a running `tensorboard --logdir` now, not when a buffer fills

    def log_images(self, step: int, pngs: dict) -> None:
        import numpy as np
        from PIL import Image

        for tag, path in pngs.items():
            with Image.open(path) as im:
                self.writer.add_image(tag, np.asarray(im.convert("RGB")), step, dataformats="HWC")
        self.writer.flush()

    def close(self, how: str) -> None:
        self.writer.close()
