"""Target replicas and pipelined stages through the command line, on a tiny random Llama (4 layers) on the CPU:
online training with target_devices "cpu;cpu" (2 replicas), "cpu,cpu" (2 pipeline stages) and "cpu,cpu;cpu,cpu"
gives bit for bit the losses and weights of "cpu"; `data dump-hidden` and `data regenerate --batch 1` (with
--hidden-out) write byte-identical files with several replicas or stages, `--batch 3` the same samples and features
within one bf16 step; metrics.jsonl reports the producer's and the drafters'
busy fractions; bad layouts are one-line errors naming the key or flag and the value."""
import json
import os
import pathlib
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from hidden_format import read_folder
from tiny_models import tiny_llama

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", HF_HUB_OFFLINE="1")
VOCAB, MASK_ID = 256, 255
TIMEOUT = 180
LAYOUTS = ["cpu;cpu", "cpu,cpu", "cpu,cpu;cpu,cpu"]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    d = tmp_path_factory.mktemp("target")
    tiny_llama(d, vocab=VOCAB, hidden=32, layers=4, max_positions=256)
    return d


def _token_samples(path, n=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as f:
        for i in range(n):
            S = 18 + 3 * i
            ids = torch.randint(3, VOCAB - 1, (S,), generator=g).tolist()
            f.write(json.dumps({"index": i, "source": "prompts.jsonl", "split": "train", "input_ids": ids,
                                "loss_mask": [0] * 6 + [1] * (S - 6)}) + "\n")
    return path


def _run(dflash_bin, *argv, check=True, env=None):
    r = subprocess.run([dflash_bin, *map(str, argv)], capture_output=True, text=True, env=dict(ENV, **(env or {})),
                       timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _train(dflash_bin, target, data, out, target_devices, threads=1, check=True, **kw):
    a = {"target": target, "data": data, "out": out, "mask_token_id": MASK_ID, "drafter_layers": 1, "dtype": "fp32",
         "num_anchors": 6, "block_size": 4, "log_every": 1, "checkpoint_every": 100, "threads": threads,
         "max_len": 64, "steps": 3, "grad_accum": 2, "drafter_devices": "cpu,cpu", "target_devices": target_devices,
         "kl_weight": 0.15}
    a.update(kw)
    argv = ["train"]
    for k, v in a.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return _run(dflash_bin, *argv, check=check)


def _metrics(run):
    """The step lines of metrics.jsonl (event lines, such as the attention backend's, left out)."""
    rows = [json.loads(l) for l in (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "event" not in row]


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).iterdir()) if p.is_file()}


def test_replicas_and_stages_train_the_same_bits(dflash_bin, target, tmp_path):
    data = _token_samples(tmp_path / "tokens.jsonl")
    _train(dflash_bin, target, data, tmp_path / "ref", "cpu")
    ref, ref_w = _metrics(tmp_path / "ref"), load_file(str(tmp_path / "ref/checkpoints/step-3.safetensors"))
    for i, layout in enumerate(LAYOUTS):
        run = tmp_path / f"run{i}"
        # 1 intra-op thread per target thread in every run (threads: per thread), so the GEMMs round alike
        r = _train(dflash_bin, target, data, run, layout)
        assert f"target: {layout.count(';') + 1} replica(s) x {layout.split(';')[0].count(',') + 1} pipeline stage(s)" \
            in r.stderr, r.stderr
        got = _metrics(run)
        assert [m["loss"] for m in got] == [m["loss"] for m in ref], layout
        assert [m["grad_norm"] for m in got] == [m["grad_norm"] for m in ref], layout
        w = load_file(str(run / "checkpoints/step-3.safetensors"))
        assert w.keys() == ref_w.keys()
        for k in ref_w:  # master weights and AdamW moments
            assert torch.equal(w[k], ref_w[k]), (layout, k)


