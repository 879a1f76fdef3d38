"""dflash.report: a training run's metrics in TensorBoard, Weights & Biases, MLflow and SwanLab.

`dflash train --report-to tensorboard,wandb,mlflow,swanlab` starts `follow` beside the trainer (through
python/cli_scripts/report.py, which loads this package without the ops library or torch): it reads what
RUN_DIR/metrics.jsonl receives and the checkpoints as they appear, and forwards every scalar, the run's settings and
the PNG plots to each tracker. `dflash report RUN_DIR --to ...` replays a finished run the same way. The trainer never
waits on it; a tracker that fails is said once (stderr and RUN_DIR/report/report.log) and left out from then on.
RUN_DIR/report/state.json keeps each tracker's run id and the last step it got, so `--resume` continues the same
tracker runs without sending a step twice. Nothing is imported here: each tracker's library loads only when named.
"""
