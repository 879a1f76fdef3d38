"""The pip package from this checkout: `pip wheel .` and `pip install --target` (scikit-build-core, offline,
against the .venv's torch, CPU-only), then a fresh interpreter that sees only the installed folder imports
`dflash` and checks both ops against dense fp64 references, forward and gradients, and that `dflash.integrations`
is shipped and imports without transformers.

The CMake build directory sits beside the build tree (<build>-pypkg), at the same depth: ccache (with
CCACHE_BASEDIR, which the Makefile sets) then sees the same relative paths and flags as the main build's
kernels and ops and serves every object from it (7 CPU-seconds instead of 160). Without ccache the first run
compiles the kernels and ops (about 2.5 CPU-minutes); later runs reconfigure and reinstall in under a minute.
"""
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = pathlib.Path(os.environ.get("DFLASH_BUILD_DIR", ROOT / "build"))

CHECK = r"""
import pathlib, sys
import torch
import dflash
from dflash import _build_info, _library
from attention_reference import dense_attention

site = pathlib.Path(sys.argv[1]).resolve()
assert pathlib.Path(dflash.__file__).resolve().parent == site / "dflash", dflash.__file__
assert _library.library_path().resolve() == site / "dflash" / "libdflash_ops.so"
assert _build_info.TORCH_VERSION == torch.__version__ and _build_info.CUDA_KERNELS is False
assert _build_info.CUDA_ARCHS == ""

g = torch.Generator().manual_seed(0)
S, N, B, Hq, Hkv, D, W = 29, 3, 8, 4, 2, 16, 6
q = torch.randn(2, N * B, Hq, D, generator=g, dtype=torch.float64)
k = torch.randn(2, S + N * B, Hkv, D, generator=g, dtype=torch.float64)
v = torch.randn(2, S + N * B, Hkv, D, generator=g, dtype=torch.float64)
dout = torch.randn(2, N * B, Hq, D, generator=g, dtype=torch.float64)
anchors = torch.tensor([[0, 17, S], [5, 5, 20]])
keep = torch.tensor([[True, True, True], [True, False, True]])
for window in (0, W):
    res = []
    for fn in (dflash.anchor_block_attention, dense_attention):
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*x, anchors, keep, B, window)
        res.append([out, *torch.autograd.grad(out, x, dout)])
    for a, b in zip(*res):
        assert (a - b).abs().max() <= 1e-10 * b.abs().max(), (window, (a - b).abs().max())

R, H, V = 40, 16, 101
h = torch.randn(R, H, generator=g, dtype=torch.float64, requires_grad=True)
lm_head = torch.randn(V, H, generator=g, dtype=torch.float64)
labels = torch.randint(0, V, (R,), generator=g)
w = torch.rand(R, generator=g, dtype=torch.float64)
loss = dflash.chunked_lm_loss(h, lm_head, labels, w, chunk_rows=7)
(gh,) = torch.autograd.grad(loss, h)
hd = h.detach().clone().requires_grad_()
dense = ((-torch.log_softmax(hd @ lm_head.T, -1).gather(1, labels[:, None]).squeeze(1)) * w).sum() / w.sum()
(gd,) = torch.autograd.grad(dense, hd)
assert abs(loss.item() - dense.item()) <= 1e-12 and (gh - gd).abs().max() <= 1e-12
import dflash.integrations as di
assert "transformers" not in sys.modules  # dflash and its integrations import without it
assert di.register() == "anchor_block"   # which imports transformers (present in this environment)
print("installed dflash ok")
"""


def pip(*args, timeout=1200):
    env = dict(os.environ, DFLASH_CUDA="OFF")  # a CPU-only library: no nvcc time in the test suite
    r = subprocess.run([sys.executable, "-m", "pip", *args, "--no-build-isolation", "--no-deps",
                        "-C", f"build-dir={BUILD.parent / (BUILD.name + '-pypkg')}", str(ROOT)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])


@pytest.mark.slow
def test_pip_wheel_and_install_then_import_in_a_fresh_interpreter(tmp_path):
    pip("wheel", "-w", str(tmp_path / "wheels"))
    (wheel,) = (tmp_path / "wheels").glob("dflash-*.whl")
    assert "-py3-none-linux_" in wheel.name, wheel.name
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"dflash/__init__.py", "dflash/integrations.py", "dflash/libdflash_ops.so", "dflash/_build_info.py",
            "dflash/py.typed"} <= names
    assert not any(n.endswith(".in") or "cli_scripts" in n for n in names), sorted(names)

    site = tmp_path / "site"
    pip("install", "--target", str(site))
    env = {k: v for k, v in os.environ.items() if k not in ("DFLASH_OPS_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT / "python" / "cli_scripts")])
    r = subprocess.run([sys.executable, "-c", CHECK, str(site)], capture_output=True, text=True, timeout=300,
                       env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "installed dflash ok" in r.stdout
