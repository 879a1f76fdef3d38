"""`dflash eval` from Python tests: random prompt-id files and one eval run read back (report, generated tokens)."""
import json
import subprocess

import torch


def write_prompts(path, n, vocab, seed=1):
    """n prompts of 4, 7, 10, ... random token ids in [3, vocab) as {"prompt_ids": [...]} JSONL; returns path."""
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt_ids": torch.randint(3, vocab, (4 + 3 * i,), generator=g).tolist()}) + "\n")
    return path


def run_eval(dflash_bin, target_dir, data, tmp_path, *extra, env, timeout=300):
    """Runs `dflash eval` on the dataset `tiny` = data; returns (eval.json, the --tokens-out rows, stdout)."""
    out, toks = tmp_path / "eval.json", tmp_path / "tokens.jsonl"
    cmd = [dflash_bin, "eval", "--target", str(target_dir), "--data", f"tiny={data}", "--json", str(out),
           "--tokens-out", str(toks), "--threads", "1", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.load(open(out)), [json.loads(line) for line in open(toks)], r.stdout
