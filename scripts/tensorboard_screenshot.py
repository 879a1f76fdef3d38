"""The screenshot of docs/TRAINING.md ("Following a run"): `tensorboard --logdir` on 127.0.0.1 over a run's
RUN_DIR/report/tensorboard, its Time Series page filtered to a few training curves, taken in headless Chromium once
the loss chart is drawn (tests/python/headless_chromium.py, as test_train_report.py uses it).
Usage: .venv/bin/python scripts/tensorboard_screenshot.py RUN_DIR OUT.png"""
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from headless_chromium import HeadlessPage  # noqa: E402

DRAWN = """(() => {
  const t = document.querySelector('tb-truncated-path[title="train/loss"]');
  const card = t && t.closest('scalar-card');
  return !!(card && card.querySelector('line-chart canvas, line-chart svg path'));
})()"""
CLOSE_SETTINGS = "document.querySelector('button[aria-label=\"Close side pane\"]')?.click(); true"


def main(run_dir, out):
    logdir = pathlib.Path(run_dir) / "report" / "tensorboard"
    tb = subprocess.Popen([str(pathlib.Path(sys.executable).parent / "tensorboard"), "--logdir", str(logdir),
                           "--host", "127.0.0.1", "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        url = None
        while url is None:
            line = tb.stderr.readline()
            if not line:
                sys.exit("tensorboard exited before serving")
            if m := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
                url = m.group(1)
        with tempfile.TemporaryDirectory() as profile:
            page = HeadlessPage(url + "?tagFilter=train%2F(loss|acc|lr|slot_acc%2F1)%24#timeseries", profile,
                                width=1280, height=800)
            try:
                if not page.wait_for(DRAWN, 120):
                    sys.exit("the loss chart was not drawn")
                page.evaluate(CLOSE_SETTINGS)
                time.sleep(3)  # the canvas exists before its lines are drawn
                pathlib.Path(out).write_bytes(page.screenshot())
            finally:
                page.close()
    finally:
        tb.terminate()
        tb.wait(timeout=30)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
