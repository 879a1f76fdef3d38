"""The environment switches seen from the op library alone (what `pip install .` gives, without the dflash command's
start-up check): a malformed DFLASH_CPU_ISA or DFLASH_FAULT_INJECT is refused at the op's call with the same line the
command prints, not taken as "use the best ISA" or a failing kernel; a well-formed one runs."""
import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD

# Calls the CPU attention op and the fused cross-entropy loss; prints what each did as JSON.
SCRIPT = r"""
import json, sys, torch
torch.ops.load_library(sys.argv[1])
torch.manual_seed(0)
def attention():
    q = torch.randn(1, 8, 2, 8); k = torch.randn(1, 20, 2, 8); v = torch.randn(1, 20, 2, 8)
    return torch.ops.dflash.anchor_block_attention(q, k, v, torch.tensor([[3, 7]]), torch.ones(1, 2, dtype=torch.bool), 4)
def loss():
    return torch.ops.dflash.chunked_lm_loss(torch.randn(6, 8), torch.randn(11, 8), torch.randint(0, 11, (6,)),
                                            torch.ones(6))[0]
got = {}
for name, fn in [("attention", attention), ("loss", loss)]:
    try:
        got[name] = "finite" if bool(torch.isfinite(fn()).all()) else "not finite"
    except (RuntimeError, ValueError) as e:
        got[name] = str(e).splitlines()[0]
print(json.dumps(got))
"""


def call_ops(env):
    e = {k: v for k, v in os.environ.items() if k not in ("DFLASH_CPU_ISA", "DFLASH_FAULT_INJECT")}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(BUILD / "libdflash_ops.so")], capture_output=True, text=True,
                       env=dict(e, **env), timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_junk_cpu_isa_is_refused_by_the_library():
    got, _ = call_ops({"DFLASH_CPU_ISA": "junk"})
    want = "DFLASH_CPU_ISA: expected base, avx2 or avx512, got 'junk'"
    assert want in got["attention"] and want in got["loss"], got


@pytest.mark.parametrize("isa", ["base", ""])
def test_a_named_or_empty_cpu_isa_runs(isa):
    got, err = call_ops({"DFLASH_CPU_ISA": isa})
    assert got == {"attention": "finite", "loss": "finite"}, (got, err)
    assert "DFLASH_CPU_ISA" not in err


def test_a_junk_fault_injection_is_refused_by_the_library_as_by_the_command(dflash_bin):
    got, _ = call_ops({"DFLASH_FAULT_INJECT": "junk"})
    cli = subprocess.run([dflash_bin, "plan", "--preset", "qwen3-8b"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, DFLASH_FAULT_INJECT="junk"))
    assert cli.returncode == 1
    line = cli.stderr.strip().removeprefix("dflash: error: ")
    assert line.startswith("DFLASH_FAULT_INJECT: expected attention_wrong, attention_throw or cross_entropy_wrong"), line
    assert line in got["attention"] and line in got["loss"], (line, got)
