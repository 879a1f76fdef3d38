"""`dflash plot RUN_DIR`: loss and accuracy curves (PNG) from a training run's metrics.jsonl; tau too when
evaluation lines ({"step", "tau"}) are present, and the drafter family's metrics when the run logged them
(DSpark: accept_rate@j, tau_probabilistic, its three losses, the confidence errors; DFlash2: recall@K, the
selector's loss and accuracy, the accepted lengths of the selector's path, the unary path and the top-K oracle).
Each logged value is one step's (a few sequences), so long runs also get a trailing mean over the logged steps.
With DATA_JSON, every series drawn is written there too: {png: {"ylabel", "series": {key: {"steps", "values"}}}}.
A damaged metrics.jsonl never ends in a traceback: a torn last line (a run killed mid-write) is skipped with a note,
anything else (a line that is not one JSON object, binary or NUL bytes, a step or plotted value that is not a
number, a slot key that is not accept_rate@<slot>) is one `dflash: error:` line naming the file, the line number
and what was expected, exit 1 (docs/ERRORS.md).
Usage: plot_metrics.py METRICS_JSONL OUT_DIR [DATA_JSON]"""
import json
import math
import os
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


# Every per-step value a PNG draws (besides the accept_rate@<slot> family and slot_acc): a number or null.
PLOTTED = ("loss", "acc", "tau", "tau_probabilistic", "ce_loss", "l1_loss", "confidence_loss", "confidence_abs_error",
           "confidence_bias", "confidence_cumprod_bias", "unary_recall_at_k", "teacher_forced_selector_acc",
           "selector_loss", "self_conditioned_path_accepted_length", "unary_path_accepted_length",
           "unary_top_k_oracle_accepted_length")
SLOT_KEY = "accept_rate@"


class MetricsError(Exception):
    """One line for the user: the file, the line number and what was expected."""


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _kind(v):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def check_row(row, where):
    """Raises MetricsError unless row is a metrics line the plots can draw."""
    if not isinstance(row, dict):
        raise MetricsError(f"{where}: expected a JSON object per line, got {_kind(row)}")
    step = row.get("step")
    if "step" in row and not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        raise MetricsError(f"{where}: 'step' must be a whole number >= 0, got {json.dumps(step)[:40]}")
    for key, v in row.items():
        if key.startswith(SLOT_KEY):
            slot = key[len(SLOT_KEY):]
            if not (slot.isascii() and slot.isdigit()):
                raise MetricsError(f"{where}: a slot key must be {SLOT_KEY}<slot number>, got {json.dumps(key)[:60]}")
        elif key not in PLOTTED and key != "slot_acc":
            continue
        if key == "slot_acc":
            if not (isinstance(v, list) and all(x is None or _is_number(x) for x in v)):
                raise MetricsError(f"{where}: 'slot_acc' must be an array of numbers, got {json.dumps(v)[:60]}")
        elif v is not None and not _is_number(v):
            raise MetricsError(f"{where}: {json.dumps(key)[:60]} must be a number or null, got {_kind(v)}")


def read_rows(metrics_path):
    """The lines of metrics.jsonl as dicts; a torn last line is skipped with a note on stderr."""
    path = pathlib.Path(metrics_path)
    if not path.is_file():
        raise MetricsError(f"{metrics_path}: expected a regular file (metrics.jsonl)")
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = len(lines) if lines[-1] else len(lines) - 1  # the number of the last line that holds bytes
    rows = []
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{metrics_path}: line {no}"
        try:
            if b"\0" in raw:
                raise MetricsError(f"{where}: expected JSON text, got a NUL byte")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise MetricsError(f"{where}: expected UTF-8 JSON text, got binary bytes") from None
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise MetricsError(f"{where}: expected one JSON object per line ({e.msg} at column {e.colno})") from None
            except (ValueError, RecursionError):
                raise MetricsError(f"{where}: expected one JSON object per line (nested too deeply)") from None
        except MetricsError:
            if no == last and not data.endswith(b"\n"):  # the run was killed while writing this line
                print(f"plot: note: {where} is cut short (a run stopped mid-write?); skipped", file=sys.stderr)
                continue
            raise
        check_row(row, where)
        rows.append(row)
    return rows


