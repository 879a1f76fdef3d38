"""`dflash train` end to end on a tiny random Llama target (hidden 32, 2 layers, vocab 256) with synthetic
offline hidden states: exact resume, a crash in the middle of a checkpoint save, 1 vs 2 worker threads,
2 processes over Gloo vs 1 process, SpecForge samples vs our shards, online target vs offline features
computed by transformers, export, config errors, and error propagation from the producer thread."""
import gzip
import io
import json
import os
import pathlib
import re
import socket
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from hidden_format import write_shard as write_dflash_shard
from tiny_models import tiny_llama

HIDDEN, VOCAB, LAYERS, MASK_ID = 32, 256, 3, 255
TARGET_LAYER_IDS = [1]  # the default (docs/DFLASH.md) for a 1-layer drafter over 3 target layers: [L // 2]
TIMEOUT = 120


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("target")
    return d, tiny_llama(d, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, max_positions=256, weight_scale=None)


def make_token_samples(n=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        S = 20 + 3 * i
        ids = torch.randint(3, VOCAB - 1, (S,), generator=g)
        mask = torch.zeros(S, dtype=torch.bool)
        mask[6:] = True
        out.append({"input_ids": ids, "loss_mask": mask})
    return out


@pytest.fixture(scope="module")
def offline_dir(tmp_path_factory):
    """Synthetic features (random, fixed seed): training needs no particular target behind them."""
    g = torch.Generator().manual_seed(2)
    samples = make_token_samples()
    for s in samples:
        s["hidden_states"] = torch.randn(s["input_ids"].numel(), HIDDEN * len(TARGET_LAYER_IDS), generator=g)
    d = tmp_path_factory.mktemp("offline")
    write_dflash_shard(d / "shard-000.safetensors", samples[:5], TARGET_LAYER_IDS, HIDDEN)
    write_dflash_shard(d / "shard-001.safetensors", samples[5:], TARGET_LAYER_IDS, HIDDEN)
    return d, samples


def base_args(target, data, out, **kw):
    a = {"target": target, "data": data, "out": out, "mask_token_id": MASK_ID, "drafter_layers": 1,
         "dtype": "fp32", "num_anchors": 6, "block_size": 4, "batch_size": 1, "log_every": 1,
         "checkpoint_every": 1, "threads": 1, "max_len": 64, "lr": 3e-3, "warmup_ratio": 0.25, "steps": 4,
         "init_std": 0.05}
    if "drafter_config" in kw and "drafter_layers" not in kw:
        del a["drafter_layers"]  # the drafter config says how many layers; a given count must agree with it
    a.update(kw)
    argv = []
    for k, v in a.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


def train(dflash_bin, argv, env=None, check=True):
    e = dict(os.environ, HF_HUB_OFFLINE="1")
    e.update(env or {})
    r = subprocess.run([dflash_bin, "train", *argv], capture_output=True, text=True, timeout=TIMEOUT, env=e)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def metrics(run):
    """The step lines of metrics.jsonl (event lines, such as the attention backend chosen, are left out)."""
    lines = [json.loads(l) for l in (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if "event" not in x]


def events(run, kind):
    return [x for x in (json.loads(l) for l in (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines())
            if x.get("event") == kind]


def final_weights(run, step):
    t = load_file(str(pathlib.Path(run) / "checkpoints" / f"step-{step}.safetensors"))
    return {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}


def test_loss_falls_and_checkpoints(dflash_bin, target_dir, offline_dir, tmp_path):
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=12, lr=1e-2))
    m = metrics(run)
    assert [x["step"] for x in m] == list(range(1, 13))
    assert m[-1]["loss"] < m[0]["loss"]
    assert len(m[0]["slot_acc"]) == 4 and 0 <= m[-1]["acc"] <= 1
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("step-*.safetensors"))
    assert ckpts == ["step-11.safetensors", "step-12.safetensors"]  # keep_checkpoints = 2
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-12.safetensors"
    cfg = json.loads((run / "train_config.json").read_text())
    assert cfg["num_anchors"] == 6 and cfg["lr"] == 1e-2


