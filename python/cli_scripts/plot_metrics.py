"""`dflash plot RUN_DIR`: loss and accuracy curves (PNG) from a training run's metrics.jsonl; tau too when
evaluation lines ({"step", "tau"}) are present. Each logged value is one step's (a few sequences), so long
runs also get a trailing mean over the logged steps. Usage: plot_metrics.py METRICS_JSONL OUT_DIR"""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def trailing_mean(values, window):
    """Mean of each value and the window - 1 before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main(metrics_path, out_dir):
    rows = [json.loads(l) for l in pathlib.Path(metrics_path).read_text().splitlines() if l.strip()]
    if not rows:
        sys.exit(f"{metrics_path}: no metrics lines")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def curve(key, ylabel, name, extra=None):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if not pts:
            return
        fig, ax = plt.subplots(figsize=(7, 4))
        steps, values = [p[0] for p in pts], [p[1] for p in pts]
        window = max(5, len(pts) // 25)
        smooth = len(pts) >= 4 * window
        ax.plot(steps, values, label=key, alpha=0.35 if smooth else 1.0)
        if smooth:
            ax.plot(steps, trailing_mean(values, window), label=f"{key}, mean of {window} logged steps")
        if extra:
            extra(ax)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(str(path))

    def slots(ax):  # per-slot accuracy of the last logged step, as a second panel would clutter: slot 1 and last
        acc = [r for r in rows if "slot_acc" in r]
        if acc and len(acc[0]["slot_acc"]) > 2:
            ax.plot([r["step"] for r in acc], [r["slot_acc"][1] for r in acc], label="slot 1", alpha=0.6)
            ax.plot([r["step"] for r in acc], [r["slot_acc"][-1] for r in acc], label="last slot", alpha=0.6)

    curve("loss", "weighted block cross-entropy", "loss.png")
    curve("acc", "top-1 accuracy (slots 1..B-1)", "accuracy.png", slots)
    curve("tau", "tau (mean accepted + 1)", "tau.png")
    for w in written:
        print(w)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
