"""dflash: the fused DFlash attention and the chunked LM-head loss as drop-ins for PyTorch training code.

    import dflash
    out = dflash.anchor_block_attention(q, k, v, anchors, keep, block_size)      # [b, N*B, Hq, D]
    out = dflash.anchor_block_attention_bhsd(q, k, v, anchors, keep, block_size)  # [b, Hq, N*B, D] (SDPA layout)
    loss = dflash.chunked_lm_loss(hidden, lm_head.weight.detach(), labels, weights)

Both have autograd, run on the CPU (fp32, bf16, fp64) and, when built with nvcc, CUDA (attention: bf16,
fp16), are thread-safe (one model replica per Python thread works) and need no torch.compile. The attention's
backend= is "auto" (default: the fused op after a one-time self-check on the device, else the reference),
"fused" or "reference" (LibTorch ops only, any device and dtype).
"""
from . import _library

_library.load()

from .attention import anchor_block_attention, anchor_block_attention_bhsd  # noqa: E402
from .loss import LossWithStats, chunked_lm_loss, chunked_lm_loss_with_stats  # noqa: E402
from .masks import BlockMaskArgs, BlockTargets, block_mask_args, block_targets, default_gamma  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "anchor_block_attention", "anchor_block_attention_bhsd", "chunked_lm_loss", "chunked_lm_loss_with_stats",
    "LossWithStats", "block_mask_args", "BlockMaskArgs", "block_targets", "BlockTargets", "default_gamma",
]