def test_resume_is_exact(dflash_bin, target_dir, offline_dir, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], straight))
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], split, stop_after=2))
    assert [x["step"] for x in metrics(split)] == [1, 2]
    train(dflash_bin, ["--out", str(split), "--resume"])
    a, b = metrics(straight), metrics(split)
    assert [x["loss"] for x in a] == [x["loss"] for x in b]
    assert [x["grad_norm"] for x in a] == [x["grad_norm"] for x in b]
    wa, wb = final_weights(straight, 4), final_weights(split, 4)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ta = load_file(str(straight / "checkpoints" / "step-4.safetensors"))
    tb = load_file(str(split / "checkpoints" / "step-4.safetensors"))
    for k in ta:  # AdamW moments too
        assert torch.equal(ta[k], tb[k]), k


def test_kill_during_save_keeps_previous_checkpoint(dflash_bin, target_dir, offline_dir, tmp_path):
    run, straight = tmp_path / "run", tmp_path / "straight"
    args = base_args(target_dir[0], offline_dir[0], run, steps=3)
    r = train(dflash_bin, args, env={"DFLASH_TEST_KILL_IN_SAVE": "2"}, check=False)
    assert r.returncode == -9, r.stderr
    ck = run / "checkpoints"
    assert (ck / "latest").read_text().strip() == "step-1.safetensors"
    assert (ck / "step-1.safetensors").exists() and not (ck / "step-2.safetensors").exists()
    stale = list(ck.glob("step-2.safetensors.tmp.*"))
    assert len(stale) == 1, list(ck.iterdir())  # the complete-but-unrenamed temporary, named by the dead pid
    # The previous checkpoint loads: resume finishes the run, equal to an uninterrupted one, and clears the
    # temporary the killed save left (issue 19: nothing else ever would).
    r = train(dflash_bin, ["--out", str(run), "--resume"])
    assert "removed 1 temporary file(s)" in r.stderr, r.stderr
    assert not [p for p in ck.iterdir() if ".tmp" in p.name], list(ck.iterdir())
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], straight, steps=3))
    wa, wb = final_weights(run, 3), final_weights(straight, 3)
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_two_worker_threads_equal_one_worker(dflash_bin, target_dir, offline_dir, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], one, steps=3, grad_accum=2, drafter_devices="cpu"))
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], two, steps=3, grad_accum=1,
                                drafter_devices="cpu,cpu"))
    a, b = metrics(one), metrics(two)
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)
    wa, wb = final_weights(one, 3), final_weights(two, 3)
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_gloo_equal_one_process(dflash_bin, target_dir, offline_dir, tmp_path):
    dist, single = tmp_path / "dist", tmp_path / "single"
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, HF_HUB_OFFLINE="1", RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, DFLASH_TEST_DUMP_RANK_WEIGHTS="1")
        procs.append(subprocess.Popen([dflash_bin, "train", *base_args(target_dir[0], offline_dir[0], dist, steps=3)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    if any("this build has no Gloo" in e for _, e in outs):
        pytest.skip("built without gloo headers (apt install libgloo-dev)")
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], single, steps=3, grad_accum=2),
          env={"DFLASH_TEST_DUMP_RANK_WEIGHTS": "1"})
    r0, r1 = load_file(str(dist / "weights.rank0.safetensors")), load_file(str(dist / "weights.rank1.safetensors"))
    ref = load_file(str(single / "weights.rank0.safetensors"))
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k  # ranks apply the same reduced gradient
        torch.testing.assert_close(r0[k], ref[k], rtol=1e-4, atol=1e-5)
    for x, y in zip(metrics(dist), metrics(single)):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)


