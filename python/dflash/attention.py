"""The DFlash anchor-block attention with autograd: the fused op (torch.ops.dflash.anchor_block_attention) or
the reference (torch.ops.dflash.anchor_block_attention_reference, LibTorch ops only, any device and dtype)."""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from . import _checks

BACKENDS = ("auto", "fused", "reference")


def _check_args(fn: str, q, k, v, anchors, keep, block_size, window, ctx_start, backend) -> tuple[int, int]:
    """The checks the op makes, in Python and first: the op's own would not run for tensors on other devices
    (torch then only says no kernel is registered). Returns block_size and window as ints."""
    if backend not in BACKENDS:
        raise ValueError(f"{fn}: backend must be auto, fused or reference, got {backend!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(fn, name, t, "float")
    _checks.tensor(fn, "anchors", anchors, "int64")
    _checks.tensor(fn, "keep", keep, "bool")
    if ctx_start is not None:
        _checks.tensor(fn, "ctx_start", ctx_start, "int64")
    block_size = _checks.integer(fn, "block_size", block_size, 1)
    window = _checks.integer(fn, "window", window, 0)
    _checks.one_device(fn, [("q", q), ("k", k), ("v", v), ("anchors", anchors), ("keep", keep),
                            ("ctx_start", ctx_start)], op_devices=backend != "reference")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{fn}: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    _checks.shape(fn, "q", q, "[batch, N*B, Hq, D]", q.dim() == 4)
    _checks.shape(fn, "k", k, "[batch, S+N*B, Hkv, D]", k.dim() == 4)
    _checks.shape(fn, "v", v, f"the shape of k {list(k.shape)}", v.shape == k.shape)
    if q.size(1) % block_size:
        raise ValueError(f"{fn}: q has {q.size(1)} tokens, not a multiple of block_size {block_size}")
    n, b = q.size(1) // block_size, q.size(0)
    for name, t in (("anchors", anchors), ("keep", keep), ("ctx_start", ctx_start)):
        if t is not None:
            _checks.shape(fn, name, t, f"[{n}] or [{b}, {n}] (N = q tokens / block_size)",
                          tuple(t.shape) in ((n,), (b, n)))
    return block_size, window


def _backend_for(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, window: int,
                 packed: bool) -> str:
    """"fused" or "reference" for this call. auto and fused check the fused op against the reference once per
    process and shape kind (the C++ side remembers the answer); auto falls back with a warning, fused raises."""
    if backend == "reference":
        return backend
    backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    chosen, fallback = torch.ops.dflash.attention_backend_for(q, k, block_size, window, packed, backward, backend)
    if fallback:
        warnings.warn(fallback, RuntimeWarning, stacklevel=3)
    return chosen


def anchor_block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, anchors: torch.Tensor,
                           keep: torch.Tensor, block_size: int, window: int = 0,
                           scale: Optional[float] = None, ctx_start: Optional[torch.Tensor] = None,
                           backend: str = "auto") -> torch.Tensor:
    """DFlash attention: every block's queries see the context before its anchor and their own block.

    Layout ``[batch, seq, heads, head_dim]`` (the op's own; see :func:`anchor_block_attention_bhsd` for the
    ``[batch, heads, seq, head_dim]`` layout of SDPA / flex code):

    - ``q``: ``[batch, N*B, Hq, D]``, the N blocks of B query tokens one after another;
    - ``k``, ``v``: ``[batch, S + N*B, Hkv, D]``, the S context keys, then the N*B block keys
      (``Hq`` a multiple of ``Hkv``: GQA heads are never expanded);
    - ``anchors``: ``[batch, N]`` (or ``[N]`` for every batch row) int64, each in ``[0, S]``;
    - ``keep``: ``[batch, N]`` (or ``[N]``) bool; a dropped block outputs zero and gets zero gradients;
    - ``block_size``: B; ``window``: sliding window (0 = none); ``scale``: softmax scale (None: 1/sqrt(D));
    - ``ctx_start``: ``[batch, N]`` (or ``[N]``) int64 or None: packed rows (several documents per row) give
      each block its document's first position, so it never sees another document (None: 0 for every block).

    A query in block n, slot j sees context keys ``ctx_start[n] <= kv < anchors[n]`` (and, with a window,
    ``kv >= anchors[n] + j - (window - 1)``) plus the B keys of its own block (with a window only slots
    ``<= j``). Returns ``[batch, N*B, Hq, D]``. fp32, bf16 and fp64 on the CPU; bf16/fp16 on CUDA.
    Gradients flow to q, k and v. q, k, v may be strided as long as ``head_dim`` has stride 1.
    Bad arguments raise ``TypeError`` (a non-tensor, a wrong dtype, a non-int size) or ``ValueError`` (a shape,
    a size, tensors on different devices or on a device without kernels, e.g. meta) naming the argument, what was
    expected and what it got; what only the op can see (anchors outside ``[0, S]``) raises its ``RuntimeError``.

    ``backend``: ``"fused"`` the fused kernels; ``"reference"`` the same attention from LibTorch ops only (any
    device and dtype, tiles of blocks, memory within 2x of the fused op, slower); ``"auto"`` (default) the fused
    op once it has passed a self-check against the reference on this device, dtype and shape kind (run once per
    process, docs/TRAINING.md "Attention backend"), else the reference with one warning. ``"fused"`` runs the
    same check and raises ``RuntimeError`` when it fails.
    """
    block_size, window = _check_args("anchor_block_attention", q, k, v, anchors, keep, block_size, window, ctx_start,
                                     backend)
    if _backend_for(backend, q, k, v, block_size, window, ctx_start is not None) == "reference":
        return torch.ops.dflash.anchor_block_attention_reference(q, k, v, anchors, keep, block_size, window, scale,
                                                                 ctx_start)
    return torch.ops.dflash.anchor_block_attention(q, k, v, anchors, keep, block_size, window, scale, ctx_start)


