"""Shared fixtures: where the build put the op library and the CLI."""
import os
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DFLASH_BUILD_DIR", ROOT / "build"))
SHARED = ROOT.parent / "shared"


def _load_ops():
    lib = BUILD / "libdflash_ops.so"
    if not lib.exists():
        raise RuntimeError(f"{lib} not found: build first (make build)")
    torch.ops.load_library(str(lib))


_load_ops()
torch.set_num_threads(os.cpu_count() or 1)
# The Python package from the checkout (python/dflash) runs on the library loaded above; the installed
# package itself is tested by test_pypkg_install.py.
sys.path.insert(0, str(ROOT / "python"))
# The plain-PyTorch drafter and the dense attention reference the tests compare against (python/cli_scripts).
sys.path.insert(0, str(ROOT / "python" / "cli_scripts"))


@pytest.fixture(scope="session")
def dflash_bin():
    return str(BUILD / "dflash")


@pytest.fixture(scope="session")
def shared_dir():
    return SHARED
