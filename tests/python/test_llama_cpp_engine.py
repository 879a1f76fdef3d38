"""llama.cpp, the real serving engine, in the loop (issue 48; docs/SERVING.md "llama.cpp"). Drafters of every family,
trained online against the SmolLM2 GGUF for a step, go through `dflash export --gguf` (llama.cpp's own converter)
and `dflash eval --engine llama.cpp` (llama-speculative-simple): llama.cpp loads each, speculates, and its output
equals its target-alone output. The refusals of `--engine llama.cpp` (the families' llama.cpp rows,
src/families/*/*_engines.cpp) are checked against what llama.cpp's converter and loader really do with each
refused export, converted here by hand. The converter's target folder (`dflash target hf-folder`) is checked
against transformers' own reading of the GGUF."""
import json
import shutil

import pytest
from safetensors.torch import load_file

from llama_cpp_runs import (MASK_ID, TARGET, eval_llama_cpp, export_gguf, prompts_file, run, token_samples,
                            train_run)

ROOT = TARGET.parents[2]
LLAMA_DIR = None   # set by the fixture below from dflash's own default (DFLASH_LLAMA_CPP_DIR or the cache)

# name: (train flags, what --engine llama.cpp does with the export)
FAMILIES = {
    "dflash": {},
    "dspark": {"drafter_family": "dspark", "markov_rank": 8},
    "dspark_no_confidence": {"drafter_family": "dspark", "markov_rank": 8, "enable_confidence_head": "false",
                             "confidence_loss_weight": 0},
    "dflash2": {"drafter_family": "dflash2", "drafter_layers": 2, "selector_rank": 16},
}
# Exports llama.cpp misreads or refuses (the families' llama.cpp rows), each trained for a step.
REFUSED = {
    "dspark_gated": {"drafter_family": "dspark", "markov_rank": 8, "markov_head_type": "gated"},
    "dspark_rank0": {"drafter_family": "dspark", "markov_rank": 0, "confidence_head_with_markov": "false"},
    "dspark_conf_without_markov": {"drafter_family": "dspark", "markov_rank": 8,
                                   "confidence_head_with_markov": "false"},
    "dflash2_top_k_24": {"drafter_family": "dflash2", "selector_rank": 16, "selector_top_k": 24},
}


def llama_cpp_dir():
    import os
    d = os.environ.get("DFLASH_LLAMA_CPP_DIR")
    if d:
        return d
    import pathlib
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return f"{cache}/dflash/llama.cpp-0.3.36"


def converter_argv(export_dir, target_dir, out):
    return [ROOT / ".venv" / "bin" / "python", f"{llama_cpp_dir()}/src/convert_hf_to_gguf.py", export_dir,
            "--target-model-dir", target_dir, "--outfile", out, "--outtype", "f32"]


def speculative_simple(draft_gguf, *flags):
    return run([f"{llama_cpp_dir()}/build/bin/llama-speculative-simple", "-m", TARGET, "-md", draft_gguf,
                "-p", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "-n", 4, "--temp", 0, "-t", 2,
                "-td", 2, "--spec-draft-p-min", 0, *flags])


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return token_samples(tmp_path_factory.mktemp("samples") / "samples.jsonl")


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return prompts_file(tmp_path_factory.mktemp("prompts") / "chat.jsonl")