def test_torchrun_two_processes_of_two_workers_equal_one_of_four(dflash_bin, target_dir, offline_dir, tmp_path):
    """torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE): the node's device list is split
    between the processes on it, so 2 processes x 2 workers train exactly the batches of 1 process x 4 workers."""
    dist, single = tmp_path / "dist", tmp_path / "single"
    port = str(free_port())
    four = dict(drafter_devices="cpu,cpu,cpu,cpu", steps=2)
    procs = []
    for rank in range(2):
        env = dict(os.environ, HF_HUB_OFFLINE="1", RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, DFLASH_TEST_DUMP_RANK_WEIGHTS="1")
        procs.append(subprocess.Popen([dflash_bin, "train", *base_args(target_dir[0], offline_dir[0], dist, **four)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    if any("this build has no Gloo" in e for _, e in outs):
        pytest.skip("built without gloo headers (apt install libgloo-dev)")
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
    assert "2 workers (cpu,cpu)" in outs[0][1] and "4 sequences" in outs[0][1], outs[0][1]
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], single, **four),
              env={"DFLASH_TEST_DUMP_RANK_WEIGHTS": "1"})
    assert "4 workers" in r.stderr and "4 sequences" in r.stderr
    r0, r1 = load_file(str(dist / "weights.rank0.safetensors")), load_file(str(dist / "weights.rank1.safetensors"))
    ref = load_file(str(single / "weights.rank0.safetensors"))
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k
        torch.testing.assert_close(r0[k], ref[k], rtol=1e-4, atol=1e-5)  # the sums associate differently
    for x, y in zip(metrics(dist), metrics(single)):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)
    # A node list that does not split evenly is refused, naming the setting.
    env = dict(os.environ, LOCAL_RANK="0", LOCAL_WORLD_SIZE="2")
    r = subprocess.run([dflash_bin, "train", *base_args(target_dir[0], offline_dir[0], tmp_path / "bad",
                                                        drafter_devices="cpu,cpu,cpu")],
                       env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1 and "'drafter_devices' lists 3 devices for LOCAL_WORLD_SIZE=2" in r.stderr, r.stderr


def test_specforge_samples_equal_dflash_shards(dflash_bin, target_dir, offline_dir, tmp_path):
    d, samples = offline_dir
    sf = tmp_path / "specforge"
    sf.mkdir()
    for i, s in enumerate(samples):  # SpecForge layout: [1, S] ids/mask, [1, S, n*H] hidden states
        obj = {"input_ids": s["input_ids"].unsqueeze(0), "loss_mask": s["loss_mask"].long().unsqueeze(0)}
        if i % 3 == 2:  # SpecForge's EAGLE-3 writer names (plus non-tensor extras)
            obj.update(aux_hidden_state=s["hidden_states"].unsqueeze(0), rid=f"r{i}", metadata={"save_start": 0},
                       hidden_state=torch.zeros(1, s["input_ids"].numel(), HIDDEN))
        else:
            obj["hidden_states"] = s["hidden_states"].unsqueeze(0)
        if i % 2:
            buf = io.BytesIO()
            torch.save(obj, buf)
            (sf / f"data_{i:03d}.ckpt.gz").write_bytes(gzip.compress(buf.getvalue()))
        else:
            torch.save(obj, str(sf / f"data_{i:03d}.ckpt"))
    a, b = tmp_path / "a", tmp_path / "b"
    train(dflash_bin, base_args(target_dir[0], d, a, steps=3))
    train(dflash_bin, base_args(target_dir[0], sf, b, steps=3))
    assert [x["loss"] for x in metrics(a)] == [x["loss"] for x in metrics(b)]


@pytest.mark.parametrize("kl", [0.0, 0.15])
def test_online_target_equals_offline_features(dflash_bin, target_dir, tmp_path, kl):
    tdir, model = target_dir
    samples = make_token_samples(n=4, seed=5)
    jl = tmp_path / "tokens.jsonl"
    jl.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                      "loss_mask": s["loss_mask"].long().tolist()}) + "\n" for s in samples))
    with torch.no_grad():
        for s in samples:  # the drafter's context: HF hidden_states[id + 1] of the target
            hs = model(s["input_ids"].unsqueeze(0), output_hidden_states=True).hidden_states
            s["hidden_states"] = torch.cat([hs[i + 1][0] for i in TARGET_LAYER_IDS], -1)
            s["last_hidden"] = hs[-1][0]  # final-normed: the soft-label teacher's input
    off = tmp_path / "offline.safetensors"
    write_dflash_shard(off, samples, TARGET_LAYER_IDS, HIDDEN)
    a, b = tmp_path / "online", tmp_path / "offline"
    train(dflash_bin, base_args(tdir, jl, a, steps=3, kl_weight=kl))
    train(dflash_bin, base_args(tdir, off, b, steps=3, kl_weight=kl))
    for x, y in zip(metrics(a), metrics(b)):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)


