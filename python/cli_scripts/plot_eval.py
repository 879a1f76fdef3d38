"""Acceptance plots from a `dflash eval --json` file: one PNG with, per dataset, the histogram of tokens
committed per verification cycle (1..B) and the per-slot acceptance rate.

usage: plot_eval.py EVAL_JSON OUT_PNG

Uses matplotlib when it is installed; otherwise writes a plain bar chart with a small built-in PNG encoder
(no labels), so the demo never fails for want of a plotting package."""
import json
import struct
import sys
import zlib

COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]


def _plot_matplotlib(datasets, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    n = len(datasets)
    width = 0.8 / max(n, 1)
    for i, d in enumerate(datasets):
        hist = d["accept_hist"][1:]
        total = max(sum(hist), 1)
        xs = [k + 1 + (i - (n - 1) / 2) * width for k in range(len(hist))]
        ax1.bar(xs, [h / total for h in hist], width=width, label=f'{d["name"]} (tau {d["tau"]:.2f})')
        slots = d.get("slot_acceptance", [])
        ax2.plot(range(1, len(slots) + 1), slots, marker="o", label=d["name"])
    ax1.set_xlabel("tokens committed per cycle (accepted drafts + 1)")
    ax1.set_ylabel("fraction of cycles")
    ax1.set_title("Acceptance length histogram")
    ax1.legend()
    ax2.set_xlabel("draft slot")
    ax2.set_ylabel("P(accepted | reached)")
    ax2.set_ylim(0, 1.05)
    ax2.set_title("Per-slot acceptance")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def _png(width, height, pixels, out):
    raw = b"".join(b"\x00" + bytes(pixels[y * width * 3:(y + 1) * width * 3]) for y in range(height))
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _plot_plain(datasets, out):
    W, H, pad = 640, 320, 20
    px = bytearray([255] * (W * H * 3))
    bins = max(len(d["accept_hist"]) - 1 for d in datasets)
    group = (W - 2 * pad) / bins
    bar = group * 0.8 / len(datasets)
    for i, d in enumerate(datasets):
        hist = d["accept_hist"][1:]
        total = max(sum(hist), 1)
        for k, h in enumerate(hist):
            x0 = int(pad + k * group + i * bar)
            top = int(H - pad - (H - 2 * pad) * h / total)
            for y in range(top, H - pad):
                for x in range(x0, max(x0 + 1, int(x0 + bar) - 1)):
                    px[(y * W + x) * 3:(y * W + x) * 3 + 3] = bytes(COLORS[i % len(COLORS)])
    for x in range(pad, W - pad):  # axis
        px[((H - pad) * W + x) * 3:((H - pad) * W + x) * 3 + 3] = b"\x00\x00\x00"
    _png(W, H, px, out)


def main():
    with open(sys.argv[1]) as f:
        datasets = json.load(f)["datasets"]
    try:
        _plot_matplotlib(datasets, sys.argv[2])
        how = "matplotlib"
    except ImportError:
        _plot_plain(datasets, sys.argv[2])
        how = "built-in encoder (install matplotlib for labelled plots)"
    print(f"wrote {sys.argv[2]} ({how})")


if __name__ == "__main__":
    main()
