"""Shared helpers of the llama.cpp tests (test_llama_cpp_engine.py, test_llama_cpp_agreement.py): drafters trained
online against the SmolLM2 GGUF target for a step or two (llama.cpp runs GGUF targets only), exported with
`dflash export --gguf`, and `dflash eval --engine llama.cpp` on a few chat prompts."""
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MASK_ID = 16   # SmolLM2's <empty_output>, as the demo uses
TIMEOUT = 600

PROMPTS = [
    {"messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]},
    {"messages": [{"role": "user", "content": "Write a short Python function that adds two numbers."}]},
]


def run(argv, env=None, timeout=TIMEOUT):
    e = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_WAIT_POLICY="passive")
    e.update(env or {})
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=e)


def token_samples(path, n=2, length=48):
    """Chat-shaped token samples for online training: any ids of the vocabulary train a drafter that loads."""
    with open(path, "w") as f:
        for i in range(n):
            ids = [(97 + 13 * i + 7 * k) % 4000 + 100 for k in range(length)]
            f.write(json.dumps({"input_ids": ids, "loss_mask": [0] * 8 + [1] * (length - 8)}) + "\n")
    return path


def train_run(dflash_bin, out, data, steps=1, **kw):
    """A drafter of SmolLM2 (1 layer, block 4) trained online for `steps` steps; kw: more train flags."""
    a = {"target": TARGET, "data": data, "out": out, "mask_token_id": MASK_ID, "drafter_layers": 1, "dtype": "fp32",
         "num_anchors": 4, "block_size": 4, "batch_size": 1, "log_every": 1, "checkpoint_every": steps,
         "threads": 2, "max_len": 64, "lr": 1e-3, "steps": steps}
    a.update(kw)
    argv = [dflash_bin, "train"]
    for k, v in a.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    r = run(argv)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def export_gguf(dflash_bin, run_dir, out, *flags, env=None):
    return run([dflash_bin, "export", run_dir, "--out", out, "--dtype", "fp32", "--gguf", *flags], env=env)


def prompts_file(path, prompts=PROMPTS):
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return path


def eval_llama_cpp(dflash_bin, drafter, prompts, json_out, *flags, engines="llama.cpp", max_new=16, env=None):
    return run([dflash_bin, "eval", "--target", TARGET, "--drafter", drafter, "--data", f"chat={prompts}",
                "--max-new", max_new, "--threads", 2, "--engine", engines, "--json", json_out, *flags], env=env)


def f32_target(path):
    """The SmolLM2 target with its Q4_1 weights dequantized to F32 by llama.cpp's own gguf-py (every metadata entry
    kept). dflash dequantizes Q4_1 to the same fp32 numbers and computes in fp32; llama.cpp multiplies Q4_1 weights
    with activations it rounds to 8 bits, so on the Q4_1 file its greedy answers part from ours after a few dozen
    tokens. On this F32 file both engines do fp32 arithmetic and write the same answers (up to exact ties)."""
    import gguf
    import numpy as np
    r = gguf.GGUFReader(str(TARGET))
    w = gguf.GGUFWriter(str(path), r.get_field(gguf.Keys.General.ARCHITECTURE).contents())
    for f in r.fields.values():
        if f.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE) or f.name.startswith("GGUF."):
            continue   # written by GGUFWriter itself, or changed below
        t = f.types[0]
        w.add_key_value(f.name, f.contents(), t, sub_type=f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        w.add_tensor(t.name, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
