"""Our target through `dflash target run` and the Hugging Face model it is compared with: the two sides the
target-family tests (dense hybrid, MoE) check against each other."""
import os
import subprocess

import torch
from safetensors.torch import load_file, save_file

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