def padding_line(stderr):
    """The run's last words on padding: (% of row positions that are tokens, % of blocks with an anchor)."""
    m = re.search(r"rows \(pack (on|off)\): ([0-9.]+)% of positions are tokens, ([0-9.]+)% of blocks have an anchor",
                  stderr)
    assert m, stderr
    return float(m.group(2)), float(m.group(3))


@pytest.mark.parametrize("online", [False, True])
def test_packed_rows_train_like_unpacked(dflash_bin, target_dir, offline_dir, tmp_path, online):
    """pack: true puts several samples in a row; every step's loss and the weights match pack: false (fp32).
    Offline: the hidden-v1 shards as they are. Online: the target runs on the unpacked rows, with soft labels."""
    data, extra = offline_dir[0], {}
    if online:
        data = tmp_path / "tokens.jsonl"
        data.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(),
                                            "loss_mask": s["loss_mask"].long().tolist()}) + "\n"
                                for s in make_token_samples(n=8, seed=6)))
        extra = {"kl_weight": 0.15}
    # 128 tokens and 64 anchors a row hold 2-3 of these samples (20-41 tokens, 13-34 anchor positions).
    kw = dict(steps=3, batch_size=4, max_len=128, num_anchors=64, **extra)
    a, b = tmp_path / "unpacked", tmp_path / "packed"
    ra = train(dflash_bin, base_args(target_dir[0], data, a, **kw))
    rb = train(dflash_bin, base_args(target_dir[0], data, b, **kw) + ["--pack"])
    assert json.loads((b / "train_config.json").read_text())["pack"] is True
    ma, mb = metrics(a), metrics(b)
    assert len(ma) == len(mb) == 3
    for x, y in zip(ma, mb):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5), (x, y)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4), (x, y)
        assert x["slot_acc"] == pytest.approx(y["slot_acc"], abs=1e-9)
    wa, wb = final_weights(a, 3), final_weights(b, 3)
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5)
    tok_a, blk_a = padding_line(ra.stderr)
    tok_b, blk_b = padding_line(rb.stderr)
    assert tok_b > tok_a and blk_b > blk_a, (ra.stderr, rb.stderr)  # packing removed padding


def test_pack_setting_is_checked(dflash_bin, target_dir, offline_dir, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"pack": "yes"}))
    r = train(dflash_bin, ["--config", str(cfg)] + base_args(target_dir[0], offline_dir[0], tmp_path / "r"), check=False)
    assert r.returncode != 0 and "key 'pack' expects true or false" in r.stderr, r.stderr


def test_loss_decay_none_and_older_runs_saved_settings(dflash_bin, target_dir, offline_dir, tmp_path):
    """`loss_decay: none` reaches the loss (another first loss than the decayed one) and is saved; a run whose saved
    settings predate the key (no loss_decay in train_config.json) resumes with the decay it was started with."""
    decayed, flat, old = tmp_path / "decayed", tmp_path / "flat", tmp_path / "old"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], decayed, steps=2))
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], flat, steps=1, loss_decay="none"))
    assert json.loads((flat / "train_config.json").read_text())["loss_decay"] == "none"
    assert metrics(flat)[0]["loss"] != metrics(decayed)[0]["loss"]
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], old, steps=2, stop_after=1))
    saved = json.loads((old / "train_config.json").read_text())
    del saved["loss_decay"]
    (old / "train_config.json").write_text(json.dumps(saved))
    train(dflash_bin, ["--out", str(old), "--resume"])
    assert [m["loss"] for m in metrics(old)] == [m["loss"] for m in metrics(decayed)]
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "bad", loss_decay="none", gamma=7),
              check=False)
    assert r.returncode == 1 and "'gamma' must be 0 (unset) with loss_decay none" in r.stderr, r.stderr