def test_busy_fractions_and_rates_are_reported(dflash_bin, target, tmp_path):
    data = _token_samples(tmp_path / "tokens.jsonl")
    r = _train(dflash_bin, target, data, tmp_path / "run", "cpu;cpu", steps=4)
    ms = _metrics(tmp_path / "run")
    assert len(ms) == 4
    for m in ms:
        for key in ("producer_busy", "drafter_busy"):
            assert 0.0 <= m[key] <= 1.0, (key, m)
        for key in ("samples_per_s", "producer_max_samples_per_s", "drafter_max_samples_per_s"):
            assert m[key] >= 0.0, (key, m)
        assert m["samples_per_s"] > 0
    assert any(m["drafter_busy"] > 0 for m in ms)
    assert any(m["producer_busy"] > 0 for m in ms)  # the first step waits for the target
    lines = [l for l in r.stderr.splitlines() if l.startswith("step ")]
    assert len(lines) == 4 and all("% busy, drafters " in l and "-bound" in l for l in lines), r.stderr
    assert all(" target " in l for l in lines)  # online: the producer side is the target


def test_dump_hidden_with_replicas_or_stages_writes_the_same_shards(dflash_bin, target, tmp_path):
    data = _token_samples(tmp_path / "samples.jsonl", n=9)
    common = ["--target", target, "--data", data, "--samples-per-shard", 4, "--last-hidden"]
    _run(dflash_bin, "data", "dump-hidden", *common, "--out", tmp_path / "ref", "--threads", 1)
    ref = _files(tmp_path / "ref")
    assert len(ref) == 4  # 3 shards + index
    for i, layout in enumerate(LAYOUTS):
        out = tmp_path / f"d{i}"
        threads = (layout.count(";") + 1) * (layout.split(";")[0].count(",") + 1)  # 1 per stage thread
        _run(dflash_bin, "data", "dump-hidden", *common, "--out", out, "--devices", layout, "--threads", threads)
        assert _files(out) == ref, layout


@pytest.mark.parametrize("batch", [1, 3])
def test_regenerate_with_replicas_writes_the_same_files(dflash_bin, target, tmp_path, batch):
    """--batch 1: byte-identical files (every sequence runs through the same GEMM shapes whatever the layout).
    --batch 3: a sequence's batch-mates, and so the rows of its decode GEMMs, depend on the layout, and a BLAS may
    round a row differently by the row count (oneDNN's AVX2 kernels do; run with ONEDNN_MAX_CPU_ISA=AVX2 to see
    it on an AVX-512 machine): the contract is the same samples (tokens) and features within one bf16 rounding
    step (docs/TARGET.md#replicas)."""
    g = torch.Generator().manual_seed(2)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": torch.randint(3, VOCAB, (3 + i % 5,), generator=g).tolist()})
                               + "\n" for i in range(11)))
    outs = {}
    for layout in ["cpu", "cpu;cpu", "cpu;cpu;cpu"]:
        name = layout.replace(";", "_")
        out, feats = tmp_path / f"{name}.jsonl", tmp_path / f"{name}_features"
        threads = layout.count(";") + 1
        _run(dflash_bin, "data", "regenerate", "--target", target, "--input", prompts, "--output", out,
             "--devices", layout, "--threads", threads, "--max-new", 12, "--batch", batch, "--eos", "none",
             "--hidden-out", feats, "--held-out-dir", "")
        outs[layout] = (out.read_bytes(), _files(feats), read_folder(feats))
    ref_jsonl, ref_files, ref_feats = outs["cpu"]
    assert len(ref_jsonl.splitlines()) == 11
    for layout in ["cpu;cpu", "cpu;cpu;cpu"]:
        jsonl, files, feats = outs[layout]
        assert jsonl == ref_jsonl, layout  # the samples: prompts, replies, order
        assert files.keys() == ref_files.keys(), layout
        if batch == 1:
            assert files == ref_files, layout
            continue
        assert feats.keys() == ref_feats.keys(), layout
        for key, (ids, mask, hs, last) in ref_feats.items():
            got = feats[key]
            assert torch.equal(got[0], ids) and torch.equal(got[1], mask), (layout, key)
            assert got[2].dtype == hs.dtype == torch.bfloat16 and got[2].shape == hs.shape, (layout, key)
            # adjacent bf16 values differ by at most 2^-7 of either: one rounding step of an fp32 difference
            torch.testing.assert_close(got[2].float(), hs.float(), rtol=2 ** -7, atol=1e-6, msg=f"{layout} {key}")


