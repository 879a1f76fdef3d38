"""`dflash train --report-to` and `dflash report` (python/dflash/report; docs/TRAINING.md "Following a run in
TensorBoard, W&B, MLflow or SwanLab") on test_train.py's tiny offline run, with the real tracker libraries and no
network: every scalar of metrics.jsonl read back from each tracker with that tracker's own reader
(tracker_readers.py) equals metrics.jsonl; the settings and the plots are there; a tracker that fails does not stop
training and is said once; kill -9 + --resume continues the same tracker runs without a step twice; `dflash report`
replays a run made without trackers, and a second replay sends nothing twice; `tensorboard --logdir` on 127.0.0.1,
loaded in headless Chromium, shows the loss chart."""
import json
import re
import subprocess
import time

import numpy as np
import pytest

import tracker_readers as tr
from headless_chromium import HeadlessPage
from eval_cli import run_eval, write_prompts
from test_train import TIMEOUT, VOCAB, base_args, metrics, offline_dir, target_dir, train  # noqa: F401 (fixtures)

ALL = "tensorboard,wandb,mlflow,swanlab"
# What an exact resume reproduces (timings and memory differ between runs).
DETERMINISTIC = ("train/loss", "train/acc", "train/lr", "train/grad_norm", "train/slot_acc/")


def assert_same(got: dict, want: dict, float32=False, only=None):
    """Each metric of `want` is in `got` with the same steps, once each, and the same values (TensorBoard keeps
    float32)."""
    names = [n for n in want if only is None or n.startswith(only)]
    assert names
    for name in names:
        assert name in got, (name, sorted(got))
        assert [s for s, _ in got[name]] == [s for s, _ in want[name]], name
        g, w = np.array([v for _, v in got[name]]), np.array([v for _, v in want[name]])
        if float32:
            g, w = g.astype(np.float32), w.astype(np.float32)
        np.testing.assert_array_equal(g, w, err_msg=name)


def report_args(target, data, run, **kw):
    # One checkpoint at the end: its plots go to the trackers' image panels once.
    return base_args(target, data, run, checkpoint_every=kw.pop("checkpoint_every", 100), **kw)


@pytest.fixture(scope="module")
def all_trackers_run(dflash_bin, target_dir, offline_dir, tmp_path_factory):  # noqa: F811
    run = tmp_path_factory.mktemp("all") / "run"
    r = train(dflash_bin, report_args(target_dir[0], offline_dir[0], run, steps=4) + ["--report-to", ALL])
    return run, r


def test_every_scalar_settings_and_plots_reach_every_tracker(all_trackers_run):
    run, r = all_trackers_run
    assert "report:" not in r.stderr, r.stderr  # nothing failed
    want = tr.expected_scalars(run)
    for name in ("train/loss", "train/acc", "train/slot_acc/3", "train/lr", "train/grad_norm", "train/tokens_per_s",
                 "train/samples_per_s", "train/producer_busy", "train/drafter_busy", "train/rss_bytes"):
        assert [s for s, _ in want[name]] == [1, 2, 3, 4], name
    report = run / "report"

    assert_same(tr.tensorboard_scalars(report / "tensorboard"), want, float32=True)
    assert tr.tensorboard_images(report / "tensorboard")["plots/loss"] == [4]

    assert_same(tr.wandb_scalars(report), want)
    records = tr.wandb_records(report)
    (wrun,) = [x["run"] for x in records if x["type"] == "run"]
    assert (wrun["project"], wrun["display_name"]) == ("dflash", "run")
    assert wrun["config"]["update"]["num_anchors"] == 6
    assert any(x["history"]["item"].get("plots/loss._type") == "image-file" for x in records if x["type"] == "history")

    assert_same(tr.mlflow_scalars(report / "mlruns"), want)
    client, mrun = tr.mlflow_run(report / "mlruns")
    assert (mrun.info.run_name, mrun.info.status) == ("run", "FINISHED")
    assert mrun.data.params["num_anchors"] == "6" and mrun.data.params["report_to"] == ALL
    assert "plots/step-4/loss.png" in [a.path for a in client.list_artifacts(mrun.info.run_id, "plots/step-4")]

    assert_same(tr.swanlab_scalars(report / "swanlog"), want)
    starts = [x.start for x in tr.swanlab_records(report / "swanlog") if x.HasField("start")]
    assert [(s.project, s.name) for s in starts] == [("dflash", "run")]
    assert any(x.media.key == "plots/loss" for x in tr.swanlab_records(report / "swanlog") if x.HasField("media"))


