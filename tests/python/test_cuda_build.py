"""DFLASH_CUDA_ARCHS reaches nvcc alone: a configure-only run of the ops library (what `pip install .` builds) in a
temporary folder, reading the nvcc command line ninja would run. Torch's CMake config adds -gencode flags of its
own to CMAKE_CUDA_FLAGS; none may survive. The built library's images are checked against cuda_compiled_archs()
by the C++ test CudaBuildInfo (tests/kernels/test_cuda_build_info.cpp)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc: the CUDA kernels are not built here")


def _configure(tmp_path, archs):
    env = dict(os.environ, DFLASH_CUDA_ARCHS=archs)
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    return subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path), "-G", "Ninja", "-DDFLASH_OPS_ONLY=ON",
                           "-DCMAKE_BUILD_TYPE=Release", f"-DDFLASH_PYTHON={ROOT / '.venv' / 'bin' / 'python'}"],
                          env=env, capture_output=True, text=True, timeout=300)


def test_dflash_cuda_archs_decides_the_nvcc_flags(tmp_path):
    r = _configure(tmp_path, "90")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "dflash: CUDA kernels for sm_90 compute_90 (DFLASH_CUDA_ARCHS=90)" in r.stdout
    commands = subprocess.run(["ninja", "-C", str(tmp_path), "-t", "commands", "dflash_ops"], capture_output=True,
                              text=True, check=True).stdout
    nvcc = [line for line in commands.splitlines() if "anchor_attention_cuda.cu" in line and "nvcc" in line]
    assert len(nvcc) == 1, commands[-2000:]
    codes = re.findall(r"(?:-gencode[ =]|--generate-code=)arch=\S+", nvcc[0])
    assert codes == ["--generate-code=arch=compute_90,code=[compute_90,sm_90]"], nvcc[0]
    info = (tmp_path / "src" / "kernels" / "cuda_build_info.cpp").read_text()
    assert 'return "sm_90 compute_90";' in info
    assert 'CUDA_ARCHS = "sm_90 compute_90"' in (tmp_path / "_build_info.py").read_text()


def test_bad_dflash_cuda_archs_stops_the_configure(tmp_path):
    r = _configure(tmp_path, "75")
    assert r.returncode != 0
    assert "DFLASH_CUDA_ARCHS: 75 is below 80; the kernels need sm_80 or newer" in r.stderr