@pytest.mark.parametrize("layout, needle", [
    ("cpu,cpu;cpu", "train config: 'target_devices': every replica needs the same number of pipeline stages; "
                    "replica 0 has 2, replica 1 has 1 in 'cpu,cpu;cpu'"),
    ("cuda:0;cuda:0", "train config: 'target_devices': cuda:0 is in replica 0 and replica 1 of 'cuda:0;cuda:0'"),
    ("cpu;;cpu", "train config: 'target_devices': an empty replica in 'cpu;;cpu'"),
    ("cpu,cpu,cpu,cpu,cpu", "train config: 'target_devices' 'cpu,cpu,cpu,cpu,cpu' has 5 pipeline stages per replica "
                            "for a target of 4 layers"),
])
def test_bad_train_layouts_are_clear_errors(dflash_bin, target, tmp_path, layout, needle):
    data = _token_samples(tmp_path / "tokens.jsonl")
    r = _train(dflash_bin, target, data, tmp_path / "run", layout, check=False)
    assert r.returncode == 1, r.stderr
    assert needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_commands_that_time_one_copy_refuse_replicas(dflash_bin, target, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt_ids": [5, 6, 7]}) + "\n")
    r = _run(dflash_bin, "eval", "--target", target, "--proposer", "oracle", "--data", f"p={prompts}",
             "--devices", "cpu;cpu", check=False)
    assert r.returncode == 1 and "eval: --devices 'cpu;cpu' lists 2 replicas; eval times one decode at a time" \
        in r.stderr, r.stderr
    r = _run(dflash_bin, "target", "generate", "--target", target, "--prompt-ids", "5,6", "--devices", "cpu;cpu",
             check=False)
    assert r.returncode == 1 and "lists 2 replicas; this command runs one copy of the target" in r.stderr, r.stderr
    r = _run(dflash_bin, "data", "regenerate", "--target", target, "--input", prompts, "--output",
             tmp_path / "o.jsonl", "--devices", "cpu;", check=False)
    assert r.returncode == 1 and "data regenerate: --devices: an empty replica in 'cpu;'" in r.stderr, r.stderr


def test_bench_producer_prints_its_three_ratios(dflash_bin, target, tmp_path):
    r = _run(dflash_bin, "bench", "producer", "--target", target, "--max-len", 32, "--micro-batches", 4, "--steps", 3,
             "--work-dir", tmp_path / "runs")
    for row in ("2 replicas / 1", "pipelined / in turn", "target_devices cpu;cpu"):
        assert row in r.stdout, r.stdout
    assert r.stdout.count("x\n") == 3, r.stdout  # three ratios
    r = _run(dflash_bin, "bench", "producer", "--target", target, "--work-dir", tmp_path / "runs", check=False)
    assert r.returncode == 1 and "--work-dir '" in r.stderr and "exists; give a new folder" in r.stderr, r.stderr


def test_bench_producer_takes_away_its_work_dir_when_a_training_run_fails(dflash_bin, target, tmp_path):
    """A failing inner run (the test hook makes worker 0 throw) leaves none of the folders the bench made; the
    folder that was there before stays, with what it held."""
    (tmp_path / "mine.txt").write_text("x")
    r = _run(dflash_bin, "bench", "producer", "--target", target, "--max-len", 32, "--micro-batches", 2, "--steps", 3,
             "--work-dir", tmp_path / "new" / "runs", check=False, env={"DFLASH_TEST_FAIL_WORKER": "0"})
    assert r.returncode == 1, r.stderr
    assert "worker 0 (cpu): test failure" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
