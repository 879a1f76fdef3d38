"""Shared fixtures: where the build put the op library and the CLI."""
import os
import pathlib

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


@pytest.fixture(scope="session")
def dflash_bin():
    return str(BUILD / "dflash")


@pytest.fixture(scope="session")
def shared_dir():
    return SHARED
