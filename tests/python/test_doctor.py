"""`dflash doctor` on this CPU-only machine: the report's sections and rows, its JSON (docs/DOCTOR.md's schema),
exit 0 when everything passes; the test-only fault injection (DFLASH_FAULT_INJECT) turning the rows of the broken
kernel into failures named in the table with exit 1; --config with a tiny target's config.json (no weights): the
run's own shapes and memory plan passing, and failing when the plan exceeds the machine's memory or the config's
budget; bad flags exit 2 with a one-line message; the CUDA parts reported as skipped without a GPU; the source
version script ("unknown" outside git, the commit inside, rewritten only when it changes)."""
import json
import os
import re
import subprocess

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW_KEYS = {"section", "device", "name", "status", "detail", "data"}
TENSORS = ["out", "dq", "dk", "dv"]
NO_GPU = not torch.cuda.is_available()


def doctor(dflash_bin, *args, env=None, timeout=300):
    e = dict(os.environ, OMP_WAIT_POLICY="passive")
    e.pop("DFLASH_FAULT_INJECT", None)
    e.update(env or {})
    return subprocess.run([dflash_bin, "doctor", *args], capture_output=True, text=True, timeout=timeout, env=e)


def rows(report, section=None, status=None):
    return [r for r in report["checks"] if (section is None or r["section"] == section)
            and (status is None or r["status"] == status)]


def summary_table(text):
    """The rows of the closing table: (result, section, device, check)."""
    table = text[text.index("\nsummary\n"):]
    out = []
    for line in table.splitlines():
        m = re.match(r"^  (PASS|FAIL|SKIP)\s+(\S+)\s+(\S*)\s+(.*)$", line)
        if m:
            out.append(m.groups())
    return out