@pytest.fixture(scope="module")
def target_folder(dflash_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("target") / "hf"
    r = run([dflash_bin, "target", "hf-folder", "--target", TARGET, "--out", out])
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def runs(dflash_bin, samples, tmp_path_factory):
    out = {}
    for name, kw in {**FAMILIES, **REFUSED}.items():
        out[name] = train_run(dflash_bin, tmp_path_factory.mktemp(name) / "run", samples, **kw)
    # DFlash2 with a sliding-window layer: the trained 2-layer run with its first layer made sliding (the weights
    # are the same; only the attention mask changes)
    sliding = tmp_path_factory.mktemp("dflash2_sliding") / "run"
    shutil.copytree(out["dflash2"], sliding)
    cfg = json.loads((sliding / "drafter_config.json").read_text())
    cfg.update(layer_types=["sliding_attention", "full_attention"], sliding_window=8, use_sliding_window=True)
    (sliding / "drafter_config.json").write_text(json.dumps(cfg, indent=2))
    out["dflash2_sliding"] = sliding
    return out


# ------------------------------------------------------------------ the converter's target folder ----

def test_target_folder_reads_as_transformers_reads_the_gguf(target_folder):
    """config.json and the tokenizer we write from our reading of the GGUF == transformers' reading of it."""
    from transformers import AutoConfig, AutoTokenizer
    ours_cfg = AutoConfig.from_pretrained(target_folder)
    hf_cfg = AutoConfig.from_pretrained(TARGET.parent, gguf_file=TARGET.name)
    for k in ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "max_position_embeddings",
              "bos_token_id", "eos_token_id", "tie_word_embeddings", "head_dim"):
        assert getattr(ours_cfg, k) == getattr(hf_cfg, k), k
    assert ours_cfg.rope_parameters["rope_theta"] == hf_cfg.rope_parameters["rope_theta"]
    ours = AutoTokenizer.from_pretrained(target_folder)
    hf = AutoTokenizer.from_pretrained(TARGET.parent, gguf_file=TARGET.name)
    assert ours.get_vocab() == hf.get_vocab()
    ours_model, hf_model = (json.loads(t.backend_tokenizer.to_str())["model"] for t in (ours, hf))
    assert ours_model["merges"] == hf_model["merges"]
    assert {k: (v.content, v.special) for k, v in ours.added_tokens_decoder.items()} == \
           {k: (v.content, v.special) for k, v in hf.added_tokens_decoder.items()}
    assert (ours.bos_token, ours.eos_token, ours.chat_template) == (hf.bos_token, hf.eos_token, hf.chat_template)
    for text in ("Hello, world! It's a <|im_start|>test\n\n  of   the tokenizer: naïve café",
                 "In 2024, 12 apples cost $3.50; 7 cost 2.0417... 1,000,000!"):
        assert ours.encode(text) == hf.encode(text)
    assert ours.convert_ids_to_tokens(ours.encode("2024")) == ["2", "0", "2", "4"]   # SmolLM2 splits digits


def test_target_folder_tokenizes_as_our_tokenizer(dflash_bin, target_folder, tmp_path):
    """transformers on the folder we wrote == our own tokenizer on the GGUF it came from."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(target_folder)
    texts = ["Question: 12 apples cost $3.50; how much are 7?\nAnswer:", "def f(x):\n    return x ** 2  # 100%",
             "<|im_start|>user\nHi there<|im_end|>\n"]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    r = run([dflash_bin, "tokenize", "--model", TARGET, "--input", src, "--output", tmp_path / "out.jsonl"])
    assert r.returncode == 0, r.stderr
    ours = [json.loads(l)["ids"] for l in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert ours == [tok.encode(t) for t in texts]


# ------------------------------------------------------------ every family through llama.cpp ----

@pytest.mark.parametrize("name", list(FAMILIES))
def test_llama_cpp_speculates_losslessly_with_every_family(dflash_bin, runs, prompts, tmp_path, name):
    out = tmp_path / "hf"
    # For llama.cpp only: the default engine set refuses a DSpark run without the confidence head (SGLang would
    # build the head anyway).
    r = export_gguf(dflash_bin, runs[name], out, "--engine", "llama.cpp")
    assert r.returncode == 0, r.stderr
    assert (out / "draft.gguf").is_file() and (out / "model.safetensors").is_file()
    assert not list(out.glob(".draft.gguf*"))
    j = tmp_path / "eval.json"
    r = eval_llama_cpp(dflash_bin, out, prompts, j)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(j.read_text())["llama_cpp"]
    ds = report["datasets"][0]
    assert ds["prompts"] == 2 and ds["output_equals_target"] and ds["differing_prompts"] == []
    assert ds["n_predict"] >= 2 and ds["cycles"] > 0 and 0 <= ds["n_accept"] <= ds["n_drafted"]
    block = json.loads((out / "config.json").read_text())["block_size"]
    assert report["draft_max"] == (block if name.startswith("dspark") else block - 1)
    assert "llama.cpp" in r.stdout and "same output" in r.stdout   # the side-by-side table


def test_dspark_runs_as_dspark_anchor_first(dflash_bin, runs, tmp_path):
    """DeepSpec's contract, which our DSpark export writes: slot j of the block [anchor, mask, ...] predicts
    x[a + j + 1]. llama.cpp runs it so: draft-dspark with sample_from_anchor (all B slots drafted, slot 0 first)."""
    out = tmp_path / "hf"
    assert export_gguf(dflash_bin, runs["dspark"], out).returncode == 0
    r = speculative_simple(out / "draft.gguf", "--spec-draft-n-max", 4)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "adding speculative implementation 'draft-dspark'" in r.stderr
    assert "block_size=4" in r.stderr and "sample_from_anchor=true" in r.stderr


# ----------------------------------------------- the llama.cpp rows of the refusal table, by running it ----

def hand_converted(dflash_bin, run_dir, target_folder, tmp_path, engines):
    """The export written for other engines, then through llama.cpp's converter by hand: (converter result, gguf)."""
    out = tmp_path / "hf"
    r = run([dflash_bin, "export", run_dir, "--out", out, "--dtype", "fp32", "--engine", engines])
    assert r.returncode == 0, r.stderr
    gguf = tmp_path / "draft.gguf"
    return run(converter_argv(out, target_folder, gguf)), gguf


