"""MLflow: a run in the experiment `report_project` of the tracking URI (default: the folder RUN_DIR/report/mlruns);
the run id is kept so a resumed training run continues it."""
from __future__ import annotations

import os
import pathlib
import time

# A local folder is MLflow's file store, which MLflow 3 keeps only behind this switch (its database and server
# backends need the full `mlflow` package).
_FILE_STORE_SWITCH = "MLFLOW_ALLOW_FILE_STORE"


def tracking_uri(given: str, default: pathlib.Path) -> str:
    if not given:
        return default.resolve().as_uri()
    if "://" in given or given.startswith(("file:", "sqlite:", "databricks")):
        return given
    return pathlib.Path(given).resolve().as_uri()  # a folder


class MlflowTracker:
    name = "mlflow"

    def __init__(self, settings, entry: dict):
        self.settings = settings
        self.entry = entry
        self.client = None
        self.run_id = None

    def open(self) -> None:
        s = self.settings
        uri = tracking_uri(s.mlflow_tracking_uri, s.report_dir / "mlruns")
        if uri.startswith("file:"):
            os.environ.setdefault(_FILE_STORE_SWITCH, "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = self.entry.get("run_id")
        if self.run_id:
            self.client.update_run(self.run_id, status="RUNNING")
            return
        exp = self.client.get_experiment_by_name(s.project)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(s.project)
        self.run_id = self.client.create_run(exp_id, run_name=s.name).info.run_id
        self.entry["run_id"] = self.run_id

    def log_config(self, config: dict) -> None:
        from mlflow.entities import Param

        params = [Param(k, str(v)) for k, v in sorted(config.items())]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log_scalars(self, step: int, scalars: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in scalars.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def log_images(self, step: int, pngs: dict) -> None:
        for path in pngs.values():
            self.client.log_artifact(self.run_id, str(path), artifact_path=f"plots/step-{step}")

    def close(self, how: str) -> None:
        status = {"done": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}.get(how, "KILLED")
        self.client.set_terminated(self.run_id, status)