def _as_bshd(x: torch.Tensor, name: str, want: str) -> torch.Tensor:
    _checks.tensor("anchor_block_attention_bhsd", name, x)
    if x.dim() != 4:
        raise ValueError(f"anchor_block_attention_bhsd: {name} must be {want}, got shape {list(x.shape)}")
    y = x.transpose(1, 2)  # a view: no copy
    return y if y.size(3) <= 1 or y.stride(3) == 1 else y.contiguous()


def anchor_block_attention_bhsd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, anchors: torch.Tensor,
                                keep: torch.Tensor, block_size: int, window: int = 0,
                                scale: Optional[float] = None,
                                ctx_start: Optional[torch.Tensor] = None, backend: str = "auto") -> torch.Tensor:
    """:func:`anchor_block_attention` for the ``[batch, heads, seq, head_dim]`` layout of SDPA and flex.

    ``q [batch, Hq, N*B, D]``, ``k, v [batch, Hkv, S + N*B, D]`` -> ``[batch, Hq, N*B, D]``. The tensors are
    passed as transposed views (the op reads any batch/seq/head strides), so nothing is copied when
    ``head_dim`` has stride 1, which is the case for every ``.view(...).transpose(1, 2)`` projection
    output; only a tensor whose last dimension is strided is made contiguous first. The result is a
    transposed view of the op's ``[batch, N*B, Hq, D]`` output (call ``.contiguous()`` if you need one).
    """
    qt = _as_bshd(q, "q", "[batch, Hq, N*B, D]")
    kt = _as_bshd(k, "k", "[batch, Hkv, S+N*B, D]")
    vt = _as_bshd(v, "v", "[batch, Hkv, S+N*B, D]")
    return anchor_block_attention(qt, kt, vt, anchors, keep, block_size, window, scale, ctx_start,
                                  backend).transpose(1, 2)