@pytest.fixture(scope="module")
def full_report(dflash_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "doctor.json"
    r = doctor(dflash_bin, "--json", str(path))
    return r, json.loads(path.read_text())


def test_cpu_report_passes_with_every_section(full_report):
    r, rep = full_report
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert rep["schema"] == "dflash-doctor-1" and rep["passed"] is True and rep["quick"] is False
    for section in ("versions", "devices", "checks", "summary"):
        assert f"\n{section}\n" in r.stdout, section

    v = rep["versions"]
    assert v["torch"] == torch.__version__.split("+")[0]
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|unknown", v["dflash"]), v["dflash"]
    assert v["threads"] == os.cpu_count() and v["cpu_isa"] in v["cpu_isas"] and v["cpu_isas"][-1] == "base"
    assert v["gloo"] is True
    for key in ("cuda_runtime", "cuda_driver", "cudnn", "nccl", "cuda_archs"):
        assert isinstance(v[key], str), key
    if v["cuda_kernels"]:
        assert v["cuda_archs"].startswith("sm_")
    if NO_GPU:
        assert v["cuda_driver"] == "" and "driver none" in r.stdout

    cpu = rep["devices"][0]
    assert cpu["device"] == "cpu" and cpu["cores"] == os.cpu_count()
    assert 0 < cpu["memory_available_bytes"] <= cpu["memory_total_bytes"]

    for row in rep["checks"]:
        assert set(row) == ROW_KEYS and row["status"] in ("pass", "fail", "skip"), row
    # The fused attention against the reference: 3 head dims x fp32/bf16 x (GQA + packed, group of 1 + window),
    # forward and backward, every tensor within its tolerance.
    att = rows(rep, "attention")
    assert len(att) == 12 and all(a["status"] == "pass" for a in att)
    shapes = {(a["data"]["spec"]["head_dim"], a["data"]["spec"]["dtype"], a["data"]["spec"]["q_heads"] //
               a["data"]["spec"]["kv_heads"], a["data"]["spec"]["window"] > 0, a["data"]["spec"]["packed"]) for a in att}
    assert shapes == {(d, t, g, w, p) for d in (64, 128, 256) for t in ("fp32", "bf16")
                      for g, w, p in ((4, False, True), (1, True, False))}
    for a in att:
        assert [t["name"] for t in a["data"]["tensors"]] == TENSORS
        assert all(0 <= t["error"] <= t["tolerance"] for t in a["data"]["tensors"])
        assert a["data"]["spec"]["backward"] and a["device"] == "cpu"
    (timing,) = rows(rep, "timing")
    assert timing["status"] == "pass" and timing["data"]["spec"]["num_blocks"] > 6
    assert timing["data"]["fused_ms"] > 0 and timing["data"]["reference_ms"] > 0
    assert re.search(r"fused [0-9.]+ ms, reference [0-9.]+ ms \([0-9.]+x", timing["detail"]), timing["detail"]
    (gemm,) = rows(rep, "gemm")
    assert gemm["data"]["shape"] == "fp32 2048^3" and gemm["data"]["gflops"] > 0
    assert re.search(r"[0-9.]+ [GT]FLOP/s", gemm["detail"])
    assert [(x["name"], x["status"]) for x in rows(rep, "loss")] == [
        ("fp32, H 256, V 4096, 32 rows", "pass"), ("bf16, H 256, V 4096, 32 rows", "pass")]
    gloo, nccl = rows(rep, "collective")
    assert gloo["name"] == "gloo" and gloo["status"] == "pass" and "all-reduce sum 3 on every rank" in gloo["detail"]
    assert nccl["name"] == "nccl"
    if NO_GPU:  # the CUDA parts say they were skipped
        assert nccl["status"] == "skip"
        assert [(x["device"], x["status"]) for x in rows(rep, "device")] == [("cpu", "pass"), ("cuda", "skip")]
        assert len(rep["devices"]) == 1

    # The closing table lists every row in order, and the counts add up.
    table = summary_table(r.stdout)
    assert [(s.lower(), sec, dev) for s, sec, dev, _ in table] == \
        [(x["status"], x["section"], x["device"]) for x in rep["checks"]]
    c = rep["counts"]
    assert c["fail"] == 0 and c["pass"] + c["skip"] == len(rep["checks"])
    assert r.stdout.rstrip().endswith(f"{len(rep['checks'])} checks: {c['pass']} passed, 0 failed, {c['skip']} skipped")


def test_json_dash_goes_to_stdout_and_text_to_stderr(dflash_bin):
    r = doctor(dflash_bin, "--quick", "--json", "-")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["quick"] is True and rep["passed"] is True
    assert len(rows(rep, "attention")) == 4  # head dim 128 only
    assert {x["data"]["spec"]["head_dim"] for x in rows(rep, "attention")} == {128}
    assert "\nsummary\n" in r.stderr and "versions" in r.stderr


@pytest.mark.parametrize("fault,broken", [("attention_wrong", {"attention", "timing"}),
                                          ("attention_throw", {"attention", "timing"}),
                                          ("cross_entropy_wrong", {"loss"})])
def test_fault_injection_fails_the_broken_kernels_rows(dflash_bin, tmp_path, fault, broken):
    path = tmp_path / "doctor.json"
    r = doctor(dflash_bin, "--quick", "--json", str(path), env={"DFLASH_FAULT_INJECT": fault})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    rep = json.loads(path.read_text())
    assert rep["passed"] is False
    failed = rows(rep, status="fail")
    assert {x["section"] for x in failed} == broken
    assert all(x["status"] == "fail" for s in broken for x in rows(rep, s))  # every row of that kernel
    assert all(x["status"] != "fail" for x in rep["checks"] if x["section"] not in broken)
    for x in failed:
        if fault == "attention_throw":
            assert x["detail"].startswith("threw: ") and "injected failure" in x["detail"], x["detail"]
            assert "injected failure" in x["data"]["exception"]
        else:
            assert re.match(r"(out|loss) max error \S+ > tolerance", x["detail"]), x["detail"]
    # The table names each failing row and says why on the next line.
    table = r.stdout[r.stdout.index("\nsummary\n"):]
    for x in failed:
        assert f"FAIL   {x['section']:<16} cpu      {x['name']}\n         -> {x['detail']}" in table
    assert f"{len(failed)} failed" in r.stdout.splitlines()[-1]


TARGET_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 32,
                 "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "tie_word_embeddings": True, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
                 "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2}


def write_config(tmp_path, **settings):
    """A train config over a target folder that holds only config.json: doctor reads no weights."""
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    (target / "config.json").write_text(json.dumps(TARGET_CONFIG))
    cfg = {"target": str(target), "mask_token_id": 255, "dtype": "fp32", "max_len": 64, "num_anchors": 6,
           "block_size": 4}
    cfg.update(settings)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(cfg))
    return path


