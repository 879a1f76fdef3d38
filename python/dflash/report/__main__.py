"""python -m dflash.report follow RUN_DIR [--plot-script FILE]
python -m dflash.report replay RUN_DIR --settings JSON [--plot-script FILE]
python -m dflash.report eval RUN_DIR --results JSON

follow: what `dflash train --report-to` runs beside the trainer. Standard input is the trainer's lifeline: a word
("done", "interrupted", "failed") and then its end; its end without a word means the trainer died (kill -9). Until
then metrics.jsonl and the checkpoints are polled once a second, niced, so the trainer never waits on us.
replay: `dflash report RUN_DIR --to ...`: the whole metrics.jsonl and the final plots, once.
eval: `dflash eval --drafter RUN_DIR` of a run with trackers: its results at the latest checkpoint's step.
Exit status 0 unless the reporter itself could not run (a tracker's failure is said and left out)."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import select
import signal
import sys

from .metrics import MetricsTail, eval_scalars
from .plots import checkpoint_step, draw
from .reporter import Reporter
from .settings import load_settings

POLL_SECONDS = 1.0


def _libraries_to_log(report_dir: pathlib.Path):
    """The trackers' own banners and logs (stdout, stderr) go to RUN_DIR/report/report.log; the stream returned is
    the terminal, for our own lines. It stays open until we exit, so whoever reads our output sees us end."""
    report_dir.mkdir(parents=True, exist_ok=True)
    terminal = os.dup(2)
    log = os.open(report_dir / "report.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return open(terminal, "w", buffering=1)


def _plots(reporter: Reporter, plot_script, step: int) -> None:
    """The checkpoint's plots to the trackers; drawn or not, the step counts as done (no retry every poll)."""
    settings = reporter.settings
    try:
        pngs = draw(plot_script, settings.run_dir, settings.report_dir / "plots") if reporter.live else {}
    except Exception as e:  # noqa: BLE001 -- no plots this time; the metrics still go
        reporter.say(f"report: the plots of step {step} could not be drawn ({e})")
        pngs = {}
    reporter.images(step, pngs)


def follow(run_dir: pathlib.Path, plot_script) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the trainer, which then tells us over the lifeline
    os.nice(10)
    settings = load_settings(run_dir)
    reporter = Reporter(settings, _libraries_to_log(settings.report_dir))
    reporter.start()
    tail = MetricsTail(run_dir / "metrics.jsonl")
    how = "killed"
    lifeline = sys.stdin.fileno()
    while reporter.live:  # every tracker failed: nothing left to do (said already)
        reporter.forward(tail.read())
        if (ck := checkpoint_step(run_dir)) > reporter.plotted_step:
            _plots(reporter, plot_script, ck)
        ready, _, _ = select.select([lifeline], [], [], POLL_SECONDS)
        if ready:
            data = os.read(lifeline, 256)
            if not data:
                break
            how = data.split()[0].decode(errors="replace") if data.split() else how
    reporter.forward(tail.read())
    if (ck := checkpoint_step(run_dir)) > reporter.plotted_step:
        _plots(reporter, plot_script, ck)
    reporter.close(how)
    return 0


def replay(run_dir: pathlib.Path, overrides: dict, plot_script) -> int:
    settings = load_settings(run_dir, overrides)
    reporter = Reporter(settings, _libraries_to_log(settings.report_dir))
    reporter.start()
    tail = MetricsTail(run_dir / "metrics.jsonl")
    last = reporter.forward(tail.read())
    if last > reporter.plotted_step:
        _plots(reporter, plot_script, last)
    reporter.close("done")
    return 0


def eval_results(run_dir: pathlib.Path, results: dict) -> int:
    settings = load_settings(run_dir)
    reporter = Reporter(settings, _libraries_to_log(settings.report_dir))
    reporter.start()
    step = checkpoint_step(run_dir) or max([t.entry.get("last_step", 0) for t in reporter.live], default=0)
    reporter.extra(step, eval_scalars(results), "logging eval results")
    reporter.close("done")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dflash.report", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("follow", "replay", "eval"))
    p.add_argument("run_dir", type=pathlib.Path)
    p.add_argument("--settings", default="{}", help="replay: report settings over the run's (JSON object)")
    p.add_argument("--results", default="{}", help="eval: dflash eval's results (its --json, as text)")
    p.add_argument("--plot-script", type=pathlib.Path, default=None, help="plot_metrics.py, for the image panels")
    a = p.parse_args(argv)
    if a.mode == "follow":
        return follow(a.run_dir, a.plot_script)
    if a.mode == "eval":
        return eval_results(a.run_dir, json.loads(a.results))
    return replay(a.run_dir, json.loads(a.settings), a.plot_script)


if __name__ == "__main__":
    sys.exit(main())