def trailing_mean(values, window):
    """Mean of each value and the window - 1 before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def write_whole(path, text):
    """A regular file (or a new name) is replaced whole, never left half-written; a device or pipe is streamed to."""
    if path.exists() and not path.is_file():
        path.write_text(text)
        return
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(metrics_path, out_dir, data_path=None):
    rows = read_rows(metrics_path)
    if not rows:
        raise MetricsError(f"{metrics_path}: no metrics lines")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    data = {}

    def points(key):  # (step, value) of the lines that logged `key`; null (nothing counted that step) left out
        return [(r["step"], r[key]) for r in rows if "step" in r and r.get(key) is not None]

    def save(fig, ax, ylabel, name, series):
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(str(path))
        data[name] = {"ylabel": ylabel, "series": series}

    def curves(keys, ylabel, name):
        """Several metrics of one kind on one plot (a family's), each as logged; none logged: no file."""
        series = {}
        for key in keys:
            pts = points(key)
            if pts:
                series[key] = {"steps": [p[0] for p in pts], "values": [p[1] for p in pts]}
        if not series:
            return
        fig, ax = plt.subplots(figsize=(7, 4))
        for key, sv in series.items():
            ax.plot(sv["steps"], sv["values"], label=key, marker="." if len(sv["steps"]) < 30 else None)
        save(fig, ax, ylabel, name, series)

    def curve(key, ylabel, name, extra=None):
        pts = points(key)
        if not pts:
            return
        fig, ax = plt.subplots(figsize=(7, 4))
        steps, values = [p[0] for p in pts], [p[1] for p in pts]
        series = {key: {"steps": steps, "values": values}}
        window = max(5, len(pts) // 25)
        smooth = len(pts) >= 4 * window
        ax.plot(steps, values, label=key, alpha=0.35 if smooth else 1.0)
        if smooth:
            ax.plot(steps, trailing_mean(values, window), label=f"{key}, mean of {window} logged steps")
        if extra:
            series.update(extra(ax))
        save(fig, ax, ylabel, name, series)

    def slots(ax):  # per-slot accuracy of the last logged step, as a second panel would clutter: slot 1 and last
        acc = [r for r in rows if "slot_acc" in r]
        if not (acc and len(acc[0]["slot_acc"]) > 2):
            return {}
        acc = [r for r in acc if "step" in r and len(r["slot_acc"]) > 2]
        steps = [r["step"] for r in acc]
        as_float = lambda v: math.nan if v is None else v  # noqa: E731  (null: nothing counted in that slot)
        first, last = [as_float(r["slot_acc"][1]) for r in acc], [as_float(r["slot_acc"][-1]) for r in acc]
        ax.plot(steps, first, label="slot 1", alpha=0.6)
        ax.plot(steps, last, label="last slot", alpha=0.6)
        return {"slot 1": {"steps": steps, "values": first}, "last slot": {"steps": steps, "values": last}}

    curve("loss", "weighted block cross-entropy", "loss.png")
    curve("acc", "top-1 accuracy (slots 1..B-1)", "accuracy.png", slots)
    curve("tau", "tau (mean accepted + 1)", "tau.png")
    # DSpark (docs/DSPARK.md "Training"): one line per slot j, in slot order
    slots = sorted({k for r in rows for k in r if k.startswith("accept_rate@")}, key=lambda k: int(k.split("@")[1]))
    curves(slots, "accept rate of slot j (mean a* = 1 - L1/2)", "dspark_accept_rate.png")
    curves(["tau_probabilistic"], "tau_probabilistic (1 + sum_j prod_i<=j a*_i)", "dspark_tau.png")
    curves(["ce_loss", "l1_loss", "confidence_loss"], "DSpark loss terms (weighted means)", "dspark_losses.png")
    curves(["confidence_abs_error", "confidence_bias", "confidence_cumprod_bias"],
           "confidence head error vs a* (|e|, bias, cumprod bias)", "dspark_confidence.png")
    # DFlash2 (docs/DFLASH2.md "Training"): what is drafted, not the unary argmax accuracy alone
    curves(["unary_recall_at_k"], "unary recall@K (gold in the top-K)", "dflash2_recall.png")
    curves(["teacher_forced_selector_acc"], "selector accuracy (teacher-forced)", "dflash2_selector_acc.png")
    curves(["selector_loss"], "selector K-way cross-entropy", "dflash2_selector_loss.png")
    curves(["self_conditioned_path_accepted_length", "unary_path_accepted_length", "unary_top_k_oracle_accepted_length"],
           "accepted length of training blocks", "dflash2_accepted_length.png")
    if data_path:
        write_whole(pathlib.Path(data_path), json.dumps(data))
    for w in written:
        print(w)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    try:
        main(*sys.argv[1:])
    except MetricsError as e:
        sys.exit(f"dflash: error: plot: {e}")
    except OSError as e:  # an output that cannot be written (a full disk, a read-only folder)
        sys.exit(f"dflash: error: plot: {e.filename or ''}: {e.strerror or e}")