def test_export_writes_hf_drafter_folder(dflash_bin, target_dir, offline_dir, tmp_path):
    run, out = tmp_path / "run", tmp_path / "hf"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=2))
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", "fp32"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == 4
    assert cfg["dflash_config"]["mask_token_id"] == MASK_ID
    assert cfg["dflash_config"]["target_layer_ids"] == TARGET_LAYER_IDS
    w = load_file(str(out / "model.safetensors"))
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.q_proj.weight",
            "layers.0.mlp.down_proj.weight"} <= set(w)
    assert not any("embed" in k or "lm_head" in k for k in w)
    ref = final_weights(run, 2)
    for k in w:
        assert torch.equal(w[k], ref[k]), k
    # Exporting again over the folder replaces it; a failed export leaves no folder and no staging files behind.
    r = subprocess.run([dflash_bin, "export", str(run), "--out", str(out), "--dtype", "bf16"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and json.loads((out / "config.json").read_text())["dtype"] == "bfloat16", r.stderr
    for bad in (["--dtype", "fp8"], ["--dtype", "fp32", "--out", str(tmp_path / "notes.txt" / "hf")]):
        (tmp_path / "notes.txt").write_text("a file, not a folder")
        r = subprocess.run([dflash_bin, "export", str(run), "--out", str(tmp_path / "hf2"), *bad], capture_output=True,
                           text=True, timeout=TIMEOUT)
        assert r.returncode != 0 and "dflash: error:" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "notes.txt", "run"]


@pytest.mark.parametrize("setup,needle", [
    ({"file": {"num_anchor": 5}}, "unknown key 'num_anchor'"),
    ({"file": {"lr": "fast"}}, "key 'lr' expects a number"),
    ({"flags": ["--bogus", "1"]}, "unknown option --bogus"),
    ({"flags": ["--lr", "-1"]}, "'lr' must be a finite number in [1e-12, 10], got -1"),
    ({"flags": ["--mask-token-id", "-1"]}, "'mask_token_id' is required"),
    ({"flags": ["--drafter-devices", ""]}, "'drafter_devices': needs at least one device, e.g. cpu or cuda:0; got ''"),
    ({"yaml": "lr: fast\n"}, "c.yaml:1: key 'lr' expects a number, got \"fast\""),
    ({"yaml": "lr: 1e-3\nnum_anchor: 5\n"}, "c.yaml:2: unknown key 'num_anchor' (valid keys: target, data,"),
    ({"yaml": "lr: [1e-3\n"}, "invalid YAML"),
    ({"flags": ["--dist-backend", "nccl"]}, "'dist_backend' nccl needs every drafter device to be CUDA"),
    ({"flags": ["--attention-backend", "flash"]}, "'attention_backend' must be auto, fused or reference, got 'flash'"),
])
def test_config_errors_are_clear(dflash_bin, target_dir, offline_dir, tmp_path, setup, needle):
    argv = base_args(target_dir[0], offline_dir[0], tmp_path / "run")
    if "file" in setup:
        f = tmp_path / "c.json"
        f.write_text(json.dumps(setup["file"]))
        argv = ["--config", str(f)] + argv
    if "yaml" in setup:
        f = tmp_path / "c.yaml"
        f.write_text(setup["yaml"])
        argv = ["--config", str(f)] + argv
    argv += setup.get("flags", [])
    r = train(dflash_bin, argv, check=False)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr


def test_flags_override_config_file(dflash_bin, target_dir, offline_dir, tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"lr": 1e-3, "num_anchors": 3, "drafter_devices": ["cpu"]}))
    run = tmp_path / "run"
    train(dflash_bin, ["--config", str(f)] + base_args(target_dir[0], offline_dir[0], run, steps=1)
          + ["--lr", "2e-3"])
    cfg = json.loads((run / "train_config.json").read_text())
    assert cfg["lr"] == 2e-3


