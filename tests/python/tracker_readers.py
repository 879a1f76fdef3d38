"""Each tracker's data read back with that tracker's own reader, as {name: [(step, value), ...]} in write order:
TensorBoard's EventAccumulator, W&B's `wandb leet inspect --json` (its reader of offline .wandb logs), MLflow's
client, SwanLab's DataStoreReader and record protos. Also what metrics.jsonl says they should hold."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent  # the trackers' command-line tools (wandb, tensorboard)
sys.path.insert(0, str(ROOT / "python"))
from dflash.report.metrics import is_step_line, step_scalars  # noqa: E402


def expected_scalars(run) -> dict:
    """{name: [(step, value)]} of metrics.jsonl's step lines, named as the reporter names them."""
    out = {}
    for line in (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if is_step_line(row):
            for name, value in step_scalars(row).items():
                out.setdefault(name, []).append((row["step"], value))
    return out


def tensorboard_scalars(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for events in sorted(pathlib.Path(folder).glob("events.out.tfevents.*")):  # one file per invocation
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def tensorboard_images(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"images": 0})
    acc.Reload()
    return {tag: [e.step for e in acc.Images(tag)] for tag in acc.Tags()["images"]}


def wandb_records(wandb_dir) -> list:
    """Every record of every offline run under wandb_dir/wandb, oldest run first."""
    records = []
    for log in sorted(pathlib.Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb")):
        r = subprocess.run([str(VENV_BIN / "wandb"), "leet", "inspect", "--json", str(log)],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, WANDB_SILENT="true"))
        assert r.returncode == 0, r.stderr
        records += [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return records


def wandb_scalars(wandb_dir) -> dict:
    out = {}
    for rec in wandb_records(wandb_dir):
        if rec.get("type") == "history":
            item = rec["history"]["item"]
            for k, v in item.items():
                if not k.startswith("_") and isinstance(v, (int, float)):
                    out.setdefault(k, []).append((item["_step"], v))
    return out


def mlflow_run(tracking_dir, run_id=None):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=pathlib.Path(tracking_dir).resolve().as_uri())
    if run_id is None:
        runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
        assert len(runs) == 1, runs
        run_id = runs[0].info.run_id
    return client, client.get_run(run_id)


def mlflow_scalars(tracking_dir) -> dict:
    client, run = mlflow_run(tracking_dir)
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k))
            for k in run.data.metrics}


def swanlab_records(logdir) -> list:
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    out = []
    for log in sorted(pathlib.Path(logdir).glob("run-*/run-*.swanlab")):
        reader = DataStoreReader()
        reader.open(log)
        for data in reader:
            rec = Record()
            rec.ParseFromString(data)
            out.append(rec)
        reader.close()
    return out


def swanlab_scalars(logdir) -> dict:
    out = {}
    for rec in swanlab_records(logdir):
        if rec.HasField("scalar"):
            out.setdefault(rec.scalar.key, []).append((rec.scalar.step, rec.scalar.value.number))
    return out
