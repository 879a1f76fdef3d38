"""Training curves of several runs side by side (e.g. the demo's three drafter families): one PNG with each run's
loss (its own family's objective, so levels are not comparable across families, trends are) and its mean
teacher-forced slot accuracy `acc`, both as a trailing mean over logged steps. `dflash plot` draws one run.

usage: python scripts/plot_families.py OUT.png LABEL[@STEPS]=RUN_DIR [LABEL[@STEPS]=RUN_DIR ...]
RUN_DIR is a training run folder (its metrics.jsonl) or a metrics.jsonl file; @STEPS shifts a run that started
from another one's checkpoint (init_from) to start at that run's step STEPS."""
import json
import pathlib
import sys

# `dflash plot`'s own script (python/cli_scripts/plot_metrics.py): its trailing mean, and importing it selects
# matplotlib's file-only Agg backend before pyplot loads.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python" / "cli_scripts"))
from plot_metrics import trailing_mean  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def read_steps(spec):
    """LABEL=PATH -> (label, the step lines of PATH's metrics.jsonl); exits with one line on bad input."""
    label, sep, path = spec.partition("=")
    if not sep or not label or not path:
        sys.exit(f"plot_families: '{spec}' is not LABEL=RUN_DIR")
    label, at, shift = label.partition("@")
    if at and not shift.isdigit():
        sys.exit(f"plot_families: '{spec}': the step shift after '@' must be a whole number of steps, got '{shift}'")
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "metrics.jsonl"
    if not p.is_file():
        sys.exit(f"plot_families: {p}: no such metrics file (expected a run folder or its metrics.jsonl)")
    rows = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"plot_families: {p}:{n}: not JSON ({e.msg})")
        if "event" not in row and "step" in row and "loss" in row:
            row["step"] += int(shift or 0)
            rows.append(row)
    if not rows:
        sys.exit(f"plot_families: {p}: no step lines with 'step' and 'loss'")
    return label, rows


def main(argv):
    if len(argv) < 2 or not argv[0].endswith(".png"):
        sys.exit("usage: plot_families.py OUT.png LABEL[@STEPS]=RUN_DIR [LABEL[@STEPS]=RUN_DIR ...]")
    runs = [read_steps(spec) for spec in argv[1:]]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for label, rows in runs:
        window = max(5, len(rows) // 25)
        steps = [r["step"] for r in rows]
        ax_loss.plot(steps, trailing_mean([r["loss"] for r in rows], window), label=label)
        acc = [(r["step"], r["acc"]) for r in rows if "acc" in r]
        if acc:
            ax_acc.plot([s for s, _ in acc], trailing_mean([a for _, a in acc], window), label=label)
    ax_loss.set_ylabel("training loss (each family's objective)")
    ax_acc.set_ylabel("mean teacher-forced slot accuracy (acc)")
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("trailing mean over logged steps")
    fig.tight_layout()
    out = pathlib.Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