def test_eval_of_the_run_reaches_its_trackers(dflash_bin, all_trackers_run, target_dir, tmp_path):  # noqa: F811
    """`dflash eval --drafter RUN_DIR` of a run with trackers: its results at the run's last checkpoint step."""
    run, _ = all_trackers_run
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(run / "export"), "--dtype", "fp32", "--engine",
                        "vllm"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    prompts = write_prompts(tmp_path / "p.jsonl", 2, VOCAB)
    results, _, _ = run_eval(dflash_bin, target_dir[0], prompts, tmp_path, "--drafter", str(run), "--max-new", "8",
                             env=None, timeout=TIMEOUT)
    (ds,) = results["datasets"]
    for name, got in (("tensorboard", tr.tensorboard_scalars(run / "report" / "tensorboard")),
                      ("mlflow", tr.mlflow_scalars(run / "report" / "mlruns"))):
        assert got["eval/tiny/tau"] == [(4, np.float32(ds["tau"]) if name == "tensorboard" else ds["tau"])], name
        assert got["eval/tiny/speedup"][0][0] == 4 and "eval/tiny/slot_acceptance/0" in got, name


def test_a_failing_tracker_is_said_once_and_training_goes_on(dflash_bin, target_dir, offline_dir, tmp_path):
    run, plain = tmp_path / "run", tmp_path / "plain"
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    r = train(dflash_bin, report_args(target_dir[0], offline_dir[0], run, steps=4) +
              ["--report-to", "mlflow,tensorboard", "--mlflow-tracking-uri", str(blocker / "mlruns")])
    said = [line for line in r.stderr.splitlines() if line.startswith("report: mlflow failed")]
    assert len(said) == 1 and "training goes on without it" in said[0], r.stderr
    assert said[0] in (run / "report" / "report.log").read_text()
    assert [x["step"] for x in metrics(run)] == [1, 2, 3, 4]
    assert_same(tr.tensorboard_scalars(run / "report" / "tensorboard"), tr.expected_scalars(run), float32=True)
    # The run itself is the one it would have been without trackers.
    train(dflash_bin, report_args(target_dir[0], offline_dir[0], plain, steps=4))
    assert [x["loss"] for x in metrics(run)] == [x["loss"] for x in metrics(plain)]


def test_kill_and_resume_continue_the_same_tracker_runs(dflash_bin, target_dir, offline_dir, tmp_path):
    run = tmp_path / "run"
    args = report_args(target_dir[0], offline_dir[0], run, steps=6, checkpoint_every=2) + ["--report-to", ALL]
    r = train(dflash_bin, args, env={"DFLASH_TEST_KILL_IN_SAVE": "4"}, check=False)
    assert r.returncode == -9, r.stderr
    state = json.loads((run / "report" / "state.json").read_text())
    assert {name: state[name]["last_step"] for name in ALL.split(",")} == dict.fromkeys(ALL.split(","), 4)
    # Steps 3 and 4 are trained again from the checkpoint of step 2; the trackers had them already.
    train(dflash_bin, ["--out", str(run), "--resume"])
    assert [x["step"] for x in metrics(run)] == [1, 2, 3, 4, 5, 6]
    want = tr.expected_scalars(run)
    report = run / "report"
    assert_same(tr.tensorboard_scalars(report / "tensorboard"), want, float32=True, only=DETERMINISTIC)
    assert_same(tr.wandb_scalars(report), want, only=DETERMINISTIC)
    assert_same(tr.mlflow_scalars(report / "mlruns"), want, only=DETERMINISTIC)  # one MLflow run (mlflow_run)
    assert_same(tr.swanlab_scalars(report / "swanlog"), want, only=DETERMINISTIC)
    for name in ("train/tokens_per_s", "train/rss_bytes"):  # the others too, with the first run's values
        assert [s for s, _ in tr.mlflow_scalars(report / "mlruns")[name]] == [1, 2, 3, 4, 5, 6]
    wandb_ids = {x["run"]["run_id"] for x in tr.wandb_records(report) if x["type"] == "run"}
    swanlab_ids = {x.start.id for x in tr.swanlab_records(report / "swanlog") if x.HasField("start")}
    assert wandb_ids == {state["wandb"]["run_id"]} and swanlab_ids == {state["swanlab"]["run_id"]}
    client, mrun = tr.mlflow_run(report / "mlruns")
    assert (mrun.info.run_id, mrun.info.status) == (state["mlflow"]["run_id"], "FINISHED")