def refusal_line(dflash_bin, run_dir, tmp_path):
    r = export_gguf(dflash_bin, run_dir, tmp_path / "refused")
    assert r.returncode == 1 and not (tmp_path / "refused").exists(), r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "llama.cpp (" in line, line
    return line


def test_gated_markov_head_fails_llama_cpps_converter(dflash_bin, runs, target_folder, tmp_path):
    assert "Markov head" in refusal_line(dflash_bin, runs["dspark_gated"], tmp_path)
    conv, gguf = hand_converted(dflash_bin, runs["dspark_gated"], target_folder, tmp_path, "sglang")
    assert conv.returncode != 0 and "unsupported markov_head_type" in conv.stderr and not gguf.exists()


def test_rank0_dspark_runs_as_dflash_with_the_other_slot_alignment(dflash_bin, runs, target_folder, tmp_path):
    """No markov_w1/w2: llama.cpp picks draft-dflash, which reads slot j as the token at a + j (DFlash), not
    DSpark's a + j + 1 that the run was trained on."""
    assert "markov_rank 0" in refusal_line(dflash_bin, runs["dspark_rank0"], tmp_path)
    # No engine reads rank 0 as trained, so no export of that run exists: the vanilla export with its heads
    # removed and markov_rank 0 is what such an export would be.
    src = tmp_path / "vanilla"
    assert run([dflash_bin, "export", runs["dspark"], "--out", src, "--dtype", "fp32"]).returncode == 0
    c = json.loads((src / "config.json").read_text())
    c["markov_rank"] = 0
    c["enable_confidence_head"] = False
    (src / "config.json").write_text(json.dumps(c))
    w = {k: v for k, v in load_file(str(src / "model.safetensors")).items()
         if not k.startswith(("markov_head.", "confidence_head."))}
    from safetensors.torch import save_file
    save_file(w, str(src / "model.safetensors"), metadata={"format": "pt"})
    gguf = tmp_path / "draft.gguf"
    conv = run(converter_argv(src, target_folder, gguf))
    assert conv.returncode == 0, conv.stderr[-2000:]
    r = speculative_simple(gguf, "--spec-draft-n-max", 3)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "adding speculative implementation 'draft-dflash'" in r.stderr


def test_confidence_head_without_markov_input_fails_llama_cpps_loader(dflash_bin, runs, target_folder, tmp_path):
    assert "confidence_head_with_markov false" in refusal_line(dflash_bin, runs["dspark_conf_without_markov"],
                                                               tmp_path)
    conv, gguf = hand_converted(dflash_bin, runs["dspark_conf_without_markov"], target_folder, tmp_path, "sglang")
    assert conv.returncode == 0, conv.stderr[-2000:]
    r = speculative_simple(gguf)
    assert r.returncode != 0 and "conf_proj" in r.stderr, r.stderr[-2000:]