def test_config_checks_the_runs_shapes_and_memory_plan(dflash_bin, tmp_path):
    # A drafter config with a sliding layer: one check per distinct window, at the run's S, heads, D, B, dtype, pack.
    drafter = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   num_hidden_layers=2, num_target_layers=3, block_size=4, vocab_size=256,
                   layer_types=["sliding_attention", "full_attention"], sliding_window=16,
                   dflash_config={"target_layer_ids": [0, 1], "mask_token_id": 255})
    (tmp_path / "drafter.json").write_text(json.dumps(drafter))
    cfg = write_config(tmp_path, drafter_devices="cpu,cpu", pack=True, budget="1GB", dtype="bf16",
                       drafter_config=str(tmp_path / "drafter.json"))
    path = tmp_path / "doctor.json"
    r = doctor(dflash_bin, "--quick", "--config", str(cfg), "--json", str(path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    rep = json.loads(path.read_text())
    (read,) = rows(rep, "config")
    assert read["status"] == "pass" and read["name"] == str(cfg)
    assert rep["config"]["drafter"] == {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
                                        "num_key_value_heads": 2, "head_dim": 8, "block_size": 4, "windows": [16, 0]}
    att = rows(rep, "config_attention")
    assert [x["name"] for x in att] == [f"bf16, S 64, Hq 4, Hkv 2, D 8, B 4, window {w}, packed, forward+backward"
                                        for w in (0, 16)]
    assert all(x["status"] == "pass" and x["device"] == "cpu" for x in att)
    plan, budget = rows(rep, "config_memory")
    assert plan["status"] == "pass" and plan["data"]["workers"] == 2
    assert 0 < plan["data"]["need_bytes"] == 2 * plan["data"]["peak_bytes"] <= plan["data"]["free_bytes"]
    assert "x 2 workers" in plan["detail"] and " fits in " in plan["detail"]
    assert budget["status"] == "pass" and budget["name"] == "budget 1GB"


def test_config_whose_plan_does_not_fit_fails(dflash_bin, tmp_path):
    # 65536 rows of 65536 tokens: terabytes of features, more than any machine these tests run on; a 1 KB budget.
    cfg = write_config(tmp_path, batch_size=65536, max_len=65536, budget="1KB")
    path = tmp_path / "doctor.json"
    r = doctor(dflash_bin, "--quick", "--config", str(cfg), "--json", str(path))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    rep = json.loads(path.read_text())
    plan, budget = rows(rep, "config_memory")
    assert plan["status"] == "fail" and plan["data"]["need_bytes"] > plan["data"]["free_bytes"] > 0
    assert re.search(r"planned peak [0-9.]+ [GT]B per worker \(at .*\) exceeds [0-9.]+ GB available", plan["detail"]), \
        plan["detail"]
    assert budget["status"] == "fail" and budget["detail"].startswith("budget: the planned peak per worker is ")
    assert {x["section"] for x in rows(rep, status="fail")} == {"config_memory"}
    assert rows(rep, "config_attention")[0]["name"].startswith("fp32, S 65536, ")


@pytest.mark.parametrize("backend,consequence", [("auto", "would run the reference attention on cpu"),
                                                  ("fused", "would refuse to start")])
def test_config_rows_say_what_train_would_do_with_a_broken_kernel(dflash_bin, tmp_path, backend, consequence):
    cfg = write_config(tmp_path, attention_backend=backend)
    path = tmp_path / "doctor.json"
    r = doctor(dflash_bin, "--quick", "--config", str(cfg), "--json", str(path),
               env={"DFLASH_FAULT_INJECT": "attention_wrong"})
    assert r.returncode == 1
    (row,) = rows(json.loads(path.read_text()), "config_attention")
    assert row["status"] == "fail" and row["detail"].startswith("out max error ")
    assert row["detail"].endswith(f"; dflash train (attention_backend {backend}) {consequence}"), row["detail"]


def test_config_errors_are_failed_rows(dflash_bin, tmp_path):
    r = doctor(dflash_bin, "--quick", "--config", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    (row,) = [t for t in summary_table(r.stdout) if t[1] == "config"]
    assert row[0] == "FAIL"
    assert "missing.json: cannot open for reading" in r.stdout
    cfg = write_config(tmp_path, max_len=1)
    r = doctor(dflash_bin, "--quick", "--config", str(cfg))
    assert r.returncode == 1
    assert "-> train config: 'max_len' must be in [2, 1048576], got 1" in r.stdout, r.stdout[-2000:]


@pytest.mark.skipif(not NO_GPU, reason="checks how a missing GPU is reported")
def test_a_missing_device_is_a_failed_row(dflash_bin):
    r = doctor(dflash_bin, "--quick", "--devices", "cpu;cuda:0")
    assert r.returncode == 1
    table = summary_table(r.stdout)
    assert ("FAIL", "device", "cuda:0", "cuda:0") in table
    assert ("SKIP", "collective", "", "nccl") in table  # no GPU answered
    assert all(t[2] != "cuda:0" for t in table if t[1] != "device")  # its kernels are not run
    assert "'cuda:0' asks for a CUDA device" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--threads", "x"], "doctor: --threads expects an integer, got 'x'"),
    (["--threads", "5000"], "doctor: --threads: expected 0 (every core) to 1024, got 5000"),
    (["--devices", "gpu:1"], "doctor: --devices: expected a device like cpu, cuda or cuda:1, got 'gpu:1'"),
    (["--devices", "cuda:1;cuda:1"], "doctor: --devices: cuda:1 is in replica 0 and replica 1"),
    (["--quick=1"], "doctor: --quick takes no value"),
    (["--frobnicate"], "doctor: unknown option --frobnicate"),
])
def test_bad_flags_exit_2(dflash_bin, args, message):
    r = doctor(dflash_bin, *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("dflash: error: " + message), r.stderr
    assert r.stdout == ""


def source_version(tmp_path, source):
    out = tmp_path / "version.h"
    subprocess.run(["cmake", f"-DSOURCE_DIR={source}", f"-DOUTPUT={out}", "-P",
                    os.path.join(ROOT, "cmake", "dflash_source_version.cmake")], check=True, capture_output=True)
    return out, re.search(r'#define DFLASH_SOURCE_VERSION "(.*)"', out.read_text()).group(1)


def test_source_version_is_the_commit_or_unknown(tmp_path):
    plain = tmp_path / "tarball"
    plain.mkdir()
    assert source_version(tmp_path, plain)[1] == "unknown"
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "a.txt").write_text("1\n")
    subprocess.run(git + ["add", "a.txt"], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    head = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    out, v = source_version(tmp_path, repo)
    assert v == head
    before = out.stat().st_mtime_ns
    assert source_version(tmp_path, repo)[1] == head and out.stat().st_mtime_ns == before  # unchanged: not rewritten
    (repo / "a.txt").write_text("2\n")
    assert source_version(tmp_path, repo)[1] == head + "-dirty"
    sub = repo / "sub"  # a folder inside some other repository is not that repository's source
    sub.mkdir()
    assert source_version(tmp_path, sub)[1] == "unknown"


def test_the_binary_names_this_checkouts_commit(full_report):
    v = full_report[1]["versions"]["dflash"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    top = subprocess.run(["git", "-C", ROOT, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if head.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(ROOT):
        assert v == "unknown"
    else:
        assert v.split("-")[0] == head.stdout.strip(), (v, head.stdout)


def test_json_into_a_missing_folder_fails_before_the_checks(dflash_bin, tmp_path):
    r = doctor(dflash_bin, "--quick", "--json", str(tmp_path / "no" / "doctor.json"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("dflash: error: ") and str(tmp_path / "no" / "doctor.json") in r.stderr, r.stderr


FAMILY_DRAFTERS = {
    "dspark": {"architectures": ["Qwen3DSparkModel"], "mask_token_id": 255, "markov_rank": 12,
               "markov_head_type": "gated"},
    "dflash2": {"architectures": ["DFlash2DraftModel"],
                "dflash_config": {"mask_token_id": 255, "conv_kernel_size": 3, "conv_group_size": 8,
                                  "selector_rank": 6, "selector_top_k": 4}},
}


@pytest.mark.parametrize("family", ["dspark", "dflash2"])
def test_config_plans_a_family_drafter_as_plan_does(dflash_bin, tmp_path, family):
    """doctor --config with a DSpark / DFlash2 drafter config: its memory row is `dflash plan`'s peak for the same
    drafter and step (the family's heads / convs / selector and objective counted), above the same drafter's as DFlash."""
    drafter = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   num_hidden_layers=2, num_target_layers=3, block_size=4, vocab_size=256, target_layer_ids=[0, 1],
                   **FAMILY_DRAFTERS[family])
    (tmp_path / "drafter.json").write_text(json.dumps(drafter))
    dflash = {k: v for k, v in drafter.items() if k not in FAMILY_DRAFTERS[family]}
    dflash.update(architectures=["DFlashDraftModel"], dflash_config={"mask_token_id": 255})
    (tmp_path / "dflash.json").write_text(json.dumps(dflash))
    settings = dict(loss_chunk_rows=16, attention_backend="auto", kl_weight=0, batch_size=1)
    flags = ["--max-len", "64", "--num-anchors", "6", "--batch", "1", "--dtype", "fp32", "--loss-chunk-rows", "16",
             "--kl-weight", "0", "--device", "cpu", "--attention-backend", "auto", "--json"]
    peaks = {}
    for name in ("drafter", "dflash"):
        cfg = write_config(tmp_path, drafter_config=str(tmp_path / f"{name}.json"), **settings)
        path = tmp_path / f"doctor-{name}.json"
        r = doctor(dflash_bin, "--quick", "--config", str(cfg), "--json", str(path))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr
        (mem,) = rows(json.loads(path.read_text()), "config_memory")
        plan = subprocess.run([dflash_bin, "plan", "--config", str(tmp_path / f"{name}.json"), *flags],
                              capture_output=True, text=True, timeout=60)
        assert plan.returncode == 0, plan.stderr
        assert mem["status"] == "pass" and mem["data"]["peak_bytes"] == json.loads(plan.stdout)["peak_bytes"]
        peaks[name] = mem["data"]["peak_bytes"]
    assert peaks["drafter"] > peaks["dflash"]