def test_report_replays_a_finished_run_once(dflash_bin, target_dir, offline_dir, tmp_path):
    run = tmp_path / "run"
    train(dflash_bin, report_args(target_dir[0], offline_dir[0], run, steps=3))
    assert not (run / "report").exists()

    def report(*argv):
        return subprocess.run([dflash_bin, "report", str(run), *argv], capture_output=True, text=True,
                              timeout=TIMEOUT)
    r = report("--to", "mlflow,tensorboard", "--report-project", "replayed")
    assert r.returncode == 0, r.stderr
    want = tr.expected_scalars(run)
    assert_same(tr.tensorboard_scalars(run / "report" / "tensorboard"), want, float32=True)
    assert_same(tr.mlflow_scalars(run / "report" / "mlruns"), want)
    client, mrun = tr.mlflow_run(run / "report" / "mlruns")
    assert client.get_experiment(mrun.info.experiment_id).name == "replayed"
    assert report("--to", "mlflow").returncode == 0  # the same MLflow run, nothing sent twice
    assert_same(tr.mlflow_scalars(run / "report" / "mlruns"), want)

    r = report("--to", "comet")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "dflash: error: report: --to must be a comma list of tensorboard, wandb, mlflow, swanlab (each once), "
        "got 'comet'"), r.stderr
    r = train(dflash_bin, report_args(target_dir[0], offline_dir[0], tmp_path / "x") + ["--report-to", "tb"],
              check=False)
    assert r.returncode != 0 and "'report_to' must be none or a comma list of tensorboard, wandb, mlflow, swanlab" \
        in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()


# The train/loss card of TensorBoard's Time Series page once its chart is drawn: the cells of its data table.
LOSS_CARD = """(() => {
  const title = document.querySelector('tb-truncated-path[title="train/loss"]');
  const card = title && title.closest('scalar-card');
  if (!card || !card.querySelector('line-chart canvas, line-chart svg path')) return null;
  const cells = [...card.querySelectorAll('tb-data-table-content-row .cell')].map(c => c.textContent.trim());
  return cells.length ? cells : null;
})()"""


def test_tensorboard_page_shows_the_loss_chart(all_trackers_run, tmp_path):
    """`tensorboard --logdir` on 127.0.0.1, its Time Series page in headless Chromium: the train/loss card draws a
    line chart, and its data table holds the last step and its loss."""
    run, _ = all_trackers_run
    tb = subprocess.Popen([str(tr.VENV_BIN / "tensorboard"), "--logdir", str(run / "report" / "tensorboard"),
                           "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    page = None
    try:
        url, deadline = None, time.monotonic() + TIMEOUT
        while url is None and time.monotonic() < deadline:
            line = tb.stderr.readline()
            assert line or tb.poll() is None, "tensorboard exited"
            if m := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
                url = m.group(1)
        assert url, "tensorboard did not say where it serves"
        page = HeadlessPage(url + "?tagFilter=train%2Floss#timeseries", tmp_path / "profile")
        cells = page.wait_for(LOSS_CARD, TIMEOUT)
    finally:
        if page:
            page.close()
        tb.terminate()
        tb.wait(timeout=30)
    assert cells, "no drawn train/loss chart on the page"
    last = metrics(run)[-1]
    # the row: color, run, smoothed, value, step, relative time
    value, step = cells[-3], cells[-2]
    assert step == str(last["step"]), cells
    assert abs(float(value) - last["loss"]) <= 1e-3 * abs(last["loss"]), (cells, last["loss"])
