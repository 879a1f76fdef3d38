"""Loads libdflash_ops.so, which registers the torch.ops.dflash operators, exactly once per process."""
from __future__ import annotations

import os
import pathlib

import torch

OPS = ("anchor_block_attention", "anchor_block_attention_reference", "attention_backend_for", "chunked_lm_loss")
# Points at a libdflash_ops.so to use instead of the packaged one (a checkout's build/, for tests).
LIBRARY_ENV = "DFLASH_OPS_LIBRARY"


def _registered() -> list[str]:
    return [name for name in OPS if hasattr(torch.ops.dflash, name)]


def _check_torch_version() -> None:
    try:
        from . import _build_info
    except ImportError:  # not an installed package: a checkout's library, built against its own torch
        return
    if torch.__version__ != _build_info.TORCH_VERSION:
        raise ImportError(
            f"dflash was built against torch {_build_info.TORCH_VERSION} but this environment has torch "
            f"{torch.__version__}; reinstall dflash (pip install --no-build-isolation .) with the torch it runs with"
        )


def library_path() -> pathlib.Path:
    """Where the ops library is taken from: $DFLASH_OPS_LIBRARY, else the one inside the package."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parent / "libdflash_ops.so"


def load() -> None:
    """Registers torch.ops.dflash.* unless this process already has them (torch.ops.load_library of the
    same operators twice is an error)."""
    have = _registered()
    if len(have) == len(OPS):
        return
    if have:
        raise RuntimeError(
            f"torch.ops.dflash has {have} but not {[n for n in OPS if n not in have]}: an older libdflash_ops.so "
            "was loaded into this process before dflash was imported"
        )
    path = library_path()
    if not path.exists():
        raise ImportError(f"{path} not found: build the package (pip install .) or set {LIBRARY_ENV}")
    if not os.environ.get(LIBRARY_ENV):
        _check_torch_version()
    torch.ops.load_library(str(path))
