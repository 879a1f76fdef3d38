"""The run's PNG plots (`dflash plot`'s, drawn by python/cli_scripts/plot_metrics.py in a child process) for the
trackers' image panels: drawn at each checkpoint into RUN_DIR/report/plots."""
from __future__ import annotations

import pathlib
import subprocess
import sys


def checkpoint_step(run_dir: pathlib.Path) -> int:
    """The step of RUN_DIR/checkpoints/latest ("step-N.safetensors"), 0 when none."""
    try:
        name = (run_dir / "checkpoints" / "latest").read_text().strip()
        return int(name.removeprefix("step-").removesuffix(".safetensors"))
    except (OSError, ValueError):
        return 0


def draw(plot_script: pathlib.Path | None, run_dir: pathlib.Path, out_dir: pathlib.Path) -> dict:
    """{"plots/loss": PATH, ...}; nothing when there is no plot script (a pip install without the checkout)."""
    if plot_script is None:
        return {}
    r = subprocess.run([sys.executable, str(plot_script), str(run_dir / "metrics.jsonl"), str(out_dir)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"plot_metrics.py exited with {r.returncode}: {r.stderr.strip()[-300:]}")
    paths = [pathlib.Path(line) for line in r.stdout.splitlines() if line.endswith(".png")]
    return {f"plots/{p.stem}": p for p in paths}