def test_yaml_config_equals_json_config(dflash_bin, target_dir, offline_dir, tmp_path):
    settings = {"num_anchors": 5, "lr": 2e-3, "drafter_devices": ["cpu", "cpu"], "warmup_ratio": 0.5,
                "activation_checkpoint": "every:1", "resume": False}
    (tmp_path / "c.json").write_text(json.dumps(settings))
    (tmp_path / "c.yaml").write_text("# same settings\nnum_anchors: 5\nlr: 2.0e-3\ndrafter_devices:\n  - cpu\n"
                                     "  - cpu\nwarmup_ratio: 0.5\nactivation_checkpoint: every:1\nresume: false\n")
    runs = {}
    for name in ("c.json", "c.yaml"):
        run = tmp_path / ("run_" + name)
        args = base_args(target_dir[0], offline_dir[0], run, steps=2)
        for k in settings:  # only in the file
            i = args.index("--" + k.replace("_", "-")) if "--" + k.replace("_", "-") in args else -1
            if i >= 0:
                del args[i:i + 2]
        train(dflash_bin, ["--config", str(tmp_path / name)] + args)
        runs[name] = (json.loads((run / "train_config.json").read_text()), metrics(run))
    cfg_json, m_json = runs["c.json"]
    cfg_yaml, m_yaml = runs["c.yaml"]
    assert {k: v for k, v in cfg_json.items() if k != "out"} == {k: v for k, v in cfg_yaml.items() if k != "out"}
    assert cfg_yaml["drafter_devices"] == "cpu,cpu" and cfg_yaml["num_anchors"] == 5 and cfg_yaml["lr"] == 2e-3
    assert [x["loss"] for x in m_json] == [x["loss"] for x in m_yaml]


def test_producer_error_stops_training(dflash_bin, target_dir, tmp_path):
    g = torch.Generator().manual_seed(3)
    samples = make_token_samples(n=4)
    for i, s in enumerate(samples):  # sample 3 has the wrong feature width
        s["hidden_states"] = torch.randn(s["input_ids"].numel(), HIDDEN + (8 if i == 3 else 0), generator=g)
    d = tmp_path / "bad"
    d.mkdir()
    write_dflash_shard(d / "a.safetensors", samples[:3], TARGET_LAYER_IDS, HIDDEN)
    write_dflash_shard(d / "b.safetensors", samples[3:], TARGET_LAYER_IDS, HIDDEN + 8)
    r = train(dflash_bin, base_args(target_dir[0], d, tmp_path / "run", steps=8, batch_size=2), check=False)
    assert r.returncode != 0
    assert "features" in r.stderr or "feature" in r.stderr, r.stderr


