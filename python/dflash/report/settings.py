"""The reporter's settings: the report_* keys and each tracker's local/offline setting, as `dflash train` saved them
in RUN_DIR/train_config.json (docs/TRAINING.md), under what `dflash report` was given."""
from __future__ import annotations

import dataclasses
import json
import pathlib

TRACKERS = ("tensorboard", "wandb", "mlflow", "swanlab")


@dataclasses.dataclass
class ReportSettings:
    run_dir: pathlib.Path
    trackers: list[str]
    project: str = "dflash"
    run_name: str = ""
    tensorboard_dir: str = ""
    wandb_mode: str = "offline"
    wandb_dir: str = ""
    mlflow_tracking_uri: str = ""
    swanlab_mode: str = "local"
    swanlab_logdir: str = ""
    train_config: dict = dataclasses.field(default_factory=dict)  # the run's settings: config/params

    @property
    def report_dir(self) -> pathlib.Path:
        return self.run_dir / "report"

    def folder(self, given: str, default: str) -> pathlib.Path:
        return pathlib.Path(given) if given else self.report_dir / default

    @property
    def name(self) -> str:
        return self.run_name or self.run_dir.resolve().name


def _trackers(text) -> list[str]:
    if isinstance(text, list):
        text = ",".join(text)
    names = [] if text in ("", "none", None) else str(text).split(",")
    for n in names:
        if n not in TRACKERS:
            raise ValueError(f"report_to: expected none or a comma list of {', '.join(TRACKERS)}, got '{text}'")
    return names


def load_settings(run_dir: pathlib.Path, overrides: dict | None = None) -> ReportSettings:
    """train_config.json's settings (a run made before report_to: the defaults), `overrides` on top."""
    path = run_dir / "train_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    merged = {**config, **(overrides or {})}
    return ReportSettings(
        run_dir=run_dir,
        trackers=_trackers(merged.get("report_to", "none")),
        project=merged.get("report_project") or "dflash",
        run_name=merged.get("report_run_name", ""),
        tensorboard_dir=merged.get("tensorboard_dir", ""),
        wandb_mode=merged.get("wandb_mode", "offline"),
        wandb_dir=merged.get("wandb_dir", ""),
        mlflow_tracking_uri=merged.get("mlflow_tracking_uri", ""),
        swanlab_mode=merged.get("swanlab_mode", "local"),
        swanlab_logdir=merged.get("swanlab_logdir", ""),
        train_config=config,
    )
