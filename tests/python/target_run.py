"""Our target through `dflash target run` and the Hugging Face model it is compared with: the two sides the
target-family tests (dense hybrid, MoE, gpt-oss) check against each other, the random weights they share and the
comparison itself."""
import json
import os
import subprocess

import torch
from safetensors.torch import load_file, save_file

from hf_greedy import hf_greedy

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", HF_HUB_OFFLINE="1")
TIMEOUT = 300


def hf_forward(model, ids):
    with torch.no_grad():
        return model(ids, output_hidden_states=True)


def run_target(dflash_bin, model_dir, ids, tmp_path, capture, *extra):
    """The captured tensors of `dflash target run` on `ids`, and its stderr."""
    inp, out = tmp_path / "ids.safetensors", tmp_path / "out.safetensors"
    save_file({"input_ids": ids}, str(inp))
    cmd = [dflash_bin, "target", "run", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
           "--capture", ",".join(map(str, capture)), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return load_file(str(out)), r.stderr


def randomize(model, seed=0):
    """Larger-than-init weights so that routing and errors are not hidden by near-zero activations; the Qwen3.5
    hybrids store their norms zero-centred (1 + w), their decays go from slow to fast."""
    g = torch.Generator().manual_seed(seed)
    hybrid = "Qwen3_5" in type(model).__name__
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("A_log"):
                p.copy_((0.02 + 1.98 * torch.rand(p.shape, generator=g)).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "linear_attn.norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_((0 if hybrid else 1) + 0.2 * torch.randn(p.shape, generator=g))
            elif "conv1d" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.double() - b.double()).abs().max().item()


def check(got, ref, capture, tol=1e-4):
    """`dflash target run`'s tensors against the HF forward: absolute differences relative to the reference's range."""
    def ok(a, b):
        return max_diff(a, b) <= tol * max(1.0, b.abs().max().item())
    assert ok(got["last_hidden"], ref.hidden_states[-1])
    assert sorted(k for k in got if k.startswith("hidden.")) == sorted(f"hidden.{i}" for i in capture)
    for i in capture:
        assert ok(got[f"hidden.{i}"], ref.hidden_states[i + 1]), (i, max_diff(got[f"hidden.{i}"], ref.hidden_states[i + 1]))
    # Logits are float32 whatever the compute dtype.
    assert max_diff(got["logits"], ref.logits) <= max(tol, 1e-6) * max(1.0, ref.logits.abs().max().item())


def generate_error(dflash_bin, model_dir):
    """The stderr of `dflash target generate` on a folder it must refuse."""
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(model_dir), "--prompt-ids", "1,2"],
                       capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode != 0
    return r.stderr


def assert_greedy_matches_hf(dflash_bin, model, path, prompt, new_tokens):
    """`dflash target generate` on `path` (a folder or .gguf) decodes what transformers' own greedy generate does."""
    with torch.no_grad():  # transformers' own cached decode
        ref = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0,
                             min_new_tokens=new_tokens)[0, prompt.shape[1]:].tolist()
    r = subprocess.run([dflash_bin, "target", "generate", "--model", str(path), "--max-new", str(new_tokens), "--eos",
                        "none", "--prompt-ids", ",".join(map(str, prompt[0].tolist()))], capture_output=True,
                       text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert [int(t) for t in r.stdout.split()] == ref


def regenerate_equals_hf_greedy(dflash_bin, model, model_dir, prompts, tmp_path):
    """`dflash data regenerate` (batches of 3, 12 new tokens, EOS 2) on `prompts` answers as transformers' greedy
    decode does: the prompts file, the samples file and its samples."""
    data, out = tmp_path / "p.jsonl", tmp_path / "s.jsonl"
    data.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    r = subprocess.run([dflash_bin, "data", "regenerate", "--model", str(model_dir), "--input", str(data), "--output",
                        str(out), "--threads", "1", "--max-new", "12", "--batch", "3"], capture_output=True,
                       text=True, env=ENV, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    samples = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(samples) == len(prompts)
    for s, p in zip(samples, prompts):
        assert s["input_ids"] == p + hf_greedy(model, p, 12, eos=2)
    return data, out, samples