def test_plot_writes_pngs(dflash_bin, target_dir, offline_dir, tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], run, steps=3))
    r = subprocess.run([dflash_bin, "plot", str(run)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    for name in ("loss.png", "accuracy.png"):
        data = (run / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_budget_refuses_before_loading(dflash_bin, target_dir, offline_dir, tmp_path):
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", budget="10KB"), check=False)
    assert r.returncode != 0 and "budget: the planned peak per worker is" in r.stderr, r.stderr
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "ok", steps=1, budget="10GB"))
    # "Before loading": a target whose weights file is garbage still gets the budget refusal, for the whole
    # target (no drafter config) and for the embedding-only path (offline data + drafter config).
    broken = tmp_path / "broken_target"
    broken.mkdir()
    (broken / "config.json").write_text((target_dir[0] / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    for extra in ([], ["--drafter-config", str(tmp_path / "ok" / "drafter_config.json")]):
        r = train(dflash_bin, base_args(broken, offline_dir[0], tmp_path / "run2", budget="10KB") + extra, check=False)
        assert r.returncode != 0 and "budget: the planned peak per worker is" in r.stderr, (extra, r.stderr)
        r = train(dflash_bin, base_args(broken, offline_dir[0], tmp_path / "run3", budget="10GB") + extra, check=False)
        assert r.returncode != 0 and "budget:" not in r.stderr and "safetensors" in r.stderr, (extra, r.stderr)


def test_sigint_finishes_step_checkpoints_and_exits_130(dflash_bin, target_dir, offline_dir, tmp_path):
    import signal
    import time
    run = tmp_path / "run"
    p = subprocess.Popen([dflash_bin, "train", *base_args(target_dir[0], offline_dir[0], run, steps=100000,
                                                           checkpoint_every=100000)],
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not ((run / "metrics.jsonl").exists() and '"loss"' in (run / "metrics.jsonl").read_text()):
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 130, err
    done = len(metrics(run))
    assert (run / "checkpoints" / "latest").read_text().strip() == f"step-{done}.safetensors"
    r = train(dflash_bin, ["--out", str(run), "--resume", "--steps", str(done + 1)])
    assert metrics(run)[-1]["step"] == done + 1


def test_worker_error_stops_all_threads(dflash_bin, target_dir, offline_dir, tmp_path):
    r = train(dflash_bin, base_args(target_dir[0], offline_dir[0], tmp_path / "run", steps=50,
                                    drafter_devices="cpu,cpu"), env={"DFLASH_TEST_FAIL_WORKER": "1"}, check=False)
    assert r.returncode == 1 and "worker 1 (cpu): test failure" in r.stderr, r.stderr


def test_offline_with_unsupported_target_reads_only_embedding(dflash_bin, target_dir, offline_dir, tmp_path):
    """Offline dumps of a target we cannot run: with a drafter config, only the embedding (and LM head) of
    the target folder are read, whatever its architecture says."""
    import shutil
    normal = tmp_path / "normal"
    train(dflash_bin, base_args(target_dir[0], offline_dir[0], normal, steps=2))
    hybrid = tmp_path / "hybrid_target"
    hybrid.mkdir()
    shutil.copy(target_dir[0] / "model.safetensors", hybrid / "model.safetensors")
    (hybrid / "config.json").write_text(json.dumps({"model_type": "some_hybrid_moe", "hidden_size": HIDDEN}))
    run = tmp_path / "run"
    train(dflash_bin, base_args(hybrid, offline_dir[0], run, steps=2) +
          ["--drafter-config", str(normal / "drafter_config.json")])
    assert [x["loss"] for x in metrics(run)] == [x["loss"] for x in metrics(normal)]


def test_failure_in_one_rank_stops_the_other(dflash_bin, target_dir, offline_dir, tmp_path):
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, HF_HUB_OFFLINE="1", RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        if rank == 1:
            env["DFLASH_TEST_FAIL_WORKER"] = "0"
        procs.append(subprocess.Popen([dflash_bin, "train", *base_args(target_dir[0], offline_dir[0],
                                                                       tmp_path / "run", steps=5)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=60) for p in procs]  # no hang: Gloo sees the peer's connection close
    if any("this build has no Gloo" in e for _, e in outs):
        pytest.skip("built without gloo headers (apt install libgloo-dev)")
    assert procs[1].returncode == 1 and "worker 0 (cpu): test failure" in outs[1][1]
    assert procs[0].returncode == 1 and "dflash: error:" in outs[0][1]


def test_plot_trailing_mean():
    import importlib.util
    path = pathlib.Path(__file__).resolve().parents[2] / "python/cli_scripts/plot_metrics.py"
    spec = importlib.util.spec_from_file_location("plot_metrics", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.trailing_mean([2.0, 4.0, 6.0, 8.0, 1.0], 3) == [2.0, 3.0, 4.0, 6.0, 5.0]
    assert mod.trailing_mean([], 3) == []