def test_selector_top_k_too_large_for_the_hidden_size_fails_llama_cpps_loader(dflash_bin, runs, target_folder,
                                                                               tmp_path):
    assert "selector_top_k 24 at hidden_size 576" in refusal_line(dflash_bin, runs["dflash2_top_k_24"], tmp_path)
    conv, gguf = hand_converted(dflash_bin, runs["dflash2_top_k_24"], target_folder, tmp_path, "sglang")
    assert conv.returncode == 0, conv.stderr[-2000:]
    r = speculative_simple(gguf)
    assert r.returncode != 0 and "hidden size is too small for the selector lattice" in r.stderr


def test_dflash2_with_a_sliding_layer(dflash_bin, runs, target_folder, tmp_path):
    """llama.cpp keeps one causal flag for the whole drafter (dflash.attention.causal from is_causal; absent:
    non-causal), so its sliding layers attend inside the block both ways, as full layers do; we train them causal
    inside the block. Running it: the sliding export converts, loads and speculates losslessly, and its drafts equal
    those of the same weights with every layer full while the window spans the context."""
    assert "sliding" in refusal_line(dflash_bin, runs["dflash2_sliding"], tmp_path)
    conv, gguf = hand_converted(dflash_bin, runs["dflash2_sliding"], target_folder, tmp_path,
                                "sglang,vllm,zlab")
    assert conv.returncode == 0, conv.stderr[-2000:]
    r = speculative_simple(gguf, "--spec-draft-n-max", 3, "-lv", 5)
    assert r.returncode == 0, r.stderr[-2000:]


# ------------------------------------------------------------------------------------- bad input ----

def test_no_llama_cpp_build_is_one_line_naming_the_setup(dflash_bin, runs, prompts, tmp_path):
    env = {"DFLASH_LLAMA_CPP_DIR": str(tmp_path / "no-build")}
    r = export_gguf(dflash_bin, runs["dflash"], tmp_path / "hf", env=env)
    assert r.returncode == 1 and not (tmp_path / "hf").exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "convert_hf_to_gguf.py" in lines[0] and "scripts/setup.sh" in lines[0], r.stderr
    good = tmp_path / "good"
    assert export_gguf(dflash_bin, runs["dflash"], good).returncode == 0
    r = eval_llama_cpp(dflash_bin, good, prompts, tmp_path / "e.json", env=env)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and "llama-speculative-simple" in lines[-1] and "scripts/setup.sh" in lines[-1]
    assert not (tmp_path / "e.json").exists()


def test_a_converter_failure_leaves_the_folder_complete_and_no_gguf(dflash_bin, runs, target_folder, tmp_path):
    bad = tmp_path / "target"
    bad.mkdir()
    shutil.copy(target_folder / "config.json", bad / "config.json")   # no tokenizer: the converter fails
    out = tmp_path / "hf"
    r = export_gguf(dflash_bin, runs["dflash"], out, "--target", bad)
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert "llama.cpp's converter failed" in line and "no draft.gguf" in line, line
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / "draft.gguf").exists() and not list(out.glob(".draft.gguf*"))


def test_a_target_without_a_bpe_tokenizer_is_refused_before_anything_is_written(dflash_bin, runs, tmp_path):
    r = run([dflash_bin, "gguf", "info", TARGET])  # the file is fine; a copy with another tokenizer model is not
    assert r.returncode == 0
    out = tmp_path / "hf"
    r = export_gguf(dflash_bin, runs["dflash"], out, "--target", tmp_path / "missing.gguf")
    assert r.returncode == 1 and not out.exists(), r.stderr
    assert "missing.gguf" in r.stderr.strip().splitlines()[-1]


def test_eval_refuses_what_llama_cpp_cannot_honour(dflash_bin, runs, prompts, tmp_path):
    out = tmp_path / "hf"
    assert run([dflash_bin, "export", runs["dflash"], "--out", out, "--dtype", "fp32"]).returncode == 0
    r = eval_llama_cpp(dflash_bin, out, prompts, tmp_path / "e.json")   # no draft.gguf
    assert r.returncode == 1 and "draft.gguf" in r.stderr and "--gguf" in r.stderr
    r = eval_llama_cpp(dflash_bin, out, prompts, tmp_path / "e.json", "--temperature", "0.5")
    assert r.returncode == 1 and "greedy" in r.stderr
    r = run([dflash_bin, "eval", "--target", TARGET, "--drafter", out, "--data", prompts, "--engine", "tgi"])
    assert r.returncode == 1 and "--engine" in r.stderr and "'tgi'" in r.stderr
