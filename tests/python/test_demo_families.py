"""demo.sh --family (issues 39/40: the demo recipe per drafter family) refuses what it cannot run before any stage,
and scripts/plot_families.py draws several runs' curves into one PNG (or says in one line what is wrong). The
families' stages end to end run in test_gpu_scripts.py's pipeline dry run."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("args, message", [
    (["--family", "medusa"], "demo: --family 'medusa' is not a drafter family, expected dflash, dspark or dflash2"),
    (["--family=DSpark"], "demo: --family 'DSpark' is not a drafter family, expected dflash, dspark or dflash2"),
    (["--family"], "demo: --family needs a value: dflash, dspark or dflash2"),
])
def test_demo_refuses_an_unknown_family_before_any_stage(tmp_path, args, message):
    env = dict(os.environ, DEMO_OUT=str(tmp_path / "out"))
    r = subprocess.run(["bash", "scripts/demo.sh", "build", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == message, r.stderr
    assert not (tmp_path / "out").exists()  # nothing was started


def _metrics(path, losses, extra=None):
    path.mkdir()
    lines = [{"event": "attention_backend", "step": 0}]
    lines += [{"step": i + 1, "loss": v, "acc": 0.1 * i, **(extra or {})} for i, v in enumerate(losses)]
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _plot(*args):
    return subprocess.run([sys.executable, "scripts/plot_families.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_plot_families_draws_every_run(tmp_path):
    _metrics(tmp_path / "a", [3.0, 2.5, 2.0])
    _metrics(tmp_path / "b", [1.0, 0.9], {"tau_probabilistic": 1.5})
    out = tmp_path / "plots" / "families.png"
    r = _plot(out, f"dflash={tmp_path / 'a'}", f"dspark@2={tmp_path / 'b' / 'metrics.jsonl'}")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_families_names_what_is_wrong(tmp_path):
    _metrics(tmp_path / "a", [3.0])
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "metrics.jsonl").write_text('{"event": "loss_kernel", "step": 0}\n')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n{"step": 2,\n')
    png = tmp_path / "x.png"
    cases = [
        ([png, "dflash"], "plot_families: 'dflash' is not LABEL=RUN_DIR"),
        ([png, f"x@ten={tmp_path / 'a'}"], "plot_families: 'x@ten="),
        ([png, f"x={tmp_path / 'none'}"], f"plot_families: {tmp_path / 'none'}: no such metrics file"),
        ([png, f"x={tmp_path / 'events'}"], f"plot_families: {tmp_path / 'events' / 'metrics.jsonl'}: no step lines"),
        ([png, f"x={tmp_path / 'bad'}"], f"plot_families: {tmp_path / 'bad' / 'metrics.jsonl'}:2: not JSON"),
        ([tmp_path / "x.jpg", f"a={tmp_path / 'a'}"], "usage: plot_families.py OUT.png"),
    ]
    for args, start in cases:
        r = _plot(*args)
        assert r.returncode != 0 and r.stderr.startswith(start) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not png.exists()
